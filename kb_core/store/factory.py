"""The one place that chooses a store (txtai-style: a factory picks the backend from configuration once, and
everything above speaks the protocol of :mod:`kb_core.store.base`)."""

from __future__ import annotations

from pathlib import Path

from kb_core.base.config import resolve_store
from kb_core.store.base import Store
from kb_core.store.registry import Home

__all__ = ["open_store"]


def open_store(home: Path, store: str | None = None, read_url: str | None = None) -> Store:
    """The store of a service: PostgreSQL when ``store`` (else ``$KB_STORE``) is a ``postgresql://`` URL, with the
    standby ``read_url`` (else ``$KB_STORE_READ_URL``) preferred for reads; else the folder store in ``home``.
    ``home`` is opened in both cases (on PostgreSQL it keeps what is local to this user), after the database
    answered, so a failed connection leaves no folder behind."""
    url, standby = resolve_store(store, read_url)
    if url is None:
        from kb_core.store.folder import FolderStore

        return FolderStore(Home(home))
    from kb_core.store.postgres.backend import PostgresBackend
    from kb_core.store.postgres.store import PostgresStore

    return PostgresBackend(PostgresStore.open(url, read_url=standby), Home(home))
