"""The PostgreSQL store on a real server: registry, commits, exact statistics, graphs, tokens, verify."""

from __future__ import annotations

import logging
import os
from collections import Counter

import numpy as np
import psycopg
import pytest

from kb_core.base.errors import DocumentNotFound, InvalidArgument, KBExists, KBNotFound, StoreError
from kb_core.engines.analysis import Analyzer
from kb_core.store.postgres import PostgresStore, StoreChange
from kb_core.store.postgres import snapshot as postgres_snapshot
from kb_core.store.postgres.embedded import LocalPostgres
from tests.postgres.helpers import make_document

ENGLISH = [
    "Hybrid search fuses BM25 keyword scores with vector cosine similarity.",
    "The score breakdown explains every hit: raw cosine, raw BM25 and the weights.",
    "Importing DOCX and legacy DOC files keeps chapters and pages.",
]
CHINESE = ["混合检索把关键词得分和向量相似度融合在一起。", "知识库工作台支持中文和英文文档。"]


def expected_statistics(texts: list[str], analyzer: Analyzer) -> tuple[int, int, dict[str, int]]:
    """N, Σ dl and df over ``texts``, computed from scratch."""
    df: Counter[str] = Counter()
    total = 0
    for text in texts:
        tokens = analyzer.tokens(text)
        total += len(tokens)
        df.update(set(tokens))
    return len(texts), total, dict(df)


def stored_statistics(store: PostgresStore, kb_id: str) -> tuple[int, int, dict[str, int]]:
    with store.snapshot(kb_id) as snapshot, psycopg.connect(store.db.primary.url) as conn:
        stats = snapshot.statistics
        rows = conn.execute(
            f"SELECT term, df FROM kb_workbench.terms_{snapshot.tables.table_no} WHERE df > 0"
        ).fetchall()
    return stats.live_rows, stats.total_length, {str(t): int(df) for t, df in rows}


def live_texts(store: PostgresStore, kb_id: str) -> list[str]:
    with store.snapshot(kb_id) as snapshot:
        texts: list[str] = []
        for document in snapshot.documents():
            texts += [chunk.content for _, chunk in snapshot.document_chunks(document.doc_id)]
        return texts


def test_registry_round_trip_and_names_clash_ignoring_case(pg_store: PostgresStore, analyzer: Analyzer) -> None:
    record = pg_store.create_knowledge_base(
        "产品手册 Manual", 256, "all-MiniLM-L6-v2", analyzer=analyzer.name, embedding_endpoint=None
    )
    assert pg_store.get(record.id) == record
    assert pg_store.find("产品手册 manual").id == record.id
    assert record in pg_store.knowledge_bases()
    with pytest.raises(KBExists, match="already exists"):
        pg_store.create_knowledge_base("产品手册 MANUAL", 64, "hashing", analyzer=analyzer.name)
    saved = pg_store.update_search_settings(record.id, {"mode": "keyword", "top_k": 7})
    assert saved.search_settings == {"mode": "keyword", "top_k": 7}
    keyed = pg_store.create_knowledge_base("remote", 64, "e5", analyzer=analyzer.name, api_key="secret-key")
    assert keyed.has_api_key and pg_store.get(keyed.id).has_api_key
    assert pg_store.api_key(keyed.id) == "secret-key"
    for kb in (record, keyed):
        pg_store.delete_knowledge_base(kb.id)
    with pytest.raises(KBNotFound):
        pg_store.get(record.id)
    assert pg_store.api_key(keyed.id) is None


def test_delete_knowledge_base_drops_its_tables(pg_store: PostgresStore, analyzer: Analyzer) -> None:
    rng = np.random.default_rng(1)
    record = pg_store.create_knowledge_base("to drop", 64, "hashing", analyzer=analyzer.name)
    pg_store.commit(record.id, StoreChange(add=(make_document("doc_a", ENGLISH, analyzer, rng),)))
    with pg_store.snapshot(record.id) as snapshot:
        table_no = snapshot.tables.table_no
    pg_store.delete_knowledge_base(record.id)
    with psycopg.connect(pg_store.db.primary.url) as conn:
        for kind in ("chunks", "terms", "postings"):
            assert conn.execute("SELECT to_regclass(%s)", (f"kb_workbench.{kind}_{table_no}",)).fetchone() == (None,)
        assert conn.execute(
            "SELECT count(*) FROM kb_workbench.documents WHERE kb_id = %s", (record.id,)
        ).fetchone() == (0,)
    with pytest.raises(KBNotFound):
        pg_store.commit(record.id, StoreChange(add=(make_document("doc_b", ENGLISH, analyzer, rng),)))
    with pytest.raises(KBNotFound), pg_store.snapshot(record.id):
        pass


def test_a_commit_stores_every_column_and_byte(pg_store: PostgresStore, analyzer: Analyzer) -> None:
    rng = np.random.default_rng(2)
    record = pg_store.create_knowledge_base("round trip", 64, "hashing", analyzer=analyzer.name)
    original = os.urandom(3000)
    document = make_document("doc_rt", ENGLISH + CHINESE, analyzer, rng, name="说明 Notes.txt", original=original)
    result = pg_store.commit(record.id, StoreChange(add=(document,)))
    assert result.added == (document.record,) and result.version == 1
    with pg_store.snapshot(record.id) as snapshot:
        assert snapshot.documents() == [document.record]
        assert snapshot.text("doc_rt") == document.text
        assert snapshot.original("doc_rt") == original
        rows = snapshot.document_chunks("doc_rt")
        assert [chunk for _, chunk in rows] == list(document.chunks)
        row_ids = [row_id for row_id, _ in rows]
        assert row_ids == sorted(row_ids)  # insertion order
        np.testing.assert_array_equal(snapshot.vectors(row_ids), document.vectors)
        assert snapshot.find_chunk(document.chunks[2].chunk_id) == row_ids[2]
        assert snapshot.chunks([row_ids[1]]) == {row_ids[1]: document.chunks[1]}
    pg_store.delete_knowledge_base(record.id)


def test_statistics_stay_exact_through_imports_updates_and_deletions(
    pg_store: PostgresStore, analyzer: Analyzer
) -> None:
    rng = np.random.default_rng(3)
    record = pg_store.create_knowledge_base("stats", 64, "hashing", analyzer=analyzer.name)
    docs = [
        make_document("doc_1", ENGLISH, analyzer, rng),
        make_document("doc_2", CHINESE, analyzer, rng),
        make_document("doc_3", ENGLISH[:1] + CHINESE[:1], analyzer, rng),
    ]
    pg_store.commit(record.id, StoreChange(add=tuple(docs)))
    assert stored_statistics(pg_store, record.id) == expected_statistics(
        ENGLISH + CHINESE + ENGLISH[:1] + CHINESE[:1], analyzer
    )
    pg_store.commit(record.id, StoreChange(delete=("doc_1",)))
    updated = make_document(
        "doc_2b", ["知识库 updated text about BM25"], analyzer, rng, name="doc_2.txt", replaces="doc_2"
    )
    pg_store.commit(record.id, StoreChange(add=(updated,)))
    expected = expected_statistics(live_texts(pg_store, record.id), analyzer)
    assert sorted(live_texts(pg_store, record.id)) == sorted(
        ENGLISH[:1] + CHINESE[:1] + ["知识库 updated text about BM25"]
    )
    assert stored_statistics(pg_store, record.id) == expected
    assert pg_store.verify(record.id) == []
    pg_store.commit(record.id, StoreChange(delete=("doc_2b", "doc_3")))
    assert stored_statistics(pg_store, record.id) == (0, 0, {})
    assert pg_store.verify(record.id) == []
    pg_store.delete_knowledge_base(record.id)


def test_names_resolve_as_in_the_folder_store(pg_store: PostgresStore, analyzer: Analyzer) -> None:
    rng = np.random.default_rng(4)
    record = pg_store.create_knowledge_base("names", 64, "hashing", analyzer=analyzer.name)
    pg_store.commit(record.id, StoreChange(add=(make_document("doc_1", ENGLISH, analyzer, rng, name="Report.txt"),)))
    clash = pg_store.commit(
        record.id, StoreChange(add=(make_document("doc_2", CHINESE, analyzer, rng, name="report.TXT"),))
    )
    assert clash.added[0].name.startswith("report_") and clash.added[0].name.endswith(".TXT")
    failed = pg_store.commit(
        record.id, StoreChange(add=(make_document("doc_3", [], analyzer, rng, name="bad.doc", status="failed"),))
    )
    assert failed.added[0].status == "failed"
    retried = pg_store.commit(
        record.id, StoreChange(add=(make_document("doc_4", ENGLISH, analyzer, rng, name="BAD.doc"),))
    )
    assert retried.removed == ("doc_3",) and retried.added[0].name == "BAD.doc"
    with pg_store.snapshot(record.id) as snapshot:
        names = sorted(d.name for d in snapshot.documents())
    assert names == sorted(["Report.txt", clash.added[0].name, "BAD.doc"])
    pg_store.delete_knowledge_base(record.id)


def test_a_failed_commit_changes_nothing(pg_store: PostgresStore, analyzer: Analyzer) -> None:
    rng = np.random.default_rng(5)
    record = pg_store.create_knowledge_base("atomic", 64, "hashing", analyzer=analyzer.name)
    pg_store.commit(record.id, StoreChange(add=(make_document("doc_1", ENGLISH, analyzer, rng),)))
    before = stored_statistics(pg_store, record.id)
    wrong_dimension = make_document("doc_2", CHINESE, analyzer, rng, dimension=8)
    with pytest.raises(InvalidArgument, match="dimension 8"):
        pg_store.commit(record.id, StoreChange(delete=("doc_1",), add=(wrong_dimension,)))
    with pytest.raises(DocumentNotFound):
        pg_store.commit(record.id, StoreChange(delete=("doc_1", "doc_missing")))
    with pytest.raises(DocumentNotFound):
        pg_store.commit(
            record.id, StoreChange(add=(make_document("doc_3", CHINESE, analyzer, rng, replaces="doc_gone"),))
        )
    other = Analyzer(stem=None)
    with pytest.raises(InvalidArgument, match="analys") as caught:
        pg_store.commit(record.id, StoreChange(add=(make_document("doc_4", CHINESE, other, rng),)))
    assert caught.value.code == "ANALYZER_MISMATCH"
    assert stored_statistics(pg_store, record.id) == before
    with pg_store.snapshot(record.id) as snapshot:
        assert [d.doc_id for d in snapshot.documents()] == ["doc_1"] and snapshot.version == 1
    pg_store.delete_knowledge_base(record.id)


def test_a_bundle_commits_documents_and_graph_together(pg_store: PostgresStore, analyzer: Analyzer) -> None:
    rng = np.random.default_rng(6)
    record = pg_store.create_knowledge_base("bundle", 64, "hashing", analyzer=analyzer.name)
    graph = {
        "ontology": {"nodes": ["Product"]},
        "nodes": [{"id": "n1", "doc_id": "doc_b1", "名字": "工作台"}],
        "edges": [],
    }
    result = pg_store.commit(
        record.id,
        StoreChange(add=(make_document("doc_b1", CHINESE, analyzer, rng),), graph=graph, expected_graph_version=0),
    )
    assert result.graph_version == 1
    stored = pg_store.graph(record.id)
    assert stored is not None and stored["version"] == 1 and stored["nodes"] == graph["nodes"]
    with pytest.raises(StoreError) as caught:
        pg_store.commit(
            record.id,
            StoreChange(add=(make_document("doc_b2", ENGLISH, analyzer, rng),), graph=graph, expected_graph_version=0),
        )
    assert caught.value.code == "GRAPH_CHANGED"
    with pg_store.snapshot(record.id) as snapshot:
        assert [d.doc_id for d in snapshot.documents()] == ["doc_b1"]  # the documents of the refused bundle are absent
    pg_store.delete_knowledge_base(record.id)
    assert pg_store.graph(record.id) is None


def test_tokens_are_stored_by_hash_with_their_scopes(pg_store: PostgresStore) -> None:
    token, record = pg_store.create_token(["kb_a", "kb_b"], "read", 50)
    assert token.startswith("kbt_") and token not in record.token_hash
    assert pg_store.verify_token(token) == record
    assert record.scope == frozenset({"kb_a", "kb_b"}) and not record.can_write
    everything, write = pg_store.create_token(None, "write")
    assert write.scope is None and write.can_write
    assert {t.id for t in pg_store.tokens()} >= {record.id, write.id}
    assert pg_store.verify_token("kbt_not-a-token") is None
    pg_store.revoke_token(record.id)
    assert pg_store.verify_token(token) is None and pg_store.verify_token(everything) == write
    with pytest.raises(InvalidArgument):
        pg_store.create_token([], "read")


def test_verify_finds_statistics_that_the_rows_contradict(pg_store: PostgresStore, analyzer: Analyzer) -> None:
    rng = np.random.default_rng(7)
    record = pg_store.create_knowledge_base("tamper", 64, "hashing", analyzer=analyzer.name)
    pg_store.commit(record.id, StoreChange(add=(make_document("doc_1", ENGLISH, analyzer, rng),)))
    assert pg_store.verify(record.id) == []
    with pg_store.snapshot(record.id) as snapshot:
        table_no = snapshot.tables.table_no
    with psycopg.connect(pg_store.db.primary.url, autocommit=True) as conn:
        conn.execute(f"UPDATE kb_workbench.terms_{table_no} SET df = df + 1 WHERE term = 'bm25'")
        conn.execute(
            "UPDATE kb_workbench.knowledge_bases SET total_length = total_length + 3 WHERE id = %s", (record.id,)
        )
    problems = pg_store.verify(record.id)
    assert any("document frequency" in p for p in problems) and any("Σdl" in p for p in problems)
    pg_store.delete_knowledge_base(record.id)


def test_the_server_runs_unprivileged_on_loopback_with_pgvector(
    postgres_server: LocalPostgres, pg_store: PostgresStore
) -> None:
    with open(f"/proc/{postgres_server.process.pid}/status", encoding="utf-8") as status:
        uid = next(int(line.split()[1]) for line in status if line.startswith("Uid:"))
    assert uid != 0
    assert pg_store.db.primary.display.startswith("postgresql://postgres@127.0.0.1:")
    assert tuple(int(p) for p in pg_store.pgvector_version.split(".")[:2]) >= (0, 8)
    with psycopg.connect(postgres_server.url()) as conn:
        assert str(conn.execute("SHOW server_version").fetchone()[0]).startswith("18.")  # type: ignore[index]


def test_pruned_keyword_candidates_equal_scoring_every_posting(
    pg_store: PostgresStore, analyzer: Analyzer, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MaxScore returns exactly the rows and scores of the exhaustive aggregation, English and Chinese, and each of
    its branches is taken by some query (so the comparison covers them)."""
    rng = np.random.default_rng(8)
    words = np.array([f"w{i}" for i in range(3000)] + list("知识库检索向量关键词文档混合排序"))
    picks = rng.zipf(1.2, size=(4000, 30)) % len(words)
    texts = [" ".join(row) for row in words[picks]]
    record = pg_store.create_knowledge_base("maxscore", 64, "hashing", analyzer=analyzer.name)
    documents = tuple(make_document(f"doc_{i}", texts[i * 100 : (i + 1) * 100], analyzer, rng) for i in range(40))
    pg_store.commit(record.id, StoreChange(add=documents[:20]))
    pg_store.commit(record.id, StoreChange(add=documents[20:]))
    pg_store.commit(record.id, StoreChange(delete=("doc_3", "doc_17")))
    queries = [" ".join(words[rng.zipf(1.2, size=n) % len(words)]) for n in (2, 3, 4, 6) for _ in range(8)]
    queries += ["w1 w2", "w1 w2 w3 w2999", "知识 检索 w1", "向量 w5 w700", "w0 w1 w2 w3 w4 w5"]
    caplog.set_level(logging.DEBUG, logger="kb_core.store.postgres.snapshot")
    with pg_store.snapshot(record.id) as snapshot:
        for query, probe_limit in [(q, 20_000) for q in queries] + [(q, 50) for q in queries[:24]]:
            # a small probe limit sends long essential postings to the full aggregation
            monkeypatch.setattr(postgres_snapshot, "_PROBE_POSTINGS", probe_limit)
            terms = snapshot.query_terms(query, analyzer)
            for k in (1, 10, 100):
                assert snapshot.keyword_candidates(terms, k) == snapshot.keyword_candidates(
                    terms, k, exhaustive=True
                ), (
                    query,
                    k,
                )
    branches = caplog.text
    for branch in ("no threshold", "is final", "scoring the rows of", "full aggregation"):
        assert branch in branches, branch
    pg_store.delete_knowledge_base(record.id)


def test_pruned_keyword_candidates_count_support_terms_exactly(
    pg_store: PostgresStore, analyzer: Analyzer, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chinese queries with stop words: the bigrams reaching into a stop word add to rows holding a query term and
    find none alone; MaxScore (its bounds count them) returns exactly the exhaustive aggregation's rows and scores."""
    rng = np.random.default_rng(11)
    words = np.array(["知识", "检索", "向量", "文档", "混合", "排序", "的", "是", "在", "了", "和", "模型", "得分"])
    texts = ["".join(words[rng.zipf(1.3, size=12) % len(words)]) for _ in range(3000)]
    for i in range(0, 3000, 40):  # a rare word, so some queries have a seed to prune with
        texts[i] = "拓扑的" + texts[i]
    for i in range(7, 3000, 13):  # rows holding support bigrams (的向, 的得, 是混) and no query term: never found
        texts[i] = ["他的向导", "我的得失", "就是混沌"][i % 3]
    record = pg_store.create_knowledge_base("support", 64, "hashing", analyzer=analyzer.name)
    documents = tuple(make_document(f"doc_{i}", texts[i * 100 : (i + 1) * 100], analyzer, rng) for i in range(30))
    pg_store.commit(record.id, StoreChange(add=documents))
    queries = ["什么是混合检索的得分", "文档的向量是什么", "在知识和向量的排序", "模型的得分和检索的方法"]
    queries += ["拓扑的得分是什么", "拓扑的检索和排序", "拓扑的"]
    caplog.set_level(logging.DEBUG, logger="kb_core.store.postgres.snapshot")
    with pg_store.snapshot(record.id) as snapshot:
        supported = 0
        for query, probe_limit in [(q, 20_000) for q in queries] + [(q, 50) for q in queries]:
            monkeypatch.setattr(postgres_snapshot, "_PROBE_POSTINGS", probe_limit)
            terms = snapshot.query_terms(query, analyzer)
            supported += sum(1 for df in terms.df[len(terms.terms) :] if df)
            for k in (1, 10, 100, 3000):  # 3000: every row holding a term, none holding support terms only
                pruned = snapshot.keyword_candidates(terms, k)
                assert pruned == snapshot.keyword_candidates(terms, k, exhaustive=True), (query, k)
                holding = snapshot.row_scores(terms, [hit.row_id for hit in pruned])[0]
                assert holding.contains.any(axis=1).all(), query  # no row is found by a support term alone
        assert supported >= 4  # the support terms are in the index, so the comparison covers them
    assert "scoring the rows of" in caplog.text  # the pruned path ran, with the support terms' bounds
    pg_store.delete_knowledge_base(record.id)
