"""The current knowledge base: the sidebar's picker and counts, and what a page does when none is selected or the
selected one was deleted meanwhile.

The list of knowledge bases (with each one's counts) is read once per script run, whoever asks (the picker, the
page's ``require_current_kb``, the counts redrawn after the page): :func:`kb_listing`. A page that changes what the
list says (a KB created, deleted or selected, documents imported or deleted) calls :func:`listing_changed`, and the
next ask reads it again.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import streamlit as st
from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx

from kb_core import KBError, Operations
from kb_core.features.results import KBList
from pages._errors import show_error
from pages._i18n import t

# The name of the KB this browser session last used, so that a KB deleted meanwhile (by another session) is named
# when the page says it is gone.
LAST_KB_KEY = "kb_last_used"
_LISTING_KEY = "kb_listing_this_run"


def _this_run() -> object:
    """An object that is this script run's own: Streamlit makes a new cursor map each run (and each fragment run).
    Kept in the session state with the listing, it cannot be confused with a later run's."""
    ctx = get_script_run_ctx()
    return ctx.cursors if ctx is not None else None


def kb_listing(sess: Operations) -> KBList:
    """The KBs this session sees, with their counts and the current one: read once per script run (a KBError is
    raised, and remembered for the run, as the read's)."""
    run = _this_run()
    kept = st.session_state.get(_LISTING_KEY)
    if kept is not None and run is not None and kept[0] is run and kept[1] is sess:
        found = kept[2]
    else:
        try:
            found = sess.list_knowledge_bases()
        except KBError as error:
            found = error
        st.session_state[_LISTING_KEY] = (run, sess, found)
    if isinstance(found, KBError):
        raise found
    return found  # type: ignore[no-any-return]


def listing_changed() -> None:
    """The KB list may say something else now (a KB created, deleted or selected, documents imported or deleted):
    the next :func:`kb_listing` reads it again."""
    st.session_state.pop(_LISTING_KEY, None)


def _now_current(kb_id: str) -> None:
    """This run's list, with ``kb_id`` as the current KB: a selection changes nothing else the list says."""
    kept = st.session_state.get(_LISTING_KEY)
    if kept is None or not isinstance(kept[2], KBList):
        return
    listing = kept[2]
    rows = [{**kb, "is_current": kb["id"] == kb_id} for kb in listing.knowledge_bases]
    st.session_state[_LISTING_KEY] = (kept[0], kept[1], replace(listing, knowledge_bases=rows, current_kb_id=kb_id))


def current_kb_name(sess: Operations) -> str | None:
    try:
        listing = kb_listing(sess)
    except KBError:
        return None
    for kb in listing.knowledge_bases:
        if kb["id"] == listing.current_kb_id:
            st.session_state[LAST_KB_KEY] = str(kb["name"])
            return str(kb["name"])
    return None


def kb_disappeared(sess: Operations) -> str | None:
    """The name of the KB this session was using if it no longer exists (deleted meanwhile, by another browser
    session or process), else None: the pages then say so and ask for a choice, and never go on with another KB."""
    if sess.current_kb_id is None or current_kb_name(sess) is not None:
        return None
    return str(st.session_state.get(LAST_KB_KEY) or t("the selected knowledge base"))


def require_current_kb(sess: Operations) -> str:
    """The current KB's name; otherwise a hint (or, for a KB deleted meanwhile, that it is gone) and the page stops."""
    name = current_kb_name(sess)
    if name is None:
        gone = kb_disappeared(sess)
        if gone is not None:
            st.warning(
                t(
                    "The knowledge base **{name}** this page was using no longer exists: it was deleted, perhaps in "
                    "another browser session. Choose a knowledge base in the sidebar (or create one on the "
                    "**Knowledge bases** page) to go on.",
                    name=gone,
                ),
                icon=":material/warning:",
            )
        else:
            st.info(t("No knowledge base is selected. Pick one in the sidebar or create one on the **Knowledge "
                      "bases** page."))
        st.stop()
    return name  # type: ignore[return-value]


def select(sess: Operations, name: str) -> None:
    """Make ``name`` the session's current KB (the list says so from now on)."""
    try:
        _now_current(sess.select_knowledge_base(name).kb_id)
    except KBError as error:
        show_error(error)
        listing_changed()


def ensure_selection(sess: Operations, preferred: str | None = None) -> None:
    """A new browser session starts on the demo KB (or the first one) so every page has something to show. A session
    whose KB was deleted meanwhile keeps no selection: it is asked to choose (:func:`kb_disappeared`)."""
    if sess.current_kb_id is not None or current_kb_name(sess) is not None:
        return
    try:
        kbs = kb_listing(sess).knowledge_bases
    except KBError:
        return
    if not kbs:
        return
    names = [kb["name"] for kb in kbs]
    choice = preferred if preferred in names else names[0]
    try:
        _now_current(sess.select_knowledge_base(choice).kb_id)
    except KBError:
        listing_changed()


def sidebar_kb_picker(sess: Operations) -> Any:
    """The current-KB picker, and under it the KB's counts; returns the counts' placeholder (None without a KB)
    for :func:`refresh_sidebar_counts`."""
    try:
        kbs = kb_listing(sess).knowledge_bases
    except KBError as error:
        show_error(error)
        return None
    names = [kb["name"] for kb in kbs]
    current = current_kb_name(sess)
    gone = kb_disappeared(sess) if current is None else None
    with st.sidebar:
        if not names:
            st.caption(t("No knowledge bases yet."))
            return None
        index = names.index(current) if current in names else None
        choice = st.selectbox(
            t("Current knowledge base"),
            names,
            index=index,
            key=f"sidebar_kb_{current}_{gone}",  # re-created when another page changes the selection
            placeholder=t("Choose a knowledge base"),
            help=t("Each browser session has its own current knowledge base."),
        )
        if gone is not None:
            st.caption(":orange[" + t("**{name}** no longer exists (deleted elsewhere): choose another.", name=gone)
                       + "]")
        if choice is not None and choice != current:
            select(sess, choice)
            st.rerun()
        counts = st.empty()
        if current is not None:
            counts.caption(kb_counts_line(next(k for k in kbs if k["name"] == current)))
        return counts


def kb_counts_line(kb: dict[str, Any]) -> str:
    failed = int(kb.get("failed_document_count") or 0)
    documents, chunks = kb["document_count"], kb["chunk_count"]
    parts = [
        t("{n} document", n=documents) if documents == 1 else t("{n} documents", n=documents),
        t("{n} chunk", n=chunks) if chunks == 1 else t("{n} chunks", n=chunks),
    ]
    if failed:
        parts.append(t("{n} failed import", n=failed) if failed == 1 else t("{n} failed imports", n=failed))
    parts += [str(kb["embedding_model"]), t("chunk size {size}", size=kb["chunk_size"])]
    return " · ".join(parts)


def refresh_sidebar_counts(sess: Operations, counts: Any) -> None:
    """Redraw the sidebar's counts after the page ran: read again only when the page changed the list (it imported
    or deleted documents, :func:`listing_changed`)."""
    if counts is None:
        return
    try:
        listing = kb_listing(sess)
    except KBError:
        return
    kb = next((k for k in listing.knowledge_bases if k["id"] == listing.current_kb_id), None)
    if kb is not None:
        counts.caption(kb_counts_line(kb))
