"""Import: upload several files or give paths on the server (inside the folders of $KB_ALLOW_DIRS only; off without
it); per-file and overall progress; results table."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from kb_core import Session
from pages import _shared as ui

UPLOAD_TYPES = ["txt", "md", "text", "docx", "doc", "csv", "tsv", "log", "rst"]

session = ui.session()
kb_name = ui.require_current_kb(session)
st.title("Import documents")
st.caption(f"Into knowledge base **{kb_name}**. TXT (any common encoding), DOCX and DOC files.")


def run_import(
    paths: list[str], names: list[str], source: str, chunk_size: int | None, via: Session | None = None
) -> None:
    """Import ``paths`` through ``via`` (this browser's session, confined for server paths)."""
    st.markdown("**Progress**")
    # Any click reruns this page, which stops the running import at its next progress report (Streamlit raises in
    # the report): documents committed so far stay, the rest is not imported. This button says so.
    st.button("Cancel import", key="cancel_import", icon=":material/cancel:")
    if executor == "local":  # a Ray cluster loads the model on its own nodes
        ui.load_model_with_notice(session)
    bars = ui.ImportBars(paths, names)
    result = (via or session).import_document(
        paths,
        chunk_size,
        progress=bars,
        display_names=names if source == "upload" else None,
        source=source,
        executor=executor,
        executor_address=address or None,
    )
    bars.finish(result)
    st.session_state["import_result"] = {"envelope": result, "names": dict(zip(paths, names, strict=True))}


def results_table(data: dict[str, Any], names: dict[str, str]) -> pd.DataFrame:
    rows = [
        {"File": names.get(f["file_path"], f["file_path"]), "Document name": f["doc_name"],
         "Status": "already imported (skipped)" if f.get("already_imported") else "imported",
         "Chunks": f["chunk_count"], "Reason": ""}
        for f in data.get("success_files", [])
    ]
    rows += [
        {"File": names.get(f["file_path"], f["file_path"]), "Document name": "",
         "Status": "failed", "Chunks": 0, "Reason": f["error"]}
        for f in data.get("failed_files", [])
    ]
    return pd.DataFrame(rows, columns=["File", "Document name", "Status", "Chunks", "Reason"])


with st.expander("Options"):
    override = st.checkbox("Use a different chunk size for this import", key="import_override")
    chunk_size = st.number_input(
        "Chunk size (tokens)", min_value=32, max_value=8192, value=512, step=64, disabled=not override,
        key="import_chunk_size",
    )
    executors = session.import_executors()["data"]["executors"]
    usable = [name for name, reason in executors.items() if reason is None]
    executor = st.radio(
        "Executor", usable, horizontal=True, key="import_executor",
        help="local: this machine's cores; ray: Ray Data on a Ray cluster (parsing, chunking and embedding there)",
    )
    for name, reason in executors.items():
        if reason is not None:
            st.caption(f"{name}: not available here: {reason}")
    address = st.text_input(
        "Ray cluster address (empty: the cluster this app is connected to, else a new local one)",
        key="import_ray_address", disabled=executor != "ray", placeholder="10.0.0.5:6379 or ray://host:10001",
    )
size = int(chunk_size) if override else None

if st.session_state.get("cancel_import"):
    st.session_state.pop("import_result", None)
    st.warning(
        "Import cancelled. Documents committed before the cancel stay imported (see Documents); the others were "
        "not imported.",
        icon=":material/cancel:",
    )

ui.demo_limits_caption(session)
upload_tab, path_tab = st.tabs(["Upload files", "Paths on the server"])
with upload_tab:
    uploads = st.file_uploader(
        "Files", type=UPLOAD_TYPES, accept_multiple_files=True, key=f"uploads_{st.session_state.get('upload_round', 0)}"
    )
    if st.button("Import uploaded files", type="primary", disabled=not uploads, key="import_uploads"):
        folder = ui.scratch_dir("kb-upload-", session)
        try:
            paths, names = [], []
            for index, upload in enumerate(uploads or []):
                # A folder per file keeps the browser's name (and its suffix, which the parser reads).
                target = folder / str(index) / Path(upload.name).name
                target.parent.mkdir(parents=True)
                target.write_bytes(upload.getvalue())
                paths.append(str(target))
                names.append(upload.name)
            run_import(paths, names, "upload", size)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        st.session_state["upload_round"] = st.session_state.get("upload_round", 0) + 1

with path_tab:
    confined = ui.server_path_session(session)
    if confined is not None:
        text = st.text_area(
            "One file path per line (files on the machine that runs the app, inside the allowed folders)",
            height=120, key="import_paths", placeholder="/data/manuals/guide.docx\n/data/manuals/说明.txt",
        )
        path_list = [line.strip() for line in text.splitlines() if line.strip()]
        if st.button("Import these files", type="primary", key="import_server_paths"):
            if path_list:
                run_import(path_list, [Path(p).name for p in path_list], "path", size, confined)
            else:
                st.warning("Give at least one file path.")

stored = st.session_state.get("import_result")
if stored:
    envelope = stored["envelope"]
    st.subheader("Results")
    if envelope["success"]:
        data = envelope["data"]
        warnings = data.get("warnings") or []
        summary = envelope["message"].split(" Note: ", 1)[0]  # the notes are shown below, each once
        if data["failed_count"]:
            st.warning(summary, icon=":material/warning:")
        else:
            st.success(summary, icon=":material/check_circle:")
        for warning in warnings:
            st.warning(warning, icon=":material/translate:")
    else:
        ui.show_error(envelope)
        data = envelope.get("data") or {}
    if data:
        st.dataframe(results_table(data, stored["names"]), hide_index=True, width="stretch")
