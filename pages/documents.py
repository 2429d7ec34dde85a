"""Documents: table with filter and sort, chunk preview (chapter, page), delete, re-chunk with progress."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from kb_core.engines.text_language import language_name
from kb_core.features.documents import human_size
from pages import _service
from pages._errors import attempt
from pages._i18n import say, t
from pages._picker import require_current_kb
from pages._progress import ImportBars

session = _service.session()
kb_name = require_current_kb(session)
st.title(t("Documents"))
st.caption(t("In knowledge base **{kb}**.", kb=kb_name))

flash = st.session_state.pop("doc_flash", None)
if flash:
    st.success(say(flash), icon=":material/check_circle:")

listing = attempt(lambda: session.list_documents())
documents: list[dict[str, Any]] = listing.documents if listing else []
if not documents:
    st.info(t("This knowledge base has no documents yet. Add some on the **Import** page."))
    st.stop()


def text_or_blank(value: Any) -> str:
    return "" if value is None or (isinstance(value, float) and value != value) else str(value)


def status_label(status: str) -> str:
    labels = {
        "ready": t("ready"),
        "failed": t("failed"),
        "pending": t("pending"),
        "parsing": t("parsing"),
        "embedding": t("embedding"),
    }
    return labels.get(status, status)


# The table's columns by their English names (what filters and sorting use); shown under these headers.
HEADERS = {
    "Name": t("Name"),
    "Status": t("Status"),
    "Source": t("Source"),
    "Error": t("Error"),
    "Type": t("Type"),
    "Size": t("Size"),
    "Bytes": t("Bytes"),
    "Chunks": t("Chunks"),
    "Chunk size": t("Chunk size"),
    "Language": t("Language"),
    "Created": t("Created"),
    "Updated": t("Updated"),
}

# Source and Error come right after the status, so they stay in view at 1280 px (#34); the dates go last.
frame = pd.DataFrame(
    {
        "Name": [d["name"] for d in documents],
        "Status": [d["status"] for d in documents],
        "Source": [text_or_blank(d.get("source")) for d in documents],
        "Error": [text_or_blank(d.get("error")) for d in documents],
        "Type": [d["file_type"] for d in documents],
        "Size": [human_size(d["size_bytes"]) if d["size_bytes"] is not None else "" for d in documents],
        "Bytes": [d["size_bytes"] for d in documents],
        "Chunks": [d["chunk_count"] for d in documents],
        "Chunk size": [d["chunk_size"] for d in documents],
        # Detected from the text when it was imported; blank for documents imported before it was stored.
        "Language": [f"{say(language_name(d['language']))} ({d['language']})" if d.get("language") else ""
                     for d in documents],
        "Created": [text_or_blank(d["created_at"])[:19].replace("T", " ") for d in documents],
        "Updated": [text_or_blank(d["updated_at"])[:19].replace("T", " ") for d in documents],
    }
)

filter_col, status_col, type_col, sort_col, order_col = st.columns([3, 2, 2, 2, 1], vertical_alignment="bottom")
needle = filter_col.text_input(t("Filter by name"), key="doc_filter", placeholder=t("part of a name"))
statuses = status_col.multiselect(t("Status"), sorted(frame["Status"].unique()), key="doc_status",
                                  format_func=status_label, placeholder=t("All"))
types = type_col.multiselect(t("Type"), sorted(frame["Type"].unique()), key="doc_type", placeholder=t("All"))
sort_by = sort_col.selectbox(
    t("Sort by"), ["Updated", "Name", "Chunks", "Bytes", "Created", "Status", "Type", "Language"], key="doc_sort",
    format_func=HEADERS.__getitem__,
)
descending = order_col.toggle(t("Desc."), value=True, key="doc_desc")

shown = frame
if needle.strip():
    shown = shown[shown["Name"].str.casefold().str.contains(needle.strip().casefold(), regex=False)]
if statuses:
    shown = shown[shown["Status"].isin(statuses)]
if types:
    shown = shown[shown["Type"].isin(types)]
shown = shown.sort_values(sort_by, ascending=not descending, kind="stable")
shown_table = shown.drop(columns=["Bytes"]).assign(Status=shown["Status"].map(status_label)).rename(columns=HEADERS)
st.dataframe(shown_table, hide_index=True, width="stretch", column_config={
    HEADERS["Status"]: st.column_config.TextColumn(width=80),
    HEADERS["Source"]: st.column_config.TextColumn(width=64),
    HEADERS["Error"]: st.column_config.TextColumn(width=200),
    HEADERS["Type"]: st.column_config.TextColumn(width=48),
    HEADERS["Chunks"]: st.column_config.NumberColumn(width=60),
})
kinds = frame["Status"].value_counts()
flying = int(len(frame) - kinds.get("ready", 0) - kinds.get("failed", 0))
counted = [t("{shown} of {total} rows shown: {ready} documents", shown=len(shown), total=len(frame),
             ready=int(kinds.get("ready", 0)))]
failed = int(kinds.get("failed", 0))
if failed:
    counted.append(t("{n} failed import (no documents; see Error)", n=failed) if failed == 1
                   else t("{n} failed imports (no documents; see Error)", n=failed))
if flying:
    counted.append(t("{n} being imported now", n=flying))
st.caption(t(", ").join(counted) + t("."))

ready = [d for d in documents if d["status"] == "ready" and d["id"]]
if not ready:
    st.stop()
st.divider()
names = [d["name"] for d in ready]
chosen = st.selectbox(t("Document"), names, key="doc_chosen")
document = next(d for d in ready if d["name"] == chosen)

preview_tab, rechunk_tab, delete_tab = st.tabs([t("Chunk preview"), t("Re-chunk"), t("Delete")])
with preview_tab:
    found = attempt(lambda: session.get_item(document["id"]))
    item = found.data if found else None
    listed = attempt(lambda: session.list_chunks(document["name"]))
    chunks: list[dict[str, Any]] = listed.chunks if listed else []
    if chunks:
        st.caption(t("{n} chunks of at most {size} tokens.", n=len(chunks), size=document["chunk_size"]))
        for chunk in chunks:
            place = " · ".join(
                part for part in (
                    t("chapter: {chapter}", chapter=chunk["chapter"]) if chunk.get("chapter") else "",
                    t("page {page}", page=chunk["page"]) if chunk.get("page") is not None else "",
                    t("{n} tokens", n=chunk["tokens"]),
                ) if part
            )
            with st.expander(t("Chunk {n} — {place}", n=chunk["chunk_index"] + 1, place=place),
                             expanded=chunk["chunk_index"] == 0):
                st.text(chunk["content"])
    elif item:
        st.info(t("No chunks could be listed for this document; its full text follows."))
    if item:
        with st.expander(t("Full parsed text")):
            st.text(item.get("text") or "")

with rechunk_tab:
    new_size = st.number_input(
        t("New chunk size (tokens)"), min_value=32, max_value=8192, value=int(document["chunk_size"]), step=32,
        key="doc_new_size",
    )
    if st.button(t("Re-chunk"), type="primary", key="doc_rechunk"):
        bars = ImportBars([document["file_path"]], [document["name"]], title=t("Re-chunking"))
        updated = attempt(lambda: session.update_document(document["name"], int(new_size), progress=bars))
        if updated is not None:
            st.session_state["doc_flash"] = updated.message
            st.rerun()

with delete_tab:
    st.write(t("Delete **{name}** and its {n} chunks from the knowledge base.", name=document["name"],
               n=document["chunk_count"]))
    sure = st.checkbox(t("Yes, delete this document"), key="doc_delete_sure")
    if st.button(t("Delete document"), disabled=not sure, key="doc_delete"):
        deleted = attempt(lambda: session.delete_document(document["name"]))
        if deleted is not None:
            st.session_state["doc_flash"] = deleted.message
            st.session_state.pop("doc_delete_sure", None)
            st.rerun()
