"""Fusion of keyword (BM25) and vector (cosine) candidate lists, with a score breakdown per hit.

Every score a person or agent reads lies in [0, 1], higher is better, and means the same kind of thing in every
mode and on every embedding model, so a threshold set once works across the queries of a KB and across KBs. Each
signal is put on an absolute [0, 1] scale that does not depend on the other candidates of the query:

    vector_normalized  = clip((cosine − zero) / (top − zero), 0, 1)     the cosine on the model's semantic scale
    keyword_normalized = 1 − exp(−BM25 / keyword_reference)           saturating share of keyword evidence
    keyword_reference  = Σ idf(t) over the query's terms that occur in the KB (its support terms left out)

``zero`` and ``top`` are the model's semantic scale for the query's script
(:mod:`kb_core.engines.embedding.calibration`): what unrelated text scores on average (→ 0) and what a near-identical
text scores (→ 1). Cosines themselves are not comparable across models (multilingual-e5-small gives unrelated text
0.74–0.81, all-MiniLM-L6-v2 0.04), so a raw cosine of 0.6 meant "relevant" on one model and "anything" on the other; on
the scale, the question a calibration sentence answers scores about 0.7 on both. Every breakdown reports the anchors
(``semantic_zero``, ``semantic_top``) and the model's floor (``semantic_floor``: the cosine a chunk must exceed to count
as semantic evidence).

``keyword_reference`` is the BM25 of a *reference match*: a chunk of average length holding each query term once
(each term then contributes exactly its idf). So a keyword score of 0.63 (1 − 1/e) means as much keyword evidence
as the reference match, 0.86 twice as much, 0.39 half of it; 0 means no query term. The map is monotone, so
keyword-only search ranks exactly as BM25 does. Every hit carries a :class:`ScoreBreakdown` from which
``final_score`` is recomputed by hand:

    vector_contribution  = vector_weight  · vector_normalized
    keyword_contribution = keyword_weight · keyword_normalized
    fused_score          = vector_contribution + keyword_contribution
    jaccard_contribution = jaccard_weight · jaccard
    final_score          = (1 − jaccard_weight) · fused_score + jaccard_contribution

``vector_weight + keyword_weight = 1`` (the weights *used*, the requested ones normalised to sum to 1); the
requested weights are recorded beside them. With ``weighting="fixed"`` (the default) the weights used are exactly
the requested ones. Two things can change them, and each says so in the breakdown's ``notes``:

* the language guard (``vector_prior=0``): the caller knows the embedding model does not cover the query's
  language (an English-only model and a Chinese query), so the vector signal gets weight 0;
* ``weighting="auto"``: each signal's weight is scaled by how far its top score stands out from what chance
  would give for that many scores (below), so a signal that carries no information for a query loses its weight.

With ``method="rrf"`` (weighted reciprocal rank fusion, Cormack et al., SIGIR 2009) the normalised value is
``(rrf_k + 1) / (rrf_k + rank)``: 1 for rank 1, 0 when the signal did not rank the candidate. RRF scores are
rank-based: they order one query's hits but say nothing about how well a chunk matches.

Signal quality (``weighting="auto"``). The evidence of a list is how far its top score stands out from the bulk,
measured on the list's own scores:

    z_top    = (max − mean) / std                      over the signal's ranked list (n scores)
    chance   = Φ⁻¹((n − 0.375) / (n + 0.25))           the expected z of the maximum of n normal draws (Blom 1958)
    quality  = max(0, (z_top − chance) / chance)       0: the top is no better separated than noise would be

Auto weights are ``w_s · quality_s`` renormalised to sum to 1; if neither signal shows any evidence the requested
weights are kept. The constants come from principle (Gaussian extreme-value chance level), not from fitting
evaluation queries; ``benchmarks/fusion_study.py`` measures fixed, auto and RRF fusion on SciFact and XQuAD.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from kb_core.base.config import DEFAULT_KEYWORD_WEIGHT, DEFAULT_VECTOR_WEIGHT, FUSION_METHODS, RRF_K, WEIGHTINGS
from kb_core.base.errors import InvalidArgument
from kb_core.base.i18n import msg
from kb_core.engines.embedding.calibration import SemanticScale
from kb_core.engines.weights import FusionWeights, guarded_weights, weights_from_ranked_lists

__all__ = [
    "DEFAULT_JACCARD_WEIGHT",
    "DEFAULT_KEYWORD_WEIGHT",
    "DEFAULT_VECTOR_WEIGHT",
    "FUSION_METHODS",
    "RRF_K",
    "WEIGHTINGS",
    "Candidate",
    "CandidateArrays",
    "FusedRanking",
    "ScoreBreakdown",
    "auto_weights",
    "fuse",
    "fuse_arrays",
    "jaccard_similarity",
    "keyword_normalized",
    "single_signal_ranking",
    "vector_normalized",
]

DEFAULT_JACCARD_WEIGHT = 0.0  # measured in benchmarks/fusion_study.py: query/document term Jaccard did not help


@dataclass(frozen=True)
class Candidate:
    """One document chunk found by at least one signal. Ranks are 1-based positions in each signal's list."""

    key: Hashable
    vector_score: float | None
    keyword_score: float | None
    vector_rank: int | None
    keyword_rank: int | None
    terms: frozenset[str] = frozenset()
    jaccard: float | None = None  # when known (e.g. from the keyword index), used instead of ``terms``


@dataclass(frozen=True)
class ScoreBreakdown:
    """Everything needed to recompute ``final_score`` by hand (formula in the module docstring).

    ``vector_score`` is the raw cosine, ``semantic_zero`` and ``semantic_top`` the model's semantic scale it is read
    on (``semantic_floor``: the cosine it must exceed to count as semantic evidence), ``keyword_score`` the raw
    BM25, ``keyword_reference`` the BM25 of the query's reference match; ``normalization`` names how the normalised
    values were made from them.
    """

    vector_score: float | None
    keyword_score: float | None
    vector_normalized: float
    keyword_normalized: float
    vector_rank: int | None
    keyword_rank: int | None
    vector_weight: float
    keyword_weight: float
    requested_vector_weight: float
    requested_keyword_weight: float
    vector_contribution: float
    keyword_contribution: float
    fused_score: float
    jaccard: float
    jaccard_weight: float
    jaccard_contribution: float
    final_score: float
    fusion_method: str
    keyword_reference: float = 0.0
    semantic_zero: float = 0.0
    semantic_top: float = 1.0
    semantic_floor: float = 0.0
    normalization: str = "calibrated"
    weighting: str = "fixed"
    notes: tuple[str, ...] = ()


# No measured scale (a caller without one): the cosine itself, negative cosines counting as 0.
UNCALIBRATED = SemanticScale.unmeasured()


def vector_normalized(cosine: float | None, scale: SemanticScale = UNCALIBRATED) -> float:
    """A cosine on the [0, 1] score scale of ``scale`` (module docstring)."""
    return scale.normalized(cosine)


def keyword_normalized(bm25: float | None, reference: float) -> float:
    """A BM25 score on the [0, 1] scale: ``1 − exp(−bm25 / reference)`` (module docstring)."""
    if bm25 is None or reference <= 0 or bm25 <= 0:
        return 0.0
    return -math.expm1(-float(bm25) / reference)


def jaccard_similarity(a: frozenset[str], b: frozenset[str]) -> float:
    """|a ∩ b| / |a ∪ b|; 0 when both are empty."""
    if not a and not b:
        return 0.0
    return len(a & b) / len(a | b)


def candidate_jaccard(candidate: Candidate, query_terms: frozenset[str]) -> float:
    if candidate.jaccard is not None:
        return candidate.jaccard
    return jaccard_similarity(query_terms, candidate.terms)


def _check_weight(name: str, value: float) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
        raise InvalidArgument(f"{name} must be a finite number ≥ 0; got {value!r}")
    return float(value)


def _ranked_lists(pool: Sequence[Candidate]) -> tuple[np.ndarray, np.ndarray]:
    """Each signal's own ranked list of scores (the candidates it retrieved)."""
    v_list = np.array([c.vector_score for c in pool if c.vector_rank is not None and c.vector_score is not None])
    k_list = np.array([c.keyword_score for c in pool if c.keyword_rank is not None and c.keyword_score is not None])
    return v_list.astype(np.float64), k_list.astype(np.float64)


@dataclass(frozen=True)
class CandidateArrays:
    """Candidates as columns, one row per candidate (what search builds: no Python object per candidate).

    A missing score is NaN, a missing rank 0. ``keys`` identify the rows (search uses ``(segment, row)`` pairs).
    """

    keys: Sequence[Hashable]
    vector_score: np.ndarray  # float64
    keyword_score: np.ndarray  # float64
    vector_rank: np.ndarray  # int64, 1-based; 0 = not ranked by the vector signal
    keyword_rank: np.ndarray  # int64, 1-based; 0 = not ranked by the keyword signal
    jaccard: np.ndarray  # float64

    def __len__(self) -> int:
        return len(self.vector_score)

    @classmethod
    def from_candidates(cls, pool: Sequence[Candidate], query_terms: frozenset[str] = frozenset()) -> CandidateArrays:
        def column(values: list[float | None]) -> np.ndarray:
            return np.array([math.nan if v is None else float(v) for v in values], dtype=np.float64)

        return cls(
            [c.key for c in pool],
            column([c.vector_score for c in pool]),
            column([c.keyword_score for c in pool]),
            np.array([c.vector_rank or 0 for c in pool], dtype=np.int64),
            np.array([c.keyword_rank or 0 for c in pool], dtype=np.int64),
            np.array([candidate_jaccard(c, query_terms) for c in pool], dtype=np.float64),
        )

    def take(self, positions: np.ndarray) -> CandidateArrays:
        index = np.asarray(positions, dtype=np.int64)
        keys = self.keys[index] if isinstance(self.keys, np.ndarray) else [self.keys[i] for i in index.tolist()]
        return CandidateArrays(
            keys,
            self.vector_score[index],
            self.keyword_score[index],
            self.vector_rank[index],
            self.keyword_rank[index],
            self.jaccard[index],
        )

    def key(self, position: int) -> Hashable:
        key = self.keys[position]
        return tuple(int(x) for x in key) if isinstance(key, np.ndarray) else key

    def keys_of(self, positions: Sequence[int] | None = None) -> list[Hashable]:
        """:meth:`key` of each of ``positions`` (default: every candidate, in order); keys given as an (n, 2)
        integer array (the stores' ``(segment, row)`` pairs) come back as ``(int, int)`` tuples."""
        if isinstance(self.keys, np.ndarray) and self.keys.ndim == 2:
            table = self.keys if positions is None else self.keys[np.asarray(positions, dtype=np.int64)]
            return [tuple(key) for key in table.tolist()]
        return [self.key(position) for position in (range(len(self)) if positions is None else positions)]

    def candidate(self, position: int) -> Candidate:
        vector, keyword = self.vector_score[position], self.keyword_score[position]
        v_rank, k_rank = int(self.vector_rank[position]), int(self.keyword_rank[position])
        return Candidate(
            key=self.key(position),
            vector_score=None if math.isnan(vector) else float(vector),
            keyword_score=None if math.isnan(keyword) else float(keyword),
            vector_rank=v_rank or None,
            keyword_rank=k_rank or None,
            jaccard=float(self.jaccard[position]),
        )

    def ranked_lists(self) -> tuple[np.ndarray, np.ndarray]:
        """Each signal's own ranked list of scores, in candidate order (as :func:`_ranked_lists`)."""
        v = self.vector_score[(self.vector_rank > 0) & ~np.isnan(self.vector_score)]
        k = self.keyword_score[(self.keyword_rank > 0) & ~np.isnan(self.keyword_score)]
        return v, k


def auto_weights(
    candidates: Sequence[Candidate] | CandidateArrays,
    vector_weight: float,
    keyword_weight: float,
    vector_prior: float = 1.0,
) -> FusionWeights:
    """The weights ``weighting="auto"`` uses: the requested ones scaled by each signal's quality (module doc)."""
    if isinstance(candidates, CandidateArrays):
        v_list, k_list = candidates.ranked_lists()
    else:
        v_list, k_list = _ranked_lists(candidates)
    return weights_from_ranked_lists(v_list, k_list, vector_weight, keyword_weight, vector_prior)


@dataclass(frozen=True)
class FusedRanking:
    """Every candidate's score parts as arrays and the order best first; breakdowns are built on demand.

    The arrays hold exactly what :class:`ScoreBreakdown` reports, computed with the same float64 operations in the
    same order, so a breakdown built from them recomputes its ``final_score`` exactly.
    """

    candidates: CandidateArrays
    order: np.ndarray  # candidate positions, best first (ties keep candidate order)
    vector_normalized: np.ndarray
    keyword_normalized: np.ndarray
    vector_contribution: np.ndarray
    keyword_contribution: np.ndarray
    fused_score: np.ndarray
    jaccard: np.ndarray
    final_score: np.ndarray
    weights: FusionWeights
    requested_vector_weight: float
    requested_keyword_weight: float
    jaccard_weight: float
    fusion_method: str
    keyword_reference: float
    normalization: str
    weighting: str
    notes: tuple[str, ...]
    semantic_scale: SemanticScale = UNCALIBRATED

    def __len__(self) -> int:
        return len(self.order)

    def rank_of(self) -> np.ndarray:
        """1-based rank of each candidate position."""
        ranks = np.empty(len(self.order), dtype=np.int64)
        ranks[self.order] = np.arange(1, len(self.order) + 1)
        return ranks

    def breakdown(self, position: int) -> ScoreBreakdown:
        """The breakdown of the candidate at ``position`` (candidate order, not rank)."""
        c = self.candidates
        vector, keyword = float(c.vector_score[position]), float(c.keyword_score[position])
        v_rank, k_rank = int(c.vector_rank[position]), int(c.keyword_rank[position])
        jaccard = float(self.jaccard[position])
        return ScoreBreakdown(
            vector_score=None if math.isnan(vector) else vector,
            keyword_score=None if math.isnan(keyword) else keyword,
            vector_normalized=float(self.vector_normalized[position]),
            keyword_normalized=float(self.keyword_normalized[position]),
            vector_rank=v_rank or None,
            keyword_rank=k_rank or None,
            vector_weight=self.weights.vector,
            keyword_weight=self.weights.keyword,
            requested_vector_weight=self.requested_vector_weight,
            requested_keyword_weight=self.requested_keyword_weight,
            vector_contribution=float(self.vector_contribution[position]),
            keyword_contribution=float(self.keyword_contribution[position]),
            fused_score=float(self.fused_score[position]),
            jaccard=jaccard,
            jaccard_weight=self.jaccard_weight,
            jaccard_contribution=self.jaccard_weight * jaccard,
            final_score=float(self.final_score[position]),
            fusion_method=self.fusion_method,
            keyword_reference=self.keyword_reference,
            semantic_zero=self.semantic_scale.mean,
            semantic_top=self.semantic_scale.top,
            semantic_floor=self.semantic_scale.floor,
            normalization=self.normalization,
            weighting=self.weighting,
            notes=self.notes,
        )

    def breakdown_dicts(self, positions: Sequence[int]) -> list[dict[str, object]]:
        """``dataclasses.asdict(self.breakdown(p))`` (notes as a list) for each of ``positions``, built column by
        column: the same values, without a :class:`ScoreBreakdown` and a dict copy per hit."""
        index = np.asarray(positions, dtype=np.int64)
        c = self.candidates
        jaccard = self.jaccard[index].tolist()
        columns = {
            "vector_score": [None if math.isnan(v) else v for v in c.vector_score[index].tolist()],
            "keyword_score": [None if math.isnan(v) else v for v in c.keyword_score[index].tolist()],
            "vector_normalized": self.vector_normalized[index].tolist(),
            "keyword_normalized": self.keyword_normalized[index].tolist(),
            "vector_rank": [r or None for r in c.vector_rank[index].tolist()],
            "keyword_rank": [r or None for r in c.keyword_rank[index].tolist()],
            "vector_contribution": self.vector_contribution[index].tolist(),
            "keyword_contribution": self.keyword_contribution[index].tolist(),
            "fused_score": self.fused_score[index].tolist(),
            "jaccard": jaccard,
            "jaccard_contribution": [self.jaccard_weight * j for j in jaccard],
            "final_score": self.final_score[index].tolist(),
        }
        constant = {
            "vector_weight": self.weights.vector,
            "keyword_weight": self.weights.keyword,
            "requested_vector_weight": self.requested_vector_weight,
            "requested_keyword_weight": self.requested_keyword_weight,
            "jaccard_weight": self.jaccard_weight,
            "fusion_method": self.fusion_method,
            "keyword_reference": self.keyword_reference,
            "semantic_zero": self.semantic_scale.mean,
            "semantic_top": self.semantic_scale.top,
            "semantic_floor": self.semantic_scale.floor,
            "normalization": self.normalization,
            "weighting": self.weighting,
        }
        n = len(index)
        values = [columns[name] if name in columns else [constant[name]] * n for name in _FIELD_ORDER]
        values.append([list(self.notes) for _ in range(n)])  # each hit its own list
        return [dict(zip(_FIELD_ORDER_WITH_NOTES, row, strict=True)) for row in zip(*values, strict=True)]

    def pairs(self, limit: int | None = None) -> list[tuple[Candidate, ScoreBreakdown]]:
        """``(candidate, breakdown)`` best first, for the first ``limit`` ranks (all by default)."""
        positions = self.order.tolist() if limit is None else self.order[:limit].tolist()
        return [(self.candidates.candidate(p), self.breakdown(p)) for p in positions]


_FIELD_ORDER = tuple(f.name for f in dataclasses.fields(ScoreBreakdown) if f.name != "notes")
_FIELD_ORDER_WITH_NOTES = (*_FIELD_ORDER, "notes")


def vector_normalized_array(cosines: np.ndarray, scale: SemanticScale = UNCALIBRATED) -> np.ndarray:
    """:func:`vector_normalized` of each value (NaN, a missing score, gives 0)."""
    return scale.normalized_array(cosines)


def keyword_normalized_array(bm25: np.ndarray, reference: float) -> np.ndarray:
    """:func:`keyword_normalized` of each value, computed by the same ``math.expm1`` (so values are identical)."""
    out = np.zeros(len(bm25), dtype=np.float64)
    if reference <= 0:
        return out
    positive = np.flatnonzero(bm25 > 0)  # NaN (missing) compares False
    out[positive] = [-math.expm1(-value / reference) for value in bm25[positive].tolist()]
    return out


def _ranking(
    arrays: CandidateArrays,
    vn: np.ndarray,
    kn: np.ndarray,
    weights: FusionWeights,
    requested: tuple[float, float],
    jaccard_weight: float,
    method: str,
    reference: float,
    normalization: str,
    weighting: str,
    scale: SemanticScale,
    cosine_ties: bool,
) -> FusedRanking:
    v_contribution, k_contribution = weights.vector * vn, weights.keyword * kn
    fused = v_contribution + k_contribution
    jaccard = arrays.jaccard if jaccard_weight > 0 else np.zeros(len(arrays), dtype=np.float64)
    final = (1.0 - jaccard_weight) * fused + jaccard_weight * jaccard
    if cosine_ties:
        # Equal scores (cosines above the scale's top all read 1) go to the higher raw cosine.
        order = np.lexsort((-np.nan_to_num(arrays.vector_score, nan=-np.inf), -final))
    else:
        order = np.argsort(-final, kind="stable")
    return FusedRanking(
        candidates=arrays,
        order=order,
        vector_normalized=vn,
        keyword_normalized=kn,
        vector_contribution=v_contribution,
        keyword_contribution=k_contribution,
        fused_score=fused,
        jaccard=jaccard,
        final_score=final,
        weights=weights,
        requested_vector_weight=requested[0],
        requested_keyword_weight=requested[1],
        jaccard_weight=jaccard_weight,
        fusion_method=method,
        keyword_reference=reference,
        normalization=normalization,
        weighting=weighting,
        notes=weights.notes,
        semantic_scale=scale,
    )


def fuse(
    candidates: Iterable[Candidate],
    *,
    vector_weight: float = DEFAULT_VECTOR_WEIGHT,
    keyword_weight: float = DEFAULT_KEYWORD_WEIGHT,
    method: str = "weighted",
    rrf_k: int = RRF_K,
    query_terms: frozenset[str] = frozenset(),
    jaccard_weight: float = DEFAULT_JACCARD_WEIGHT,
    weighting: str = "fixed",
    vector_prior: float = 1.0,
    keyword_reference: float | None = None,
    semantic_scale: SemanticScale = UNCALIBRATED,
) -> list[tuple[Candidate, ScoreBreakdown]]:
    """Fuse the candidates of both signals; best first (ties keep input order).

    ``keyword_reference`` is the BM25 of the query's reference match (module docstring); the search passes it.
    Without it the best keyword score among the candidates stands in, and a note says the scale is relative.
    ``semantic_scale`` is the model's (the search passes it); without it the cosine itself is the semantic part.
    """
    pool = list(candidates)
    ranking = fuse_arrays(
        CandidateArrays.from_candidates(pool, query_terms),
        vector_weight=vector_weight,
        keyword_weight=keyword_weight,
        method=method,
        rrf_k=rrf_k,
        jaccard_weight=jaccard_weight,
        weighting=weighting,
        vector_prior=vector_prior,
        keyword_reference=keyword_reference,
        semantic_scale=semantic_scale,
    )
    return [(pool[p], ranking.breakdown(p)) for p in ranking.order.tolist()]


def fuse_arrays(
    arrays: CandidateArrays,
    *,
    vector_weight: float = DEFAULT_VECTOR_WEIGHT,
    keyword_weight: float = DEFAULT_KEYWORD_WEIGHT,
    method: str = "weighted",
    rrf_k: int = RRF_K,
    jaccard_weight: float = DEFAULT_JACCARD_WEIGHT,
    weighting: str = "fixed",
    vector_prior: float = 1.0,
    keyword_reference: float | None = None,
    semantic_scale: SemanticScale = UNCALIBRATED,
) -> FusedRanking:
    """:func:`fuse` on columnar candidates, every candidate at once with numpy; breakdowns on demand."""
    requested_v = _check_weight("vector_weight", vector_weight)
    requested_k = _check_weight("keyword_weight", keyword_weight)
    if requested_v + requested_k <= 0:
        raise InvalidArgument("vector_weight and keyword_weight are both 0; at least one must be positive")
    jaccard_weight = _check_weight("jaccard_weight", jaccard_weight)
    if jaccard_weight > 1:
        raise InvalidArgument(f"jaccard_weight must lie in [0, 1]; got {jaccard_weight!r}")
    vector_prior = _check_weight("vector_prior", vector_prior)
    if vector_prior > 1:
        raise InvalidArgument(f"vector_prior must lie in [0, 1]; got {vector_prior!r}")
    if method not in FUSION_METHODS:
        raise InvalidArgument(f"fusion method {method!r} is not supported; use one of {', '.join(FUSION_METHODS)}")
    if weighting not in WEIGHTINGS:
        raise InvalidArgument(f"weighting {weighting!r} is not supported; use one of {', '.join(WEIGHTINGS)}")
    if not isinstance(rrf_k, int) or rrf_k < 0:
        raise InvalidArgument(f"rrf_k must be an integer ≥ 0; got {rrf_k!r}")
    if keyword_reference is not None and (not math.isfinite(keyword_reference) or keyword_reference < 0):
        raise InvalidArgument(f"keyword_reference must be a finite number ≥ 0; got {keyword_reference!r}")

    if weighting == "auto" and len(arrays):
        weights = auto_weights(arrays, requested_v, requested_k, vector_prior)
    else:
        weights = guarded_weights(requested_v, requested_k, vector_prior)
    notes = list(weights.notes)
    reference = keyword_reference
    if reference is None and method == "weighted":
        known = arrays.keyword_score[~np.isnan(arrays.keyword_score)]
        reference = float(known.max()) if len(known) else 0.0
        if len(arrays):
            notes.append(msg("keyword reference unknown: BM25 measured against the best candidate's score"))
    if method == "rrf":
        v_rank = arrays.vector_rank.astype(np.float64)
        k_rank = arrays.keyword_rank.astype(np.float64)
        vn = np.where(arrays.vector_rank > 0, (rrf_k + 1) / (rrf_k + v_rank), 0.0)
        kn = np.where(arrays.keyword_rank > 0, (rrf_k + 1) / (rrf_k + k_rank), 0.0)
    else:
        vn = vector_normalized_array(arrays.vector_score, semantic_scale)
        kn = keyword_normalized_array(arrays.keyword_score, reference or 0.0)
    return _ranking(
        arrays,
        vn,
        kn,
        FusionWeights(weights.vector, weights.keyword, tuple(notes)),
        (requested_v, requested_k),
        jaccard_weight,
        method,
        float(reference or 0.0),
        "reciprocal rank" if method == "rrf" else "calibrated",
        weighting,
        semantic_scale,
        method == "weighted",
    )


def single_signal_ranking(
    arrays: CandidateArrays,
    signal: str,
    jaccard_weight: float,
    keyword_reference: float,
    semantic_scale: SemanticScale = UNCALIBRATED,
) -> FusedRanking:
    """Ranking by one signal (semantic or keyword search): weight 1 on it, the same normalised values as fusion."""
    is_vector = signal == "vector"
    vn = vector_normalized_array(arrays.vector_score, semantic_scale)
    kn = keyword_normalized_array(arrays.keyword_score, keyword_reference)
    ranking = _ranking(
        arrays,
        vn,
        kn,
        FusionWeights(1.0 if is_vector else 0.0, 0.0 if is_vector else 1.0),
        (1.0 if is_vector else 0.0, 0.0 if is_vector else 1.0),
        jaccard_weight,
        "semantic only" if is_vector else "keyword only",
        keyword_reference,
        "calibrated",
        "fixed",
        semantic_scale,
        is_vector,
    )
    # Only the ranked signal contributes (its weight is 1); the other's contribution is 0, not 0 × value.
    zero = np.zeros(len(arrays), dtype=np.float64)
    if is_vector:
        return dataclasses.replace(ranking, keyword_contribution=zero, fused_score=vn)
    return dataclasses.replace(ranking, vector_contribution=zero, fused_score=kn)
