"""What the service reads item by item on a PostgreSQL store, with the folder store's answers: ``get_item`` (a
document's text, or a chunk with its neighbours) and ``get_document_info``. ``update_document`` re-imports the
kept original through :meth:`kb_core.store.postgres.importing.PostgresSink.reimport_source`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kb_core.errors import KBNotFound
from kb_core.store.postgres.records import DocumentRecord

if TYPE_CHECKING:
    from kb_core.store.postgres.store import PostgresStore
    from kb_core.store.registry import KnowledgeBaseRecord

__all__ = ["document_row", "find_item"]


def find_item(
    store: PostgresStore, item_id: str, records: Sequence[KnowledgeBaseRecord], neighbours: int
) -> dict[str, Any] | None:
    """The document (``doc_…``: its catalog row and full text) or live chunk (with up to ``neighbours`` chunks
    either side in its document) of that id in the first of ``records`` holding it; None when none does.
    Rows are the catalog's; :func:`kb_core.store.documents.find_item` shapes them as the folder store does."""
    for record in records:
        try:
            with store.snapshot(record.id) as snapshot:
                if item_id.startswith("doc_"):
                    documents = snapshot.documents([item_id])
                    if not documents:
                        continue
                    text = snapshot.text(item_id)
                    return {"type": "document", "kb_name": record.name, "row": documents[0].to_row(), "text": text}
                row_id = snapshot.find_chunk(item_id)
                if row_id is None:
                    continue
                chunk = snapshot.chunks([row_id])[row_id]
                siblings = [c.to_row() for _, c in snapshot.document_chunks(chunk.doc_id)]
                owner = snapshot.documents([chunk.doc_id])
        except KBNotFound:  # deleted meanwhile: as absent from the folder store's list of KBs
            continue
        at = next(i for i, r in enumerate(siblings) if r["chunk_id"] == item_id)
        return {
            "type": "chunk",
            "kb_name": record.name,
            "doc_name": owner[0].name if owner else None,
            "chunk": chunk.to_row(),
            "previous": siblings[max(0, at - neighbours) : at],
            "next": siblings[at + 1 : at + 1 + neighbours],
        }
    return None


def document_row(
    store: PostgresStore, doc_id: str, records: Sequence[KnowledgeBaseRecord]
) -> tuple[KnowledgeBaseRecord, dict[str, Any]] | None:
    """The catalog row of document ``doc_id`` and the KB holding it (the first of ``records``), or None."""
    for record in records:
        try:
            with store.snapshot(record.id) as snapshot:
                documents: list[DocumentRecord] = snapshot.documents([doc_id])
        except KBNotFound:
            continue
        if documents:
            return record, documents[0].to_row()
    return None

