"""Keeping the search indexes in step with the graph: the indexed text of each node is a document.

:func:`sync_index` compares what the graph wants indexed (one document per node with indexed text,
identified by the SHA-256 of that text) with the KB's live documents of source "bundle", and makes
ONE commit of the KB store that adds a segment with the new or changed texts and tombstones every
bundle document the graph no longer names. Because it is a diff against the truth (the graph), the
same call also repairs the indexes after a crash between the index commit and the graph commit:
orphaned documents are removed and missing ones re-indexed on the next sync.
"""

from __future__ import annotations

import logging
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

import numpy as np

from kb_core.base.errors import KBError, StoreError
from kb_core.base.locking import lock_if_free
from kb_core.engines.text_language import document_language
from kb_core.features.bundles.documents import BUNDLE_SOURCE, chunk_and_embed, diff_bundle_documents
from kb_core.features.bundles.graph import GraphState, GraphStore
from kb_core.features.seams import Resources
from kb_core.store import Change, KBStore, KnowledgeBaseRecord, Manifest, catalog, utc_now
from kb_core.store.verify import live_document_records

if TYPE_CHECKING:
    from kb_core.store.base import Database

logger = logging.getLogger(__name__)


def sync_index(service: Resources, record: KnowledgeBaseRecord, state: GraphState) -> dict[str, int]:
    """Make the KB's bundle documents match ``state`` in one commit; sets each node's doc_id/doc_name.

    Call under the graph lock. Returns documents_indexed, documents_removed, chunks_indexed.
    """

    def in_database(database: Database) -> dict[str, int]:
        from kb_core.features.bundles.postgres import sync_index as prepare_on_postgres

        # prepared here, committed with the graph (kb_core.features.bundles.postgres)
        return prepare_on_postgres(service, database, record, state)

    return service.store.choose(folder=lambda: _sync_folder_index(service, record, state), postgres=in_database)


def _sync_folder_index(service: Resources, record: KnowledgeBaseRecord, state: GraphState) -> dict[str, int]:
    from kb_core.store.segments import chunk_row, write_segment_files
    from kb_core.store.sink import timestamped_name

    reader = service.reader(record.id)
    documents = reader.snapshot().documents()
    live = {
        row["doc_id"]: row
        for row in documents.to_dict("records")
        if row["source"] == BUNDLE_SOURCE and row["status"] == "ready"
    }
    remove, pending = diff_bundle_documents(state, live)
    if not pending and not remove:
        return {"documents_indexed": 0, "documents_removed": 0, "chunks_indexed": 0}

    embedder = service.embedder(record)
    new_docs, vectors = chunk_and_embed(pending, embedder, record.chunk_size)
    store = service.kb_store(record.id)
    staged = store.stage_segment() if new_docs else None
    try:
        doc_rows: list[dict[str, Any]] = []
        if staged is not None:
            now = utc_now()
            chunk_rows: list[dict[str, Any]] = []
            text_rows: list[dict[str, Any]] = []
            for doc in new_docs:
                original = f"files/{doc.doc_id}.txt"
                data = doc.text.encode("utf-8")
                (staged.path / original).write_bytes(data)
                doc_rows.append(
                    {
                        "doc_id": doc.doc_id,
                        "name": doc.name,
                        "file_name": f"{doc.doc_id}.txt",
                        "file_path": f"bundle:{state.nodes[doc.node_id]['type']}/{doc.name}",
                        "file_type": "txt",
                        "source": BUNDLE_SOURCE,
                        "size_bytes": len(data),
                        "sha256": doc.sha256,
                        "chunk_size": record.chunk_size,
                        "status": "ready",
                        "error": None,
                        "chunk_count": len(doc.chunks),
                        "created_at": now,
                        "updated_at": now,
                        "original": original,
                        "language": document_language(doc.text),
                    }
                )
                text_rows.append({"doc_id": doc.doc_id, "text": doc.text})
                chunk_rows.extend(chunk_row(doc.doc_id, chunk) for chunk in doc.chunks)
            matrix = np.vstack(vectors).astype(np.float32)
            write_segment_files(staged, doc_rows, chunk_rows, text_rows, matrix, embedder.model_key, service.analyzer)

        def plan(manifest: Manifest) -> Change:
            snapshot = reader.snapshot()
            if snapshot.version != manifest.version:
                raise StoreError("The knowledge base changed while committing the bundle; try again.")
            current = snapshot.documents().to_dict("records")
            gone = set(remove)
            tombstones: dict[str, dict[str, int]] = {}
            for row in current:
                if row["doc_id"] in gone:
                    tombstones.setdefault(row["segment_id"], {})[row["doc_id"]] = int(row["chunk_count"])
            taken = {str(r["name"]).casefold() for r in current if r["doc_id"] not in gone and r["status"] == "ready"}
            for row, doc in zip(doc_rows, new_docs, strict=True):
                if row["name"].casefold() in taken:
                    row["name"] = f"{state.nodes[doc.node_id]['type']}: {row['name']}"
                if row["name"].casefold() in taken:
                    row["name"] = timestamped_name(row["name"], taken)
                taken.add(row["name"].casefold())
            if staged is not None:
                catalog.write_documents(staged.path, doc_rows)
                return Change(add=(staged,), tombstones=tombstones)
            return Change(tombstones=tombstones)

        store.commit(plan)
    except BaseException:
        if staged is not None:
            store.discard(staged)
        raise
    for row, doc in zip(doc_rows, new_docs, strict=True):
        state.nodes[doc.node_id].update(doc_id=doc.doc_id, doc_name=row["name"], text_sha256=doc.sha256)
    service.compact_quietly(record)
    return {
        "documents_indexed": len(new_docs),
        "documents_removed": len(remove),
        "chunks_indexed": sum(len(d.chunks) for d in new_docs),
    }


def bundle_index_problem(store: KBStore) -> str | None:
    """How the KB's bundle documents differ from its knowledge graph (the truth), or None when they match.

    A bundle import commits the search index first and the graph second; a process killed in between leaves
    documents no graph node names, or nodes whose document was replaced or deleted. Checked under the graph's
    write lock, and skipped while a bundle import holds it (its two commits are then legitimately apart). One of
    ``kb verify``'s checks of the folder store (:func:`kb_core.store.verify.verify_home`).
    """
    graph = GraphStore(store.root)
    if not graph.root.is_dir():
        return None
    lock = graph.root / "write.lock"
    with lock_if_free(lock) if lock.exists() else nullcontext(True) as free:
        if not free:
            return None
        try:
            state = graph.load()
            records = live_document_records(store)
        except KBError as exc:
            return f"its knowledge graph or index cannot be read to compare them ({exc.message})"
        if records is None:
            return None  # a missing segment is reported on its own
        indexed = {d: row[0] for d, row in records.items() if row[1] == BUNDLE_SOURCE and row[2] == "ready"}
        linked = {n["doc_id"]: n for n in state.nodes.values() if n.get("doc_id")}
    orphans = sorted(set(indexed) - set(linked))
    gone = sorted(set(linked) - set(indexed))
    if not orphans and not gone:
        return None
    parts = []
    if orphans:
        names = ", ".join(repr(indexed[d]) for d in orphans[:5]) + (" …" if len(orphans) > 5 else "")
        parts.append(f"{len(orphans)} searchable bundle document(s) that no graph node names ({names})")
    if gone:
        names = ", ".join(repr(linked[d].get("doc_name") or linked[d]["id"]) for d in gone[:5])
        names += " …" if len(gone) > 5 else ""
        parts.append(f"{len(gone)} graph node(s) whose indexed document is gone ({names})")
    return (
        "the search index does not match the knowledge graph: " + " and ".join(parts) + ". A bundle import "
        "interrupted between its index and graph commits leaves this (so does deleting a bundle document "
        "directly). Run `kb verify --repair` to roll the index back to the committed graph (the graph is the "
        "truth), then import that bundle again"
    )
