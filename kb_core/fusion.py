"""Fusion of keyword (BM25) and vector (cosine) candidate lists, with a score breakdown per hit.

Every hit carries a :class:`ScoreBreakdown` from which its ``final_score`` can be recomputed by hand:

    vector_contribution  = vector_weight  · vector_normalized
    keyword_contribution = keyword_weight · keyword_normalized
    fused_score          = vector_contribution + keyword_contribution
    jaccard_contribution = jaccard_weight · jaccard
    final_score          = (1 − jaccard_weight) · fused_score + jaccard_contribution

``vector_weight + keyword_weight = 1`` always (the *effective* weights); the requested weights are recorded
beside them.

Normalisation (``method="weighted"``). Each signal is normalised over *its own ranked list* (the candidates it
retrieved, ``*_rank`` not None), so a candidate that only the other signal found cannot stretch the scale:

* ``"zscore"`` (default): ``(s − mean) / std``. A list whose top stands far out of its bulk keeps that margin
  (BM25 on a rare term: z ≈ 7), while a flat, noisy list cannot stretch its top to the same height, which is
  what min-max does.
* ``"minmax"``: ``(s − min) / (max − min)``, the common baseline.
* ``"meanmax"``: ``(s − mean) / (max − mean)`` — top 1, mean 0.

A candidate missing a signal's score (outside that list, e.g. no keyword match) gets the list's minimum: it
ranked below everything the list holds; a candidate rescored exactly on that signal keeps its score clipped to
the list's range. A list with no spread (one score, or equal scores) normalises its members to 1.
With ``method="rrf"`` the normalised value is
``(rrf_k + 1) / (rrf_k + rank)`` (1 for rank 1; 0 when the signal did not rank it), i.e. weighted reciprocal
rank fusion (Cormack et al., SIGIR 2009) rescaled so the top is 1.

Signal quality (``adaptive=True``). A signal that carries no information for a query (an English-only
embedding model on a Chinese query, a BM25 list of equal scores) still produces a ranked list, and min-max
stretches its noise to [0, 1], which is how a hybrid becomes worse than its better half. The evidence of a
list is how far its top score stands out from the bulk, measured on the list's own scores:

    z_top    = (max − mean) / std                      over the signal's ranked list (n scores)
    chance   = Φ⁻¹((n − 0.375) / (n + 0.25))           the expected z of the maximum of n normal draws (Blom 1958)
    quality  = max(0, (z_top − chance) / chance)       0: the top is no better separated than noise would be

Effective weights are ``w_s · quality_s`` renormalised to sum to 1; if neither signal shows any evidence the
requested weights are kept. A signal whose scores are constant (or that returned nothing) has quality 0. The
breakdown's ``notes`` say when and why a weight was moved. ``vector_prior`` (default 1, in [0, 1]) lets the
caller scale the vector signal's quality by what it knows: :func:`script_coverage` gives the share of the query's
letters written in scripts the embedding model was trained on (0 for a Chinese query to an English-only model).

The constants here come from principle (Gaussian extreme-value chance level), not from fitting evaluation
queries; ``benchmarks/fusion_study.py`` measures the result on SciFact (English) and XQuAD (Chinese).
"""

from __future__ import annotations

import heapq
import math
import re
import unicodedata
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from kb_core.errors import InvalidArgument

__all__ = [
    "DEFAULT_JACCARD_WEIGHT",
    "FUSION_METHODS",
    "NORMALIZATIONS",
    "Candidate",
    "ScoreBreakdown",
    "fuse",
    "jaccard_similarity",
    "near_duplicate_keys",
    "normalize_scores",
    "script_coverage",
    "signal_quality",
]

FUSION_METHODS = ("weighted", "rrf")
NORMALIZATIONS = ("meanmax", "minmax", "zscore")
DEFAULT_JACCARD_WEIGHT = 0.0  # measured in benchmarks/fusion_study.py: query/document term Jaccard did not help
_EPS = 1e-12


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
    """Everything needed to recompute ``final_score`` by hand (formula in the module docstring)."""

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
    notes: tuple[str, ...] = ()


def normalize_scores(scores: Sequence[float] | np.ndarray, method: str = "meanmax") -> np.ndarray:
    """Normalise one list's scores; constant (or empty) lists map to zeros: they carry no ordering.

    ``meanmax``: (s − mean)/(max − mean); ``minmax``: (s − min)/(max − min); ``zscore``: (s − mean)/std.
    """
    if method not in NORMALIZATIONS:
        raise InvalidArgument(f"normalization {method!r} is not supported; use one of {', '.join(NORMALIZATIONS)}")
    values = np.asarray(scores, dtype=np.float64)
    if values.size == 0:
        return values
    low, high, mean = float(values.min()), float(values.max()), float(values.mean())
    if method == "minmax":
        span = high - low
        return (values - low) / span if span > _EPS * max(1.0, abs(high)) else np.zeros_like(values)
    if method == "zscore":
        std = float(values.std())
        return (values - mean) / std if std > _EPS * max(1.0, abs(high)) else np.zeros_like(values)
    span = high - mean
    return (values - mean) / span if span > _EPS * max(1.0, abs(high)) else np.zeros_like(values)


def _apply_normalization(values: np.ndarray, reference: np.ndarray, method: str) -> np.ndarray:
    """Normalise ``values`` with the statistics of ``reference`` (the signal's own list)."""
    if reference.size == 0:
        return np.zeros_like(values)
    low, high, mean = float(reference.min()), float(reference.max()), float(reference.mean())
    tiny = _EPS * max(1.0, abs(high))
    # A list of one score (or of equal scores) has no scale: its members share the top, 1; others 0.
    flat = np.where(values >= high - tiny, 1.0, 0.0)
    if method == "minmax":
        span = high - low
        return (values - low) / span if span > tiny else flat
    if method == "zscore":
        std = float(reference.std())
        return (values - mean) / std if std > tiny else flat
    span = high - mean
    return (values - mean) / span if span > tiny else flat


def expected_maximum_z(n: int) -> float:
    """Expected maximum of ``n`` standard normal draws, by Blom's approximation of normal order statistics.

    The asymptotic √(2 ln n) overstates it for the candidate-list sizes met here (2.50 against 1.93 for
    n = 23; 3.03 against 2.50 for n = 100), which removed a real signal's weight from small KBs.
    """
    return NormalDist().inv_cdf((n - 0.375) / (n + 0.25))


def signal_quality(scores: Sequence[float] | np.ndarray) -> tuple[float, float, float]:
    """``(quality, z_top, chance)`` of one signal's ranked list; see the module docstring."""
    values = np.asarray(scores, dtype=np.float64)
    n = values.size
    if n < 2:
        return (0.0 if n == 0 else 1.0), 0.0, 0.0
    std = float(values.std())
    if std <= _EPS * max(1.0, float(np.abs(values).max())):
        return 0.0, 0.0, expected_maximum_z(n)
    z_top = (float(values.max()) - float(values.mean())) / std
    chance = expected_maximum_z(n)
    quality = max(0.0, (z_top - chance) / chance)
    return quality, z_top, chance


_SCRIPT_PREFIXES = {
    "latin": ("LATIN",),
    "cjk": ("CJK", "HIRAGANA", "KATAKANA", "HANGUL", "BOPOMOFO"),
    "cyrillic": ("CYRILLIC",),
    "greek": ("GREEK",),
    "arabic": ("ARABIC",),
    "hebrew": ("HEBREW",),
    "devanagari": ("DEVANAGARI",),
    "thai": ("THAI",),
}


def script_coverage(text: str, scripts: Iterable[str] = ("latin",)) -> float:
    """Share of the letters of ``text`` written in one of ``scripts`` (see ``_SCRIPT_PREFIXES``); 1 if none.

    A cheap, model-agnostic language check for ``fuse(vector_prior=...)``: an English-only embedding model
    (scripts ``("latin",)``) gets 0 for a Chinese query and about 0.6 for "FAISS 是什么".
    """
    wanted = tuple(prefix for name in scripts for prefix in _SCRIPT_PREFIXES.get(name.lower(), (name.upper(),)))
    letters = covered = 0
    for char in text:
        if not char.isalpha():
            continue
        letters += 1
        if unicodedata.name(char, "").startswith(wanted):
            covered += 1
    return 1.0 if letters == 0 else covered / letters


def _orders(values: np.ndarray) -> bool:
    """True when a list has at least one score and is not constant (a single hit still ranks)."""
    return values.size == 1 or (
        values.size > 1 and float(np.ptp(values)) > _EPS * max(1.0, float(np.abs(values).max()))
    )


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


def fuse(
    candidates: Iterable[Candidate],
    *,
    vector_weight: float = 0.7,
    keyword_weight: float = 0.3,
    method: str = "weighted",
    rrf_k: int = 60,
    query_terms: frozenset[str] = frozenset(),
    jaccard_weight: float = DEFAULT_JACCARD_WEIGHT,
    normalization: str = "zscore",
    adaptive: bool = True,
    vector_prior: float = 1.0,
) -> list[tuple[Candidate, ScoreBreakdown]]:
    """Fuse the candidates of both signals; best first (ties keep input order)."""
    pool = list(candidates)
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
    if normalization not in NORMALIZATIONS:
        raise InvalidArgument(
            f"normalization {normalization!r} is not supported; use one of {', '.join(NORMALIZATIONS)}"
        )
    if not isinstance(rrf_k, int) or rrf_k < 0:
        raise InvalidArgument(f"rrf_k must be an integer ≥ 0; got {rrf_k!r}")
    if not pool:
        return []

    total = requested_v + requested_k
    base_v, base_k = requested_v / total, requested_k / total
    notes: list[str] = []

    v_list = np.array([c.vector_score for c in pool if c.vector_rank is not None and c.vector_score is not None])
    k_list = np.array([c.keyword_score for c in pool if c.keyword_rank is not None and c.keyword_score is not None])
    weight_v, weight_k = base_v, base_k
    if adaptive:
        quality_v, z_v, chance_v = signal_quality(v_list)
        quality_k, z_k, chance_k = signal_quality(k_list)
        quality_v *= vector_prior
        raw_v, raw_k = base_v * quality_v, base_k * quality_k
        if raw_v + raw_k > 0:
            weight_v, weight_k = raw_v / (raw_v + raw_k), raw_k / (raw_v + raw_k)
        else:
            # No evidence either way: keep the requested split among the signals that produced any ordering.
            usable_v = base_v * float(_orders(v_list) and vector_prior > 0)
            usable_k = base_k * float(_orders(k_list))
            if usable_v + usable_k > 0:
                weight_v, weight_k = usable_v / (usable_v + usable_k), usable_k / (usable_v + usable_k)
            if base_v > 0 and base_k > 0 and usable_v > 0 and usable_k > 0:
                notes.append("neither signal stands out from chance for this query; requested weights kept")
        for name, other, base, weight, quality, z, chance, size in (
            ("vector", "keyword", base_v, weight_v, quality_v, z_v, chance_v, v_list.size),
            ("keyword", "vector", base_k, weight_k, quality_k, z_k, chance_k, k_list.size),
        ):
            if base <= 0 or abs(weight - base) < 0.005:
                continue
            if size == 0:
                notes.append(f"{name} search returned no candidates; weight moved to {other}")
            elif weight == 0 and name == "vector" and vector_prior == 0:
                notes.append(
                    "vector signal not used: the embedding model does not cover this query's language "
                    f"(vector prior 0); weight moved to {other}"
                )
            elif weight == 0:
                notes.append(
                    f"{name} signal carries no information for this query (top z {z:.2f} ≤ chance {chance:.2f}); "
                    f"weight moved to {other}"
                )
            elif weight < base:
                notes.append(
                    f"{name} signal weakly separated (top z {z:.2f}, chance {chance:.2f}, quality {quality:.2f}); "
                    f"weight {base:.2f} → {weight:.2f}"
                )

    v_norm, k_norm = _normalized(pool, method, normalization, rrf_k, v_list, k_list)
    results: list[tuple[Candidate, ScoreBreakdown]] = []
    frozen_notes = tuple(notes)
    for position, candidate in enumerate(pool):
        vn, kn = float(v_norm[position]), float(k_norm[position])
        v_contribution, k_contribution = weight_v * vn, weight_k * kn
        fused = v_contribution + k_contribution
        jaccard = candidate_jaccard(candidate, query_terms) if jaccard_weight > 0 else 0.0
        j_contribution = jaccard_weight * jaccard
        final = (1.0 - jaccard_weight) * fused + j_contribution
        results.append(
            (
                candidate,
                ScoreBreakdown(
                    vector_score=candidate.vector_score,
                    keyword_score=candidate.keyword_score,
                    vector_normalized=vn,
                    keyword_normalized=kn,
                    vector_rank=candidate.vector_rank,
                    keyword_rank=candidate.keyword_rank,
                    vector_weight=weight_v,
                    keyword_weight=weight_k,
                    requested_vector_weight=requested_v,
                    requested_keyword_weight=requested_k,
                    vector_contribution=v_contribution,
                    keyword_contribution=k_contribution,
                    fused_score=fused,
                    jaccard=jaccard,
                    jaccard_weight=jaccard_weight,
                    jaccard_contribution=j_contribution,
                    final_score=final,
                    fusion_method=method,
                    notes=frozen_notes,
                ),
            )
        )
    order = sorted(range(len(results)), key=lambda i: -results[i][1].final_score)
    return [results[i] for i in order]


def _normalized(
    pool: list[Candidate], method: str, normalization: str, rrf_k: int, v_list: np.ndarray, k_list: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    if method == "rrf":
        v = [(rrf_k + 1) / (rrf_k + c.vector_rank) if c.vector_rank is not None else 0.0 for c in pool]
        k = [(rrf_k + 1) / (rrf_k + c.keyword_rank) if c.keyword_rank is not None else 0.0 for c in pool]
        return np.asarray(v, dtype=np.float64), np.asarray(k, dtype=np.float64)
    out = []
    for values, reference in (
        ([c.vector_score for c in pool], v_list),
        ([c.keyword_score for c in pool], k_list),
    ):
        floor = float(reference.min()) if reference.size else 0.0
        filled = np.array([floor if s is None else float(s) for s in values], dtype=np.float64)
        # A score outside the list (rescored exactly) is kept within the list's range: it never beats the
        # top, and a far-off value cannot produce an extreme negative z that swamps the other signal.
        if reference.size:
            filled = np.clip(filled, float(reference.min()), float(reference.max()))
        out.append(_apply_normalization(filled, reference.astype(np.float64), normalization))
    return out[0], out[1]


_SPACE = re.compile(r"\s+", re.UNICODE)


def _normalise_text(text: str) -> str:
    return _SPACE.sub(" ", unicodedata.normalize("NFKC", text)).strip().casefold()


def _shingles(text: str, size: int = 4) -> frozenset[str]:
    """Character shingles: they work the same for spaced (English) and unspaced (Chinese) text."""
    compact = text.replace(" ", "")
    if len(compact) <= size:
        return frozenset([compact]) if compact else frozenset()
    return frozenset(compact[i : i + size] for i in range(len(compact) - size + 1))


def near_duplicate_keys(texts: Mapping[Hashable, str], threshold: float = 0.9) -> set[Hashable]:
    """Keys to drop because an earlier (better-ranked) text is an exact or near duplicate.

    ``texts`` must iterate best-ranked first. Exact duplicates are found after Unicode (NFKC), whitespace and
    case normalisation; near duplicates by Jaccard similarity ≥ ``threshold`` of 4-character shingles. A text
    is dropped when it is that close to any text that is kept. Pairwise comparison is fine at top-k scale.
    """
    if not 0 < threshold <= 1:
        raise InvalidArgument(f"threshold must lie in (0, 1]; got {threshold!r}")
    drop: set[Hashable] = set()
    seen_exact: set[str] = set()
    kept: list[tuple[frozenset[str], frozenset[int]]] = []
    for key, text in texts.items():
        normal = _normalise_text(text)
        if normal in seen_exact:
            drop.add(key)
            continue
        shingles = _shingles(normal)
        sketch = _sketch(shingles)
        for other, other_sketch in kept:
            # Cheap filters first: Jaccard ≥ t needs sizes within a factor t, and near-identical sets share
            # most of their smallest shingle hashes; only then the exact Jaccard.
            small, large = sorted((len(shingles), len(other)))
            if small < threshold * large or len(sketch & other_sketch) < _SKETCH_SIZE // 2:
                continue
            if jaccard_similarity(shingles, other) >= threshold:
                drop.add(key)
                break
        else:
            seen_exact.add(normal)
            kept.append((shingles, sketch))
    return drop


_SKETCH_SIZE = 16


def _sketch(shingles: frozenset[str]) -> frozenset[int]:
    """Bottom-k sketch: the smallest shingle hashes. Sets with Jaccard ≥ 0.9 share most of them."""
    return frozenset(heapq.nsmallest(_SKETCH_SIZE, map(hash, shingles)))
