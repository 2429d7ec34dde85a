"""The narrative of a search, written once: a hit's score breakdown as rows, parts, sums and steps, what its scores
mean, and the notes on a result (what ``min_score`` hid, copies dropped, candidates left out, stop words).

The notes, labels and breakdown rows are :class:`kb_core.base.i18n.Text` (English that remembers its template), so
the pages say them in the reader's language (``say``); the steps, the formula and the arithmetic are English
sentences around the figures (still English in the Chinese app: docs/app.md). The edges only render what is here: no
edge writes a note or a step of its own (the datasette way: one data method, many renderers).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kb_core.base.config import RRF_K
from kb_core.base.i18n import Text, msg

# The three stacked parts of a final score, in the order they are drawn.
PARTS = ("semantic", "keyword", "Jaccard")
AUTO_WEIGHTS_NOTE = "auto weights: {reason}"  # the template every auto-weighting note is made with (weights.py)


# -- a hit's breakdown -----------------------------------------------------------------------------------------------
def part_names() -> dict[str, Text]:
    """The stacked parts' names, by part (the keys of :func:`contribution_parts`)."""
    return {"semantic": msg("semantic"), "keyword": msg("keyword"), "Jaccard": msg("Jaccard")}


def contribution_parts(b: Mapping[str, object]) -> dict[str, float]:
    """The three stacked parts of the final score: they add up to ``final_score`` (see kb_core.engines.fusion)."""
    keep = 1.0 - float(b.get("jaccard_weight") or 0.0)  # type: ignore[arg-type]
    return {
        "semantic": keep * float(b.get("vector_contribution") or 0.0),  # type: ignore[arg-type]
        "keyword": keep * float(b.get("keyword_contribution") or 0.0),  # type: ignore[arg-type]
        "Jaccard": float(b.get("jaccard_contribution") or 0.0),  # type: ignore[arg-type]
    }


def parts_sum(parts: Mapping[str, float], final: float) -> Text:
    """``semantic 0.4123 + keyword 0.2000 + Jaccard 0.0000 = final 0.6123``."""
    names = part_names()
    terms = [msg("{name} {value}", name=names[part], value=f"{value:.4f}") for part, value in parts.items()]
    summed = terms[0]
    for term in terms[1:]:
        summed = msg("{first} + {then}", first=summed, then=term)
    return msg("{parts} = final {final}", parts=summed, final=f"{final:.4f}")


def weighting_label(weighting: str) -> Text:
    return {"fixed": msg("fixed"), "auto": msg("auto")}.get(weighting, Text(weighting))


def fusion_label(fusion: str) -> Text:
    return {"weighted": msg("weighted sum"), "rrf": Text("RRF")}.get(fusion, Text(fusion))


def normalization_label(normalization: str) -> Text:
    return {
        "calibrated": msg("calibrated normalisation"),
        "reciprocal rank": msg("reciprocal rank normalisation"),
        "absolute": msg("absolute normalisation"),
    }.get(normalization, msg("{name} normalisation", name=normalization))


def _number(value: object, digits: int = 4) -> str:
    return "–" if value is None else f"{float(value):.{digits}f}"  # type: ignore[arg-type]


def breakdown_rows(b: Mapping[str, object]) -> list[tuple[Text, str]]:
    """A breakdown as (part, value) rows, raw signals first, then their 0–1 values, ranks, weights and sums."""
    rank_based = b.get("normalization") == "reciprocal rank"
    return [
        (msg("raw cosine (semantic)"), _number(b.get("vector_score"))),
        (msg("this model's scale: unrelated text → 0 / near-identical → 1"),
         f"{_number(b.get('semantic_zero'))} / {_number(b.get('semantic_top'))}"),
        (msg("the model's floor: a cosine must exceed it to count"), _number(b.get("semantic_floor"))),
        (msg("semantic, 0–1 (from its rank)") if rank_based
         else msg("semantic, 0–1: the cosine on that scale, clipped to 0–1"), _number(b["vector_normalized"])),
        (msg("raw BM25 (keyword)"), _number(b.get("keyword_score"))),
        (msg("keyword reference: BM25 of a reference match"), _number(b.get("keyword_reference"))),
        (msg("keyword, 0–1 (from its rank)") if rank_based else msg("keyword, 0–1: 1 − exp(−BM25 / reference)"),
         _number(b["keyword_normalized"])),
        (msg("rank in semantic list"), str(b.get("vector_rank") or "–")),
        (msg("rank in keyword list"), str(b.get("keyword_rank") or "–")),
        (msg("weights used (vector / keyword)"), f"{b['vector_weight']:.3f} / {b['keyword_weight']:.3f}"),
        (msg("weights asked (vector / keyword)"),
         f"{b['requested_vector_weight']:.3f} / {b['requested_keyword_weight']:.3f}"),
        (msg("weighting"), weighting_label(str(b.get("weighting", "fixed")))),
        (msg("semantic contribution"), _number(b["vector_contribution"])),
        (msg("keyword contribution"), _number(b["keyword_contribution"])),
        (msg("fused score"), _number(b["fused_score"])),
        (msg("Jaccard overlap × weight"), f"{b['jaccard']:.4f} × {b['jaccard_weight']:.2f}"),
        (msg("final score (0–1)"), _number(b["final_score"])),
        (msg("fusion"), msg("{fusion} · {normalization}", fusion=fusion_label(str(b["fusion_method"])),
                            normalization=normalization_label(str(b.get("normalization", "absolute"))))),
    ]


def score_scale(mode: str, fusion: str) -> Text:
    """One sentence on what a result's score means for these settings (see kb_core.engines.fusion)."""
    semantic = msg("the cosine similarity of the query and the chunk on this model's measured scale: what unrelated "
                   "text scores is 0, a near-identical text 1, so a score means the same on every model")
    if mode == "semantic":
        return msg("Scores lie on a 0–1 scale: {semantic}.", semantic=semantic)
    if mode == "keyword":
        return msg("Scores lie on a 0–1 scale: 1 − exp(−BM25 / reference), where the reference is the BM25 of a chunk "
                   "of average length holding each query term once; 0.63 is as much keyword evidence as that "
                   "reference match, 0.86 twice as much.")
    if fusion == "rrf":
        return msg("Scores lie on a 0–1 scale but come from ranks (reciprocal rank fusion): each signal gives "
                   "61 / (60 + rank), 1 for its first place. They order this query's hits; they do not say how well "
                   "a chunk matches.")
    return msg("Scores lie on a 0–1 scale: vector weight × semantic + keyword weight × (1 − exp(−BM25 / reference)); "
               "semantic is {semantic}; the reference is the BM25 of a chunk of average length holding each query "
               "term once. The same score means the same evidence in every query.", semantic=semantic)


def _fused_sum(b: Mapping[str, object]) -> str:
    return (
        f"{b['vector_weight']:.2f} × {b['vector_normalized']:.4f} + {b['keyword_weight']:.2f} × "
        f"{b['keyword_normalized']:.4f} = {b['fused_score']:.4f}"
    )


def _jaccard_sum(b: Mapping[str, object]) -> str:
    return (
        f"(1 − {b['jaccard_weight']:.2f}) × {b['fused_score']:.4f} + {b['jaccard_weight']:.2f} × "
        f"{b['jaccard']:.4f} = {b['final_score']:.4f}"
    )


def semantic_mapping(b: Mapping[str, object], digits: int = 4) -> str:
    """``cosine 0.8710 → 0.3510 on this model's scale (unrelated text 0.8116 → 0, near-identical 0.9798 → 1)``: how
    a breakdown's cosine became its semantic part (:mod:`kb_core.engines.embedding.calibration`)."""
    cosine = b.get("vector_score")
    if cosine is None:
        return "no cosine → 0"
    zero, top = float(b.get("semantic_zero", 0.0)), float(b.get("semantic_top", 1.0))  # type: ignore[arg-type]
    return (
        f"cosine {cosine:.{digits}f} → {float(b['vector_normalized']):.{digits}f} on this model's scale (unrelated "  # type: ignore[arg-type]
        f"text {zero:.{digits}f} → 0, near-identical {top:.{digits}f} → 1)"
    )


def explanation_steps(
    mode: str, b: Mapping[str, object], matched_terms: Sequence[str], support_terms: Sequence[str] = ()
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
    lines += [f"Note: {note}" for note in b["notes"]]  # type: ignore[attr-defined]
    return lines


def rank_explanation(
    mode: str,
    b: Mapping[str, object],
    matched_terms: Sequence[str],
    support_terms: Sequence[str],
    *,
    kb_name: str,
    rank: int | None,
    hits: int,
    evidence: bool,
    candidate_position: int,
    candidates: int,
    semantic_floor: float | None,
    above: tuple[str, str, float] | None,
) -> list[str]:
    """explain_search's lines: where the chunk ranks (or why it is no hit), :func:`explanation_steps`, and how far
    the hit above it (``(id, doc_name, score)``) is ahead."""
    lines = explanation_steps(mode, b, matched_terms, support_terms)
    if rank is not None:
        lines.insert(0, f"Ranked {rank} of {hits} hits in '{kb_name}'.")
    elif not evidence:
        cosine = b.get("vector_score")
        lines.insert(
            0,
            f"Not among the hits of '{kb_name}': no signal supports it ("
            + ("it holds no query term" if not matched_terms else "its keyword weight is 0")
            + (
                ""
                if semantic_floor is None or cosine is None
                else f"; its cosine {cosine:.4f} is not above the model's semantic floor {semantic_floor:.4f}, what "
                "unrelated text scores"
            )
            + "), so it is never shown whatever its rank.",
        )
    else:
        lines.insert(
            0,
            f"Not among the hits of '{kb_name}': {candidate_position} of {candidates} scored "
            "candidates before near-duplicate removal"
            + (
                "; a better-ranked chunk with nearly the same text was kept instead."
                if candidate_position <= hits + 10
                else "."
            ),
        )
    if rank is not None and above is not None:
        above_id, above_doc, above_score = above
        lines.append(
            f"The hit above it ({above_id}, {above_doc}) scores {above_score:.4f}, "
            f"{above_score - float(b['final_score']):+.4f} more."  # type: ignore[arg-type]
        )
    return lines


def formula_line(b: Mapping[str, object]) -> Text:
    """:func:`explanation_steps` in one line, for a list of hits: each signal's raw value, its [0, 1] value, weight
    and contribution."""
    cosine = "-" if b["vector_score"] is None else f"{b['vector_score']:.4f}"
    bm25 = "-" if b["keyword_score"] is None else f"{b['keyword_score']:.3f}"
    if b.get("normalization") == "reciprocal rank":
        v_how = msg("rank {rank}", rank=b["vector_rank"] or "-")
        k_how = msg("rank {rank}", rank=b["keyword_rank"] or "-")
    else:
        zero, top = float(b.get("semantic_zero", 0.0)), float(b.get("semantic_top", 1.0))  # type: ignore[arg-type]
        v_how = msg(
            "cosine {cosine}; this model's scale: {zero:.3f} → 0, {top:.3f} → 1", cosine=cosine, zero=zero, top=top
        )
        k_how = msg(
            "BM25 {bm25}, reference {reference:.3f}", bm25=bm25, reference=float(b.get("keyword_reference", 0))  # type: ignore[arg-type]
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


def arithmetic_steps(b: Mapping[str, object]) -> list[str]:
    """:func:`explanation_steps` as the search lab's score breakdown lists it: how each signal's 0–1 value is made,
    then the fused and final sums."""
    vn, kn = float(b["vector_normalized"]), float(b["keyword_normalized"])  # type: ignore[arg-type]
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
    if float(b.get("jaccard_weight") or 0.0):  # type: ignore[arg-type]
        steps.append(f"final: {_jaccard_sum(b)}")
    else:
        steps.append(f"final = fused = {float(b['final_score']):.4f} (Jaccard weight 0)")  # type: ignore[arg-type]
    return steps


# -- a result's notes ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Note:
    """One thing a result says beside its hits: ``kind`` names it (below_min_score, duplicates_dropped,
    without_evidence, stop_words), ``text`` says it."""

    kind: str
    text: Text


def below_min_score_note(count: int, min_score: float) -> Note | None:
    if not count:
        return None
    return Note("below_min_score", msg("{count} hit(s) below {min_score:.2f} not shown.", count=count,
                                       min_score=float(min_score)))


def duplicates_note(count: int) -> Note | None:
    if not count:
        return None
    return Note("duplicates_dropped", msg(
        "{count} hit(s) dropped: the same text as a better-ranked hit from another knowledge base.", count=count
    ))


def hit_list_notes(duplicates_dropped: int, below_min_score: int, min_score: float) -> list[Note]:
    """The notes of a search over several knowledge bases (search_knowledge_base), in the order they are said: its
    message and its tool text both say these."""
    found = (duplicates_note(duplicates_dropped), below_min_score_note(below_min_score, min_score))
    return [note for note in found if note is not None]


def result_notes(
    *,
    shown: int,
    top_k: int,
    mode: str,
    min_score: float,
    below_min_score: int = 0,
    duplicates_dropped: int = 0,
    without_evidence: int = 0,
    semantic_floor: float | None = None,
    vector_weight_used: float | None = None,
    stop_words: Sequence[str] = (),
    only_stop_words: bool = False,
) -> list[Note]:
    """The notes of a search result, in the order they are said: hits hidden by ``min_score``, copies dropped,
    candidates left out for want of evidence (said only when the result has room for them: fewer hits than
    ``top_k``), stop words left out of the keyword query (never for a query of stop words only, which a warning
    covers, nor in semantic mode, which reads no keyword)."""
    notes = [n for n in (below_min_score_note(below_min_score, min_score), duplicates_note(duplicates_dropped)) if n]
    if without_evidence and shown + below_min_score < top_k:
        facts = {"count": without_evidence, "floor": semantic_floor or 0}
        if mode == "keyword" or (mode != "semantic" and vector_weight_used == 0):
            text = msg("{count} candidate(s) left out: they held no query term.", **facts)
        elif mode == "semantic":
            text = msg(
                "{count} candidate(s) left out: they scored a cosine at or below the model's semantic floor "
                "{floor:.3f}.",
                **facts,
            )
        else:
            text = msg(
                "{count} candidate(s) left out: they held no query term and scored a cosine at or below the "
                "model's semantic floor {floor:.3f} (what unrelated text scores).",
                **facts,
            )
        notes.append(Note("without_evidence", text))
    if stop_words and not only_stop_words and mode != "semantic":
        notes.append(Note("stop_words", msg("Stop words left out of the keyword query: {words}.",
                                            words=", ".join(stop_words))))
    return notes


def auto_weight_reasons(notes: Sequence[str]) -> list[Text]:
    """The reasons of auto-weighting notes (each ``auto weights: <reason>``), without their common lead-in, for a
    reader who says the lead-in once for all of them."""
    reasons: list[Text] = []
    for note in notes:
        if isinstance(note, Text) and note.template == AUTO_WEIGHTS_NOTE:
            reasons.append(note.params["reason"])
        else:
            reasons.append(note if isinstance(note, Text) else Text(str(note)))
    return reasons
