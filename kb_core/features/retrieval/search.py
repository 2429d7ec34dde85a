"""Hybrid retrieval over one snapshot of a KB: BM25 + FAISS candidates, fusion, dedup, breakdowns.

Pipeline for ``mode="hybrid"``:

1. over-fetch ``candidates`` rows from the keyword index (BM25) and from the vector index (cosine);
2. score every candidate exactly on *both* signals (a keyword-only hit gets its real cosine and vice
   versa), so each breakdown shows raw cosine and raw BM25;
3. fuse (:func:`kb_core.engines.fusion.fuse`: the cosine on the model's measured semantic scale and BM25 on an
   absolute [0, 1] scale, the requested weights — or, as options, signal-quality weights or RRF — and a Jaccard
   rerank term); the breakdown's formula is in :mod:`kb_core.engines.fusion`;
4. keep only candidates with evidence in the active mode: a keyword score > 0 (a query term, stop words left out)
   with a keyword weight > 0, or a cosine above the model's semantic floor (what unrelated text scores for it,
   :mod:`kb_core.engines.embedding.calibration`) with a vector weight > 0; fewer hits than ``top_k`` is a correct
   answer;
5. drop exact and near-duplicate chunks, keeping the better-ranked one;
6. return ``top_k`` hits.

``mode="semantic"`` ranks by cosine and ``mode="keyword"`` by BM25; their breakdowns use weight 1 on the one
signal, with the same normalised value as hybrid, so a score means the same thing in every mode.
The language guard (``language_guard=True``, the default) checks the embedding model's language coverage
against the query: an English-only model on a Chinese query gets vector weight 0, with a warning and a note
in the breakdown; ``language_guard=False`` uses the requested weights anyway.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, cast

import numpy as np

from kb_core.base.config import DEFAULT_KEYWORD_WEIGHT, DEFAULT_VECTOR_WEIGHT, SEARCH_MODES
from kb_core.base.errors import InvalidArgument
from kb_core.base.i18n import msg
from kb_core.engines.analysis import Analyzer, QueryTerms
from kb_core.engines.embedding.builtin import covers_script
from kb_core.engines.embedding.calibration import SemanticScale
from kb_core.engines.fusion import (
    DEFAULT_JACCARD_WEIGHT,
    FUSION_METHODS,
    WEIGHTINGS,
    ScoreBreakdown,
    auto_weights,
    fuse_arrays,
    single_signal_ranking,
)
from kb_core.engines.near_duplicates import near_duplicate_rows
from kb_core.engines.weights import FusionWeights
from kb_core.store.base import CandidateRequest, RowKey, Searcher

logger = logging.getLogger(__name__)

MIN_CANDIDATES = 100
NEAR_DUPLICATE_THRESHOLD = 0.9

# In every warning about a query the embedding model cannot read (evaluations summarise them by it).
LANGUAGE_NOT_COVERED = "does not cover this query's language"
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")
_LETTER = re.compile(r"[^\W\d_]", re.UNICODE)


def detect_language(text: str) -> str:
    """ "cjk" when most letters are Chinese/Japanese/Korean characters, else "latin" (a coarse, cheap check)."""
    letters = _LETTER.findall(text)
    if not letters:
        return "latin"
    cjk = sum(1 for ch in letters if _CJK.match(ch))
    return "cjk" if cjk / len(letters) >= 0.3 else "latin"


def model_covers(model_name: str, language: str) -> bool:
    """Whether the embedding model reads text of ``language`` (a script, as :func:`detect_language` names it): the
    built-in models say which they read (all-MiniLM-L6-v2 Latin only, multilingual-e5-small CJK too); a model
    known to be English-only reads Latin only; any other model is assumed to read the query's language."""
    return covers_script(model_name, language)


@dataclass(frozen=True)
class SearchSettings:
    mode: str = "hybrid"
    top_k: int = 5
    vector_weight: float = DEFAULT_VECTOR_WEIGHT
    keyword_weight: float = DEFAULT_KEYWORD_WEIGHT
    jaccard_weight: float = DEFAULT_JACCARD_WEIGHT
    fusion: str = "weighted"  # weighted | rrf
    weighting: str = "fixed"  # fixed: exactly the requested weights | auto: scaled by each signal's quality
    language_guard: bool = True  # vector weight 0 when the model does not cover the query's language
    min_score: float = 0.0  # hits whose final score is below it are not shown (applied by the session)
    candidates: int = MIN_CANDIDATES
    deduplicate: bool = True

    def validated(self) -> SearchSettings:
        if self.mode not in SEARCH_MODES:
            raise InvalidArgument(
                msg(
                    "mode {mode!r} is not supported; use one of {choices}.",
                    mode=self.mode, choices=", ".join(SEARCH_MODES),
                ),
                details={"field": "mode"},
            )
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or not 1 <= self.top_k <= 1000:
            raise InvalidArgument(
                msg("top_k must be an integer from 1 to 1000, got {value!r}.", value=self.top_k),
                details={"field": "top_k"},
            )
        for name in ("vector_weight", "keyword_weight", "jaccard_weight", "min_score"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
                raise InvalidArgument(
                    msg("{field} must be a number from 0 to 1, got {value!r}.", field=name, value=value),
                    details={"field": name},
                )
        if self.mode == "hybrid" and self.vector_weight + self.keyword_weight <= 0:
            raise InvalidArgument(msg("vector_weight and keyword_weight are both 0; at least one must be positive."))
        if self.fusion not in FUSION_METHODS:
            raise InvalidArgument(
                msg(
                    "fusion {fusion!r} is not supported; use one of {choices}.",
                    fusion=self.fusion, choices=", ".join(FUSION_METHODS),
                ),
                details={"field": "fusion"},
            )
        if self.weighting not in WEIGHTINGS:
            raise InvalidArgument(
                msg(
                    "weighting {weighting!r} is not supported; use one of {choices}.",
                    weighting=self.weighting, choices=", ".join(WEIGHTINGS),
                ),
                details={"field": "weighting"},
            )
        if not isinstance(self.language_guard, bool):
            raise InvalidArgument(
                msg("language_guard must be true or false, got {value!r}.", value=self.language_guard),
                details={"field": "language_guard"},
            )
        return self

    SAVED_FIELDS = (
        "mode",
        "top_k",
        "vector_weight",
        "keyword_weight",
        "jaccard_weight",
        "fusion",
        "weighting",
        "language_guard",
        "min_score",
    )


# The defaults of every saved search setting: what a KB with no saved defaults searches with. The one declaration;
# the pages, the CLI and MCP read them here.
DEFAULT_SEARCH_SETTINGS: Mapping[str, Any] = MappingProxyType(
    {name: getattr(SearchSettings(), name) for name in SearchSettings.SAVED_FIELDS}
)


def saved_search_settings(saved: Mapping[str, Any]) -> dict[str, Any]:
    """A KB's saved search defaults (``record.search_settings``) over :data:`DEFAULT_SEARCH_SETTINGS`: every saved
    setting, as a search with none given would use it."""
    return {**DEFAULT_SEARCH_SETTINGS, **{k: v for k, v in saved.items() if k in DEFAULT_SEARCH_SETTINGS}}


@dataclass(frozen=True)
class SearchFilters:
    doc_names: tuple[str, ...] = ()
    file_types: tuple[str, ...] = ()

    def allows(self, doc_name: str, file_type: str) -> bool:
        if self.doc_names and doc_name.casefold() not in {n.casefold() for n in self.doc_names}:
            return False
        return not self.file_types or file_type.lower() in {t.lower().lstrip(".") for t in self.file_types}

    @property
    def active(self) -> bool:
        return bool(self.doc_names or self.file_types)


@dataclass
class SearchHit:
    id: str
    doc_id: str
    content: str
    tokens: int
    chunk_index: int
    doc_name: str
    score: float
    chapter: str | None
    page: int | None
    file_type: str
    kb_id: str
    kb_name: str
    matched_terms: list[str]  # the query's words this chunk holds, as the query writes them
    breakdown: dict[str, Any] = field(default_factory=dict)
    location: tuple[int, int] = (0, 0)  # (segment index, row) inside its snapshot
    # Han bigrams of the query that are no word of it (across two words, or into a stop word) that this chunk holds:
    # they add to its BM25 beside matched_terms
    support_terms: list[str] = field(default_factory=list)
    # The passage around its best-matching words (:func:`kb_core.features.retrieval.highlight.passage`), set by the
    # operations that show hits (search, search_knowledge_base): the snippet as text, and its place with the marks.
    snippet: str = ""
    passage: dict[str, Any] | None = None

    def with_passage(self, analyzer: Analyzer) -> SearchHit:
        """This hit with its ``snippet`` and ``passage`` (``start``, ``end``, ``marks``: character spans of
        ``content``)."""
        from kb_core.features.retrieval.highlight import passage, snippet_text

        window = passage(self.content, self.matched_terms, analyzer)
        self.snippet = snippet_text(self.content, window)
        self.passage = {"start": window.start, "end": window.end, "marks": [list(m) for m in window.marks]}
        return self

    def to_json(self, explain: bool = True) -> dict[str, Any]:
        value = self.__dict__.copy()  # the fields in declaration order (a dataclass sets exactly these)
        del value["location"]
        breakdown = value.pop("breakdown")
        value["matched_terms"] = list(self.matched_terms)
        value["support_terms"] = list(self.support_terms)
        if self.passage is not None:
            value["passage"] = {**self.passage, "marks": [list(m) for m in self.passage["marks"]]}
        if explain:
            breakdown = breakdown.copy()
            for name in [name for name, item in breakdown.items() if type(item) is list]:
                breakdown[name] = list(breakdown[name])  # the caller's copy: lists (notes) are not shared
            value["breakdown"] = breakdown
        return value


@dataclass
class RankedHits:
    """One KB's ranked hits, warnings for the user, and the weights hybrid fusion used and would use on auto."""

    hits: list[SearchHit]
    warnings: list[str]
    weights_used: FusionWeights | None = None
    auto_weights: FusionWeights | None = None
    keyword_reference: float = 0.0
    explained: dict[tuple[int, int], ExplainedRow] = field(default_factory=dict)
    explained_by_id: dict[str, ExplainedRow] = field(default_factory=dict)
    semantic_scale: SemanticScale | None = None  # the model's scale for this query (None: keyword mode, not used)
    without_evidence: int = 0  # scored candidates left out because no signal of the active mode supports them
    query_terms: QueryTerms | None = None  # the keyword terms searched with and the stop words left out

    @property
    def semantic_floor(self) -> float | None:
        """The cosine a chunk must exceed for semantic evidence (None: not used)."""
        return None if self.semantic_scale is None else self.semantic_scale.floor


@dataclass(frozen=True)
class ExplainedRow:
    """Where one row landed among a query's scored candidates (1-based, before near-duplicate removal)."""

    position: int
    candidates: int
    breakdown: ScoreBreakdown
    matched_terms: list[str]
    evidence: bool = True  # False: no signal of the active mode supports it, so it is never a hit
    support_terms: list[str] = field(default_factory=list)  # bigrams reaching into a stop word that add to its BM25


def dedup_margin(settings: SearchSettings) -> int:
    """How many candidates below ``top_k`` are read to refill hits dropped as near duplicates."""
    return min(settings.top_k, 10) if settings.deduplicate else 0


def candidate_request(
    query: str,
    query_vector: np.ndarray | None,
    settings: SearchSettings,
    filters: SearchFilters,
    extra_keys: Sequence[RowKey] = (),
) -> CandidateRequest:
    """What to ask a store's searcher for: ``candidates`` (at least 10 per hit) rows of each signal, four times
    as many when filters drop some; the prefix hints where only the first ``top_k`` + margin rows are read."""
    fetch = max(settings.candidates, settings.top_k * 10) * (4 if filters.active else 1)
    wanted = settings.top_k + dedup_margin(settings)
    plain = settings.jaccard_weight == 0 and not filters.active
    return CandidateRequest(
        query=query,
        vector=query_vector,
        mode=settings.mode,
        fetch=fetch,
        extra_keys=tuple((int(k[0]), int(k[1])) for k in extra_keys),
        keyword_prefix=wanted if settings.mode == "keyword" and plain and not extra_keys else None,
        semantic_prefix=wanted if settings.mode == "semantic" and plain else None,
        documents_wanted=filters.active,
    )


@dataclass
class SearchOutcome:
    """What a search returns to the session: hits, warnings, the settings, and the hybrid weights.

    ``weights_used`` are the weights the fusion used (the requested ones unless the language guard or
    ``weighting="auto"`` moved them, with the reason in ``notes``); ``auto_weights`` are what auto weighting would
    use for the same query, shown beside the requested ones.
    """

    hits: list[SearchHit]
    warnings: list[str]
    settings: SearchSettings
    weights_used: FusionWeights | None = None
    auto_weights: FusionWeights | None = None
    semantic_scale: SemanticScale | None = None
    below_min_score: int = 0  # hits that would have been shown but scored below settings.min_score
    without_evidence: int = 0  # scored candidates no signal of the active mode supports (never hits)
    query_terms: QueryTerms | None = None

    @property
    def semantic_floor(self) -> float | None:
        """The cosine a chunk had to exceed for semantic evidence (None: not used)."""
        return None if self.semantic_scale is None else self.semantic_scale.floor

    def weights_json(self) -> dict[str, Any] | None:
        if self.settings.mode != "hybrid":
            return None
        total = self.settings.vector_weight + self.settings.keyword_weight
        requested = {
            "vector": self.settings.vector_weight / total,
            "keyword": self.settings.keyword_weight / total,
        }
        used = self.weights_used
        auto = self.auto_weights
        return {
            "weighting": self.settings.weighting,
            "language_guard": self.settings.language_guard,
            "requested": requested,
            "used": None if used is None else {"vector": used.vector, "keyword": used.keyword},
            "auto": None if auto is None else {"vector": auto.vector, "keyword": auto.keyword},
            "notes": [] if used is None else list(used.notes),
            "auto_notes": [] if auto is None else list(auto.notes),
        }


def rank(
    searcher: Searcher,
    query: str,
    query_vector: np.ndarray | None,
    settings: SearchSettings,
    filters: SearchFilters,
    kb_name: str,
    explain_keys: Sequence[RowKey] = (),
    semantic_scale: SemanticScale | None = None,
) -> RankedHits:
    """The ranked hits of one KB snapshot, warnings for the user, and the weights used.

    Cosines are read on ``semantic_scale``, the model's for the query's script (None: the cosine itself, floor 0).
    Only candidates with evidence in the active mode become hits (module docstring, step 4): a keyword score > 0,
    or a cosine above the scale's floor, for a signal whose weight is > 0. For each of ``explain_keys`` (rows whose
    rank someone asks about) ``RankedHits.explained`` holds its position among all scored candidates before
    near-duplicate removal, its breakdown, its matched terms and whether it has evidence, whether or not it made
    the hits."""
    warnings: list[str] = []
    analysed = searcher.analyzer.query_terms(query)
    if analysed.only_stop_words and settings.mode != "semantic":
        stop_words = ", ".join(analysed.stop_words)
        warnings.append(
            msg(
                "The query holds only stop words ({words}), which are no keyword evidence: nothing is found by "
                "keywords.",
                words=stop_words,
            )
            if settings.mode == "keyword"
            else msg(
                "The query holds only stop words ({words}), which are no keyword evidence: only chunks close in "
                "meaning (a cosine above what unrelated text scores) are hits.",
                words=stop_words,
            )
        )
    scale = None if settings.mode == "keyword" else (semantic_scale or SemanticScale.unmeasured())
    floor = 0.0 if scale is None else scale.floor
    request = candidate_request(query, query_vector, settings, filters, explain_keys)
    candidates, row_terms = searcher.candidates(request)
    if not len(candidates):
        return RankedHits([], warnings, semantic_scale=scale, query_terms=analysed)
    source = np.arange(len(candidates))  # each candidate's position in ``row_terms``
    if filters.active:
        allowed = np.array(
            [
                filters.allows(document["name"], document["file_type"])
                for document in (searcher.document_of(key) for key in cast("list[RowKey]", candidates.keys_of()))
            ],
            dtype=bool,
        )
        source = np.flatnonzero(allowed)
        candidates = candidates.take(source)
    keyword_reference = searcher.keyword_reference(row_terms.terms)
    if semantic_scale is not None and not semantic_scale.measured and settings.mode != "keyword":
        warnings.append(
            msg(
                "The semantic scale of {model} could not be measured this time (it did not embed its calibration "
                "texts), so semantic scores are raw cosines and no floor applies.",
                model=searcher.embedding_model,
            )
        )
    covered = model_covers(searcher.embedding_model, detect_language(query))
    guarded = settings.language_guard and not covered
    if not covered and settings.mode == "hybrid" and settings.vector_weight > 0:
        if guarded and settings.keyword_weight > 0:
            warnings.append(
                msg(
                    "The embedding model {model} does not cover this query's language, so the language guard gave "
                    "the vector signal weight 0 and hybrid search ranks by keywords. Switch the language guard off "
                    "to use the requested weights.",
                    model=searcher.embedding_model,
                )
            )
        else:
            warnings.append(
                msg(
                    "The embedding model {model} does not cover this query's language; its semantic scores carry "
                    "little meaning here, and the requested weights are used.",
                    model=searcher.embedding_model,
                )
            )
    elif not covered and settings.mode == "semantic":
        warnings.append(
            msg(
                "The embedding model {model} does not cover this query's language; semantic scores carry little "
                "meaning here.",
                model=searcher.embedding_model,
            )
        )
    weights_used: FusionWeights | None = None
    suggested: FusionWeights | None = None
    if settings.mode == "hybrid":
        vector_prior = 0.0 if guarded else 1.0
        ranking = fuse_arrays(
            candidates,
            vector_weight=settings.vector_weight,
            keyword_weight=settings.keyword_weight,
            method=settings.fusion,
            jaccard_weight=settings.jaccard_weight,
            weighting=settings.weighting,
            vector_prior=vector_prior,
            keyword_reference=keyword_reference,
            semantic_scale=scale or SemanticScale.unmeasured(),
        )
        if len(ranking):
            weights_used = FusionWeights(ranking.weights.vector, ranking.weights.keyword, ranking.notes)
        suggested = auto_weights(candidates, settings.vector_weight, settings.keyword_weight, vector_prior)
    else:
        signal = "vector" if settings.mode == "semantic" else "keyword"
        ranking = single_signal_ranking(
            candidates, signal, settings.jaccard_weight, keyword_reference, scale or SemanticScale.unmeasured()
        )
    evidence = _evidence(ranking, settings.mode, floor)
    explained: dict[tuple[int, int], ExplainedRow] = {}
    if explain_keys and len(ranking):
        wanted = set(explain_keys)
        ranks = ranking.rank_of()
        for position, key in enumerate(cast("list[RowKey]", candidates.keys_of())):
            if key in wanted:
                explained[key] = ExplainedRow(
                    int(ranks[position]),
                    len(ranking),
                    ranking.breakdown(position),
                    analysed.words_held(row_terms.matched(int(source[position]))),
                    bool(evidence[position]),
                    row_terms.supported(int(source[position])),
                )
    supported = ranking.order[evidence[ranking.order]]
    # Dropped duplicates are refilled from a margin below top_k; pairwise dedup keeps that margin small.
    window = supported[: settings.top_k + dedup_margin(settings)].tolist()
    if not window:
        return RankedHits(
            [], warnings, weights_used, suggested, keyword_reference, explained,
            semantic_scale=scale, without_evidence=len(ranking), query_terms=analysed,
        )
    window_keys = cast("list[RowKey]", candidates.keys_of(window))
    records, signatures = searcher.rows_with_signatures(window_keys)
    chosen = list(zip(window, window_keys, records, strict=True))
    if settings.deduplicate:
        dropped = near_duplicate_rows(signatures, [r["content"] for r in records], NEAR_DUPLICATE_THRESHOLD)
        chosen = [item for item, drop in zip(chosen, dropped.tolist(), strict=True) if not drop]
    chosen = chosen[: settings.top_k]
    breakdowns = ranking.breakdown_dicts([position for position, _, _ in chosen])
    chosen_rows = source[[position for position, _, _ in chosen]]
    matched = [analysed.words_held(terms) for terms in row_terms.matched_many(chosen_rows)]
    support_held = row_terms.supported_many(chosen_rows)
    hits: list[SearchHit] = []
    for (_, key, row), breakdown, terms, support in zip(chosen, breakdowns, matched, support_held, strict=True):
        document = searcher.document_of(key, row["doc_id"])
        hits.append(
            SearchHit(
                id=row["chunk_id"],
                doc_id=row["doc_id"],
                content=row["content"],
                tokens=int(row["tokens"]),
                chunk_index=int(row["chunk_index"]),
                doc_name=document["name"],
                score=breakdown["final_score"],  # type: ignore[arg-type]
                chapter=row["chapter"],
                page=row["page"],
                file_type=document["file_type"],
                kb_id=searcher.kb_id,
                kb_name=kb_name,
                matched_terms=terms,
                breakdown=breakdown,
                location=key,
                support_terms=support,
            )
        )
    without = int(len(ranking) - len(supported))
    return RankedHits(
        hits, warnings, weights_used, suggested, keyword_reference, explained,
        semantic_scale=scale, without_evidence=without, query_terms=analysed,
    )


def _evidence(ranking: Any, mode: str, floor: float) -> np.ndarray:
    """Which candidates some signal of the active mode supports: a keyword score > 0 with a keyword weight > 0, or
    a cosine above ``floor`` with a vector weight > 0 (semantic mode: the cosine, keyword mode: the keywords)."""
    c = ranking.candidates
    keyword = np.nan_to_num(c.keyword_score, nan=0.0) > 0
    vector = np.nan_to_num(c.vector_score, nan=-1.0) > floor
    if mode == "semantic":
        return vector
    if mode == "keyword":
        return keyword
    return (keyword & (ranking.weights.keyword > 0)) | (vector & (ranking.weights.vector > 0))
