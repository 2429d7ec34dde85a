"""Import: upload several files or give paths on the server (inside the folders of $KB_ALLOW_DIRS only; off without
it). An import is a job the service runs (#34): it goes on when this page is left or reloaded; the page shows its
progress per file, a Cancel button, and its results (per file, failures with reasons) until dismissed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import streamlit as st

from kb_core import Operations
from kb_core.features.results import ImportJobStatus
from pages import _service
from pages._demo import demo_limits_caption
from pages._errors import attempt
from pages._i18n import say, t
from pages._paths import server_path_session
from pages._picker import require_current_kb
from pages._progress import import_jobs_panel

UPLOAD_TYPES = ["txt", "md", "text", "docx", "doc", "csv", "tsv", "log", "rst"]

session = _service.session()
kb_name = require_current_kb(session)
st.title(t("Import documents"))
st.caption(t("Into knowledge base **{kb}**. TXT (any common encoding), DOCX and DOC files.", kb=kb_name))


def start(begin: Callable[[], ImportJobStatus]) -> None:
    """Start an import job, then clear the form for the next import (its job is listed below), or show why it did
    not start."""
    if attempt(begin) is None:
        return
    st.session_state["upload_round"] = st.session_state.get("upload_round", 0) + 1  # a fresh, empty uploader
    st.rerun()


with st.expander(t("Options")):
    override = st.checkbox(t("Use a different chunk size for this import"), key="import_override")
    chunk_size = st.number_input(
        t("Chunk size (tokens)"), min_value=32, max_value=8192, value=512, step=64, disabled=not override,
        key="import_chunk_size",
    )
    executors = session.import_executors().executors
    usable = [name for name, reason in executors.items() if reason is None]
    executor = st.radio(
        t("Executor"), usable, horizontal=True, key="import_executor",
        help=t("local: this machine's cores; ray: Ray Data on a Ray cluster (parsing, chunking and embedding there)"),
    )
    for name, reason in executors.items():
        if reason is not None:
            st.caption(t("{executor}: not available here: {reason}", executor=name, reason=say(reason)))
    address = st.text_input(
        t("Ray cluster address (empty: the cluster this app is connected to, else a new local one)"),
        key="import_ray_address", disabled=executor != "ray",
        placeholder=t("10.0.0.5:6379 or ray://host:10001"),
    )
size = int(chunk_size) if override else None
how: dict[str, Any] = {"executor": executor, "executor_address": address or None}

demo_limits_caption(session)
upload_tab, path_tab = st.tabs([t("Upload files"), t("Paths on the server")])
with upload_tab:
    uploads = st.file_uploader(
        t("Files"), type=UPLOAD_TYPES, accept_multiple_files=True,
        key=f"uploads_{st.session_state.get('upload_round', 0)}",
    )
    if st.button(t("Import uploaded files"), type="primary", disabled=not uploads, key="import_uploads"):
        # The service keeps the files (known by their names) for the job, and removes them when it ends.
        start(lambda: session.start_import(
            uploads=[(u.name, u.getvalue()) for u in uploads or []], chunk_size=size, **how
        ))

with path_tab:
    confined: Operations | None = server_path_session(session)
    if confined is not None:
        text = st.text_area(
            t("One file path per line (files on the machine that runs the app, inside the allowed folders)"),
            height=120, key="import_paths", placeholder="/data/manuals/guide.docx\n/data/manuals/说明.txt",
        )
        path_list = [line.strip() for line in text.splitlines() if line.strip()]
        if st.button(t("Import these files"), type="primary", key="import_server_paths"):
            if path_list:
                start(lambda: confined.start_import(
                    [str(Path(p)) for p in path_list], chunk_size=size, **how
                ))
            else:
                st.warning(t("Give at least one file path."))

import_jobs_panel(session)
