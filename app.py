"""KB Workbench: the Streamlit app.   streamlit run app.py   (scripts/run.sh)

Opens the service once per process, gives each browser session its own current knowledge base,
builds the demo KB from data/demo on the first start (with a progress bar) and routes to the pages.
"""

from __future__ import annotations

import streamlit as st

from kb_core.demo import DEMO_EMBEDDING_MODEL, DEMO_KB_NAME, demo_exists, demo_files, ensure_demo_kb
from pages import _shared as ui

st.set_page_config(page_title="KB Workbench", page_icon=":material/hub:", layout="wide")
st.markdown(
    "<style>mark{background:#ffe58a;padding:0 1px;border-radius:2px}"
    ".block-container{padding-top:2.2rem}</style>",
    unsafe_allow_html=True,
)

session = ui.session()
# Navigation first, so the sidebar shows the real pages while the demo builds.
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
    files = demo_files()
    if not files or demo_exists(session):
        return
    with ui._demo_lock(str(ui.service().home.root)):
        if demo_exists(session):
            return
        with st.status(f"Building the demo knowledge base “{DEMO_KB_NAME}” (first start)…", expanded=True) as status:
            st.write(f"Importing {len(files)} English and Chinese documents with the {DEMO_EMBEDDING_MODEL} model.")
            bars = ui.ImportBars([str(p) for p in files], [p.name for p in files], title="Demo")
            result = ensure_demo_kb(session, progress=bars, model_progress=st.write)
            if result is not None and not result["success"]:
                status.update(label="Building the demo knowledge base failed", state="error")
                ui.show_error(result)
                return
            status.update(label="Demo knowledge base ready", state="complete", expanded=False)


if ui.demo_enabled() and not st.session_state.get("demo_checked"):
    build_demo()
    st.session_state["demo_checked"] = True
ui.ensure_selection(session, preferred=DEMO_KB_NAME)

with st.sidebar:
    st.markdown("### :material/hub: KB Workbench")
ui.sidebar_kb_picker(session)
navigation.run()
