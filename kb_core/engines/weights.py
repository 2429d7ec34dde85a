"""Fusion weights: the ones a fusion used and why (:class:`FusionWeights`), the language guard
(:func:`guarded_weights`, :func:`script_coverage`) and auto weighting from each signal's quality
(:func:`signal_quality`, :func:`weights_from_ranked_lists`). The scores they weigh and the reasoning behind the
quality measure are described in :mod:`kb_core.engines.fusion`."""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from kb_core.base.i18n import Text, msg

__all__ = [
    "SCORE_EPSILON",
    "FusionWeights",
    "expected_maximum_z",
    "guarded_weights",
    "script_coverage",
    "signal_quality",
    "weights_from_ranked_lists",
]

SCORE_EPSILON = 1e-12  # spreads below this share of the largest score count as no spread at all


@dataclass(frozen=True)
class FusionWeights:
    """The weights a fusion used (summing to 1), and why they differ from the requested ones, if they do."""

    vector: float
    keyword: float
    notes: tuple[str, ...] = ()


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
    if std <= SCORE_EPSILON * max(1.0, float(np.abs(values).max())):
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

    A cheap, model-agnostic language check: an English-only embedding model (scripts ``("latin",)``) gets 0 for
    a Chinese query and about 0.6 for "FAISS 是什么".
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
        values.size > 1 and float(np.ptp(values)) > SCORE_EPSILON * max(1.0, float(np.abs(values).max()))
    )


def guarded_weights(vector_weight: float, keyword_weight: float, vector_prior: float) -> FusionWeights:
    """The requested weights normalised to sum to 1, with the vector signal off when the language guard says so."""
    total = vector_weight + keyword_weight
    base_v, base_k = vector_weight / total, keyword_weight / total
    if vector_prior > 0 or base_v == 0:
        return FusionWeights(base_v, base_k)
    if base_k == 0:
        return FusionWeights(
            base_v,
            base_k,
            ("language guard not applied: the keyword weight is 0, so the vector signal is the only one asked for",),
        )
    return FusionWeights(
        0.0,
        1.0,
        (
            "language guard: the embedding model does not cover this query's language, so the vector signal "
            f"gets weight 0 (asked {base_v:.2f}); switch the guard off to use the requested weights",
        ),
    )


def _auto(reason: Text) -> Text:
    """An auto-weighting note: its lead-in and its reason kept apart, so a reader can say the lead-in once for several
    (kb_core.features.retrieval.narrative.auto_weight_reasons)."""
    return msg("auto weights: {reason}", reason=reason)


def weights_from_ranked_lists(
    v_list: np.ndarray, k_list: np.ndarray, vector_weight: float, keyword_weight: float, vector_prior: float = 1.0
) -> FusionWeights:
    """The weights ``weighting="auto"`` uses, from each signal's own ranked list of scores: the requested ones
    scaled by each signal's quality (see :mod:`kb_core.engines.fusion`)."""
    total = vector_weight + keyword_weight
    base_v, base_k = vector_weight / total, keyword_weight / total
    quality_v, z_v, chance_v = signal_quality(v_list)
    quality_k, z_k, chance_k = signal_quality(k_list)
    quality_v *= vector_prior
    raw_v, raw_k = base_v * quality_v, base_k * quality_k
    notes: list[str] = []
    weight_v, weight_k = base_v, base_k
    if raw_v + raw_k > 0:
        weight_v, weight_k = raw_v / (raw_v + raw_k), raw_k / (raw_v + raw_k)
    else:
        # No evidence either way: keep the requested split among the signals that produced any ordering.
        usable_v = base_v * float(_orders(v_list) and vector_prior > 0)
        usable_k = base_k * float(_orders(k_list))
        if usable_v + usable_k > 0:
            weight_v, weight_k = usable_v / (usable_v + usable_k), usable_k / (usable_v + usable_k)
        if base_v > 0 and base_k > 0 and usable_v > 0 and usable_k > 0:
            notes.append(
                _auto(msg("neither signal stands out from chance for this query; requested weights kept"))
            )
    vector, keyword = msg("vector"), msg("keyword")
    for name, other, base, weight, quality, z, chance, size in (
        (vector, keyword, base_v, weight_v, quality_v, z_v, chance_v, v_list.size),
        (keyword, vector, base_k, weight_k, quality_k, z_k, chance_k, k_list.size),
    ):
        if base <= 0 or abs(weight - base) < 0.005:
            continue
        if size == 0:
            notes.append(
                _auto(msg("{name} search returned no candidates; weight moved to {other}", name=name, other=other))
            )
        elif weight == 0 and name == "vector" and vector_prior == 0:
            notes.append(
                _auto(
                    msg(
                        "the embedding model does not cover this query's language; vector weight moved to {other}",
                        other=other,
                    )
                )
            )
        elif weight == 0:
            notes.append(
                _auto(
                    msg(
                        "{name} signal carries no information for this query (top z {z:.2f} ≤ chance "
                        "{chance:.2f}); weight moved to {other}",
                        name=name, z=z, chance=chance, other=other,
                    )
                )
            )
        elif weight < base:
            notes.append(
                _auto(
                    msg(
                        "{name} signal weakly separated (top z {z:.2f}, chance {chance:.2f}, quality "
                        "{quality:.2f}); weight {base:.2f} → {weight:.2f}",
                        name=name, z=z, chance=chance, quality=quality, base=base, weight=weight,
                    )
                )
            )
    return FusionWeights(weight_v, weight_k, tuple(notes))
