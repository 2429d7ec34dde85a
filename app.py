"""KB Workbench: the Streamlit app.   streamlit run app.py   (scripts/run.sh)

Opens the service once per process, gives each browser session its own current knowledge base,
builds the demo KB from data/demo on the first start (with a progress bar) and routes to the pages.
"""

from __future__ import annotations

import streamlit as st

from kb_core import KBError
from kb_core.demo import DEMO_EMBEDDING_MODEL, DEMO_KB_NAME, demo_exists, demo_files, ensure_demo_kb
from pages import _shared as ui

st.set_page_config(page_title="KB Workbench", page_icon=":material/hub:", layout="wide")
st.markdown(
    "<style>mark{background:#ffe58a;padding:0 1px;border-radius:2px}"
    ".block-container{padding-top:2.2rem}"
    # result cards: the chunk clamped to its first lines, "show all" unfolds it (pages/_shared.py: clamped)
    ".kb-chunk-text{line-height:1.55}details.kb-chunk>summary{list-style:none;cursor:pointer;display:block}"
    "details.kb-chunk>summary::-webkit-details-marker{display:none}"
    "details.kb-chunk:not([open]) .kb-clamp{display:-webkit-box;-webkit-line-clamp:6;-webkit-box-orient:vertical;"
    "overflow:hidden}.kb-more{color:#1c6dd0;font-size:.85rem}"
    "details.kb-chunk:not([open]) .kb-more::before{content:'show all ▾'}"
    "details.kb-chunk[open] .kb-more::before{content:'show less ▴'}"
    # score bars: a hit's stacked parts on the 0–1 scale, final score marked (pages/_shared.py: score_bars)
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

session = ui.session()
# Navigation first, so the sidebar shows the real pages while the demo builds. .streamlit/config.toml hides the
# sidebar navigation, so Streamlit's raw list of pages/ does not flash while the first run starts; it is on for these.
st.set_option("client.showSidebarNavigation", True)
navigation = st.navigation(
    [
        st.Page("pages/knowledge_bases.py", title="Knowledge bases", icon=":material/database:", default=True),
        st.Page("pages/import_files.py", title="Import", icon=":material/upload_file:"),
        st.Page("pages/documents.py", title="Documents", icon=":material/description:"),
        st.Page("pages/search_lab.py", title="Search lab", icon=":material/manage_search:"),
        st.Page("pages/evaluate.py", title="Evaluate", icon=":material/monitoring:"),
        st.Page("pages/knowledge_graph.py", title="Knowledge graph", icon=":material/account_tree:"),
        st.Page("pages/export_import.py", title="Backup & transfer", icon=":material/swap_horiz:"),
    ]
)


def build_demo() -> None:
    # Built by a local session: in a public demo a visitor neither sees the demo KB before it is published nor may
    # create a shared one.
    builder = ui.service().session() if ui.public_demo_enabled() else session
    files = demo_files()
    if not files or demo_exists(builder):
        publish_demo()
        return
    with ui.demo_lock(str(ui.service().home.root)):
        if demo_exists(builder):
            return
        with st.status(f"Building the demo knowledge base “{DEMO_KB_NAME}” (first start)…", expanded=True) as status:
            st.write(f"Importing {len(files)} English and Chinese documents with the {DEMO_EMBEDDING_MODEL} model.")
            ui.load_model_with_notice(session, model=DEMO_EMBEDDING_MODEL)
            bars = ui.ImportBars([str(p) for p in files], [p.name for p in files], title="Demo")
            result = ensure_demo_kb(builder, progress=bars, model_progress=st.write)
            if result is not None and not result["success"]:
                status.update(label="Building the demo knowledge base failed", state="error")
                ui.show_error(result)
                return
            publish_demo()
            status.update(label="Demo knowledge base ready", state="complete", expanded=False)


def publish_demo() -> None:
    """In a public demo the demo KB is shared with every visitor, read-only (the operator may unpublish it)."""
    demo = ui.public_demo()
    if demo is None or st.session_state.get("demo_published"):
        return
    try:
        record = ui.service().find_kb(DEMO_KB_NAME)
    except KBError:
        return
    if record.id not in demo.ledger.read().published and not demo.ledger.read().owners.get(record.id):
        demo.ledger.publish(record.id)
    st.session_state["demo_published"] = True


if ui.demo_enabled() and not st.session_state.get("demo_checked"):
    build_demo()
    st.session_state["demo_checked"] = True
ui.ensure_selection(session, preferred=DEMO_KB_NAME)

with st.sidebar:
    st.markdown("### :material/hub: KB Workbench")
ui.demo_banner(session)
counts = ui.sidebar_kb_picker(session)
ui.operator_sign_in(session)
try:
    navigation.run()
finally:  # also when the page stops early: the counts as the page left them (after an import, a deletion)
    ui.refresh_sidebar_counts(session, counts)
    ui.set_visitor_cookie()
