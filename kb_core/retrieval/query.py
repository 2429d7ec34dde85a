"""Search features above the ranking code: a KB's settings for one call, rag_search's ranking, explanations.

They take the process's resources (:class:`kb_core.seams.Resources`) and KB records and return typed data; the
session's operations (:mod:`kb_core.operations`) call them; the edges make envelopes of what they return.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from kb_core.config import RRF_K
from kb_core.errors import ItemNotFound
from kb_core.i18n import msg
from kb_core.retrieval.search import SearchFilters, SearchHit, SearchSettings
from kb_core.store.registry import KnowledgeBaseRecord

if TYPE_CHECKING:
    from kb_core.seams import Resources


def search_settings(record: KnowledgeBaseRecord, overrides: dict[str, Any]) -> SearchSettings:
    """The KB's saved defaults overridden by the call's settings. One weight given alone takes the other
    as its complement (vector 0.2 means keyword 0.8), so a single slider means what it shows."""
    saved = {k: v for k, v in record.search_settings.items() if k in SearchSettings.SAVED_FIELDS}
    given = {k: v for k, v in overrides.items() if v is not None}
    if "mode" in given and isinstance(given["mode"], str):
        given["mode"] = given["mode"].strip().lower()
    for name, other in (("vector_weight", "keyword_weight"), ("keyword_weight", "vector_weight")):
        value = given.get(name)
        if other not in given and isinstance(value, int | float) and not isinstance(value, bool):
            given[other] = round(1.0 - float(value), 12)
    return SearchSettings(**{**saved, **given}).validated()


def rag_rank(
    service: Resources, record: KnowledgeBaseRecord, keywords: list[str], top_k: int, min_score: float | None = None
) -> list[dict[str, Any]]:
    """rag_search's ranking: hybrid hits for all keywords, those covering more keywords first. Only chunks that hold
    at least one keyword, or whose cosine clears the model's semantic floor (with a vector weight > 0), are returned,
    and none below ``min_score`` (default the KB's saved value, else 0)."""
    settings = search_settings(record, {"top_k": min(100, top_k * 4), "mode": "hybrid", "min_score": min_score})
    ranked = service.search_kb(record, " ".join(keywords), settings, SearchFilters())
    analyzer = service.analyzer
    keyword_terms = [frozenset(analyzer.query_terms(k).terms) or frozenset({k.casefold()}) for k in keywords]
    floor = ranked.semantic_floor

    def coverage(hit: SearchHit) -> int:
        terms = frozenset(analyzer.tokens(hit.content))
        text = hit.content.casefold()
        return sum(1 for k, t in zip(keywords, keyword_terms, strict=True) if t <= terms or k.casefold() in text)

    def semantic(hit: SearchHit) -> bool:
        cosine = hit.breakdown.get("vector_score")
        weight = float(hit.breakdown.get("vector_weight") or 0.0)  # type: ignore[arg-type]
        return floor is not None and weight > 0 and cosine is not None and float(cosine) > floor  # type: ignore[arg-type]

    covered = [(hit, coverage(hit)) for hit in ranked.hits if hit.score >= settings.min_score]
    supported = [(hit, n) for hit, n in covered if n > 0 or semantic(hit)]
    best = sorted(supported, key=lambda pair: (-pair[1], -pair[0].score))[:top_k]
    return [
        {
            "chunk_text": hit.content,
            "metadata": {"source": hit.doc_name, "chapter": hit.chapter, "page": hit.page},
            "score": hit.score,
            "matched_keywords": n,
            "id": hit.id,
        }
        for hit, n in best
    ]


def _fused_sum(b: Mapping[str, Any]) -> str:
    return (
        f"{b['vector_weight']:.2f} × {b['vector_normalized']:.4f} + {b['keyword_weight']:.2f} × "
        f"{b['keyword_normalized']:.4f} = {b['fused_score']:.4f}"
    )


def _jaccard_sum(b: Mapping[str, Any]) -> str:
    return (
        f"(1 − {b['jaccard_weight']:.2f}) × {b['fused_score']:.4f} + {b['jaccard_weight']:.2f} × "
        f"{b['jaccard']:.4f} = {b['final_score']:.4f}"
    )


def semantic_mapping(b: Mapping[str, Any], digits: int = 4) -> str:
    """``cosine 0.8710 → 0.3510 on this model's scale (unrelated text 0.8116 → 0, near-identical 0.9798 → 1)``: how
    a breakdown's cosine became its semantic part (:mod:`kb_core.embedding.calibration`)."""
    cosine = b.get("vector_score")
    if cosine is None:
        return "no cosine → 0"
    zero, top = float(b.get("semantic_zero", 0.0)), float(b.get("semantic_top", 1.0))
    return (
        f"cosine {cosine:.{digits}f} → {float(b['vector_normalized']):.{digits}f} on this model's scale (unrelated "
        f"text {zero:.{digits}f} → 0, near-identical {top:.{digits}f} → 1)"
    )


def explanation_steps(
    mode: str, b: Mapping[str, Any], matched_terms: Sequence[str], support_terms: Sequence[str] = ()
) -> list[str]:
    """The steps of a score in words, for a breakdown as hits carry it (``ScoreBreakdown`` as a dict); every figure
    is in the breakdown. The one explanation of a score: explain_search and the search lab show it."""
    lines = [f"Score {b['final_score']:.4f} on a 0–1 scale ({mode} search, {b['fusion_method']} fusion)."]
    bm25 = "none" if b["keyword_score"] is None else f"{b['keyword_score']:.3f}"
    vn, kn, reference = b["vector_normalized"], b["keyword_normalized"], b["keyword_reference"]
    if b["normalization"] == "reciprocal rank":
        lines.append(f"Vector: rank {b['vector_rank'] or '-'} → {vn:.4f} (reciprocal rank, k {RRF_K}).")
        lines.append(f"Keyword: rank {b['keyword_rank'] or '-'} → {kn:.4f}.")
    else:
        lines.append(
            f"Vector: {semantic_mapping(b)}; rank {b['vector_rank'] or 'not retrieved'} in the vector list."
        )
        pairs = len(support_terms)
        lines.append(
            f"Keyword: BM25 {bm25}; the reference match for this query (each term once, average length) scores "
            f"{reference:.3f}, so 1 − exp(−{bm25}/{reference:.3f}) = {kn:.4f}; "
            f"rank {b['keyword_rank'] or 'not retrieved'} in the keyword list; matched words: "
            f"{', '.join(matched_terms) or 'none'}"
            + (
                f"; the BM25 also counts {pairs} Chinese character pair{'s' if pairs != 1 else ''} of the query that "
                "join two of its words or reach into a stop word, which add to a chunk that holds a query word but "
                "never find or mark one on their own."
                if support_terms
                else "."
            )
        )
    lines.append(
        f"Weights used: vector {b['vector_weight']:.2f}, keyword {b['keyword_weight']:.2f} ({b['weighting']}; asked "
        f"{b['requested_vector_weight']:.2f} / {b['requested_keyword_weight']:.2f}): {_fused_sum(b)}."
    )
    if b["jaccard_weight"]:
        lines.append(f"Jaccard rerank: {_jaccard_sum(b)}.")
    lines += [f"Note: {note}" for note in b["notes"]]
    return lines


def formula_line(b: Mapping[str, Any]) -> str:
    """:func:`explanation_steps` in one line, for a list of hits: each signal's raw value, its [0, 1] value, weight
    and contribution."""
    cosine = "-" if b["vector_score"] is None else f"{b['vector_score']:.4f}"
    bm25 = "-" if b["keyword_score"] is None else f"{b['keyword_score']:.3f}"
    if b.get("normalization") == "reciprocal rank":
        v_how = msg("rank {rank}", rank=b["vector_rank"] or "-")
        k_how = msg("rank {rank}", rank=b["keyword_rank"] or "-")
    else:
        zero, top = float(b.get("semantic_zero", 0.0)), float(b.get("semantic_top", 1.0))
        v_how = msg(
            "cosine {cosine}; this model's scale: {zero:.3f} → 0, {top:.3f} → 1", cosine=cosine, zero=zero, top=top
        )
        k_how = msg(
            "BM25 {bm25}, reference {reference:.3f}", bm25=bm25, reference=float(b.get("keyword_reference", 0))
        )
    terms = {
        "vector_weight": b["vector_weight"], "vector": b["vector_normalized"], "v_how": v_how,
        "keyword_weight": b["keyword_weight"], "keyword": b["keyword_normalized"], "k_how": k_how,
        "fused": b["fused_score"],
    }
    if b["jaccard_weight"]:
        return msg(
            "{vector_weight:.2f} × {vector:.3f} ({v_how}) + {keyword_weight:.2f} × {keyword:.3f} ({k_how}) = "
            "{fused:.4f}; with Jaccard {jaccard:.3f} × {jaccard_weight:.2f}: {final:.4f}",
            jaccard=b["jaccard"], jaccard_weight=b["jaccard_weight"], final=b["final_score"], **terms,
        )
    return msg(
        "{vector_weight:.2f} × {vector:.3f} ({v_how}) + {keyword_weight:.2f} × {keyword:.3f} ({k_how}) = {fused:.4f}",
        **terms,
    )


def arithmetic_steps(b: Mapping[str, Any]) -> list[str]:
    """:func:`explanation_steps` as the search lab's score breakdown lists it: how each signal's 0–1 value is made,
    then the fused and final sums."""
    vn, kn = float(b["vector_normalized"]), float(b["keyword_normalized"])
    if b.get("normalization") == "reciprocal rank":
        steps = [
            f"semantic: rank {b['vector_rank']} → {RRF_K + 1} / ({RRF_K} + {b['vector_rank']}) = {vn:.4f}"
            if b.get("vector_rank") else "semantic: not ranked by the vector search → 0",
            f"keyword: rank {b['keyword_rank']} → {RRF_K + 1} / ({RRF_K} + {b['keyword_rank']}) = {kn:.4f}"
            if b.get("keyword_rank") else "keyword: not ranked by the keyword search → 0",
        ]
    else:
        bm25, reference = b.get("keyword_score"), b.get("keyword_reference")
        steps = [
            f"semantic: {semantic_mapping(b)}",
            f"keyword: BM25 {bm25:.3f}, reference {reference:.3f} → 1 − exp(−{bm25:.3f} / {reference:.3f}) = {kn:.4f}"
            if bm25 and reference else "keyword: no query term in the chunk (BM25 0) → 0",
        ]
    steps.append(f"fused: {_fused_sum(b)}")
    if float(b.get("jaccard_weight") or 0.0):
        steps.append(f"final: {_jaccard_sum(b)}")
    else:
        steps.append(f"final = fused = {float(b['final_score']):.4f} (Jaccard weight 0)")
    return steps


def explain_chunk(
    service: Resources, record: KnowledgeBaseRecord, query: str, chunk_id: str, settings: SearchSettings
) -> dict[str, Any]:
    """Why live chunk ``chunk_id`` of ``record`` ranks where it does for ``query`` under ``settings``: its place
    among the hits (or among the scored candidates), its breakdown, the hit above it, and each step in words
    (``explanation``). ItemNotFound when the chunk is gone."""
    ranked = service.search_kb(record, query, settings, SearchFilters(), explain_chunk_ids=[chunk_id])
    explained = ranked.explained_by_id.get(chunk_id)
    if explained is None:  # deleted between the lookup and the search
        raise ItemNotFound(f"No live chunk with id {chunk_id!r} exists.", details={"id": chunk_id})
    position = next((i for i, hit in enumerate(ranked.hits, start=1) if hit.id == chunk_id), None)
    breakdown = asdict(explained.breakdown)
    breakdown["notes"] = list(breakdown["notes"])
    above = ranked.hits[position - 2] if position and position > 1 else None
    if position is None:
        above = next((h for h in ranked.hits if h.score < explained.breakdown.final_score), None)
    lines = explanation_steps(settings.mode, breakdown, explained.matched_terms, explained.support_terms)
    if position is not None:
        lines.insert(0, f"Ranked {position} of {len(ranked.hits)} hits in '{record.name}'.")
    elif not explained.evidence:
        cosine = explained.breakdown.vector_score
        floor = ranked.semantic_floor
        lines.insert(
            0,
            f"Not among the hits of '{record.name}': no signal supports it ("
            + ("it holds no query term" if not explained.matched_terms else "its keyword weight is 0")
            + (
                ""
                if floor is None or cosine is None
                else f"; its cosine {cosine:.4f} is not above the model's semantic floor {floor:.4f}, what "
                "unrelated text scores"
            )
            + "), so it is never shown whatever its rank.",
        )
    else:
        lines.insert(
            0,
            f"Not among the hits of '{record.name}': {explained.position} of {explained.candidates} scored "
            "candidates before near-duplicate removal"
            + (
                "; a better-ranked chunk with nearly the same text was kept instead."
                if explained.position <= len(ranked.hits) + 10
                else "."
            ),
        )
    if position is not None and above is not None:
        lines.append(
            f"The hit above it ({above.id}, {above.doc_name}) scores {above.score:.4f}, "
            f"{above.score - explained.breakdown.final_score:+.4f} more."
        )
    data = {
        "chunk_id": chunk_id,
        "kb_name": record.name,
        "query": query,
        "rank": position,
        "hits": len(ranked.hits),
        "candidate_position": explained.position,
        "candidates": explained.candidates,
        "score": explained.breakdown.final_score,
        "matched_terms": explained.matched_terms,
        "support_terms": explained.support_terms,
        "breakdown": breakdown,
        "above": None if above is None else {"id": above.id, "doc_name": above.doc_name, "score": above.score},
        "settings": asdict(settings),
        "explanation": lines,
        "evidence": explained.evidence,
    }
    return data
