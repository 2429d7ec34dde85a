"""Export / import: every KB or chosen ones into one portable file (download, or a path on the server), and
merging such a file into the home (upload, or a path on the server) with counts and renamed KBs. Paths on the
server lie inside the folders of $KB_ALLOW_DIRS (never the home); without it those tabs are off."""

from __future__ import annotations

import os
import shutil
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from kb_core import KBError, Operations
from kb_core.features.documents import human_size
from kb_core.features.results import ExportSummary, ImportSummary
from pages import _service
from pages._errors import attempt, show_error
from pages._i18n import say, t
from pages._paths import server_path_session
from pages._picker import kb_listing

EXPORT_SUFFIX = ".kbx"

session = _service.session()
st.title(t("Export / import knowledge bases"))
st.caption(t(
    "One portable file (a ZIP with a manifest and checksums) holds knowledge bases with their settings, documents "
    "and original files, chunks, vectors and knowledge-bundle graphs. API keys are never exported. Importing "
    "validates the whole file first and changes nothing if any part is refused; names that already exist get a "
    "timestamp suffix."
))

listing = attempt(lambda: kb_listing(session))  # the sidebar's: read once per run
kbs = listing.knowledge_bases if listing else []
names = [kb["name"] for kb in kbs]


def export_name(chosen: list[str]) -> str:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    label = chosen[0] if len(chosen) == 1 else "knowledge-bases"
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in label).strip("-.") or "kb"
    return f"{safe}-{stamp}{EXPORT_SUFFIX}"


def prepare_download(chosen: list[str]) -> None:
    """Export into a temp folder, keep the bytes for the download button, remove the file."""
    folder = _service.scratch_dir("kb-export-", session)
    name = export_name(chosen)
    written: ExportSummary | KBError
    data = None
    try:
        with st.spinner(t("Writing the export file…")):
            written = session.export_database(str(folder / name), kb_names=chosen or None)
        data = (folder / name).read_bytes()
    except KBError as error:
        written = error
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    st.session_state["export_result"] = {"result": written, "name": name, "bytes": data}


def run_import(path: str, label: str, via: Operations | None = None, uploaded: bool = False) -> None:
    merged: ImportSummary | KBError
    with st.spinner(t("Validating and importing {file}…", file=label)):
        # an upload is saved under a temporary name: the messages name the user's file instead
        try:
            merged = (via or session).import_database(path, display_name=label if uploaded else None)
        except KBError as error:
            merged = error
    st.session_state["import_db_result"] = {"result": merged, "label": label}


def show_import_result(stored: dict[str, Any]) -> None:
    merged = stored["result"]
    if isinstance(merged, KBError):
        show_error(merged)  # the service names the file
        return
    st.success(say(merged.message), icon=":material/check_circle:")
    left, right = st.columns(2)
    left.metric(t("Knowledge bases imported"), len(merged.knowledge_bases))
    right.metric(t("Documents imported"), merged.document_count)
    renamed = {to: was for was, to in merged.renamed_knowledge_bases}
    if merged.knowledge_bases:
        st.dataframe(
            pd.DataFrame(
                {
                    t("Imported as"): merged.knowledge_bases,
                    t("Renamed from"): [renamed.get(n, "") for n in merged.knowledge_bases],
                }
            ),
            hide_index=True, width="stretch",
        )
        if renamed:
            st.caption(t("Renamed knowledge bases had a name that already exists here; nothing was overwritten."))


export_col, import_col = st.columns(2, gap="large")

with export_col:
    st.subheader(t("Export"))
    chosen = st.multiselect(t("Knowledge bases (none chosen: all)"), names, key="export_kbs",
                            placeholder=t("All knowledge bases"))
    download_tab, server_tab = st.tabs([t("Download"), t("Path on the server")])
    with download_tab:
        if st.button(t("Prepare export file"), type="primary", key="export_prepare", disabled=not names,
                     icon=":material/inventory_2:"):
            prepare_download(chosen)
        stored = st.session_state.get("export_result")
        if stored:
            written = stored["result"]
            if not isinstance(written, KBError) and stored["bytes"] is not None:
                # the file was written to a scratch folder: the message names the download instead
                said = say(written.message)
                st.success(said.replace(written.export_path, stored["name"]),
                           icon=":material/check_circle:")
                st.download_button(
                    t("Download {file} ({size})", file=stored["name"], size=human_size(len(stored["bytes"]))),
                    stored["bytes"],
                    file_name=stored["name"],
                    mime="application/zip",
                    key="export_download",
                    icon=":material/download:",
                )
            elif isinstance(written, KBError):
                show_error(written)
    with server_tab:
        confined = server_path_session(session)
        if confined is not None:
            target = st.text_input(t("Export file path (on the machine that runs the app)"), key="export_path",
                                   placeholder=f"/backups/knowledge-bases{EXPORT_SUFFIX}")
            if st.button(t("Export to this path"), key="export_to_path", disabled=not names):
                if not target.strip():
                    st.warning(t("Give the path of the file to write."))
                else:
                    with st.spinner(t("Writing the export file…")):
                        exported = attempt(
                            lambda: confined.export_database(target.strip(), kb_names=chosen or None)
                        )
                    if exported is not None:
                        st.success(say(exported.message), icon=":material/check_circle:")
    if not names:
        st.info(t("There are no knowledge bases to export yet."))

with import_col:
    st.subheader(t("Import"))
    stored = st.session_state.get("import_db_result")
    if stored:
        show_import_result(stored)
    upload_tab, path_tab = st.tabs([t("Upload a file"), t("Path on the server")])
    with upload_tab:
        if session.principal.kind == "visitor":  # the session refuses it too
            st.info(t("Merging an export file is off for visitors of this public demo; create a knowledge base and "
                      "import documents instead."), icon=":material/lock:")
        round_ = st.session_state.get("import_db_round", 0)
        upload = st.file_uploader(t("Export file ({suffix} or .zip)", suffix=EXPORT_SUFFIX), type=["kbx", "zip"],
                                  key=f"import_db_upload_{round_}", disabled=session.principal.kind == "visitor")
        if st.button(t("Import uploaded file"), type="primary", disabled=upload is None, key="import_db_upload_go"):
            handle, path = tempfile.mkstemp(prefix="kb-import-", suffix=EXPORT_SUFFIX, dir=session.scratch_root)
            try:
                with os.fdopen(handle, "wb") as out:
                    out.write(upload.getvalue())  # type: ignore[union-attr]
                run_import(path, upload.name, uploaded=True)  # type: ignore[union-attr]
            finally:
                os.unlink(path)
            st.session_state["import_db_round"] = round_ + 1
            st.rerun()  # the sidebar lists the new knowledge bases
    with path_tab:
        confined = server_path_session(session)
        if confined is not None:
            source = st.text_input(t("Export file path (on the machine that runs the app)"), key="import_db_path",
                                   placeholder=f"/backups/knowledge-bases{EXPORT_SUFFIX}")
            if st.button(t("Import this file"), type="primary", key="import_db_path_go"):
                if not source.strip():
                    st.warning(t("Give the path of an export file."))
                else:
                    run_import(source.strip(), Path(source.strip()).name, confined)
                    st.rerun()
