"""Documents: table with filter and sort, chunk preview (chapter, page), delete, re-chunk with progress."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from kb_core.documents import human_size
from kb_core.text_language import language_name
from pages import _shared as ui

session = ui.session()
kb_name = ui.require_current_kb(session)
st.title("Documents")
st.caption(f"In knowledge base **{kb_name}**.")

flash = st.session_state.pop("doc_flash", None)
if flash:
    st.success(flash, icon=":material/check_circle:")

listing = ui.data_or_error(session.list_documents())
documents: list[dict[str, Any]] = listing["documents"] if listing else []
if not documents:
    st.info("This knowledge base has no documents yet. Add some on the **Import** page.")
    st.stop()


def text_or_blank(value: Any) -> str:
    return "" if value is None or (isinstance(value, float) and value != value) else str(value)


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
        "Language": [f"{language_name(d['language'])} ({d['language']})" if d.get("language") else ""
                     for d in documents],
        "Created": [text_or_blank(d["created_at"])[:19].replace("T", " ") for d in documents],
        "Updated": [text_or_blank(d["updated_at"])[:19].replace("T", " ") for d in documents],
    }
)

filter_col, status_col, type_col, sort_col, order_col = st.columns([3, 2, 2, 2, 1], vertical_alignment="bottom")
needle = filter_col.text_input("Filter by name", key="doc_filter", placeholder="part of a name")
statuses = status_col.multiselect("Status", sorted(frame["Status"].unique()), key="doc_status")
types = type_col.multiselect("Type", sorted(frame["Type"].unique()), key="doc_type")
sort_by = sort_col.selectbox(
    "Sort by", ["Updated", "Name", "Chunks", "Bytes", "Created", "Status", "Type", "Language"], key="doc_sort"
)
descending = order_col.toggle("Desc.", value=True, key="doc_desc")

shown = frame
if needle.strip():
    shown = shown[shown["Name"].str.casefold().str.contains(needle.strip().casefold(), regex=False)]
if statuses:
    shown = shown[shown["Status"].isin(statuses)]
if types:
    shown = shown[shown["Type"].isin(types)]
shown = shown.sort_values(sort_by, ascending=not descending, kind="stable")
st.dataframe(shown.drop(columns=["Bytes"]), hide_index=True, width="stretch", column_config={
    "Status": st.column_config.TextColumn(width=80),
    "Source": st.column_config.TextColumn(width=64),
    "Error": st.column_config.TextColumn(width=200),
    "Type": st.column_config.TextColumn(width=48),
    "Chunks": st.column_config.NumberColumn(width=60),
})
kinds = frame["Status"].value_counts()
flying = int(len(frame) - kinds.get("ready", 0) - kinds.get("failed", 0))
st.caption(
    f"{len(shown)} of {len(frame)} rows shown: {int(kinds.get('ready', 0))} documents"
    + (f", {int(kinds['failed'])} failed import{'s' if kinds['failed'] != 1 else ''} (no documents; see Error)"
       if kinds.get("failed", 0) else "")
    + (f", {flying} being imported now" if flying else "")
    + "."
)

ready = [d for d in documents if d["status"] == "ready" and d["id"]]
if not ready:
    st.stop()
st.divider()
names = [d["name"] for d in ready]
chosen = st.selectbox("Document", names, key="doc_chosen")
document = next(d for d in ready if d["name"] == chosen)

preview_tab, rechunk_tab, delete_tab = st.tabs(["Chunk preview", "Re-chunk", "Delete"])
with preview_tab:
    item = ui.data_or_error(session.get_item(document["id"]))
    listed = ui.data_or_error(session.list_chunks(document["name"]))
    chunks: list[dict[str, Any]] = listed["chunks"] if listed else []
    if chunks:
        st.caption(f"{len(chunks)} chunks of at most {document['chunk_size']} tokens.")
        for chunk in chunks:
            place = " · ".join(
                part for part in (
                    f"chapter: {chunk['chapter']}" if chunk.get("chapter") else "",
                    f"page {chunk['page']}" if chunk.get("page") is not None else "",
                    f"{chunk['tokens']} tokens",
                ) if part
            )
            with st.expander(f"Chunk {chunk['chunk_index'] + 1} — {place}", expanded=chunk["chunk_index"] == 0):
                st.text(chunk["content"])
    elif item:
        st.info("No chunks could be listed for this document; its full text follows.")
    if item:
        with st.expander("Full parsed text"):
            st.text(item.get("text") or "")

with rechunk_tab:
    new_size = st.number_input(
        "New chunk size (tokens)", min_value=32, max_value=8192, value=int(document["chunk_size"]), step=32,
        key="doc_new_size",
    )
    if st.button("Re-chunk", type="primary", key="doc_rechunk"):
        bars = ui.ImportBars([document["file_path"]], [document["name"]], title="Re-chunking")
        result = session.update_document(document["name"], int(new_size), progress=bars)
        if result["success"]:
            st.session_state["doc_flash"] = result["message"]
            st.rerun()
        ui.show_error(result)

with delete_tab:
    st.write(f"Delete **{document['name']}** and its {document['chunk_count']} chunks from the knowledge base.")
    sure = st.checkbox("Yes, delete this document", key="doc_delete_sure")
    if st.button("Delete document", disabled=not sure, key="doc_delete"):
        result = session.delete_document(document["name"])
        if result["success"]:
            st.session_state["doc_flash"] = result["message"]
            st.session_state.pop("doc_delete_sure", None)
            st.rerun()
        ui.show_error(result)
