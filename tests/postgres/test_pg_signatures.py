"""Near-duplicate signatures on PostgreSQL: computed once at import and stored with each chunk row (as the folder
store keeps them in chunks.arrow), so a search reads them instead of recomputing them from the hits' texts; rows
written before they were stored (NULL, or a chunk table without the columns, which the next open adds) get them
computed from the text, with the same values."""

from __future__ import annotations

import numpy as np
import psycopg

from kb_core.engines.analysis import Analyzer
from kb_core.engines.near_duplicates import text_signatures
from kb_core.store.postgres import PostgresStore, StoreChange
from kb_core.store.postgres.searching import PostgresSearcher
from tests.postgres.helpers import make_document

TEXTS = [
    "Hybrid search fuses BM25 keyword scores with vector cosine similarity.",
    "Hybrid search fuses BM25 keyword scores with vector cosine similarity!",  # a near-duplicate
    "混合检索把关键词得分和向量相似度融合在一起。",
    "ok",  # shorter than one shingle
]


def test_signatures_are_stored_at_import_and_computed_for_older_rows(
    pg_store: PostgresStore, analyzer: Analyzer
) -> None:
    record = pg_store.create_knowledge_base("signatures 签名", 64, "hashing", analyzer=analyzer.name)
    pg_store.commit(record.id, StoreChange(add=(make_document("doc_sig", TEXTS, analyzer, np.random.default_rng(1)),)))
    expected = text_signatures(TEXTS)
    with pg_store.snapshot(record.id) as snapshot:
        row_ids = [row_id for row_id, _ in snapshot.document_chunks("doc_sig")]
        stored = snapshot.chunks_with_signatures(row_ids)
        for position, row_id in enumerate(row_ids):
            chunk, signature = stored[row_id]
            assert chunk.content == TEXTS[position] and signature is not None
            assert signature[0] == expected.text_hash[position] and signature[1] == expected.shingle_count[position]
            assert np.array_equal(signature[2], expected.sketch[position])
        table_no = snapshot.tables.table_no
    with psycopg.connect(pg_store.db.primary.url, autocommit=True) as conn:  # rows of an older version
        conn.execute(f"UPDATE kb_workbench.chunks_{table_no} SET sketch = NULL WHERE row_id = %s", (row_ids[0],))
    with pg_store.snapshot(record.id) as snapshot:
        searcher = PostgresSearcher(snapshot, analyzer, "hashing")
        rows, signatures = searcher.rows_with_signatures([(0, r) for r in reversed(row_ids)])
        assert [r["content"] for r in rows] == TEXTS[::-1]
        assert np.array_equal(signatures.text_hash, expected.text_hash[::-1])
        assert np.array_equal(signatures.shingle_count, expected.shingle_count[::-1])
        assert np.array_equal(signatures.sketch, expected.sketch[::-1])

    with psycopg.connect(pg_store.db.primary.url, autocommit=True) as conn:  # a table made before the columns
        conn.execute(
            f"ALTER TABLE kb_workbench.chunks_{table_no} DROP COLUMN text_hash, DROP COLUMN shingle_count, "
            "DROP COLUMN sketch"
        )
    reopened = PostgresStore.open(pg_store.db.primary.url)
    try:
        with reopened.snapshot(record.id) as snapshot:
            searcher = PostgresSearcher(snapshot, analyzer, "hashing")
            rows, signatures = searcher.rows_with_signatures([(0, r) for r in row_ids])
        assert np.array_equal(signatures.sketch, expected.sketch)
        reopened.commit(
            record.id, StoreChange(add=(make_document("doc_new", TEXTS[:1], analyzer, np.random.default_rng(2)),))
        )
        with reopened.snapshot(record.id) as snapshot:
            ((row_id, _),) = snapshot.document_chunks("doc_new")
            assert snapshot.chunks_with_signatures([row_id])[row_id][1] is not None
    finally:
        reopened.close()
