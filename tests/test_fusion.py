"""kb_core.engines.fusion: [0, 1] scores, exact weights, recomputable breakdowns, pure-signal orderings, RRF,
the language guard, auto weights."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kb_core.base.errors import InvalidArgument
from kb_core.engines.fusion import (
    Candidate,
    ScoreBreakdown,
    auto_weights,
    fuse,
    jaccard_similarity,
    keyword_normalized,
    vector_normalized,
)
from kb_core.engines.weights import script_coverage, signal_quality


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
    weighting=st.sampled_from(["fixed", "auto"]),
    vector_prior=st.sampled_from([0.0, 1.0]),
)
def test_breakdown_recomputes_final_score_in_zero_one(
    data: st.DataObject,
    n: int,
    vector_weight: float,
    keyword_weight: float,
    jaccard_weight: float,
    method: str,
    weighting: str,
    vector_prior: float,
) -> None:
    score = st.one_of(st.none(), st.floats(-1, 1))
    vector = data.draw(st.lists(score, min_size=n, max_size=n))
    keyword = data.draw(st.lists(st.one_of(st.none(), st.floats(0, 40)), min_size=n, max_size=n))
    terms = data.draw(st.lists(st.sets(words, max_size=5), min_size=n, max_size=n))
    query = frozenset(data.draw(st.sets(words, max_size=4)))
    scale = data.draw(st.floats(0.5, 40))
    fused = fuse(
        make_pool(vector, keyword, terms),
        vector_weight=vector_weight,
        keyword_weight=keyword_weight,
        method=method,
        query_terms=query,
        jaccard_weight=jaccard_weight,
        weighting=weighting,
        vector_prior=vector_prior,
        keyword_reference=scale,
    )
    assert len(fused) == n
    finals = [b.final_score for _, b in fused]
    assert finals == sorted(finals, reverse=True)
    for candidate, b in fused:
        assert 0.0 <= b.final_score <= 1.0 + 1e-12
        assert 0.0 <= b.vector_normalized <= 1.0 and 0.0 <= b.keyword_normalized <= 1.0
        assert math.isclose(b.vector_weight + b.keyword_weight, 1.0, abs_tol=1e-9)
        assert abs(b.vector_contribution - b.vector_weight * b.vector_normalized) <= 1e-9
        assert abs(b.keyword_contribution - b.keyword_weight * b.keyword_normalized) <= 1e-9
        assert abs(b.fused_score - (b.vector_contribution + b.keyword_contribution)) <= 1e-9
        assert abs(b.jaccard_contribution - b.jaccard_weight * b.jaccard) <= 1e-9
        assert abs(b.final_score - recompute(b)) <= 1e-9
        assert b.jaccard == jaccard_similarity(query, candidate.terms) or jaccard_weight == 0
        assert (b.vector_rank, b.keyword_rank) == (candidate.vector_rank, candidate.keyword_rank)
        assert (b.requested_vector_weight, b.requested_keyword_weight) == (vector_weight, keyword_weight)
        assert b.fusion_method == method and b.weighting == weighting
        if method == "weighted":
            # the normalised values come from the raw scores alone: cosine clipped to [0, 1], BM25 / scale
            assert b.vector_normalized == vector_normalized(candidate.vector_score)
            assert b.keyword_normalized == keyword_normalized(candidate.keyword_score, scale)
            assert b.keyword_reference == scale
        if weighting == "fixed" and vector_prior == 1.0:
            total = vector_weight + keyword_weight
            assert b.vector_weight == pytest.approx(vector_weight / total)
            assert b.notes == ()


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
    only_vector = fuse(pool, vector_weight=1, keyword_weight=0, method=method, keyword_reference=100.0)
    only_keyword = fuse(pool, vector_weight=0, keyword_weight=1, method=method, keyword_reference=100.0)
    assert [c.key for c, _ in only_vector] == by_vector
    assert [c.key for c, _ in only_keyword] == by_keyword
    assert only_vector[0][1].vector_weight == 1.0 and only_vector[0][1].keyword_weight == 0.0


def test_requested_weights_are_the_weights_used_whatever_the_signals_look_like() -> None:
    """The old adaptive fusion moved 0.7/0.3 to 0.95/0.05 or 0/1 on small lists; fixed weighting never does."""
    flat_vector = make_pool([0.42] * 30, np.random.default_rng(1).gamma(2.0, 3.0, 30).tolist())
    noisy = make_pool(
        (0.45 + 0.03 * np.random.default_rng(2).standard_normal(20)).tolist(), [1.0] * 19 + [14.0]
    )
    for pool in (flat_vector, noisy, _informative_pool(7, 5)):
        for vector_weight in (0.7, 0.2):
            fused = fuse(pool, vector_weight=vector_weight, keyword_weight=1 - vector_weight, keyword_reference=60.0)
            for _, b in fused:
                assert (b.vector_weight, b.keyword_weight) == pytest.approx((vector_weight, 1 - vector_weight))
                assert b.notes == ()


def test_a_candidates_score_does_not_depend_on_the_other_candidates() -> None:
    """Absolute scales: a threshold set once means the same for every query and every candidate list."""
    pool = _informative_pool(3, 10)
    more = pool + [Candidate(key=f"extra{i}", vector_score=0.99, keyword_score=50.0, vector_rank=None,
                             keyword_rank=None) for i in range(5)]
    alone = {c.key: b.final_score for c, b in fuse(pool, keyword_reference=80.0)}
    together = {c.key: b.final_score for c, b in fuse(more, keyword_reference=80.0)}
    assert all(together[key] == alone[key] for key in alone)


def test_moving_the_vector_weight_changes_the_ranking() -> None:
    # doc0: semantically close, few keywords; doc1: the keyword match
    pool = make_pool([0.80, 0.40, 0.30], [2.0, 18.0, 1.0])
    at_07 = fuse(pool, vector_weight=0.7, keyword_weight=0.3, keyword_reference=20.0)
    at_02 = fuse(pool, vector_weight=0.2, keyword_weight=0.8, keyword_reference=20.0)
    assert at_07[0][0].key == "doc0" and at_02[0][0].key == "doc1"
    assert at_07[0][1].final_score == pytest.approx(0.7 * 0.8 + 0.3 * (1 - math.exp(-2.0 / 20.0)))


def test_rrf_scores_follow_reciprocal_ranks() -> None:
    pool = make_pool([0.9, 0.8, None, 0.1], [None, 5.0, 9.0, 1.0])
    fused = fuse(pool, method="rrf", rrf_k=60, vector_weight=0.5, keyword_weight=0.5)
    by_key = {c.key: b for c, b in fused}
    # doc1 is ranked 2nd by both lists: 0.5·61/62 + 0.5·61/62
    assert by_key["doc1"].fused_score == pytest.approx(61 / 62)
    assert by_key["doc0"].keyword_normalized == 0.0 and by_key["doc0"].vector_normalized == 1.0
    assert by_key["doc2"].keyword_normalized == 1.0
    assert fused[0][0].key == "doc1"
    assert all(b.fusion_method == "rrf" and b.normalization == "reciprocal rank" for _, b in fused)


def test_auto_weighting_gives_a_constant_signal_no_weight_and_a_note() -> None:
    rng = np.random.default_rng(1)
    keyword = rng.gamma(2.0, 3.0, 30).tolist()
    keyword[7] = 60.0
    pool = make_pool([0.42] * 30, keyword)
    fused = fuse(pool, vector_weight=0.7, keyword_weight=0.3, weighting="auto", keyword_reference=80.0)
    b = fused[0][1]
    assert b.vector_weight == 0.0 and b.keyword_weight == 1.0
    assert any("vector signal carries no information" in note for note in b.notes)
    assert [c.key for c, _ in fused] == [c.key for c in sorted(pool, key=lambda c: -c.keyword_score)]
    # the same pool with fixed weights keeps 0.7/0.3
    assert fuse(pool, keyword_reference=80.0)[0][1].vector_weight == pytest.approx(0.7)


def test_auto_weighting_lets_no_noise_signal_outvote_a_clear_keyword_winner() -> None:
    # An embedding model that does not know the query's language: cosines are a flat, noisy band.
    rng = np.random.default_rng(2)
    n = 100
    vector = (0.45 + 0.03 * rng.standard_normal(n)).tolist()
    keyword = rng.exponential(1.0, n).tolist()
    keyword[37] = 14.0  # the one document that matches the query's rare terms
    fused = fuse(make_pool(vector, keyword), vector_weight=0.7, keyword_weight=0.3, weighting="auto",
                 keyword_reference=30.0)
    assert fused[0][0].key == "doc37"
    assert fused[0][1].vector_weight < 0.1
    assert fused[0][1].notes


def test_auto_weighting_keeps_the_requested_weights_for_equally_informative_signals() -> None:
    rng = np.random.default_rng(3)
    n = 100
    vector = (0.3 + 0.05 * rng.standard_normal(n)).tolist()
    vector[3], vector[4] = 0.85, 0.8
    keyword = [40.0 * v + 3.0 for v in vector]  # same evidence, BM25-sized scale
    pool = make_pool(vector, keyword)
    weights = auto_weights(pool, 0.7, 0.3)
    assert weights.vector == pytest.approx(0.7) and weights.keyword == pytest.approx(0.3)
    assert weights.notes == ()
    fused = fuse(pool, weighting="auto", keyword_reference=80.0)
    assert [c.key for c, _ in fused[:2]] == ["doc3", "doc4"]


def test_script_coverage() -> None:
    assert script_coverage("What is hybrid search?") == 1.0
    assert script_coverage("黑豹队的防守丢了多少分？") == 0.0
    assert script_coverage("FAISS 是什么") == pytest.approx(5 / 8)
    assert script_coverage("黑豹队", ("latin", "cjk")) == 1.0
    assert script_coverage("123 !?") == 1.0


def test_a_missing_signal_keeps_fixed_weights_and_scores_zero_there() -> None:
    pool = make_pool([0.9, 0.5, 0.4, 0.2], [None, None, None, None])
    fused = fuse(pool, keyword_reference=0.0)
    assert fused[0][1].vector_weight == pytest.approx(0.7)
    assert [b.final_score for _, b in fused] == pytest.approx([0.63, 0.35, 0.28, 0.14])
    auto = fuse(pool, weighting="auto", keyword_reference=0.0)
    assert auto[0][1].vector_weight == 1.0
    assert any("keyword search returned no candidates" in note for note in auto[0][1].notes)
    assert [c.key for c, _ in auto] == ["doc0", "doc1", "doc2", "doc3"]


def test_language_guard_turns_the_vector_signal_off_and_says_so() -> None:
    pool = _informative_pool(4)
    for weighting in ("fixed", "auto"):
        fused = fuse(pool, vector_prior=0.0, weighting=weighting, keyword_reference=60.0)
        assert fused[0][1].vector_weight == 0.0
        notes = fused[0][1].notes
        assert any("does not cover this query's language" in note for note in notes)
        # the pool's vector signal is informative: the note must not claim it fell below chance
        assert not any("≤ chance" in note for note in notes)
    # asked for the vector signal only, the guard cannot apply; it says so and keeps it
    only_vector = fuse(pool, vector_weight=1, keyword_weight=0, vector_prior=0.0, keyword_reference=60.0)
    assert only_vector[0][1].vector_weight == 1.0
    assert any("guard not applied" in note for note in only_vector[0][1].notes)


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
    with pytest.raises(InvalidArgument, match="weighting"):
        fuse(pool, weighting="adaptive")
    with pytest.raises(InvalidArgument, match="keyword_reference"):
        fuse(pool, keyword_reference=float("nan"))


def test_without_a_keyword_reference_the_best_candidate_sets_it_and_a_note_says_so() -> None:
    fused = fuse(make_pool([0.5, 0.4], [8.0, 2.0]))
    assert fused[0][1].keyword_reference == 8.0
    assert fused[0][1].keyword_normalized == pytest.approx(1 - math.exp(-1))
    assert any("keyword reference unknown" in note for note in fused[0][1].notes)


def test_normalised_values() -> None:
    assert vector_normalized(0.83) == 0.83
    assert vector_normalized(-0.2) == 0.0 and vector_normalized(None) == 0.0
    # the reference match (each query term once in a chunk of average length) scores 1 − 1/e
    assert keyword_normalized(20.0, 20.0) == pytest.approx(1 - math.exp(-1))
    assert keyword_normalized(5.0, 20.0) < keyword_normalized(6.0, 20.0) < keyword_normalized(400.0, 20.0) < 1.0
    assert keyword_normalized(5.0, 0.0) == 0.0 and keyword_normalized(None, 20.0) == 0.0


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


@pytest.mark.parametrize("options", [{}, {"weighting": "auto"}, {"method": "rrf"}, {"jaccard_weight": 0.3}])
def test_breakdown_dicts_of_hits_equal_the_breakdowns(options: dict) -> None:
    """Search builds its hits' breakdowns column by column; each must equal ``asdict`` of the breakdown."""
    import dataclasses

    from kb_core.engines.fusion import CandidateArrays, fuse_arrays, single_signal_ranking

    rng = np.random.default_rng(3)
    n = 40
    vector = rng.uniform(-0.2, 0.9, n)
    keyword = rng.uniform(0, 12, n)
    vector[rng.random(n) < 0.3] = math.nan  # found by one signal only
    keyword[rng.random(n) < 0.3] = math.nan
    vector_rank = np.zeros(n, dtype=np.int64)
    keyword_rank = np.zeros(n, dtype=np.int64)
    for scores, ranks in ((vector, vector_rank), (keyword, keyword_rank)):
        found = np.flatnonzero(~np.isnan(scores))
        ranks[found[np.argsort(-scores[found])]] = np.arange(1, len(found) + 1)
    keys = np.stack([np.zeros(n, dtype=np.int64), np.arange(n)], axis=1)
    arrays = CandidateArrays(keys, vector, keyword, vector_rank, keyword_rank, rng.uniform(0, 1, n))
    rankings = [fuse_arrays(arrays, keyword_reference=9.0, **options)]
    if not options:
        rankings += [single_signal_ranking(arrays, signal, 0.0, 9.0) for signal in ("vector", "keyword")]
    for ranking in rankings:
        positions = ranking.order[:25].tolist()
        expected = []
        for position in positions:
            value = dataclasses.asdict(ranking.breakdown(position))
            value["notes"] = list(value["notes"])
            expected.append(value)
        assert ranking.breakdown_dicts(positions) == expected
        assert [list(d) for d in ranking.breakdown_dicts(positions)] == [list(d) for d in expected]
        assert arrays.keys_of(positions) == [arrays.key(p) for p in positions]
