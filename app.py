"""KB Workbench: the Streamlit app's pages.   scripts/run.sh (which serves it through serve.py)

Opens the service once per process, gives each browser session its own current knowledge base, builds the demo KB
from data/demo on the first start (an import job of the service, with its progress), shows the session's running
imports in the sidebar on every page, and routes to the pages.
"""

from __future__ import annotations

from contextlib import suppress
from typing import Any

import streamlit as st

from kb_core import KBError, Operations
from kb_core.session.demo import DEMO_EMBEDDING_MODEL, DEMO_KB_NAME, demo_exists, demo_files, start_demo_build
from pages import _service
from pages._demo import demo_banner, demo_build, demo_enabled, demo_lock, operator_sign_in, set_visitor_cookie
from pages._errors import show_error
from pages._i18n import language_switch, say, t
from pages._picker import ensure_selection, refresh_sidebar_counts, sidebar_kb_picker
from pages._progress import (
    JOB_POLL_SECONDS,
    attach_jobs_from_url,
    job_outcome,
    job_progress,
    sidebar_jobs,
    sync_job_url,
)

st.set_page_config(page_title="KB Workbench", page_icon=":material/hub:", layout="wide")
st.markdown(
    "<style>mark{background:#ffe58a;padding:0 1px;border-radius:2px}"
    ".block-container{padding-top:2.2rem}"
    # result cards: the hit's passage, "show all" swaps it for the whole text (pages/_cards.py: passage_card)
    ".kb-chunk-text{line-height:1.55}details.kb-chunk>summary{list-style:none;cursor:pointer;display:block}"
    "details.kb-chunk>summary::-webkit-details-marker{display:none}"
    "details.kb-chunk:not([open]) .kb-full{display:none}details.kb-chunk[open] .kb-passage{display:none}"
    ".kb-more{color:#1c6dd0;font-size:.85rem}"
    "details.kb-chunk:not([open]) .kb-show-less,details.kb-chunk[open] .kb-show-all{display:none}"
    # score bars: a hit's stacked parts on the 0–1 scale, final score marked (pages/_cards.py: score_bars)
    ".kb-bars{font-size:.8rem;margin:.2rem 0 .8rem}.kb-bars-legend{display:flex;gap:1rem;margin:0 0 .3rem 14rem}"
    ".kb-bars-legend i{display:inline-block;width:.75rem;height:.75rem;margin-right:.3rem;border-radius:2px;"
    "vertical-align:-1px}.kb-bars-legend i.kb-bars-final{width:2px;background:currentColor;border-radius:0}"
    ".kb-bars-row{display:flex;align-items:center;min-height:1.6rem}.kb-bars-label{flex:0 0 14rem;overflow:hidden;"
    "text-overflow:ellipsis;white-space:nowrap;padding-right:.6rem;text-align:right}"
    ".kb-bars-track,.kb-bars-axis{position:relative;flex:1 1 auto;margin-right:3.2rem}"
    ".kb-bars-track{display:flex;height:1.1rem;background:rgba(128,128,128,.12)}.kb-bars-track i{display:block}"
    ".kb-bars-track b{position:absolute;top:-.2rem;bottom:-.2rem;border-left:2px solid currentColor;"
    "padding-left:.3rem;font-weight:500;line-height:1.5rem;white-space:nowrap}"
    ".kb-bars-axis{height:1.1rem;border-top:1px solid rgba(128,128,128,.5)}.kb-bars-axis span{position:absolute;"
    "transform:translateX(-50%);opacity:.7;font-size:.7rem}.kb-bars-title{text-align:center;opacity:.7;"
    "font-size:.75rem;padding-left:14rem}.kb-card-score{float:right;margin-left:1rem}</style>",
    unsafe_allow_html=True,
)

session = _service.session()
# Navigation first, so the sidebar shows the real pages while the demo builds. .streamlit/config.toml hides the
# sidebar navigation, so Streamlit's raw list of pages/ does not flash while the first run starts; it is on for these.
st.set_option("client.showSidebarNavigation", True)
navigation = st.navigation(
    [
        st.Page("pages/knowledge_bases.py", title=t("Knowledge bases"), icon=":material/database:", default=True),
        st.Page("pages/import_files.py", title=t("Import"), icon=":material/upload_file:"),
        st.Page("pages/documents.py", title=t("Documents"), icon=":material/description:"),
        st.Page("pages/search_lab.py", title=t("Search lab"), icon=":material/manage_search:"),
        st.Page("pages/evaluate.py", title=t("Evaluate"), icon=":material/monitoring:"),
        st.Page("pages/knowledge_graph.py", title=t("Knowledge graph"), icon=":material/account_tree:"),
        st.Page("pages/export_import.py", title=t("Backup & transfer"), icon=":material/swap_horiz:"),
    ]
)
attach_jobs_from_url(session)
RUNNING = ("running", "cancelling")


def demo_builder() -> Operations:
    """The session the demo KB is built and watched by: this one, or in a public demo a local session of the server
    (a visitor neither sees the demo KB before it is published nor may create a shared one)."""
    if not _service.public_demo_enabled():
        return session
    if "demo_builder" not in st.session_state:
        st.session_state["demo_builder"] = _service.service().session()
    return st.session_state["demo_builder"]  # type: ignore[no-any-return]


def demo_progress(job_id: str) -> None:
    """The demo build's progress, polled; once the job ends, the whole app runs again (the pages may show)."""
    status = job_status(demo_builder(), job_id)
    if status is None or status["state"] not in RUNNING:
        st.rerun()
    job_progress(status, title=t("Demo"))


def job_status(builder: Operations, job_id: str, watch: bool = False) -> dict[str, Any] | None:
    """The import job's status, or None once the service no longer knows it."""
    try:
        return builder.import_job(job_id, watch=watch).data
    except KBError:
        return None


def demo_gate() -> None:
    """On a first start the demo KB is built by an import job of the service (it goes on whatever the browser does);
    every session that arrives meanwhile waits for it, watching its progress, and the pages show once it is ready."""
    builder = demo_builder()
    home = str(_service.service().home.root)
    holder = demo_build(home)
    waited = st.session_state.get("demo_waited")
    ended = job_status(builder, waited) if waited is not None else None
    if waited is not None and (ended is None or ended["state"] not in RUNNING):
        # this session watched the build and it has ended: say how, once (a page opened meanwhile waits on)
        st.session_state.pop("demo_waited")
        with suppress(KBError):  # gone already: nothing left to list
            builder.dismiss_import_job(waited)  # not one of this visitor's own imports
        if ended is not None and ended["state"] == "finished":
            publish_demo()
            with st.status(t("Demo knowledge base ready"), state="complete", expanded=False):
                st.write(f"{say(ended['message'])} ({ended['elapsed_seconds']:.0f} s)")
        elif ended is not None:
            with st.status(t("Building the demo knowledge base failed"), state="error", expanded=True):
                job_outcome(builder, ended)
    if st.session_state.get("demo_checked") and holder.get("job_id") is None:
        return
    files = demo_files()
    with demo_lock(home):
        job_id = holder.get("job_id")
        status = job_status(builder, job_id) if job_id else None
        if status is None or status["state"] not in RUNNING:
            holder["job_id"] = job_id = None
            st.session_state["demo_checked"] = True
            if not files or demo_exists(builder):
                publish_demo()
                return
            creating = st.empty()  # says so while a built-in model's folder is built (once per machine)
            with creating.container(border=True):
                st.markdown(t("**Building the demo knowledge base “{name}” (first start)…**", name=DEMO_KB_NAME))
                try:
                    started = start_demo_build(builder, model_progress=lambda line: st.write(say(line)))
                except KBError as refused:
                    started = refused
            creating.empty()
            if isinstance(started, KBError):
                show_error(started, prefix=t("Building the demo knowledge base failed: "))
                return
            if started is None:
                return
            holder["job_id"] = job_id = started.data["job_id"]
    job_status(builder, job_id, watch=True)
    st.session_state["demo_waited"] = job_id
    with st.container(border=True):
        st.markdown(t("**Building the demo knowledge base “{name}” (first start)…**", name=DEMO_KB_NAME))
        st.write(t("Importing {n} English and Chinese documents with the {model} model. The build goes on if you "
                   "close this tab; the pages open once it is done.", n=len(files), model=DEMO_EMBEDDING_MODEL))
        st.fragment(demo_progress, run_every=JOB_POLL_SECONDS)(job_id)
    st.stop()


def publish_demo() -> None:
    """In a public demo the demo KB is shared with every visitor, read-only (the operator may unpublish it)."""
    demo = _service.public_demo()
    if demo is None or st.session_state.get("demo_published"):
        return
    try:
        record = _service.service().find_kb(DEMO_KB_NAME)
    except KBError:
        return
    if record.id not in demo.ledger.read().published and not demo.ledger.read().owners.get(record.id):
        demo.ledger.publish(record.id)
    st.session_state["demo_published"] = True


if demo_enabled():
    demo_gate()
ensure_selection(session, preferred=DEMO_KB_NAME)

with st.sidebar:
    st.markdown("### :material/hub: KB Workbench")
language_switch()
demo_banner(session)
counts = sidebar_kb_picker(session)
operator_sign_in(session)
sidebar_jobs(session)
try:
    navigation.run()
finally:  # also when the page stops early: the counts as the page left them (after an import, a deletion)
    refresh_sidebar_counts(session, counts)
    set_visitor_cookie()
    sync_job_url(session)
