"""The PostgreSQL schema of the store (``kb_workbench``), created on first open and checked on every open.

Shared tables (one row per KB, document, token …)::

    meta             (key, value)                       schema_version
    knowledge_bases  id, name, name_key (unique), chunk_size, embedding_model, embedding_endpoint, created_at,
                     search_settings (jsonb: the saved search defaults), analyzer, dimension,
                     table_no (names the KB's own tables), live_rows, total_length (BM25's N and Σ dl over live
                     rows), version (commits so far), updated_at
    api_keys         kb_id → api_key                    (an endpoint KB's key; never listed or exported)
    documents        kb_id + the columns of documents.parquet, name_key; one ready document per name_key (language
                     added to databases made before it, null in their rows)
    texts            kb_id, doc_id, text                (texts.parquet)
    originals        kb_id, doc_id, content bytea       (the kept original file)
    graphs           kb_id, version, state json         (the bundle graph: GraphState.to_json() with sorted keys,
                                                        as the folder store's state files; json, not jsonb, which
                                                        orders keys by length: the example bundle and the schema
                                                        follow the order of the ontology's types and fields)
    tokens           id, token_hash (unique), scope text[] (NULL: every KB), capability, rate_per_hour, created_at
    imports          id, kb_id, backend_pid, backend_start, documents jsonb, started_at: the in-flight documents of
                     a running import (pending/parsing/embedding), announced over the import's own connection; a
                     row whose connection is gone (its importer died) is ignored and removed

Per knowledge base ``N = knowledge_bases.table_no``::

    chunks_N    row_id (identity: insertion order, the tie-break of equal scores), the columns of
                chunks.parquet, length (analysed tokens: BM25's dl), term_ids int[] (the row's distinct
                terms), the near-duplicate signature computed at import (text_hash, shingle_count, sketch:
                16 little-endian uint64; NULL in rows written before they were stored: computed from the text
                when read), embedding vector(d); HNSW index (vector_cosine_ops) on embedding
    terms_N     term_id, term (unique), df (live rows holding the term)
    postings_N  (term_id, row_id) primary key INCLUDE (tf, dl): the inverted index, one range scan per term

**Why a table per KB, not one table with a partial HNSW index per KB.** The vector column's dimension is a
property of the KB's model, and an HNSW index needs a typed ``vector(d)`` column: one shared table would need an
expression index ``((embedding::vector(d))) WHERE kb_id = '…'`` per KB, which the planner uses only when a query
repeats the cast and the KB id as a literal (a parameterised ``kb_id = $1`` silently scans every row). A table
per KB gets a plain HNSW index, per-KB planner statistics (a 1k-chunk KB beside a 1M-chunk one), dead rows and
vacuum confined to one KB, and a KB deletion that is a ``DROP TABLE`` instead of millions of deleted rows. The
cost, a few DDL statements per KB, is transactional in PostgreSQL, so creating or dropping a KB is still atomic.
"""

from __future__ import annotations

import logging

import psycopg
from psycopg import sql

from kb_core.base.errors import StoreError

logger = logging.getLogger(__name__)

SCHEMA = "kb_workbench"
SCHEMA_VERSION = 1
MIN_PGVECTOR = (0, 8, 0)  # HNSW iterative scans (hnsw.iterative_scan) arrived in 0.8.0
HNSW_M = 16
HNSW_EF_CONSTRUCTION = 64
_SETUP_LOCK = 0x6B62_7767  # pg_advisory_xact_lock key: one process creates the schema at a time

_SHARED_TABLES = """
CREATE TABLE IF NOT EXISTS {schema}.meta (key text PRIMARY KEY, value text NOT NULL);
CREATE TABLE IF NOT EXISTS {schema}.knowledge_bases (
    id text PRIMARY KEY,
    name text NOT NULL,
    name_key text COLLATE "C" NOT NULL UNIQUE,
    chunk_size integer NOT NULL,
    embedding_model text NOT NULL,
    embedding_endpoint text,
    created_at text NOT NULL,
    search_settings jsonb NOT NULL DEFAULT '{{}}',
    analyzer text NOT NULL,
    dimension integer CHECK (dimension > 0),
    table_no bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    live_rows bigint NOT NULL DEFAULT 0 CHECK (live_rows >= 0),
    total_length bigint NOT NULL DEFAULT 0 CHECK (total_length >= 0),
    version bigint NOT NULL DEFAULT 0,
    updated_at text NOT NULL
);
CREATE TABLE IF NOT EXISTS {schema}.api_keys (
    kb_id text PRIMARY KEY REFERENCES {schema}.knowledge_bases (id) ON DELETE CASCADE,
    api_key text NOT NULL
);
CREATE TABLE IF NOT EXISTS {schema}.documents (
    kb_id text NOT NULL REFERENCES {schema}.knowledge_bases (id) ON DELETE CASCADE,
    doc_id text NOT NULL,
    name text NOT NULL,
    file_name text,
    file_path text,
    file_type text,
    source text,
    size_bytes bigint,
    sha256 text,
    chunk_size bigint,
    status text NOT NULL CHECK (status IN ('ready', 'failed')),
    error text,
    chunk_count bigint NOT NULL CHECK (chunk_count >= 0),
    created_at text,
    updated_at text,
    original text,
    name_key text COLLATE "C" NOT NULL,
    language text,
    PRIMARY KEY (kb_id, doc_id)
);
CREATE UNIQUE INDEX IF NOT EXISTS documents_ready_name ON {schema}.documents (kb_id, name_key) WHERE status = 'ready';
CREATE TABLE IF NOT EXISTS {schema}.texts (
    kb_id text NOT NULL,
    doc_id text NOT NULL,
    text text NOT NULL,
    PRIMARY KEY (kb_id, doc_id),
    FOREIGN KEY (kb_id, doc_id) REFERENCES {schema}.documents (kb_id, doc_id) ON DELETE CASCADE
);
CREATE TABLE IF NOT EXISTS {schema}.originals (
    kb_id text NOT NULL,
    doc_id text NOT NULL,
    content bytea NOT NULL,
    PRIMARY KEY (kb_id, doc_id),
    FOREIGN KEY (kb_id, doc_id) REFERENCES {schema}.documents (kb_id, doc_id) ON DELETE CASCADE
);
CREATE TABLE IF NOT EXISTS {schema}.graphs (
    kb_id text PRIMARY KEY REFERENCES {schema}.knowledge_bases (id) ON DELETE CASCADE,
    version bigint NOT NULL,
    state json NOT NULL,
    updated_at text NOT NULL
);
DO $$ BEGIN  -- databases made before the order mattered stored graphs as jsonb (which sorts keys)
    IF (SELECT data_type FROM information_schema.columns WHERE table_schema = 'kb_workbench'
        AND table_name = 'graphs' AND column_name = 'state') = 'jsonb' THEN
        ALTER TABLE kb_workbench.graphs ALTER COLUMN state TYPE json;
    END IF;
END $$;
CREATE TABLE IF NOT EXISTS {schema}.imports (
    id text PRIMARY KEY,
    kb_id text NOT NULL REFERENCES {schema}.knowledge_bases (id) ON DELETE CASCADE,
    backend_pid integer NOT NULL,
    backend_start timestamptz NOT NULL,
    documents jsonb NOT NULL DEFAULT '[]',
    started_at text NOT NULL
);
CREATE TABLE IF NOT EXISTS {schema}.tokens (
    id text PRIMARY KEY,
    token_hash text NOT NULL UNIQUE,
    scope text[],
    capability text NOT NULL CHECK (capability IN ('read', 'write')),
    rate_per_hour integer NOT NULL CHECK (rate_per_hour > 0),
    created_at text NOT NULL
);
"""


def table(kind: str, table_no: int) -> sql.Identifier:
    """The qualified name of one KB's ``chunks``, ``terms`` or ``postings`` table."""
    if kind not in ("chunks", "terms", "postings"):
        raise ValueError(kind)
    return sql.Identifier(SCHEMA, f"{kind}_{int(table_no)}")


def ensure_schema(conn: psycopg.Connection, display: str) -> str:
    """Create the extension, schema and shared tables if missing (one process at a time); check the versions.

    Returns the pgvector version. Raises :class:`StoreError` naming the problem when pgvector is absent or too old,
    or the schema is newer than this code.
    """
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SETUP_LOCK,))
        version = _ensure_pgvector(conn, display)
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(SCHEMA)))
        conn.execute(sql.SQL(_SHARED_TABLES).format(schema=sql.Identifier(SCHEMA)))  # type: ignore[arg-type]
        row = conn.execute(
            sql.SQL("SELECT value FROM {}.meta WHERE key = 'schema_version'").format(sql.Identifier(SCHEMA))
        ).fetchone()
        if row is None:
            conn.execute(
                sql.SQL("INSERT INTO {}.meta (key, value) VALUES ('schema_version', %s)").format(
                    sql.Identifier(SCHEMA)
                ),
                (str(SCHEMA_VERSION),),
            )
            logger.info("created the kb_workbench schema (version %d) in %s", SCHEMA_VERSION, display)
        else:
            _check_schema_version(row[0], display)
        _add_signature_columns(conn)
        _add_language_column(conn)
    return version


def _add_signature_columns(conn: psycopg.Connection) -> None:
    """Chunk tables made before signatures were stored get the (nullable) columns; a check first, so an open of
    an up-to-date database takes no table lock."""
    missing = conn.execute(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relkind = 'r' AND c.relname ~ '^chunks_[0-9]+$' AND NOT EXISTS "
        "(SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'sketch' AND NOT a.attisdropped)",
        (SCHEMA,),
    ).fetchall()
    for (name,) in missing:
        conn.execute(
            sql.SQL(
                "ALTER TABLE {} ADD COLUMN IF NOT EXISTS text_hash bigint, "
                "ADD COLUMN IF NOT EXISTS shingle_count integer, ADD COLUMN IF NOT EXISTS sketch bytea"
            ).format(sql.Identifier(SCHEMA, str(name)))
        )
        logger.info("added near-duplicate signature columns to %s.%s", SCHEMA, name)


def _add_language_column(conn: psycopg.Connection) -> None:
    """A documents table made before documents stored their detected language gets the (nullable) column; a check
    first, so an open of an up-to-date database takes no table lock."""
    present = conn.execute(
        "SELECT 1 FROM information_schema.columns WHERE table_schema = %s AND table_name = 'documents' "
        "AND column_name = 'language'",
        (SCHEMA,),
    ).fetchone()
    if present is None:
        conn.execute(sql.SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS language text").format(
            sql.Identifier(SCHEMA, "documents")
        ))
        logger.info("added the language column to %s.documents", SCHEMA)


def check_schema(conn: psycopg.Connection, display: str) -> str:
    """On a read replica, where nothing can be created: the extension and schema must be there already."""
    with conn.transaction():
        version = _pgvector_version(conn)
        if version is None:
            raise StoreError(
                f"The database at {display} has no pgvector extension; open the store on the primary first.",
                code="PGVECTOR_MISSING",
            )
        exists = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (f"{SCHEMA}.meta",)).fetchone()
        if not exists or not exists[0]:
            raise StoreError(
                f"The database at {display} holds no kb_workbench schema yet; open the store on the primary first.",
                code="STORE_ERROR",
            )
        row = conn.execute(
            sql.SQL("SELECT value FROM {}.meta WHERE key = 'schema_version'").format(sql.Identifier(SCHEMA))
        ).fetchone()
        _check_schema_version(row[0] if row else "0", display)
    return version


def _check_schema_version(value: str, display: str) -> None:
    found = int(value)
    if found > SCHEMA_VERSION:
        raise StoreError(
            f"The kb_workbench schema in {display} has version {found}; this program reads versions up to "
            f"{SCHEMA_VERSION}. Upgrade KB Workbench.",
            code="STORE_ERROR",
        )


def _pgvector_version(conn: psycopg.Connection) -> str | None:
    row = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
    return None if row is None else str(row[0])


def _ensure_pgvector(conn: psycopg.Connection, display: str) -> str:
    version = _pgvector_version(conn)
    if version is None:
        available = conn.execute("SELECT default_version FROM pg_available_extensions WHERE name = 'vector'").fetchone()
        if available is None:
            raise StoreError(
                f"The PostgreSQL server at {display} has no pgvector extension (pg_available_extensions lists no "
                "'vector'); install pgvector 0.8 or newer on the server.",
                code="PGVECTOR_MISSING",
            )
        try:
            with conn.transaction():
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        except psycopg.errors.InsufficientPrivilege as exc:
            raise StoreError(
                f"The database at {display} has no pgvector extension and this user may not create it; ask an "
                "administrator to run CREATE EXTENSION vector in it.",
                code="PGVECTOR_MISSING",
            ) from exc
        version = _pgvector_version(conn) or str(available[0])
    parsed = tuple(int(p) for p in version.split(".")[:3] if p.isdigit())
    if parsed < MIN_PGVECTOR:
        raise StoreError(
            f"The PostgreSQL server at {display} has pgvector {version}; the store needs 0.8.0 or newer "
            "(ALTER EXTENSION vector UPDATE).",
            code="PGVECTOR_MISSING",
        )
    return version


def create_kb_tables(conn: psycopg.Connection, table_no: int) -> None:
    """The per-KB tables (inside the caller's transaction); the vector column comes with the dimension."""
    chunks, terms, postings = (table(kind, table_no) for kind in ("chunks", "terms", "postings"))
    conn.execute(
        sql.SQL(
            """
            CREATE TABLE {chunks} (
                row_id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
                chunk_id text NOT NULL UNIQUE,
                doc_id text NOT NULL,
                chunk_index integer NOT NULL,
                content text NOT NULL,
                tokens integer NOT NULL,
                chapter text,
                page integer,
                start_char bigint NOT NULL,
                end_char bigint NOT NULL,
                length integer NOT NULL CHECK (length >= 0),
                term_ids integer[] NOT NULL,
                text_hash bigint,
                shingle_count integer,
                sketch bytea
            );
            CREATE INDEX {chunks_doc} ON {chunks} (doc_id);
            CREATE TABLE {terms} (
                term_id integer GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
                term text COLLATE "C" NOT NULL UNIQUE,
                df integer NOT NULL CHECK (df >= 0)
            );
            CREATE TABLE {postings} (
                term_id integer NOT NULL,
                row_id bigint NOT NULL,
                tf integer NOT NULL CHECK (tf > 0),
                dl integer NOT NULL,
                PRIMARY KEY (term_id, row_id) INCLUDE (tf, dl)
            );
            """
        ).format(
            chunks=chunks,
            chunks_doc=sql.Identifier(f"chunks_{int(table_no)}_doc"),
            terms=terms,
            postings=postings,
        )
    )


def add_vector_column(conn: psycopg.Connection, table_no: int, dimension: int) -> None:
    """Give a KB's chunks their typed vector column and HNSW index (inside the caller's transaction)."""
    chunks = table("chunks", table_no)
    conn.execute(
        sql.SQL("ALTER TABLE {} ADD COLUMN embedding vector({}) NOT NULL").format(chunks, sql.Literal(int(dimension)))
    )
    conn.execute(
        sql.SQL(
            "CREATE INDEX {} ON {} USING hnsw (embedding vector_cosine_ops) WITH (m = {}, ef_construction = {})"
        ).format(
            sql.Identifier(f"chunks_{int(table_no)}_hnsw"),
            chunks,
            sql.Literal(HNSW_M),
            sql.Literal(HNSW_EF_CONSTRUCTION),
        )
    )


def drop_kb_tables(conn: psycopg.Connection, table_no: int) -> None:
    for kind in ("postings", "terms", "chunks"):
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(table(kind, table_no)))
