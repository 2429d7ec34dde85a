"""Search features above the ranking code: a KB's settings for one call, rag_search's ranking, explanations.

They take the process's resources (:class:`kb_core.features.seams.Resources`) and KB records and return typed data; the
session's operations (:mod:`kb_core.session.operations`) call them; the edges make envelopes of what they return.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from kb_core.base.errors import ItemNotFound
from kb_core.features.retrieval.narrative import rank_explanation
from kb_core.features.retrieval.search import SearchFilters, SearchHit, SearchSettings
from kb_core.store.registry import KnowledgeBaseRecord

if TYPE_CHECKING:
    from kb_core.features.seams import Resources


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
    lines = rank_explanation(
        settings.mode, breakdown, explained.matched_terms, explained.support_terms,
        kb_name=record.name, rank=position, hits=len(ranked.hits), evidence=explained.evidence,
        candidate_position=explained.position, candidates=explained.candidates, semantic_floor=ranked.semantic_floor,
        above=None if position is None or above is None else (above.id, above.doc_name, above.score),
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
