"""The rows a PostgreSQL commit writes: names resolved against the live documents, documents removed with their
postings and term statistics, documents added by binary COPY, and the bundle graph.

:class:`CommitWriting` holds the steps :meth:`kb_core.store.postgres.store.PostgresStore.commit` runs inside its one
transaction (see :mod:`kb_core.store.postgres.store` for the transaction model); each takes the open connection.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import psycopg
import psycopg.errors
from psycopg import sql

from kb_core.base.errors import DocumentNotFound, InvalidArgument, StoreError
from kb_core.base.json_text import json_text
from kb_core.engines.near_duplicates import TextSignatures, text_signatures
from kb_core.store.postgres import schema
from kb_core.store.postgres.records import DocumentRecord, PreparedDocument, StoreChange
from kb_core.store.postgres.snapshot import KBTables
from kb_core.store.registry import utc_now

_S = sql.Identifier(schema.SCHEMA)
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


class CommitWriting:
    """The writing steps of a commit (mixed into :class:`PostgresStore`)."""

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

        from kb_core.store.sink import timestamped_name

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
            (kb_id, version, json_text(state, sort_keys=True), utc_now()),  # as the folder's
        )
        return version
