"""Knowledge bundles on a PostgreSQL store (:mod:`kb_core.store.postgres`): the bundle code over the database.

:class:`PostgresGraphStore` has the interface of the folder store's :class:`kb_core.features.bundles.graph.GraphStore`
(``load``, ``lock``, ``commit``, ``export_shadow``). The folder store commits a bundle in two steps (the index
segment, then the graph file, with a repair for a crash between them); here both are ONE transaction:
:func:`sync_index` (which :func:`kb_core.features.bundles.indexing.sync_index` hands over to on PostgreSQL) prepares the
bundle documents to add and remove, outside any transaction, and leaves them with the graph store whose
:meth:`~PostgresGraphStore.lock` block is open; :meth:`~PostgresGraphStore.commit` writes them with the graph in
one :class:`~kb_core.store.postgres.records.StoreChange`, guarded by the graph's version. Bundle writers of one
KB take turns on a PostgreSQL advisory lock, on every host.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from kb_core.engines.text_language import document_language
from kb_core.features.bundles.graph import GraphState, write_shadow
from kb_core.features.bundles.ontology import default_ontology
from kb_core.store.postgres.connection import database_errors
from kb_core.store.postgres.records import ChunkRecord, DocumentRecord, PreparedDocument, StoreChange
from kb_core.store.registry import utc_now

if TYPE_CHECKING:
    from kb_core.features.seams import Resources
    from kb_core.store.postgres.store import PostgresStore
    from kb_core.store.registry import KnowledgeBaseRecord

logger = logging.getLogger(__name__)

__all__ = ["PostgresGraphStore", "sync_index"]

_GRAPH_LOCK = 0x6B62_6772  # pg_advisory_lock(key, hashtext(kb_id)): one bundle writer per KB, on every host
_OPEN: ContextVar[PostgresGraphStore | None] = ContextVar("kb_pg_graph_store", default=None)


@dataclass
class _PendingIndex:
    add: list[PreparedDocument] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)


class PostgresGraphStore:
    """The graph of one KB in the database (``graphs`` table), committed together with its bundle documents."""

    def __init__(self, service: Resources, record: KnowledgeBaseRecord, database: PostgresStore) -> None:
        self.service = service
        self.store = database
        self.record = record
        self.pending: _PendingIndex | None = None
        self._loaded_version: int | None = None

    def load(self) -> GraphState:
        """The committed state; an empty graph with the default ontology if none yet."""
        stored = self.store.graph(self.record.id)
        state = GraphState(version=0, ontology=default_ontology()) if stored is None else GraphState.from_json(stored)
        self._loaded_version = state.version
        return state

    @contextmanager
    def lock(self) -> Iterator[None]:
        """Bundle imports and ontology changes of this KB take turns (a session advisory lock on a connection of
        its own, released when the block ends or the process dies)."""
        db = self.store.db
        conn = db.connect(db.primary, autocommit=True)
        token = _OPEN.set(self)
        try:
            with database_errors(db.primary):
                conn.execute("SELECT pg_advisory_lock(%s, hashtext(%s))", (_GRAPH_LOCK, self.record.id))
            yield
        finally:
            _OPEN.reset(token)
            self.pending = None
            conn.close()  # releases the advisory lock

    def commit(self, state: GraphState) -> GraphState:
        """Write ``state`` as the next graph version with the prepared bundle documents, in one transaction; fails
        (GRAPH_CHANGED, nothing written) if another writer committed a graph since :meth:`load`."""
        pending, self.pending = self.pending or _PendingIndex(), None
        result = self.store.commit(
            self.record.id,
            StoreChange(
                add=tuple(pending.add),
                delete=tuple(pending.delete),
                graph=GraphState(state.version, state.ontology, state.nodes, state.edges).to_json(),
                expected_graph_version=self._loaded_version if self._loaded_version is not None else state.version,
                keep_names=True,  # the graph names its documents: a name taken meanwhile fails, nothing half-named
            ),
        )
        assert result.graph_version is not None
        self._loaded_version = result.graph_version
        return GraphState(result.graph_version, state.ontology, state.nodes, state.edges)

    def export_shadow(self, state: GraphState, target: Path | None = None) -> Path:
        """The readable text export of ``state`` (by default in this host's home: the database is the truth)."""
        folder = target or self.service.home.root / "graph-shadow" / self.record.id
        write_shadow(state, folder)
        return folder


def sync_index(
    service: Resources, database: PostgresStore, record: KnowledgeBaseRecord, state: GraphState
) -> dict[str, int]:
    """:func:`kb_core.features.bundles.indexing.sync_index` on PostgreSQL: the same diff between the graph and the KB's
    bundle documents, the same chunks, names and vectors, but nothing is committed here: the documents wait for
    the graph commit of the open :meth:`PostgresGraphStore.lock` block (one transaction for both)."""
    from kb_core.features.bundles.documents import (
        BUNDLE_SOURCE,
        chunk_and_embed,
        diff_bundle_documents,
        node_display_name,
    )
    from kb_core.store.segments import chunk_row
    from kb_core.store.sink import timestamped_name

    graph_store = _OPEN.get()
    if graph_store is None or graph_store.record.id != record.id:
        raise RuntimeError("sync_index on PostgreSQL runs inside PostgresGraphStore.lock() of the same KB")
    with database.snapshot(record.id, prefer_replica=False) as snapshot:
        current = [d.to_row() for d in snapshot.documents()]
    live = {r["doc_id"]: r for r in current if r["source"] == BUNDLE_SOURCE and r["status"] == "ready"}
    remove, pending = diff_bundle_documents(state, live)
    graph_store.pending = _PendingIndex(delete=remove)
    if not pending and not remove:
        return {"documents_indexed": 0, "documents_removed": 0, "chunks_indexed": 0}

    new_docs, vectors = chunk_and_embed(pending, service.embedder(record), record.chunk_size)
    # names as the folder store's bundle commit gives them: a clash gets the node type, then a timestamp
    gone = set(remove)
    taken = {str(r["name"]).casefold() for r in current if r["doc_id"] not in gone and r["status"] == "ready"}
    now = utc_now()
    at = 0
    for new in new_docs:
        node, doc_id, text, sha, chunks = state.nodes[new.node_id], new.doc_id, new.text, new.sha256, new.chunks
        name = new.name
        if name.casefold() in taken:
            name = f"{node['type']}: {name}"
        if name.casefold() in taken:
            name = timestamped_name(name, taken)
        taken.add(name.casefold())
        data = text.encode("utf-8")
        document = DocumentRecord(
            doc_id=doc_id,
            name=name,
            file_name=f"{doc_id}.txt",
            file_path=f"bundle:{node['type']}/{node_display_name(node)}",
            file_type="txt",
            source=BUNDLE_SOURCE,
            size_bytes=len(data),
            sha256=sha,
            chunk_size=record.chunk_size,
            status="ready",
            error=None,
            chunk_count=len(chunks),
            created_at=now,
            updated_at=now,
            original=f"files/{doc_id}.txt",
            language=document_language(text),
        )
        rows = [ChunkRecord.from_row(chunk_row(doc_id, chunk)) for chunk in chunks]
        matrix = np.vstack(vectors[at : at + len(chunks)]).astype(np.float32)
        at += len(chunks)
        graph_store.pending.add.append(
            PreparedDocument.build(document, rows, matrix, service.analyzer, text=text, original=data)
        )
        node.update(doc_id=doc_id, doc_name=name, text_sha256=sha)
    return {
        "documents_indexed": len(new_docs),
        "documents_removed": len(remove),
        "chunks_indexed": sum(len(d.chunks) for d in new_docs),
    }
