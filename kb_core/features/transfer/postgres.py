"""Export files (:mod:`kb_core.features.transfer`) to and from the PostgreSQL store (:mod:`kb_core.store.postgres`).

An export file holds KBs as segments (parquet catalog rows, ``vectors.npy``, originals). Into PostgreSQL
(:func:`commit_plans`), each validated KB becomes a new KB and one commit of all its documents, rows in the file's
order (so equal scores break ties as in the folder store), chunks analysed again with the service's analyzer, the
bundle graph in the same transaction. Out of PostgreSQL (:func:`export_segments`), each KB is read from one
snapshot and written as one segment, rows in ``row_id`` order. Either way the other store gives the same answers.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Sequence
from datetime import datetime
from pathlib import PurePath
from typing import IO, Any

import numpy as np
import pyarrow as pa

from kb_core.base.validation import name_key
from kb_core.engines.analysis import Analyzer
from kb_core.features.bundles.graph import GraphState
from kb_core.features.transfer.format import SUFFIX_PATTERN, KBPlan, SegmentExport, rename_clashing
from kb_core.store import catalog
from kb_core.store.postgres.records import ChunkRecord, DocumentRecord, PreparedDocument, StoreChange
from kb_core.store.postgres.store import PostgresStore
from kb_core.store.registry import KnowledgeBaseRecord

logger = logging.getLogger(__name__)

__all__ = ["commit_plans", "export_segments"]


def _prepared_documents(plan: KBPlan, analyzer: Analyzer) -> list[PreparedDocument]:
    prepared: list[PreparedDocument] = []
    for segment in plan.segments:
        rows_of: dict[str, list[int]] = {}
        for row, chunk in enumerate(segment.chunks):
            rows_of.setdefault(chunk["doc_id"], []).append(row)
        texts = {row["doc_id"]: row["text"] for row in segment.texts}
        # documents in the order of their first row, so the rows keep the file's order
        ordered = sorted(segment.documents, key=lambda d: rows_of.get(d["doc_id"], [len(segment.chunks)])[0])
        for document in ordered:
            rows = rows_of.get(document["doc_id"], [])
            original = segment.originals.get(document["doc_id"])
            prepared.append(
                PreparedDocument.build(
                    DocumentRecord.from_row(document),
                    [ChunkRecord.from_row(segment.chunks[r]) for r in rows],
                    segment.vectors[rows] if rows else None,
                    analyzer,
                    text=texts.get(document["doc_id"]),
                    original=original.read_bytes() if original is not None else None,
                )
            )
    return prepared


def commit_plans(
    store: PostgresStore, plans: Sequence[KBPlan], analyzer: Analyzer, now: datetime
) -> list[tuple[str, str]]:
    """Create each planned KB and commit its documents (and graph); all or nothing: on a failure the KBs created so
    far are deleted again. Returns the KBs renamed because their name was taken, as (old, new)."""
    renamed = rename_clashing(plans, {name_key(r.name) for r in store.knowledge_bases()}, now)
    created: list[str] = []
    try:
        for plan in plans:
            dimensions = {int(s.vectors.shape[1]) for s in plan.segments if len(s.chunks)}
            record = store.create_knowledge_base(
                plan.record.name,
                plan.record.chunk_size,
                plan.record.embedding_model,
                analyzer=analyzer.name,
                embedding_endpoint=plan.record.embedding_endpoint,
                dimension=dimensions.pop() if len(dimensions) == 1 else None,
                kb_id=plan.record.id,
            )
            created.append(record.id)
            if plan.record.search_settings:
                store.update_search_settings(record.id, plan.record.search_settings)
            documents = _prepared_documents(plan, analyzer)
            graph = None if plan.graph is None else plan.graph.to_json()
            if documents or graph is not None:
                store.commit(record.id, StoreChange(add=tuple(documents), graph=graph))
    except BaseException:
        for kb_id in reversed(created):
            try:
                store.delete_knowledge_base(kb_id)
            except Exception:
                logger.exception("could not remove knowledge base %s of a failed import", kb_id)
        raise
    return renamed


def export_segments(
    store: PostgresStore, record: KnowledgeBaseRecord, kb_index: int, model_key: str
) -> tuple[list[SegmentExport], GraphState | None]:
    """A KB as one export segment (none when it holds no documents) and its graph, read in one snapshot."""
    path = f"kb/{kb_index:04d}/seg/0000"
    with store.snapshot(record.id, prefer_replica=False) as snapshot:
        documents = snapshot.documents()
        if not documents:
            return [], _graph(store, record.id)
        chunks: list[tuple[int, ChunkRecord]] = []
        texts: list[dict[str, Any]] = []
        originals: dict[str, IO[bytes]] = {}
        for document in documents:
            chunks.extend(snapshot.document_chunks(document.doc_id))
            text = snapshot.text(document.doc_id)
            if text is not None:
                texts.append({"doc_id": document.doc_id, "text": text})
            original = snapshot.original(document.doc_id) if document.original else None
            if original is not None and document.original:
                suffix = PurePath(document.original).suffix.lower()
                member = f"{path}/files/{document.doc_id}{suffix if SUFFIX_PATTERN.match(suffix) else ''}"
                originals[member] = io.BytesIO(original)
        chunks.sort(key=lambda pair: pair[0])
        row_ids = [row_id for row_id, _ in chunks]
        dimension = snapshot.tables.dimension or 0
        vectors = snapshot.vectors(row_ids) if row_ids else np.zeros((0, dimension), dtype=np.float32)
        first_row = {chunk.doc_id: i for i, (_, chunk) in reversed(list(enumerate(chunks)))}
        ordered = sorted(documents, key=lambda d: first_row.get(d.doc_id, len(chunks)))
        segment = SegmentExport(
            path=path,
            documents=pa.Table.from_pylist([d.to_row() for d in ordered], schema=catalog.DOCUMENTS_SCHEMA),
            chunks=pa.Table.from_pylist([c.to_row() for _, c in chunks], schema=catalog.CHUNKS_SCHEMA),
            texts=pa.Table.from_pylist(texts, schema=catalog.TEXTS_SCHEMA),
            vectors=np.ascontiguousarray(vectors, dtype=np.float32),
            originals=originals,
            model_key=model_key,
            analyzer=snapshot.tables.analyzer,
        )
    return [segment], _graph(store, record.id)


def _graph(store: PostgresStore, kb_id: str) -> GraphState | None:
    state = store.graph(kb_id)
    return None if state is None else GraphState.from_json(state)
