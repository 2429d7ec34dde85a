"""Keeping the search indexes in step with the graph: the indexed text of each node is a document.

:func:`sync_index` compares what the graph wants indexed (one document per node with indexed text,
identified by the SHA-256 of that text) with the KB's live documents of source "bundle", and makes
ONE commit of the KB store that adds a segment with the new or changed texts and tombstones every
bundle document the graph no longer names. Because it is a diff against the truth (the graph), the
same call also repairs the indexes after a crash between the index commit and the graph commit:
orphaned documents are removed and missing ones re-indexed on the next sync.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from kb_core.bundles.graph import GraphState
from kb_core.errors import StoreError
from kb_core.seams import Resources
from kb_core.store import Change, KnowledgeBaseRecord, Manifest, catalog, utc_now

if TYPE_CHECKING:
    from kb_core.embedding.base import Embedder

logger = logging.getLogger(__name__)

BUNDLE_SOURCE = "bundle"
EMBED_BATCH = 256


def node_text(state: GraphState, node: dict[str, Any]) -> str:
    node_type = state.ontology.nodes.get(node["type"])
    if node_type is None:
        return ""
    parts = [node["properties"].get(f) for f in node_type.indexed]
    return "\n\n".join(p for p in parts if isinstance(p, str) and p.strip())


def node_display_name(node: dict[str, Any]) -> str:
    identity = node["identity"]
    if len(identity) == 1:
        name = str(next(iter(identity.values())))
    else:
        name = ", ".join(f"{k}={v}" for k, v in identity.items())
    name = " ".join(name.split())[:200]
    return name or node["id"]


@dataclass
class NewBundleDocument:
    node_id: str
    doc_id: str
    name: str
    text: str
    sha256: str
    chunks: list[Any]


def diff_bundle_documents(
    state: GraphState, live: dict[str, dict[str, Any]]
) -> tuple[list[str], list[tuple[dict[str, Any], str, str]]]:
    """What a sync changes, given the KB's live bundle documents by doc_id: the doc_ids to remove and the nodes
    to (re-)index with their text and its SHA-256. Nodes without indexed text, and unchanged ones, are updated."""
    keep: set[str] = set()
    pending: list[tuple[dict[str, Any], str, str]] = []
    for node_id in sorted(state.nodes):
        node = state.nodes[node_id]
        text = node_text(state, node)
        if not text:
            node.update(doc_id=None, doc_name=None, text_sha256=None)
            continue
        sha = hashlib.sha256(text.encode("utf-8")).hexdigest()
        old = live.get(node.get("doc_id") or "")
        if old is not None and old["sha256"] == sha:
            keep.add(old["doc_id"])
            node.update(doc_name=old["name"], text_sha256=sha)
            continue
        pending.append((node, text, sha))
    return sorted(set(live) - keep), pending


def chunk_and_embed(
    pending: list[tuple[dict[str, Any], str, str]], embedder: Embedder, chunk_size: int
) -> tuple[list[NewBundleDocument], list[np.ndarray]]:
    """The new bundle documents of ``pending`` (a node whose text gives no chunk gets none) and one vector per
    chunk, in order."""
    from kb_core.ingest.chunking import chunk_document
    from kb_core.ingest.parsing.base import ParsedDocument
    from kb_core.ingest.parsing.txt_parser import split_paragraphs

    new_docs: list[NewBundleDocument] = []
    for node, text, sha in pending:
        blocks = tuple(b for b in split_paragraphs(text) if b.text.strip())
        chunks = chunk_document(ParsedDocument("txt", blocks), embedder.tokenizer, chunk_size) if blocks else []
        if not chunks:
            node.update(doc_id=None, doc_name=None, text_sha256=None)
            continue
        doc_id = f"doc_{uuid.uuid4().hex[:16]}"
        new_docs.append(NewBundleDocument(node["id"], doc_id, node_display_name(node), text, sha, chunks))
    contents = [c.content for d in new_docs for c in d.chunks]
    vectors: list[np.ndarray] = []
    for start in range(0, len(contents), EMBED_BATCH):
        vectors.extend(embedder.embed_documents(contents[start : start + EMBED_BATCH]))
    return new_docs, vectors


def sync_index(service: Resources, record: KnowledgeBaseRecord, state: GraphState) -> dict[str, int]:
    """Make the KB's bundle documents match ``state`` in one commit; sets each node's doc_id/doc_name.

    Call under the graph lock. Returns documents_indexed, documents_removed, chunks_indexed.
    """
    if service.postgres is not None:  # prepared here, committed with the graph (kb_core.store.postgres.bundles)
        from kb_core.store.postgres.bundles import sync_index as prepare_on_postgres

        return prepare_on_postgres(service, record, state)
    from kb_core.ingest.pipeline import timestamped_name
    from kb_core.store.segments import chunk_row, write_segment_files

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
                    }
                )
                text_rows.append({"doc_id": doc.doc_id, "text": doc.text})
                chunk_rows.extend(chunk_row(doc.doc_id, chunk) for chunk in doc.chunks)
            matrix = np.vstack(vectors).astype(np.float32)
            write_segment_files(staged, doc_rows, chunk_rows, text_rows, matrix, embedder, service.analyzer)

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
