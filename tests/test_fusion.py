"""kb_core.fusion: recomputable breakdowns, pure-signal orderings, RRF, uninformative signals, dedup."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kb_core.errors import InvalidArgument
from kb_core.fusion import (
    Candidate,
    ScoreBreakdown,
    fuse,
    jaccard_similarity,
    near_duplicate_keys,
    normalize_scores,
    script_coverage,
    signal_quality,
)


def make_pool(vector: list[float | None], keyword: list[float | None], terms: list[set[str]] | None = None):
    """Candidates with ranks derived from the scores, as the search service builds them."""

    def ranks(scores: list[float | None]) -> dict[int, int]:
        present = sorted((i for i, s in enumerate(scores) if s is not None), key=lambda i: (-scores[i], i))
        return {i: r + 1 for r, i in enumerate(present)}

    v_rank, k_rank = ranks(vector), ranks(keyword)
    return [
        Candidate(
            key=f"doc{i}",
            vector_score=vector[i],
            keyword_score=keyword[i],
            vector_rank=v_rank.get(i),
            keyword_rank=k_rank.get(i),
            terms=frozenset(terms[i]) if terms else frozenset(),
        )
        for i in range(len(vector))
    ]


def recompute(b: ScoreBreakdown) -> float:
    """The documented formula, from the breakdown's fields only."""
    fused = b.vector_weight * b.vector_normalized + b.keyword_weight * b.keyword_normalized
    return (1 - b.jaccard_weight) * fused + b.jaccard_weight * b.jaccard


words = st.sampled_from(["alpha", "beta", "gamma", "delta", "向量", "检索", "知识库", "融合"])


@settings(max_examples=150, deadline=None)
@given(
    data=st.data(),
    n=st.integers(1, 30),
    vector_weight=st.floats(0, 5),
    keyword_weight=st.floats(0.01, 5),
    jaccard_weight=st.floats(0, 1),
    method=st.sampled_from(["weighted", "rrf"]),
    normalization=st.sampled_from(["meanmax", "minmax", "zscore"]),
)
def test_breakdown_recomputes_final_score(
    data: st.DataObject,
    n: int,
    vector_weight: float,
    keyword_weight: float,
    jaccard_weight: float,
    method: str,
    normalization: str,
) -> None:
    score = st.one_of(st.none(), st.floats(-1, 1))
    vector = data.draw(st.lists(score, min_size=n, max_size=n))
    keyword = data.draw(st.lists(st.one_of(st.none(), st.floats(0, 40)), min_size=n, max_size=n))
    terms = data.draw(st.lists(st.sets(words, max_size=5), min_size=n, max_size=n))
    query = frozenset(data.draw(st.sets(words, max_size=4)))
    fused = fuse(
        make_pool(vector, keyword, terms),
        vector_weight=vector_weight,
        keyword_weight=keyword_weight,
        method=method,
        normalization=normalization,
        query_terms=query,
        jaccard_weight=jaccard_weight,
    )
    assert len(fused) == n
    finals = [b.final_score for _, b in fused]
    assert finals == sorted(finals, reverse=True)
    for candidate, b in fused:
        assert math.isclose(b.vector_weight + b.keyword_weight, 1.0, abs_tol=1e-9)
        assert abs(b.vector_contribution - b.vector_weight * b.vector_normalized) <= 1e-9
        assert abs(b.keyword_contribution - b.keyword_weight * b.keyword_normalized) <= 1e-9
        assert abs(b.fused_score - (b.vector_contribution + b.keyword_contribution)) <= 1e-9
        assert abs(b.jaccard_contribution - b.jaccard_weight * b.jaccard) <= 1e-9
        assert abs(b.final_score - recompute(b)) <= 1e-9
        assert b.jaccard == jaccard_similarity(query, candidate.terms) or jaccard_weight == 0
        assert (b.vector_rank, b.keyword_rank) == (candidate.vector_rank, candidate.keyword_rank)
        assert (b.requested_vector_weight, b.requested_keyword_weight) == (vector_weight, keyword_weight)
        assert b.fusion_method == method


def _informative_pool(seed: int, n: int = 40):
    rng = np.random.default_rng(seed)
    vector = rng.uniform(0.1, 0.9, n).tolist()
    keyword = rng.gamma(2.0, 3.0, n).tolist()
    return make_pool(vector, keyword)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("method", ["weighted", "rrf"])
def test_pure_weights_reproduce_single_signal_order(seed: int, method: str) -> None:
    pool = _informative_pool(seed)
    by_vector = [c.key for c in sorted(pool, key=lambda c: -c.vector_score)]
    by_keyword = [c.key for c in sorted(pool, key=lambda c: -c.keyword_score)]
    only_vector = fuse(pool, vector_weight=1, keyword_weight=0, method=method, jaccard_weight=0)
    only_keyword = fuse(pool, vector_weight=0, keyword_weight=1, method=method, jaccard_weight=0)
    assert [c.key for c, _ in only_vector] == by_vector
    assert [c.key for c, _ in only_keyword] == by_keyword
    assert only_vector[0][1].vector_weight == 1.0 and only_vector[0][1].keyword_weight == 0.0


def test_rrf_scores_follow_reciprocal_ranks() -> None:
    pool = make_pool([0.9, 0.8, None, 0.1], [None, 5.0, 9.0, 1.0])
    fused = fuse(pool, method="rrf", rrf_k=60, vector_weight=0.5, keyword_weight=0.5, adaptive=False)
    by_key = {c.key: b for c, b in fused}
    # doc1 is ranked 2nd by both lists: 0.5·61/62 + 0.5·61/62
    assert by_key["doc1"].fused_score == pytest.approx(61 / 62)
    assert by_key["doc0"].keyword_normalized == 0.0 and by_key["doc0"].vector_normalized == 1.0
    assert by_key["doc2"].keyword_normalized == 1.0
    assert fused[0][0].key == "doc1"
    assert all(b.fusion_method == "rrf" for _, b in fused)


def test_constant_signal_gets_no_weight_and_a_note() -> None:
    rng = np.random.default_rng(1)
    keyword = rng.gamma(2.0, 3.0, 30).tolist()
    keyword[7] = 60.0
    pool = make_pool([0.42] * 30, keyword)
    fused = fuse(pool, vector_weight=0.7, keyword_weight=0.3)
    b = fused[0][1]
    assert b.vector_weight == 0.0 and b.keyword_weight == 1.0
    assert any("vector signal carries no information" in note for note in b.notes)
    assert [c.key for c, _ in fused] == [c.key for c in sorted(pool, key=lambda c: -c.keyword_score)]


def test_noise_signal_cannot_outvote_a_clear_keyword_winner() -> None:
    # An embedding model that does not know the query's language: cosines are a flat, noisy band.
    rng = np.random.default_rng(2)
    n = 100
    vector = (0.45 + 0.03 * rng.standard_normal(n)).tolist()
    keyword = rng.exponential(1.0, n).tolist()
    keyword[37] = 14.0  # the one document that matches the query's rare terms
    fused = fuse(make_pool(vector, keyword), vector_weight=0.7, keyword_weight=0.3)
    assert fused[0][0].key == "doc37"
    assert fused[0][1].vector_weight < 0.1
    assert fused[0][1].notes


def test_equally_informative_signals_keep_requested_weights_whatever_their_scale() -> None:
    rng = np.random.default_rng(3)
    n = 100
    vector = (0.3 + 0.05 * rng.standard_normal(n)).tolist()
    vector[3], vector[4] = 0.85, 0.8
    keyword = [40.0 * v + 3.0 for v in vector]  # same evidence, BM25-sized scale
    fused = fuse(make_pool(vector, keyword), vector_weight=0.7, keyword_weight=0.3)
    b = fused[0][1]
    assert b.vector_weight == pytest.approx(0.7) and b.keyword_weight == pytest.approx(0.3)
    assert b.notes == ()
    assert [c.key for c, _ in fused[:2]] == ["doc3", "doc4"]


def test_script_coverage() -> None:
    assert script_coverage("What is hybrid search?") == 1.0
    assert script_coverage("黑豹队的防守丢了多少分？") == 0.0
    assert script_coverage("FAISS 是什么") == pytest.approx(5 / 8)
    assert script_coverage("黑豹队", ("latin", "cjk")) == 1.0
    assert script_coverage("123 !?") == 1.0


def test_missing_signal_moves_weight() -> None:
    pool = make_pool([0.9, 0.5, 0.4, 0.2], [None, None, None, None])
    fused = fuse(pool)
    assert fused[0][1].vector_weight == 1.0
    assert any("keyword search returned no candidates" in note for note in fused[0][1].notes)
    assert [c.key for c, _ in fused] == ["doc0", "doc1", "doc2", "doc3"]


def test_vector_prior_zero_disables_vector_signal() -> None:
    pool = _informative_pool(4)
    fused = fuse(pool, vector_prior=0.0)
    assert fused[0][1].vector_weight == 0.0
    notes = fused[0][1].notes
    assert any("vector prior 0" in note and "does not cover" in note for note in notes)
    # the pool's vector signal is informative: the note must not claim it fell below chance
    assert not any("≤ chance" in note for note in notes)


def test_empty_and_invalid_arguments() -> None:
    assert fuse([]) == []
    pool = _informative_pool(0, 5)
    with pytest.raises(InvalidArgument, match="method"):
        fuse(pool, method="borda")
    with pytest.raises(InvalidArgument, match="both 0"):
        fuse(pool, vector_weight=0, keyword_weight=0)
    with pytest.raises(InvalidArgument, match="vector_weight"):
        fuse(pool, vector_weight=-1)
    with pytest.raises(InvalidArgument, match="jaccard_weight"):
        fuse(pool, jaccard_weight=1.5)
    with pytest.raises(InvalidArgument, match="normalization"):
        normalize_scores([1.0], "softmax")


def test_normalize_scores() -> None:
    np.testing.assert_allclose(normalize_scores([1, 2, 3], "minmax"), [0, 0.5, 1])
    np.testing.assert_allclose(normalize_scores([1, 2, 3], "meanmax"), [-1, 0, 1])
    np.testing.assert_allclose(normalize_scores([1, 2, 3], "zscore"), np.array([-1, 0, 1]) / np.std([1, 2, 3]))
    for method in ("minmax", "meanmax", "zscore"):
        assert normalize_scores([4.0, 4.0, 4.0], method).tolist() == [0.0, 0.0, 0.0]
        assert normalize_scores([], method).size == 0


def test_signal_quality_separates_signal_from_noise() -> None:
    rng = np.random.default_rng(5)
    # Pure noise reaches the expected maximum about half the time; its quality stays small on average.
    noise_quality = [signal_quality(np.random.default_rng(seed).standard_normal(100))[0] for seed in range(200)]
    assert np.mean(noise_quality) < 0.1
    separated = np.concatenate([[12.0, 11.0], rng.exponential(1.0, 98)])
    assert signal_quality(separated)[0] > 0.5
    assert signal_quality([3.0] * 10)[0] == 0.0


def test_jaccard_similarity() -> None:
    assert jaccard_similarity(frozenset({"a", "b"}), frozenset({"b", "c"})) == pytest.approx(1 / 3)
    assert jaccard_similarity(frozenset(), frozenset()) == 0.0
    assert jaccard_similarity(frozenset({"知识库"}), frozenset({"知识库"})) == 1.0


def test_near_duplicates_dropped_keeping_best_ranked() -> None:
    base = "Hybrid retrieval fuses BM25 keyword scores with dense vector similarity to rank passages."
    texts = {
        "best": base,
        "exact-copy": "  hybrid   retrieval fuses BM25 keyword scores with dense vector\nsimilarity to rank passages. ",
        "other": "FAISS builds an HNSW graph so approximate nearest neighbour search stays fast at scale.",
        "near-copy": base.replace("passages.", "passages!"),
        "zh-best": "知识库工作台把文档切分成片段，并为每个片段计算向量，以便混合检索。",
        "zh-near": "知识库工作台把文档切分成片段，并为每个片段计算向量，以便混合检索！",
        "zh-other": "删除文档时会记录墓碑，已删除的行不会再出现在结果中。",
    }
    dropped = near_duplicate_keys(texts, threshold=0.9)
    assert dropped == {"exact-copy", "near-copy", "zh-near"}
    # Order decides which one survives: the first (best-ranked) of each group.
    reordered = {"near-copy": texts["near-copy"], "best": texts["best"]}
    assert near_duplicate_keys(reordered) == {"best"}
    assert near_duplicate_keys({}) == set()
    with pytest.raises(InvalidArgument):
        near_duplicate_keys(texts, threshold=0)
