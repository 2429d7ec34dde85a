"""Paths typed into the app: only inside the folders ``$KB_ALLOW_DIRS`` names (never the home, none in a public
demo), so whoever reaches the app cannot read or write any file the server can."""

from __future__ import annotations

import os
from pathlib import Path

import streamlit as st

from kb_core import Operations
from kb_core.base.safe_files import path_name_problem, shown_path
from pages._i18n import t
from pages._service import public_demo_enabled

# Folders whose files the "path on the server" fields may name (separated like PATH); unset: those fields are off.
ALLOW_DIRS_ENVIRONMENT_VARIABLE = "KB_ALLOW_DIRS"


def server_folders() -> tuple[list[Path], list[str]]:
    """The folders of ``$KB_ALLOW_DIRS`` that exist, and the entries that name no folder; none in a public demo, which
    has no server folders at all."""
    found: list[Path] = []
    if public_demo_enabled():
        return found, []
    missing: list[str] = []
    for entry in os.environ.get(ALLOW_DIRS_ENVIRONMENT_VARIABLE, "").split(os.pathsep):
        if entry.strip():
            if path_name_problem(entry.strip()) is not None:  # not UTF-8, too long: never a folder to use
                missing.append(shown_path(entry.strip()))
                continue
            folder = Path(entry.strip()).expanduser()
            if folder.is_dir():
                found.append(folder)
            else:
                missing.append(entry.strip())
    return found, missing


def server_path_session(sess: Operations) -> Operations | None:
    """``sess`` confined to ``$KB_ALLOW_DIRS`` (never the home), for paths typed into the app; None, after saying
    so, when no folder is configured: whoever reaches the app must not read or write any file the server can."""
    if public_demo_enabled():
        st.info(t("Files on the server are off in this public demo; upload files instead."), icon=":material/lock:")
        return None
    folders, missing = server_folders()
    if missing:
        st.warning(t("{variable} names folders that do not exist: {folders}.", variable=ALLOW_DIRS_ENVIRONMENT_VARIABLE,
                     folders=", ".join(missing)))
    if not folders:
        st.info(
            t(
                "Files on the server can be used only inside folders the server allows. Start the app with "
                "{variable}=/data/docs (several folders separated by '{separator}') to allow them; the knowledge-base "
                "home is never one of them.",
                variable=ALLOW_DIRS_ENVIRONMENT_VARIABLE, separator=os.pathsep,
            ),
            icon=":material/lock:",
        )
        return None
    st.caption(t("Allowed folders on the server: {folders}", folders=", ".join(f"`{f}`" for f in folders)))
    return sess.confined(folders)

