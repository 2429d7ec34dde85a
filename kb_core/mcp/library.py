"""``search_knowledge_base``: one search over every knowledge base the session sees, as numbered hits."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kb_core.errors import EmbeddingError, KBError
from kb_core.results import HitList, SearchHit, SearchRequest
from kb_core.retrieval.narrative import hit_list_notes

if TYPE_CHECKING:
    from kb_core.envelope import Envelope
    from kb_core.operations import Operations
    from kb_core.session import Session


def search_library(
    session: Session, query: str, limit: int, mode: str, expand_graph: bool = False, min_score: float | None = None
) -> Envelope:
    """The envelope of :func:`search_knowledge_base` on ``session``'s operations (the Python API's form)."""
    return session.answer(search_knowledge_base, query, limit, mode, expand_graph, min_score)


def search_knowledge_base(
    session: Operations,
    query: str,
    limit: int,
    mode: str,
    expand_graph: bool = False,
    min_score: float | None = None,
) -> HitList:
    """search_knowledge_base: every KB the session sees; hybrid uses each KB's saved weights (default 70% semantic +
    30% keyword). Scores lie in [0, 1]. A hit whose text equals a better hit's from another KB is dropped and
    counted; ``min_score`` hides hits below it (counted too)."""
    kb_ids = [r.id for r in session.visible_kbs()]
    hits: list[SearchHit] = []
    warnings: list[str] = []
    skipped: list[dict[str, str]] = []
    below = copies = 0
    floor = 0.0 if min_score is None else min_score
    if kb_ids:
        request = SearchRequest(
            query,
            kb_ids=tuple(kb_ids),
            settings={"top_k": limit, "mode": mode, "min_score": min_score},
            skip_failing=True,
            drop_copies=True,
        )
        try:
            outcome = session.search_chunks(request)
            hits, warnings, skipped = outcome.hits, outcome.warnings, outcome.skipped
            below, copies = outcome.below_min_score, outcome.duplicates_dropped
            floor = outcome.settings.min_score
        except EmbeddingError as exc:
            skipped = list(exc.details.get("failed_knowledge_bases", ()))
            # The tool contract: an embedding failure is -32603; here only when no KB could be searched.
            reasons = "; ".join(f"knowledge base '{s['kb_name']}': {s['message']}" for s in skipped)
            raise KBError(
                f"search_knowledge_base could not embed the query for any knowledge base ({reasons}). "
                "Keyword mode does not need embeddings.",
                code="INTERNAL_ERROR",
                details={"cause": exc.code, "failed_knowledge_bases": skipped},
            ) from exc
    elif not isinstance(query, str) or not query.strip():
        session.search_chunks(SearchRequest(query))  # raises the session's INVALID_ARGUMENT
    found = [hit.with_passage(session.service.analyzer).to_json(False) for hit in hits[:limit]]
    if expand_graph and found:
        found = session.expand_hits(found)
    rows = [
        {
            "rank": rank,
            "id": hit["id"],
            "doc_id": hit["doc_id"],
            "title": hit.get("doc_name") or hit["doc_id"],
            "kb_name": hit.get("kb_name"),
            "score": round(float(hit["score"]), 4),
            "snippet": hit.get("snippet") or _expanded_snippet(hit, session),
            "chapter": hit.get("chapter"),
            "page": hit.get("page"),
            "file_type": hit.get("file_type"),
            "expanded": bool(hit.get("expanded")),
            "via": _via(hit),
        }
        for rank, hit in enumerate(found, start=1)
    ]
    message = f"Found {len(rows)} chunk(s) ({mode} search over {len(kb_ids)} knowledge base(s))."
    added = sum(1 for r in rows if r["expanded"])
    if added:
        message += f" {added} of them were added by graph expansion."
    for note in hit_list_notes(copies, below, floor):
        message += f" {note.text}"
    if warnings:
        message += " " + " ".join(warnings)
    return HitList(message, rows, len(rows), mode, limit, warnings, skipped, floor, below, copies)


def _expanded_snippet(hit: dict[str, Any], session: Any) -> str:
    """A chunk added by graph expansion matched no query word: its passage is where the chunk begins."""
    from kb_core.retrieval.highlight import passage, snippet_text

    content = str(hit.get("content") or "")
    return snippet_text(content, passage(content, (), session.service.analyzer))


def _via(hit: dict[str, Any]) -> str | None:
    """``REFERENCES from Document doc_uri=doc-001`` for a hit added by graph expansion."""
    if not hit.get("expanded"):
        return None
    link = (hit.get("breakdown") or {}).get("graph_expansion") or {}
    notes = (hit.get("breakdown") or {}).get("notes") or []
    prefix = "added by graph expansion: "
    note = next((n for n in notes if isinstance(n, str) and n.startswith(prefix)), None)
    return note[len(prefix) :] if note else link.get("edge_type")
