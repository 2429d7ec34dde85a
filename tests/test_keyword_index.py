"""BM25 over segments with live masks: exact global statistics, persistence, edge cases."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kb_core.base.errors import InvalidArgument, StoreError
from kb_core.engines.analysis import Analyzer, default_analyzer
from kb_core.engines.keyword_index import (
    KEYWORD_FILE,
    BM25Parameters,
    KeywordSearcher,
    KeywordSegment,
)

WORDS = [
    "retrieval", "search", "index", "segment", "vector", "keyword", "ranking", "document", "query", "token",
    "knowledge", "base", "the", "of", "running", "runs", "知识库", "检索", "中文", "分词", "向量", "文档", "搜索",
    "排序", "关键词", "系统", "的", "是",
]  # fmt: skip
ANALYZER = default_analyzer()


def reference_bm25(live_texts: list[str], query: str, analyzer: Analyzer, k1: float, b: float) -> list[float]:
    """BM25 written straight from the formula over exactly the live texts (the query's distinct terms; its support
    terms, the Han bigrams reaching into a stop word, only for texts holding one of those terms)."""
    docs = [Counter(analyzer.tokens(t)) for t in live_texts]
    lengths = [sum(d.values()) for d in docs]
    n = len(docs)
    avgdl = (sum(lengths) / n) if n and sum(lengths) else 1.0
    scores = [0.0] * n
    analysed = analyzer.query_terms(query)
    holding = [any(term in d for term in analysed.terms) for d in docs]
    for term, support in [(t, False) for t in analysed.terms] + [(t, True) for t in analysed.support]:
        df = sum(1 for d in docs if term in d)
        if df == 0:
            continue
        idf = math.log(1.0 + (n - df + 0.5) / (df + 0.5))
        for i, d in enumerate(docs):
            tf = d.get(term, 0)
            if tf and (holding[i] or not support):
                scores[i] += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * lengths[i] / avgdl))
    return scores


def random_text(rng: np.random.Generator) -> str:
    n = int(rng.integers(0, 25))
    words = rng.choice(WORDS, size=n)
    # Some words glued together, Chinese-style, and some upper-case, to exercise the analyzer.
    return "".join(w if rng.random() < 0.3 and not w.isascii() else f" {w.upper() if rng.random() < 0.2 else w}"
                   for w in words)  # fmt: skip


def build(texts_per_segment: list[list[str]], masks: list[np.ndarray]) -> tuple[KeywordSearcher, list[tuple]]:
    pairs = zip(texts_per_segment, masks, strict=True)
    segments = [(KeywordSegment.build(texts, ANALYZER), mask) for texts, mask in pairs]
    live_index = [(si, row) for si, mask in enumerate(masks) for row in np.flatnonzero(mask).tolist()]
    return KeywordSearcher(segments, ANALYZER), live_index


def check_exact(texts_per_segment: list[list[str]], masks: list[np.ndarray], queries: list[str]) -> None:
    searcher, live_index = build(texts_per_segment, masks)
    live_texts = [texts_per_segment[si][row] for si, row in live_index]
    everything = [(si, row) for si, texts in enumerate(texts_per_segment) for row in range(len(texts))]
    for query in queries:
        expected = reference_bm25(live_texts, query, ANALYZER, 1.2, 0.75)
        want = {pos: s for pos, s in zip(live_index, expected, strict=True) if s > 0}
        hits = searcher.search(query, k=len(everything) + 1)
        got = {(h.segment_index, h.row): h.score for h in hits}
        assert got.keys() == want.keys(), query
        for key, score in want.items():
            assert got[key] == pytest.approx(score, abs=1e-6), (query, key)
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
        # score_rows: exact for live rows, 0 for deleted ones.
        scored = searcher.score_rows(query, everything)
        for (si, row), score in zip(everything, scored, strict=True):
            assert score == pytest.approx(want.get((si, row), 0.0), abs=1e-6)
        # A top-k is the head of the full ranking.
        assert searcher.search(query, 3) == hits[:3]


def test_scores_equal_from_scratch_bm25_over_live_rows_after_deletions() -> None:
    rng = np.random.default_rng(7)
    texts = [[random_text(rng) for _ in range(int(rng.integers(1, 40)))] for _ in range(5)]
    masks = [rng.random(len(t)) < 0.7 for t in texts]
    masks[1][:] = False  # a fully deleted segment
    queries = ["retrieval search", "知识库检索", "Knowledge BASE ranking of the documents", "runs 向量 中文分词",
               "search search search", "keyword", "向量的文档", "是知识库的检索排序", "的是"]  # fmt: skip
    assert ANALYZER.query_terms("向量的文档").support  # the support terms are exercised
    check_exact(texts, masks, queries)


def test_support_terms_are_exact_on_the_sparse_path_too() -> None:
    """Rare query terms in many rows take the sorted (sparse) accumulation, not the dense one: the support terms
    (的文, 量的) still add only to rows holding 向量 or 文档, across segments with deleted rows."""
    rng = np.random.default_rng(11)
    phrases = ["向量的文档", "向量文档", "这是的文", "量的排序", "文档", "检索的向量"]
    texts = [
        [rng.choice(phrases) if rng.random() < 0.03 else random_text(rng).replace("向量", "").replace("文档", "")
         for _ in range(300)]
        for _ in range(3)
    ]  # fmt: skip
    masks = [rng.random(300) < 0.8 for _ in range(3)]
    searcher, live_index = build(texts, masks)
    analysed = ANALYZER.query_terms("向量的文档")
    assert set(analysed.support) == {"量的", "的文"}
    everything = len(live_index) + 1
    postings = sum(len(searcher.search_terms([t], everything)) for t in analysed.terms)
    assert 0 < postings * 8 < sum(len(t) for t in texts)  # the sparse path
    check_exact(texts, masks, ["向量的文档", "的文", "向量的文档 检索"])


def test_matches_bm25s_lucene_on_live_tokens() -> None:
    bm25s = pytest.importorskip("bm25s")
    rng = np.random.default_rng(3)
    texts = [[random_text(rng) for _ in range(30)] for _ in range(3)]
    masks = [rng.random(30) < 0.8 for _ in range(3)]
    searcher, live_index = build(texts, masks)
    corpus_tokens = [ANALYZER.tokens(texts[si][row]) for si, row in live_index]
    reference = bm25s.BM25(method="lucene", k1=1.2, b=0.75, dtype="float64")
    reference.index(corpus_tokens, show_progress=False)
    for query in ["retrieval search", "知识库 检索 系统", "vector index segment"]:
        analysed = ANALYZER.query_terms(query)
        words = [t for t in analysed.terms if t in reference.vocab_dict]
        support = [t for t in analysed.support if t in reference.vocab_dict and t not in words]

        def lucene(terms: list[str]) -> np.ndarray:
            if not terms:
                return np.zeros(len(live_index))
            return reference.get_scores(terms) * (1.2 + 1)  # bm25s omits the constant (k1 + 1) factor

        # the query's words, plus its support terms (Han bigrams that are no word of it) in rows holding a word
        matched = lucene(words)
        expected = matched + np.where(matched > 0, lucene(support), 0.0)
        got = searcher.score_rows(query, live_index)
        np.testing.assert_allclose(got, expected, atol=1e-6)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    segments=st.lists(
        st.lists(st.tuples(st.lists(st.sampled_from(WORDS), max_size=12), st.booleans()), max_size=8),
        min_size=1,
        max_size=4,
    ),
    query=st.lists(st.sampled_from(WORDS), min_size=1, max_size=5),
)
def test_property_exact_bm25_for_any_history(segments: list[list[tuple[list[str], bool]]], query: list[str]) -> None:
    # every other row glued Chinese-style, so Han bigrams reaching into a stop word (的, 是) occur in texts and queries
    texts = [[("" if i % 2 else " ").join(words) for i, (words, _) in enumerate(seg)] for seg in segments]
    masks = [np.array([live for _, live in seg], dtype=bool) for seg in segments]
    check_exact(texts, masks, [" ".join(query), "".join(query)])


def test_term_absent_from_a_segment_uses_global_df() -> None:
    english = KeywordSegment.build(["vector search engine", "keyword search"], ANALYZER)
    chinese = KeywordSegment.build(["知识库 检索", "中文 分词"], ANALYZER)
    searcher = KeywordSearcher([(english, np.ones(2, bool)), (chinese, np.ones(2, bool))], ANALYZER)
    hits = searcher.search("知识库", 10)
    assert [(h.segment_index, h.row) for h in hits] == [(1, 0)]
    assert "知识库" in searcher.row_terms(searcher.query_terms("知识库"), [(1, 0)]).matched(0)
    assert searcher.row_terms(["vector"], [(0, 0)]).matched(0) == ["vector"]
    assert searcher.search("nonexistent", 10) == []


def test_matched_terms_are_the_query_terms_found_in_the_row() -> None:
    segment = KeywordSegment.build(["Running search engines", "search only"], ANALYZER)
    searcher = KeywordSearcher([(segment, np.ones(2, bool))], ANALYZER)
    hits = searcher.search("search runs missing", 10)
    assert [h.row for h in hits] == [0, 1]
    found = searcher.row_terms(searcher.query_terms("search runs missing"), [(0, 0), (0, 1)])
    assert found.terms == ("search", "run", "miss")
    assert found.matched(0) == ["run", "search"] and found.matched(1) == ["search"]
    assert found.distinct.tolist() == [3, 2]  # run, search, engin | search, onli
    assert found.jaccard().tolist() == [2 / 4, 1 / 4]


@pytest.mark.parametrize("query", ["", "   ", "the of and", "，。！"])
def test_empty_or_stop_word_query_returns_nothing(query: str) -> None:
    segment = KeywordSegment.build(["the knowledge base", "知识库"], ANALYZER)
    searcher = KeywordSearcher([(segment, np.ones(2, bool))], ANALYZER)
    assert searcher.search(query, 10) == []
    assert searcher.score_rows(query, [(0, 0), (0, 1)]).tolist() == [0.0, 0.0]


def test_empty_and_fully_deleted_knowledge_bases() -> None:
    assert KeywordSearcher([], ANALYZER).search("anything", 5) == []
    empty = KeywordSegment.build([], ANALYZER)
    segment = KeywordSegment.build(["knowledge"], ANALYZER)
    searcher = KeywordSearcher([(empty, np.zeros(0, bool)), (segment, np.zeros(1, bool))], ANALYZER)
    assert searcher.n_docs == 0
    assert searcher.search("knowledge", 5) == []


def test_ties_are_ordered_by_segment_then_row() -> None:
    first = KeywordSegment.build(["alpha beta", "alpha beta", "gamma"], ANALYZER)
    second = KeywordSegment.build(["alpha beta"], ANALYZER)
    searcher = KeywordSearcher([(first, np.ones(3, bool)), (second, np.ones(1, bool))], ANALYZER)
    hits = searcher.search("alpha", 2)
    assert [(h.segment_index, h.row) for h in hits] == [(0, 0), (0, 1)]
    assert hits[0].score == hits[1].score


def test_k_and_argument_validation() -> None:
    segment = KeywordSegment.build(["alpha"], ANALYZER)
    searcher = KeywordSearcher([(segment, np.ones(1, bool))], ANALYZER)
    assert searcher.search("alpha", 0) == []
    with pytest.raises(InvalidArgument):
        searcher.search("alpha", -1)
    with pytest.raises(InvalidArgument):
        searcher.score_rows("alpha", [(1, 0)])
    with pytest.raises(InvalidArgument):
        searcher.score_rows("alpha", [(0, 5)])
    with pytest.raises(InvalidArgument):
        KeywordSearcher([(segment, np.ones(2, bool))], ANALYZER)
    with pytest.raises(InvalidArgument):
        KeywordSearcher([(segment, np.ones(1, int))], ANALYZER)
    with pytest.raises(InvalidArgument) as excinfo:
        KeywordSearcher([(segment, np.ones(1, bool))], Analyzer(cjk="bigram"))
    assert excinfo.value.code == "ANALYZER_MISMATCH"
    with pytest.raises(InvalidArgument):
        BM25Parameters(k1=1.2, b=1.5)


def test_parameters_change_scores_as_the_formula_says() -> None:
    texts = ["alpha alpha beta", "alpha gamma delta epsilon zeta", "beta"]
    segment = KeywordSegment.build(texts, ANALYZER)
    for params in (BM25Parameters(0.9, 0.4), BM25Parameters(1.5, 1.0)):
        searcher = KeywordSearcher([(segment, np.ones(3, bool))], ANALYZER, params)
        expected = reference_bm25(texts, "alpha beta", ANALYZER, params.k1, params.b)
        got = searcher.score_rows("alpha beta", [(0, 0), (0, 1), (0, 2)])
        np.testing.assert_allclose(got, expected, atol=1e-9)


def test_save_load_round_trip(tmp_path: Path) -> None:
    texts = ["Knowledge base search", "知识库管理系统", "mixed 中文 and English ＦＵＬＬ", ""]
    segment = KeywordSegment.build(texts, ANALYZER)
    segment.save(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [KEYWORD_FILE]
    with np.load(tmp_path / KEYWORD_FILE, allow_pickle=False) as npz:
        assert "data" in npz.files
    loaded = KeywordSegment.load(tmp_path)
    assert loaded.vocabulary == segment.vocabulary
    assert loaded.analyzer_name == ANALYZER.name
    np.testing.assert_array_equal(loaded.lengths, segment.lengths)
    assert (loaded.term_frequencies != segment.term_frequencies).nnz == 0
    live = np.array([True, True, False, True])
    before = KeywordSearcher([(segment, live)], ANALYZER).search("知识库 search full", 10)
    after = KeywordSearcher([(loaded, live)], ANALYZER).search("知识库 search full", 10)
    assert before == after and before


def test_save_overwrites_atomically(tmp_path: Path) -> None:
    KeywordSegment.build(["first version"], ANALYZER).save(tmp_path)
    KeywordSegment.build(["second version"], ANALYZER).save(tmp_path)
    assert "second" in KeywordSegment.load(tmp_path).vocabulary
    assert [p.name for p in tmp_path.iterdir()] == [KEYWORD_FILE]


def test_load_missing_or_damaged_file_is_a_store_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError):
        KeywordSegment.load(tmp_path)
    (tmp_path / KEYWORD_FILE).write_bytes(b"not a numpy archive")
    with pytest.raises(StoreError) as excinfo:
        KeywordSegment.load(tmp_path)
    assert KEYWORD_FILE in str(excinfo.value)


def test_a_tiny_term_cache_gives_the_same_results() -> None:
    rng = np.random.default_rng(11)
    texts = [[random_text(rng) for _ in range(40)] for _ in range(2)]
    masks = [rng.random(40) < 0.8 for _ in range(2)]
    segments = [(KeywordSegment.build(t, ANALYZER), m) for t, m in zip(texts, masks, strict=True)]
    roomy = KeywordSearcher(segments, ANALYZER)
    tiny = KeywordSearcher(segments, ANALYZER, cache_postings=5)
    for query in ["retrieval search index", "知识库 检索", "the knowledge base", "retrieval search index"]:
        assert tiny.search(query, 7) == roomy.search(query, 7)


def test_concurrent_queries_agree_with_sequential_ones() -> None:
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(5)
    segments = [(KeywordSegment.build([random_text(rng) for _ in range(200)], ANALYZER), np.ones(200, bool))]
    queries = [" ".join(rng.choice(WORDS, size=3)) for _ in range(60)]
    expected = [KeywordSearcher(segments, ANALYZER).search(q, 5) for q in queries]
    shared = KeywordSearcher(segments, ANALYZER)
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda q: shared.search(q, 5), queries))
    assert got == expected


def test_exact_when_query_terms_are_rare_in_a_large_segment() -> None:
    # Few postings relative to the rows: the sparse accumulation path (sort the touched rows) is used.
    rng = np.random.default_rng(2)
    filler = ["vector index segment", "ranking document query", "search token"]
    texts = [[filler[i % 3] for i in range(300)] for _ in range(2)]
    for segment_texts in texts:
        for row in rng.choice(300, size=12, replace=False):
            segment_texts[row] += " " + " ".join(rng.choice(["知识库", "检索", "retrieval", "knowledge"], size=2))
    masks = [rng.random(300) < 0.9 for _ in range(2)]
    check_exact(texts, masks, ["知识库 retrieval", "knowledge 检索 知识库", "retrieval"])
