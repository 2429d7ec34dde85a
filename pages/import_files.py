"""Import: upload several files or give paths on the server; per-file and overall progress; results table."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from pages import _shared as ui

UPLOAD_TYPES = ["txt", "md", "text", "docx", "doc", "csv", "tsv", "log", "rst"]

session = ui.session()
kb_name = ui.require_current_kb(session)
st.title("Import documents")
st.caption(f"Into knowledge base **{kb_name}**. TXT (any common encoding), DOCX and DOC files.")


def run_import(paths: list[str], names: list[str], source: str, chunk_size: int | None) -> None:
    st.markdown("**Progress**")
    bars = ui.ImportBars(paths, names)
    result = session.import_document(
        paths,
        chunk_size,
        progress=bars,
        display_names=names if source == "upload" else None,
        source=source,
    )
    bars.finish(result)
    st.session_state["import_result"] = {"envelope": result, "names": dict(zip(paths, names, strict=True))}


def results_table(data: dict[str, Any], names: dict[str, str]) -> pd.DataFrame:
    rows = [
        {"File": names.get(f["file_path"], f["file_path"]), "Document name": f["doc_name"],
         "Status": "imported", "Chunks": f["chunk_count"], "Reason": ""}
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
size = int(chunk_size) if override else None

upload_tab, path_tab = st.tabs(["Upload files", "Paths on the server"])
with upload_tab:
    uploads = st.file_uploader(
        "Files", type=UPLOAD_TYPES, accept_multiple_files=True, key=f"uploads_{st.session_state.get('upload_round', 0)}"
    )
    if st.button("Import uploaded files", type="primary", disabled=not uploads, key="import_uploads"):
        folder = Path(tempfile.mkdtemp(prefix="kb-upload-"))
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
    text = st.text_area(
        "One file path per line (files on the machine that runs the app)", height=120, key="import_paths",
        placeholder="/data/manuals/guide.docx\n/data/manuals/说明.txt",
    )
    path_list = [line.strip() for line in text.splitlines() if line.strip()]
    if st.button("Import these files", type="primary", key="import_server_paths"):
        if path_list:
            run_import(path_list, [Path(p).name for p in path_list], "path", size)
        else:
            st.warning("Give at least one file path.")

stored = st.session_state.get("import_result")
if stored:
    envelope = stored["envelope"]
    st.subheader("Results")
    if envelope["success"]:
        data = envelope["data"]
        if data["failed_count"]:
            st.warning(envelope["message"], icon=":material/warning:")
        else:
            st.success(envelope["message"], icon=":material/check_circle:")
    else:
        ui.show_error(envelope)
        data = envelope.get("data") or {}
    if data:
        st.dataframe(results_table(data, stored["names"]), hide_index=True, width="stretch")
