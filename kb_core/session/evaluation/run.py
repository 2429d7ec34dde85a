"""One evaluation, start to finish, for every front end (#28): choose the KB (the user's, or one built from a BEIR
corpus in the evaluation home), run the settings and the weight sweep, keep the run; and the sweep's best point
saved as a KB's default. ``kb eval`` and the app's Evaluate page parse, show and call these; nothing else.

The evaluation home is a service of its own: ``session.service.evaluation_service()``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kb_core.base.config import SEARCH_MODES
from kb_core.base.errors import InvalidArgument
from kb_core.features.beir import load_beir, load_beir_queries_qrels
from kb_core.features.evaluation.runs import EvaluationRun, record_run
from kb_core.session.evaluation.scoring import (
    DEFAULT_CHUNK_SIZE,
    DEFAULT_TOP_K,
    EvalProgress,
    EvaluationReport,
    EvaluationSetting,
    build_eval_kb,
    evaluate_kb,
    evaluate_with_sweep,
    settings_for,
    sweep_weights,
)

if TYPE_CHECKING:
    from kb_core.features.results import SavedSettings
    from kb_core.features.seams import Resources
    from kb_core.session.operations import Operations
    from kb_core.session.service import KnowledgeBaseService
    from kb_core.store import KnowledgeBaseRecord


@dataclass(frozen=True)
class EvaluationRequest:
    """What to evaluate. ``build_corpus``: search a KB built (once, then cached) from the folder's corpus.jsonl in
    the evaluation home; otherwise the user's KB ``kb_name`` (default: the session's current KB), whose documents
    the judgments name. ``sweep_steps``: also hybrid at vector weights 0, 1/steps, …, 1 (None: no sweep), ranked
    10 deep unless ``sweep_full_depth``."""

    folder: Path
    build_corpus: bool
    kb_name: str | None = None
    modes: Sequence[str] = SEARCH_MODES
    vector_weight: float | None = None
    keyword_weight: float | None = None
    weighting: str | None = None
    fusion: str | None = None
    compare_fusion: bool = False
    sweep_steps: int | None = None
    sweep_full_depth: bool = False
    max_queries: int | None = None
    split: str | None = None
    depth: int = DEFAULT_TOP_K
    chunk_size: int = DEFAULT_CHUNK_SIZE
    embedding_model: str | None = None
    dataset_name: str | None = None  # the run's dataset label for the user's KB (default: the folder's name)


@dataclass
class EvaluationOutcome:
    """One finished, kept evaluation."""

    report: EvaluationReport
    run: EvaluationRun
    record: KnowledgeBaseRecord  # the KB searched
    kb_service: Resources  # the service whose home holds it (the user's, or the evaluation home)
    dataset_name: str
    documents: int | None  # corpus documents when built from a corpus
    queries: int
    settings: list[EvaluationSetting]  # everything run, the sweep's points last
    swept: list[EvaluationSetting] = field(default_factory=list)  # the sweep's points not run anyway
    user_kb: bool = True  # the user's own KB (its default may be set), not one built from a corpus


def planned_settings(request: EvaluationRequest) -> tuple[list[EvaluationSetting], list[EvaluationSetting]]:
    """The settings ``request`` runs: each mode (with the given weights, weighting and fusion), auto and RRF
    fusion when compared, and apart the sweep's points that are not among them."""
    settings = settings_for(
        request.modes,
        vector_weight=request.vector_weight,
        keyword_weight=request.keyword_weight,
        weighting=request.weighting,
        fusion=request.fusion,
        compare_fusion=request.compare_fusion and "hybrid" in request.modes,
    )
    sweep = sweep_weights(request.sweep_steps) if request.sweep_steps else None
    return settings, [s for s in settings_for((), sweep) if s not in settings] if sweep else []


def run_evaluation(
    session: Operations,
    request: EvaluationRequest,
    *,
    eval_service: Callable[[], KnowledgeBaseService] | None = None,
    progress: EvalProgress | None = None,
) -> EvaluationOutcome:
    """Run ``request`` through ``session`` (a :class:`~kb_core.session.operations.Operations`) and keep the run in its
    home.

    ``eval_service`` opens the evaluation home (``<home>/cache/eval``; default: the session's service's
    ``evaluation_service``), called only to build from a corpus.
    Raises :class:`~kb_core.base.errors.KBError` (and ``OSError``/``ValueError`` for unreadable judgments)."""
    settings, swept = planned_settings(request)
    sweep = sweep_weights(request.sweep_steps) if request.sweep_steps else None
    # A confined session (the app's, with KB_ALLOW_DIRS) reads the judgments only inside its folders (#37).
    allowed_dirs = session.allowed_dirs
    # the session's principal may refuse the folder (before it is read) or the corpus build (a public demo)
    session.begin_evaluation(request.folder, None, request.build_corpus)
    if not request.build_corpus:
        # The user's own KB, judged by the folder's queries and qrels (corpus ids are document names).
        kb_service: Resources = session.service
        record = session.resolve_kb(request.kb_name)
        queries, qrels = load_beir_queries_qrels(request.folder, split=request.split, allowed_dirs=allowed_dirs)
        queries = _first(queries, request.max_queries)
        session.begin_evaluation(request.folder, len(queries), False)
        dataset_name = request.dataset_name or Path(request.folder).resolve().name
        documents = None
        eval_session = session
    else:
        # the session's service is the KnowledgeBaseService, whose evaluation home is one too
        eval_home: KnowledgeBaseService = (eval_service or session.service.evaluation_service)()  # type: ignore[assignment]
        kb_service = eval_home
        dataset = load_beir(request.folder, split=request.split, allowed_dirs=allowed_dirs)
        dataset = replace(dataset, queries=_first(dataset.queries, request.max_queries))
        record = build_eval_kb(
            kb_service, dataset, chunk_size=request.chunk_size, embedding_model=request.embedding_model,
            progress=progress,
        )
        queries, qrels = dataset.queries, {q: dataset.qrels[q] for q in dataset.queries}
        dataset_name, documents = dataset.name, len(dataset.corpus)
        eval_session = eval_home.session()
    if swept and request.sweep_full_depth:
        report = evaluate_kb(
            eval_session, queries, qrels, settings=settings + swept, top_k=request.depth, kb_name=record.name,
            progress=progress,
        )
    else:  # the sweep is about the top 10: ranked 10 deep
        report = evaluate_with_sweep(
            eval_session, queries, qrels, settings=settings, sweep=sweep, top_k=request.depth, kb_name=record.name,
            progress=progress,
        )
    run = record_run(
        session.evaluation_runs, kb_service, report, dataset=dataset_name, settings=settings + swept
    )
    return EvaluationOutcome(
        report, run, record, kb_service, dataset_name, documents, len(queries), settings + swept, swept,
        user_kb=not request.build_corpus,
    )


def _first(queries: dict[str, str], count: int | None) -> dict[str, str]:
    """The first ``count`` judged queries (file order), for quick looks; all of them when ``count`` is None."""
    if count is None:
        return queries
    if count < 1:
        raise InvalidArgument(f"--max-queries must be at least 1, got {count!r}.")
    return dict(list(queries.items())[:count])


def save_best(
    session: Operations, kb_name: str, best: dict[str, Any], *, mode: str | None = "hybrid"
) -> SavedSettings:
    """The sweep point ``best`` (from :func:`~kb_core.features.evaluation.runs.best_sweep_setting`) as ``kb_name``'s
    default: its weights, fixed weighting, weighted fusion, and ``mode`` (None: the saved mode stays); the KB's other
    saved settings stay. Returns the saved settings; raises KBError (the front end shows either)."""
    return session.save_search_settings(
        kb_name=kb_name,
        mode=mode,
        vector_weight=best["vector_weight"],
        keyword_weight=best["keyword_weight"],
        weighting="fixed",
        fusion="weighted",
    )
