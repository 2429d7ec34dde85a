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

import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
import psycopg.errors
from psycopg import sql

from kb_core.base.errors import InvalidArgument, KBError, KBExists, KBNotFound, StoreError
from kb_core.base.i18n import msg
from kb_core.base.json_text import json_text
from kb_core.base.validation import name_key
from kb_core.engines.keyword_index import BM25Parameters
from kb_core.store.postgres import schema
from kb_core.store.postgres.connection import Database, DatabaseTarget, database_errors
from kb_core.store.postgres.records import CommitResult, StoreChange
from kb_core.store.postgres.snapshot import KBTables, PostgresSnapshot, VectorSearchSettings
from kb_core.store.postgres.writing import CommitWriting
from kb_core.store.registry import KnowledgeBaseRecord, new_id, utc_now
from kb_core.store.tokens import DEFAULT_RATE_PER_HOUR, TOKEN_PREFIX, TokenRecord, hash_token, new_token

logger = logging.getLogger(__name__)

__all__ = ["PostgresStore"]

_S = sql.Identifier(schema.SCHEMA)
DEFAULT_BM25 = BM25Parameters()  # k1 1.2, b 0.75: the folder store's keyword index uses the same
DEFAULT_VECTOR_SEARCH = VectorSearchSettings()
_KB_COLUMNS = (
    "id, name, chunk_size, embedding_model, embedding_endpoint, created_at, search_settings, "
    "EXISTS (SELECT 1 FROM {s}.api_keys a WHERE a.kb_id = k.id) AS has_api_key"
)


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


class PostgresStore(CommitWriting):
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
        :class:`kb_core.engines.analysis.Analyzer` its chunks are analysed with (checked at every commit and search).
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
                msg(
                    "A knowledge base named '{name}' already exists (names are compared ignoring case); "
                    "choose another name.",
                    name=name,
                ),
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
                (json_text(dict(settings)), kb_id),
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
