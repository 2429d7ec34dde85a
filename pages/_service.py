"""The app's service and this browser session's session: one service per process and home (its models, readers and
index caches), opened once and closed when the server stops, and per browser session its own session (in a public
demo, the visitor's or the operator's)."""

from __future__ import annotations

import logging
import re
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import streamlit as st

from kb_core import KBError, KnowledgeBaseService, Operations
from kb_core.base.config import resolve_home
from pages._errors import show_error
from pages._i18n import t

if TYPE_CHECKING:
    from kb_core.session.public_demo import PublicDemo

SESSION_KEY = "kb_session"
# KB_DEMO: unset, a private workbench that opens on the demo KB; 0, no demo KB (tests); 1, a public demo
# (kb_core.session.public_demo: visitors in sandboxes, shared KBs read-only, quotas, an operator).
DEMO_ENVIRONMENT_VARIABLE = "KB_DEMO"
VISITOR_COOKIE = "kb_visitor"
VISITOR_TOKEN = re.compile(r"^[A-Za-z0-9_-]{24,64}$")



# The services this process opened (one per home), for close_services when the server stops.
_OPENED: list[KnowledgeBaseService] = []
_OPENED_HOMES: set[str] = set()
_OPENED_LOCK = threading.Lock()


@st.cache_resource(show_spinner=False)  # service() says so, in the session's language
def _service_for(home: str) -> KnowledgeBaseService:
    # One service per process and home: it holds the loaded models, readers and index caches.
    opened = KnowledgeBaseService(home)
    with _OPENED_LOCK:
        _OPENED.append(opened)
        _OPENED_HOMES.add(home)
    # The Chinese word dictionary loads on the first Chinese text a process analyses (~0.5 s of CPU), and a KB's query
    # embedder on its first search (multilingual-e5-small's 250,000-word tokenizer and query weights: 3-5 s on busy
    # cores, a third of a profiled session's server time, #34); loaded now, in the background, a user's first search
    # waits for neither.
    threading.Thread(target=_warm_up, args=(opened,), name="kb-search-warm", daemon=True).start()
    return opened


def _warm_up(opened: KnowledgeBaseService) -> None:
    opened.analyzer.query_terms("中文")
    try:
        records = opened.store.knowledge_bases()
    except Exception:  # a store that cannot be read says so on the pages
        return
    for record in records:
        if record.embedding_endpoint:  # an endpoint is asked at the first search, not at start
            continue
        try:
            opened.embedder(record).embed_query("warm up 预热")
        except Exception:  # the first search reports what is wrong
            logging.getLogger(__name__).info("could not warm the query embedder of %s", record.name, exc_info=True)


def close_services(timeout: float = 8.0) -> None:
    """Cancel the running imports of every service this process opened and wait for them (``timeout`` seconds in
    all): the server is stopping (serve.py's lifespan)."""
    with _OPENED_LOCK:
        opened = list(_OPENED)
    deadline = time.monotonic() + timeout
    for each in opened:
        each.close(max(0.5, deadline - time.monotonic()))



def service() -> KnowledgeBaseService:
    home = str(resolve_home())
    with _OPENED_LOCK:
        opened = home in _OPENED_HOMES
    if opened:
        return _service_for(home)
    with st.spinner(t("Opening the knowledge-base service…")):
        return _service_for(home)



def public_demo_enabled() -> bool:
    """Whether the app runs as a public demo (``KB_DEMO=1``); a KB_DEMO the app does not understand stops it."""
    from kb_core.session.public_demo import demo_setting

    try:
        return demo_setting() == "public"
    except KBError as error:
        show_error(error, with_code=False)
        st.stop()
        raise


@st.cache_resource
def _demo_for(home: str) -> PublicDemo:
    from kb_core.session.public_demo import PublicDemo

    demo = PublicDemo.from_environment(_service_for(home))
    demo.start_sweeper()  # visitor KBs are deleted at their expiry, whoever is visiting
    return demo


def public_demo() -> PublicDemo | None:
    """The public demo of this process (None outside one): its ledger, quotas and operator."""
    return _demo_for(str(resolve_home())) if public_demo_enabled() else None



def _visitor_token() -> str:
    """This browser's visitor token: kept in a cookie, so a reload or a second tab is the same visitor and finds its
    knowledge bases; a new browser is a new visitor."""
    token = st.session_state.get("kb_visitor_token")
    if token is None:
        cookie = st.context.cookies.get(VISITOR_COOKIE) or ""
        token = cookie if VISITOR_TOKEN.match(cookie) else None
        if token is None:
            from kb_core.session.public_demo import PublicDemo

            token = PublicDemo.new_visitor_token()
        st.session_state["kb_visitor_token"] = token
        st.session_state["kb_visitor_cookie_due"] = True
    return str(token)



def session() -> Operations:
    """This browser session's own session (its own current KB). In a public demo, the visitor's (or, once signed
    in, the operator's): what it may see and change is decided by the session itself."""
    current = st.session_state.get(SESSION_KEY)
    if current is None or current.service is not service():
        demo = public_demo()
        current = service().session() if demo is None else demo.visitor_session(_visitor_token())
        st.session_state[SESSION_KEY] = current
    return current


def sign_in_operator(secret: str) -> KBError | None:
    """Replace this browser session's visitor session by the operator's; None, or the refusal."""
    demo = public_demo()
    if demo is None:
        return None
    try:
        st.session_state[SESSION_KEY] = demo.operator_session(secret)
    except KBError as error:
        return error
    return None


def sign_out_operator() -> None:
    demo = public_demo()
    if demo is not None:
        st.session_state[SESSION_KEY] = demo.visitor_session(_visitor_token())



def scratch_dir(prefix: str, sess: Operations | None = None) -> Path:
    """A new private folder for files the app hands the session (uploads, exports to download): where the session
    may open them (a public demo's sessions open no other path)."""
    root = (sess or session()).scratch_root
    return Path(tempfile.mkdtemp(prefix=prefix, dir=str(root) if root is not None else None))

