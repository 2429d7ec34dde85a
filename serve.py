"""How the app is served: ``streamlit run serve.py`` (``scripts/serve.sh``; ``scripts/run.sh`` runs that).

The pages are ``app.py``'s; this wraps them in ``st.App`` for its lifespan: when the server stops (SIGTERM, Ctrl-C),
the services the pages opened cancel their running imports and wait for them (a few seconds: what was committed
stays, staging copies and uploads are removed) before the process exits (#34).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import streamlit as st


@asynccontextmanager
async def lifespan(app: st.App) -> AsyncIterator[None]:
    yield
    from pages import _service

    await anyio.to_thread.run_sync(_service.close_services)


app = st.App("app.py", lifespan=lifespan)
