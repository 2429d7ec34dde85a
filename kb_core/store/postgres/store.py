"""The PostgreSQL store: the KB registry, commits, tokens, graphs and consistency checks, all in one database.

Transaction model
-----------------
* **A commit is one transaction** (:meth:`PostgresStore.commit`): documents, texts, originals, chunks with their
  vectors, postings, the term statistics, the KB's live statistics, its version and (for a bundle) its graph are
  written together, or not at all. A writer killed at any instant leaves nothing: the server rolls back the
  transaction of a connection that dies.
* **Writers of one KB take turns**: a commit's first statement locks the KB's registry row (``SELECT … FOR
  UPDATE``), the same row a KB deletion locks. Everything slow (parsing, embedding, analysis) happens before, in
  :meth:`PreparedDocument.build <kb_core.store.postgres.records.PreparedDocument.build>`, so the lock is held only
  while rows are written. Writers of different KBs do not wait for each other. Under that lock names are resolved
  against the live documents (a clash gets a timestamp suffix, as in the folder store) and deletions check that
  what they remove still exists.
* **Statistics stay exact**: ``live_rows`` (N) and ``total_length`` (Σ dl) on the KB row and ``df`` per term are
  changed by the same transaction that adds or removes the rows, by exactly what it adds or removes, and a
  deletion cross-checks the postings it removed against the rows' term lists (a mismatch aborts the commit).
  :meth:`PostgresStore.verify` recomputes all of them from the rows.
* **Readers never lock and never wait**: a search or listing runs in one ``REPEATABLE READ READ ONLY``
  transaction (:class:`kb_core.store.postgres.snapshot.PostgresSnapshot`), so it sees the database as of one
  instant: every commit entirely, or not at all.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import psycopg
import psycopg.errors
from psycopg import sql

from kb_core.errors import DocumentNotFound, InvalidArgument, KBError, KBExists, KBNotFound, StoreError
from kb_core.retrieval.keyword_index import BM25Parameters
from kb_core.retrieval.near_duplicates import TextSignatures, text_signatures
from kb_core.store.postgres import schema
from kb_core.store.postgres.connection import Database, DatabaseTarget, database_errors
from kb_core.store.postgres.records import CommitResult, DocumentRecord, PreparedDocument, StoreChange
from kb_core.store.postgres.snapshot import KBTables, PostgresSnapshot, VectorSearchSettings
from kb_core.store.registry import KnowledgeBaseRecord, new_id, utc_now
from kb_core.store.tokens import DEFAULT_RATE_PER_HOUR, TOKEN_PREFIX, TokenRecord, hash_token, new_token
from kb_core.validation import name_key

logger = logging.getLogger(__name__)

__all__ = ["PostgresStore"]

_S = sql.Identifier(schema.SCHEMA)
DEFAULT_BM25 = BM25Parameters()  # k1 1.2, b 0.75: the folder store's keyword index uses the same
DEFAULT_VECTOR_SEARCH = VectorSearchSettings()
_KB_COLUMNS = (
    "id, name, chunk_size, embedding_model, embedding_endpoint, created_at, search_settings, "
    "EXISTS (SELECT 1 FROM {s}.api_keys a WHERE a.kb_id = k.id) AS has_api_key"
)
_DOCUMENT_COLUMNS = [f for f in DocumentRecord.__dataclass_fields__]
_COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + (0).to_bytes(4, "big") + (0).to_bytes(4, "big")
_COPY_TRAILER = (-1).to_bytes(2, "big", signed=True)
_POSTING_TUPLE = np.dtype(
    [
        ("fields", ">i2"),
        ("l1", ">i4"),
        ("term_id", ">i4"),
        ("l2", ">i4"),
        ("row_id", ">i8"),
        ("l3", ">i4"),
        ("tf", ">i4"),
        ("l4", ">i4"),
        ("dl", ">i4"),
    ]
)


def document_name_key(name: str) -> str:
    """Document names clash ignoring case, as in the folder store's importer (``str.casefold``)."""
    return name.casefold()


def _kb_record(row: Mapping[str, Any]) -> KnowledgeBaseRecord:
    return KnowledgeBaseRecord(
        id=row["id"],
        name=row["name"],
        chunk_size=int(row["chunk_size"]),
        embedding_model=row["embedding_model"],
        embedding_endpoint=row["embedding_endpoint"],
        has_api_key=bool(row["has_api_key"]),
        created_at=row["created_at"],
        search_settings=dict(row["search_settings"] or {}),
    )


def _configure_connection(conn: psycopg.Connection) -> None:
    """Each pooled connection learns the pgvector types (and is left idle, as the pool requires)."""
    from pgvector.psycopg import register_vector

    register_vector(conn)
    conn.commit()


class PostgresStore:
    """Everything the workbench stores, in one PostgreSQL database (schema ``kb_workbench``).

    Open with :meth:`open`; one instance per process, shared by threads (it holds connection pools).
    ``read_url`` names a streaming standby that snapshots prefer (falling back to the primary with a warning).
    """

    def __init__(
        self,
        database: Database,
        *,
        bm25: BM25Parameters = DEFAULT_BM25,
        vector_search: VectorSearchSettings = DEFAULT_VECTOR_SEARCH,
    ) -> None:
        self.db = database
        self.bm25 = bm25
        self.vector_search = vector_search
        self.pgvector_version = ""

    @classmethod
    def open(
        cls,
        url: str,
        *,
        read_url: str | None = None,
        pool_size: int = 4,
        connect_timeout: float = 5,
        application_name: str = "kb-workbench",
        bm25: BM25Parameters = DEFAULT_BM25,
        vector_search: VectorSearchSettings = DEFAULT_VECTOR_SEARCH,
    ) -> PostgresStore:
        """Connect, create the schema if the database has none, and check the server (pgvector ≥ 0.8)."""
        database = Database(
            url,
            read_url=read_url,
            pool_size=pool_size,
            connect_timeout=connect_timeout,
            application_name=application_name,
            configure=_configure_connection,
        )
        store = cls(database, bm25=bm25, vector_search=vector_search)
        with database.connect(database.primary) as conn, database_errors(database.primary):
            store.pgvector_version = schema.ensure_schema(conn, database.primary.display)
        return store

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def display(self) -> str:
        return self.db.primary.display

    # -- connections -----------------------------------------------------------------------------------------
    @contextmanager
    def _write(self) -> Iterator[tuple[psycopg.Connection, DatabaseTarget]]:
        """A primary connection inside one read-committed transaction (committed when the block ends)."""
        with self.db.connection() as (conn, target), conn.transaction():
            yield conn, target

    @contextmanager
    def _read(self) -> Iterator[psycopg.Connection]:
        with self.db.connection() as (conn, _), conn.transaction():
            yield conn

    # -- the registry ------------------------------------------------------------------------------------------
    def knowledge_bases(self) -> list[KnowledgeBaseRecord]:
        with self._read() as conn, conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
            cur.execute(
                sql.SQL("SELECT " + _KB_COLUMNS + " FROM {s}.knowledge_bases k ORDER BY created_at, id").format(s=_S)
            )
            return [_kb_record(row) for row in cur.fetchall()]

    def get(self, kb_id: str) -> KnowledgeBaseRecord:
        with self._read() as conn, conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
            cur.execute(
                sql.SQL("SELECT " + _KB_COLUMNS + " FROM {s}.knowledge_bases k WHERE id = %s").format(s=_S), (kb_id,)
            )
            row = cur.fetchone()
        if row is None:
            raise KBNotFound(f"Knowledge base id '{kb_id}' does not exist.", details={"kb_id": kb_id})
        return _kb_record(row)

    def find(self, kb_name: str) -> KnowledgeBaseRecord:
        with self._read() as conn, conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
            cur.execute(
                sql.SQL("SELECT " + _KB_COLUMNS + " FROM {s}.knowledge_bases k WHERE name_key = %s").format(s=_S),
                (name_key(kb_name),),
            )
            row = cur.fetchone()
        if row is None:
            raise KBNotFound(f"Knowledge base '{kb_name}' does not exist.", details={"kb_name": kb_name})
        return _kb_record(row)

    def create_knowledge_base(
        self,
        name: str,
        chunk_size: int,
        embedding_model: str,
        *,
        analyzer: str,
        embedding_endpoint: str | None = None,
        api_key: str | None = None,
        dimension: int | None = None,
        kb_id: str | None = None,
    ) -> KnowledgeBaseRecord:
        """Register a KB and create its tables in one transaction (validate ``name`` and ``chunk_size`` first).

        ``dimension`` may be left out: the first commit with vectors sets it. ``analyzer`` is the name of the
        :class:`kb_core.retrieval.analysis.Analyzer` its chunks are analysed with (checked at every commit and search).
        """
        if dimension is not None and (not isinstance(dimension, int) or dimension < 1 or dimension > 16_000):
            raise InvalidArgument(f"dimension must be a whole number from 1 to 16000, got {dimension!r}.")
        record = KnowledgeBaseRecord(
            id=kb_id or new_id("kb"),
            name=name,
            chunk_size=int(chunk_size),
            embedding_model=embedding_model,
            embedding_endpoint=embedding_endpoint,
            has_api_key=bool(api_key),
            created_at=utc_now(),
        )
        try:
            with self._write() as (conn, _):
                row = conn.execute(
                    sql.SQL(
                        "INSERT INTO {s}.knowledge_bases (id, name, name_key, chunk_size, embedding_model, "
                        "embedding_endpoint, created_at, analyzer, updated_at) "
                        "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) "
                        "RETURNING table_no"
                    ).format(s=_S),
                    (
                        record.id,
                        record.name,
                        name_key(record.name),
                        record.chunk_size,
                        record.embedding_model,
                        record.embedding_endpoint,
                        record.created_at,
                        analyzer,
                        record.created_at,
                    ),
                ).fetchone()
                assert row is not None
                schema.create_kb_tables(conn, int(row[0]))
                if dimension is not None:
                    schema.add_vector_column(conn, int(row[0]), dimension)
                    conn.execute(
                        sql.SQL("UPDATE {s}.knowledge_bases SET dimension = %s WHERE id = %s").format(s=_S),
                        (dimension, record.id),
                    )
                if api_key:
                    conn.execute(
                        sql.SQL("INSERT INTO {s}.api_keys (kb_id, api_key) VALUES (%s, %s)").format(s=_S),
                        (record.id, api_key),
                    )
        except StoreError as exc:
            if not isinstance(exc.__cause__, psycopg.errors.UniqueViolation):
                raise
            raise KBExists(  # the unique name_key, checked by the server: two hosts cannot both create one name
                f"A knowledge base named '{name}' already exists (names are compared ignoring case); "
                "choose another name.",
                details={"kb_name": name},
            ) from exc
        logger.info("created knowledge base %s (%s) in %s", record.id, record.name, self.display)
        return record

    def delete_knowledge_base(self, kb_id: str) -> None:
        """Remove a KB with its tables, documents, graph and key, in one transaction. Waits for a running commit
        of that KB; searches already reading it finish first."""
        with self._write() as (conn, _):
            row = conn.execute(
                sql.SQL("SELECT table_no FROM {s}.knowledge_bases WHERE id = %s FOR UPDATE").format(s=_S), (kb_id,)
            ).fetchone()
            if row is None:
                raise KBNotFound(f"Knowledge base id '{kb_id}' does not exist.", details={"kb_id": kb_id})
            schema.drop_kb_tables(conn, int(row[0]))
            conn.execute(sql.SQL("DELETE FROM {s}.knowledge_bases WHERE id = %s").format(s=_S), (kb_id,))
        logger.info("deleted knowledge base %s from %s", kb_id, self.display)

    def update_search_settings(self, kb_id: str, settings: Mapping[str, Any]) -> KnowledgeBaseRecord:
        with self._write() as (conn, _):
            row = conn.execute(
                sql.SQL("UPDATE {s}.knowledge_bases SET search_settings = %s::jsonb WHERE id = %s RETURNING id").format(
                    s=_S
                ),
                (json.dumps(dict(settings)), kb_id),
            ).fetchone()
        if row is None:
            raise KBNotFound(f"Knowledge base id '{kb_id}' does not exist.", details={"kb_id": kb_id})
        return self.get(kb_id)

    def api_key(self, kb_id: str) -> str | None:
        with self._read() as conn:
            row = conn.execute(
                sql.SQL("SELECT api_key FROM {s}.api_keys WHERE kb_id = %s").format(s=_S), (kb_id,)
            ).fetchone()
        return None if row is None else str(row[0])

    def tables(self, conn: psycopg.Connection, kb_id: str, *, lock: bool = False) -> KBTables:
        """The KB's tables and statistics as the connection's transaction sees them (``lock``: FOR UPDATE)."""
        query = sql.SQL(
            "SELECT table_no, analyzer, dimension, live_rows, total_length, version, embedding_model "
            "FROM {s}.knowledge_bases WHERE id = %s" + (" FOR UPDATE" if lock else "")
        ).format(s=_S)
        row = conn.execute(query, (kb_id,)).fetchone()
        if row is None:
            raise KBNotFound(f"Knowledge base id '{kb_id}' does not exist.", details={"kb_id": kb_id})
        return KBTables(kb_id, int(row[0]), str(row[1]), row[2], int(row[3]), int(row[4]), int(row[5]), str(row[6]))

    # -- reading -----------------------------------------------------------------------------------------------
    @contextmanager
    def snapshot(self, kb_id: str, *, prefer_replica: bool = True) -> Iterator[PostgresSnapshot]:
        """A consistent read view of one KB: one ``REPEATABLE READ READ ONLY`` transaction, on the read replica
        when one is configured and reachable (``snapshot.warnings`` says when it fell back to the primary)."""
        warnings_before = len(self.db.warnings)
        with self.db.connection(read_only=prefer_replica) as (conn, target), conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            with database_errors(target):
                tables = self.tables(conn, kb_id)
                yield PostgresSnapshot(
                    conn,
                    target,
                    tables,
                    bm25=self.bm25,
                    vector_search=self.vector_search,
                    warnings=tuple(self.db.warnings[warnings_before:]),
                )

    # -- committing --------------------------------------------------------------------------------------------
    def commit(self, kb_id: str, change: StoreChange) -> CommitResult:
        """Apply ``change`` to the KB in one transaction (see the module docstring); returns what it did.

        Raises :class:`KBNotFound` if the KB is gone, :class:`DocumentNotFound` if a document to delete or replace
        is gone, :class:`InvalidArgument` for vectors of the wrong dimension or terms of another analyzer, and
        :class:`StoreError` if the stored graph changed since ``expected_graph_version``.
        """
        if not (change.add or change.delete or change.graph is not None):
            raise InvalidArgument("an empty change: nothing to add, delete or store")
        with self._write() as (conn, _):
            tables = self.tables(conn, kb_id, lock=True)
            live = self._live_documents(conn, kb_id)
            added, removed = self._resolve(change, live)
            for document in added:
                if document.analyzer != tables.analyzer:
                    raise InvalidArgument(
                        f"document {document.record.doc_id} was analysed with {document.analyzer!r}; knowledge base "
                        f"{kb_id} indexes with {tables.analyzer!r}",
                        code="ANALYZER_MISMATCH",
                    )
            removed_rows, removed_length = self._remove(conn, tables, removed) if removed else (0, 0)
            rows_added, length_added = self._add(conn, tables, added) if added else (0, 0)
            graph_version = self._store_graph(conn, kb_id, change) if change.graph is not None else None
            row = conn.execute(
                sql.SQL(
                    "UPDATE {s}.knowledge_bases SET live_rows = live_rows + %s, total_length = total_length + %s, "
                    "version = version + 1, updated_at = %s WHERE id = %s RETURNING version"
                ).format(s=_S),
                (rows_added - removed_rows, length_added - removed_length, utc_now(), kb_id),
            ).fetchone()
            assert row is not None
        logger.info(
            "commit %d of %s: +%d documents (%d rows), -%d documents (%d rows)",
            row[0],
            kb_id,
            len(added),
            rows_added,
            len(removed),
            removed_rows,
        )
        return CommitResult(int(row[0]), tuple(d.record for d in added), tuple(removed), graph_version)

    def _live_documents(self, conn: psycopg.Connection, kb_id: str) -> dict[str, dict[str, Any]]:
        with conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
            cur.execute(
                sql.SQL("SELECT doc_id, name, status, chunk_count FROM {s}.documents WHERE kb_id = %s").format(s=_S),
                (kb_id,),
            )
            return {row["doc_id"]: row for row in cur.fetchall()}

    def _resolve(
        self, change: StoreChange, live: Mapping[str, Mapping[str, Any]]
    ) -> tuple[list[PreparedDocument], list[str]]:
        """Names and replacements decided against the live documents, as the folder store's importer does."""
        from dataclasses import replace

        from kb_core.ingest.pipeline import timestamped_name

        removed: list[str] = []
        for doc_id in change.delete:
            if doc_id not in live:
                raise DocumentNotFound(f"Document '{doc_id}' does not exist (deleted meanwhile?); nothing was changed.")
            removed.append(doc_id)
        taken = {
            document_name_key(str(d["name"]))
            for d in live.values()
            if d["status"] == "ready" and d["doc_id"] not in removed
        }
        added: list[PreparedDocument] = []
        new_ids: set[str] = set()
        for document in change.add:
            record = document.record
            # an update (update_document) keeps the document's id: only the document it replaces may hold it
            if (record.doc_id in live and record.doc_id != document.replaces) or record.doc_id in new_ids:
                raise InvalidArgument(f"document id {record.doc_id} is already used in this knowledge base")
            new_ids.add(record.doc_id)
            if document.replaces is not None:
                if document.replaces not in live or document.replaces in removed:
                    raise DocumentNotFound(
                        f"Document '{record.name}' was deleted or changed meanwhile; nothing was updated."
                    )
                removed.append(document.replaces)
                taken.discard(document_name_key(str(live[document.replaces]["name"])))
            elif not change.keep_names:
                for old in live.values():  # re-importing a name that failed before replaces the failed entry
                    same = document_name_key(str(old["name"])) == document_name_key(record.name)
                    if old["status"] == "failed" and same and old["doc_id"] not in removed:
                        removed.append(old["doc_id"])
            name = record.name
            if record.status == "ready":
                if document_name_key(name) in taken:
                    if change.keep_names:
                        raise StoreError(
                            f"The document name {name!r} was taken meanwhile (by another import); nothing was "
                            "committed. Try again.",
                            code="NAME_TAKEN",
                        )
                    name = timestamped_name(name, taken)
                taken.add(document_name_key(name))
            added.append(document if name == record.name else replace(document, record=replace(record, name=name)))
        return added, removed

    def _remove(self, conn: psycopg.Connection, tables: KBTables, doc_ids: Sequence[str]) -> tuple[int, int]:
        """Delete documents' rows, postings and term counts, and check the three agree; returns (rows, Σ length)."""
        chunks, terms, postings = tables.chunks, tables.terms, tables.postings
        row = conn.execute(
            sql.SQL(
                """
                WITH gone AS (DELETE FROM {chunks} WHERE doc_id = ANY(%(docs)s) RETURNING row_id, length, term_ids),
                pairs AS (SELECT row_id, unnest(term_ids) AS term_id FROM gone),
                deleted AS (
                    DELETE FROM {postings} p USING pairs WHERE p.term_id = pairs.term_id AND p.row_id = pairs.row_id
                    RETURNING 1
                ),
                counted AS (
                    UPDATE {terms} t SET df = t.df - c.n
                    FROM (SELECT term_id, count(*) AS n FROM pairs GROUP BY term_id) c WHERE t.term_id = c.term_id
                    RETURNING 1
                )
                SELECT (SELECT count(*) FROM gone), (SELECT coalesce(sum(length), 0) FROM gone),
                       (SELECT count(*) FROM pairs), (SELECT count(*) FROM deleted),
                       (SELECT count(DISTINCT term_id) FROM pairs), (SELECT count(*) FROM counted)
                """
            ).format(chunks=chunks, postings=postings, terms=terms),
            {"docs": list(doc_ids)},
        ).fetchone()
        assert row is not None
        rows, length, pairs, deleted, distinct_terms, counted = (int(v) for v in row)
        if pairs != deleted or distinct_terms != counted:
            raise StoreError(
                f"knowledge base {tables.kb_id} is inconsistent: the removed rows list {pairs} postings of "
                f"{distinct_terms} terms, the index held {deleted} postings of {counted} terms; nothing was changed. "
                "Run the store's verify."
            )
        conn.execute(
            sql.SQL("DELETE FROM {s}.documents WHERE kb_id = %s AND doc_id = ANY(%s)").format(s=_S),
            (tables.kb_id, list(doc_ids)),
        )
        return rows, length

    def _add(
        self, conn: psycopg.Connection, tables: KBTables, documents: Sequence[PreparedDocument]
    ) -> tuple[int, int]:
        """Insert documents, texts, originals, chunks, postings and term counts; returns (rows, Σ length)."""
        kb_id = tables.kb_id
        dimensions = {d.dimension for d in documents if d.dimension is not None}
        if len(dimensions) > 1:
            raise InvalidArgument(f"one commit holds vectors of dimensions {sorted(dimensions)}; use one model")
        if dimensions:
            dimension = dimensions.pop()
            if tables.dimension is None:
                schema.add_vector_column(conn, tables.table_no, dimension)
                conn.execute(
                    sql.SQL("UPDATE {s}.knowledge_bases SET dimension = %s WHERE id = %s").format(s=_S),
                    (dimension, kb_id),
                )
            elif tables.dimension != dimension:
                raise InvalidArgument(
                    f"the vectors have dimension {dimension}; knowledge base {kb_id} holds vectors of dimension "
                    f"{tables.dimension} (its model's). Re-embed with the KB's model."
                )
        with conn.cursor() as cur:
            cur.executemany(
                sql.SQL("INSERT INTO {s}.documents (kb_id, {columns}, name_key) VALUES (%s, {values}, %s)").format(
                    s=_S,
                    columns=sql.SQL(", ").join(sql.Identifier(c) for c in _DOCUMENT_COLUMNS),
                    values=sql.SQL(", ").join(sql.Placeholder() * len(_DOCUMENT_COLUMNS)),
                ),
                [
                    (kb_id, *(getattr(d.record, c) for c in _DOCUMENT_COLUMNS), document_name_key(d.record.name))
                    for d in documents
                ],
            )
            texts = [(kb_id, d.record.doc_id, d.text) for d in documents if d.text is not None]
            if texts:
                cur.executemany(
                    sql.SQL("INSERT INTO {s}.texts (kb_id, doc_id, text) VALUES (%s, %s, %s)").format(s=_S), texts
                )
            originals = [(kb_id, d.record.doc_id, d.original) for d in documents if d.original is not None]
            if originals:
                cur.executemany(
                    sql.SQL("INSERT INTO {s}.originals (kb_id, doc_id, content) VALUES (%s, %s, %s)").format(s=_S),
                    originals,
                )
        chunk_terms = [
            (chunk, terms, vector)
            for d in documents
            for chunk, terms, vector in zip(d.chunks, d.terms, d.vectors, strict=True)
        ]
        signatures = TextSignatures.concatenate(
            [d.signatures or text_signatures([c.content for c in d.chunks]) for d in documents]
        )
        sketches = signatures.sketch.astype("<u8")
        if not chunk_terms:
            return 0, 0
        term_ids = self._count_terms(conn, tables, [terms for _, terms, _ in chunk_terms])
        row_ids = [
            int(r[0])
            for r in conn.execute(
                "SELECT nextval(pg_get_serial_sequence(%s, 'row_id')) FROM generate_series(1, %s) ORDER BY 1",
                (f"{schema.SCHEMA}.chunks_{tables.table_no}", len(chunk_terms)),
            ).fetchall()
        ]
        total_length = 0
        posting_terms: list[np.ndarray] = []
        posting_rows: list[np.ndarray] = []
        posting_tf: list[np.ndarray] = []
        posting_dl: list[np.ndarray] = []
        with conn.cursor().copy(
            sql.SQL(
                "COPY {} (row_id, chunk_id, doc_id, chunk_index, content, tokens, chapter, page, start_char, end_char, "
                "length, term_ids, text_hash, shingle_count, sketch, embedding) FROM STDIN (FORMAT BINARY)"
            ).format(tables.chunks)
        ) as copy:
            copy.set_types(
                [
                    "int8",
                    "text",
                    "text",
                    "int4",
                    "text",
                    "int4",
                    "text",
                    "int4",
                    "int8",
                    "int8",
                    "int4",
                    "int4[]",
                    "int8",
                    "int4",
                    "bytea",
                    "vector",
                ]
            )
            for position, (row_id, (chunk, terms, vector)) in enumerate(zip(row_ids, chunk_terms, strict=True)):
                ids = np.fromiter(
                    (term_ids[t] for t in terms.frequencies), dtype=np.int32, count=len(terms.frequencies)
                )
                copy.write_row(
                    (
                        row_id,
                        chunk.chunk_id,
                        chunk.doc_id,
                        chunk.chunk_index,
                        chunk.content,
                        chunk.tokens,
                        chunk.chapter,
                        chunk.page,
                        chunk.start_char,
                        chunk.end_char,
                        terms.length,
                        ids.tolist(),
                        int(signatures.text_hash[position]),  # 63 bits: fits a signed bigint
                        int(signatures.shingle_count[position]),
                        sketches[position].tobytes(),
                        vector,
                    )
                )
                total_length += terms.length
                posting_terms.append(ids)
                posting_rows.append(np.full(len(ids), row_id, dtype=np.int64))
                posting_tf.append(np.fromiter(terms.frequencies.values(), dtype=np.int32, count=len(ids)))
                posting_dl.append(np.full(len(ids), terms.length, dtype=np.int32))
        n_postings = sum(len(a) for a in posting_terms)
        if n_postings:
            tuples = np.empty(n_postings, dtype=_POSTING_TUPLE)
            tuples["fields"] = 4
            tuples["l1"], tuples["l2"], tuples["l3"], tuples["l4"] = 4, 8, 4, 4
            tuples["term_id"] = np.concatenate(posting_terms)
            tuples["row_id"] = np.concatenate(posting_rows)
            tuples["tf"] = np.concatenate(posting_tf)
            tuples["dl"] = np.concatenate(posting_dl)
            # Binary COPY built by numpy: millions of postings without a Python call per row.
            with conn.cursor().copy(
                sql.SQL("COPY {} (term_id, row_id, tf, dl) FROM STDIN (FORMAT BINARY)").format(tables.postings)
            ) as copy:
                copy.write(_COPY_HEADER + tuples.tobytes() + _COPY_TRAILER)
        return len(chunk_terms), total_length

    def _count_terms(self, conn: psycopg.Connection, tables: KBTables, chunk_terms: Sequence[Any]) -> dict[str, int]:
        """Add each term's new rows to its df (new terms get ids); returns term → id for every term given."""
        df: Counter[str] = Counter()
        for terms in chunk_terms:
            df.update(terms.frequencies.keys())
        ordered = sorted(df)
        rows = conn.execute(
            sql.SQL(
                """
                WITH input AS (SELECT * FROM unnest(%(terms)s::text[], %(df)s::int[]) AS i(term, df)),
                updated AS (
                    UPDATE {terms} t SET df = t.df + input.df FROM input WHERE t.term = input.term
                    RETURNING t.term, t.term_id
                ),
                inserted AS (
                    INSERT INTO {terms} (term, df)
                    SELECT term, df FROM input WHERE NOT EXISTS (SELECT 1 FROM {terms} t WHERE t.term = input.term)
                    ORDER BY term
                    RETURNING term, term_id
                )
                SELECT term, term_id FROM updated UNION ALL SELECT term, term_id FROM inserted
                """
            ).format(terms=tables.terms),
            {"terms": ordered, "df": [df[t] for t in ordered]},
        ).fetchall()
        ids = {str(term): int(term_id) for term, term_id in rows}
        if len(ids) != len(ordered):
            raise StoreError(f"knowledge base {tables.kb_id}: {len(ordered)} terms were counted, {len(ids)} came back")
        return ids

    def _store_graph(self, conn: psycopg.Connection, kb_id: str, change: StoreChange) -> int:
        row = conn.execute(sql.SQL("SELECT version FROM {s}.graphs WHERE kb_id = %s").format(s=_S), (kb_id,)).fetchone()
        current = 0 if row is None else int(row[0])
        if change.expected_graph_version is not None and change.expected_graph_version != current:
            raise StoreError(
                f"The graph of knowledge base {kb_id} changed meanwhile (version {current}, expected "
                f"{change.expected_graph_version}); nothing was committed. Try again.",
                code="GRAPH_CHANGED",
            )
        version = current + 1
        state = {**dict(change.graph or {}), "version": version}
        conn.execute(
            sql.SQL(
                "INSERT INTO {s}.graphs (kb_id, version, state, updated_at) VALUES (%s, %s, %s::json, %s) "
                "ON CONFLICT (kb_id) DO UPDATE SET version = EXCLUDED.version, state = EXCLUDED.state, "
                "updated_at = EXCLUDED.updated_at"
            ).format(s=_S),
            (kb_id, version, json.dumps(state, ensure_ascii=False, sort_keys=True), utc_now()),  # as the folder's
        )
        return version

    # -- checking ----------------------------------------------------------------------------------------------
    def verify(self, kb_id: str) -> list[str]:
        """Recompute every statistic of a KB from its rows and compare: an empty list when all agree.

        Checks N and Σ dl against the chunk rows, each term's df against its postings, the postings against the
        rows' term lists and lengths, and each document's chunk_count against its rows.
        """
        problems: list[str] = []
        with self._read() as conn:
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            t = self.tables(conn, kb_id)
            rows, length = conn.execute(
                sql.SQL("SELECT count(*), coalesce(sum(length), 0) FROM {}").format(t.chunks)
            ).fetchone() or (0, 0)
            if (int(rows), int(length)) != (t.live_rows, t.total_length):
                problems.append(
                    f"{kb_id}: statistics say N={t.live_rows}, Σdl={t.total_length}; "
                    f"the rows give N={rows}, Σdl={length}"
                )
            bad_df = conn.execute(
                sql.SQL(
                    "SELECT count(*) FROM {terms} t FULL JOIN (SELECT term_id, count(*) AS n FROM {postings} GROUP BY "
                    "term_id) p USING (term_id) WHERE coalesce(t.df, -1) <> coalesce(p.n, 0)"
                ).format(terms=t.terms, postings=t.postings)
            ).fetchone()
            if bad_df and bad_df[0]:
                problems.append(f"{kb_id}: {bad_df[0]} terms have a document frequency that their postings contradict")
            bad_postings = conn.execute(
                sql.SQL(
                    "SELECT count(*) FROM (SELECT row_id, unnest(term_ids) AS term_id, length FROM {chunks}) c "
                    "FULL JOIN {postings} p USING (row_id, term_id) WHERE p.row_id IS NULL OR c.row_id IS NULL "
                    "OR p.dl <> c.length"
                ).format(chunks=t.chunks, postings=t.postings)
            ).fetchone()
            if bad_postings and bad_postings[0]:
                problems.append(f"{kb_id}: {bad_postings[0]} postings do not match the rows' term lists")
            bad_docs = conn.execute(
                sql.SQL(
                    "SELECT count(*) FROM {s}.documents d FULL JOIN (SELECT doc_id, count(*) AS n FROM {chunks} "
                    "GROUP BY doc_id) c USING (doc_id) WHERE (d.kb_id = %s OR d.kb_id IS NULL) "
                    "AND coalesce(d.chunk_count, -1) <> coalesce(c.n, 0)"
                ).format(s=_S, chunks=t.chunks),
                (kb_id,),
            ).fetchone()
            if bad_docs and bad_docs[0]:
                problems.append(f"{kb_id}: {bad_docs[0]} documents' chunk_count differ from their rows")
        return problems

    # -- graphs ------------------------------------------------------------------------------------------------
    def document_ids(self) -> set[str]:
        """The ids of every document of every KB (an import of an export file keeps ids only where none clash)."""
        with self._read() as conn:
            rows = conn.execute(sql.SQL("SELECT doc_id FROM {s}.documents").format(s=_S)).fetchall()
        return {str(row[0]) for row in rows}

    def graph(self, kb_id: str) -> dict[str, Any] | None:
        """The KB's committed bundle graph (``GraphState.to_json()`` form, with its version), or None."""
        with self._read() as conn:
            row = conn.execute(
                sql.SQL("SELECT state FROM {s}.graphs WHERE kb_id = %s").format(s=_S), (kb_id,)
            ).fetchone()
        return None if row is None else dict(row[0])

    # -- tokens ------------------------------------------------------------------------------------------------
    def create_token(
        self, scope: Sequence[str] | None, capability: str, rate_per_hour: int = DEFAULT_RATE_PER_HOUR
    ) -> tuple[str, TokenRecord]:
        """A new MCP bearer token (shown once; only its SHA-256 is stored), as `kb_core.store.tokens.TokenStore`."""
        token, record = new_token(scope, capability, rate_per_hour)
        with self._write() as (conn, _):
            conn.execute(
                sql.SQL(
                    "INSERT INTO {s}.tokens (id, token_hash, scope, capability, rate_per_hour, created_at) "
                    "VALUES (%s, %s, %s, %s, %s, %s)"
                ).format(s=_S),
                (
                    record.id,
                    record.token_hash,
                    None if record.scope is None else sorted(record.scope),
                    record.capability,
                    record.rate_per_hour,
                    record.created_at,
                ),
            )
        return token, record

    def tokens(self) -> list[TokenRecord]:
        with self._read() as conn, conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
            cur.execute(sql.SQL("SELECT * FROM {s}.tokens ORDER BY created_at, id").format(s=_S))
            return [TokenRecord.from_json(row) for row in cur.fetchall()]

    def token(self, token_id: str) -> TokenRecord | None:
        with self._read() as conn, conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
            cur.execute(sql.SQL("SELECT * FROM {s}.tokens WHERE id = %s").format(s=_S), (token_id,))
            row = cur.fetchone()
        return None if row is None else TokenRecord.from_json(row)

    def revoke_token(self, token_id: str) -> TokenRecord:
        with self._write() as (conn, _), conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
            cur.execute(sql.SQL("DELETE FROM {s}.tokens WHERE id = %s RETURNING *").format(s=_S), (token_id,))
            row = cur.fetchone()
        if row is None:
            raise KBError(f"Token '{token_id}' does not exist.", code="TOKEN_NOT_FOUND")
        return TokenRecord.from_json(row)

    def verify_token(self, token: str) -> TokenRecord | None:
        """The record of a presented token, or None (compared by hash: the token itself is never stored)."""
        if not isinstance(token, str) or not token.startswith(TOKEN_PREFIX):
            return None
        with self._read() as conn, conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
            cur.execute(sql.SQL("SELECT * FROM {s}.tokens WHERE token_hash = %s").format(s=_S), (hash_token(token),))
            row = cur.fetchone()
        return None if row is None else TokenRecord.from_json(row)
