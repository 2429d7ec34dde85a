"""Retrieval evaluation on BEIR-format folders, one package for the idea (#28):

* :mod:`~kb_core.session.evaluation.scoring`: settings and weight sweeps, building (and caching) a KB from a
  corpus, running the judged queries through the session and scoring them (nDCG@10, Recall@100, MRR@10);
* :mod:`~kb_core.features.evaluation.runs`: the kept runs of a home and their query-by-query comparison;
* :mod:`~kb_core.session.evaluation.run`: one evaluation start to finish, :func:`run_evaluation`, and
  :func:`save_best`, which ``kb eval``, the app's Evaluate page, the notebook and ``benchmarks/quality.py`` call.

It drives a session's typed operations as a front end would, so it sits in the session layer (#38); the kept runs
and the report's types are features below it. The evaluation home (``<home>/cache/eval``) is opened by the service
(:meth:`kb_core.session.service.KnowledgeBaseService.evaluation_service`). Its modules import each other, never this
package, so loading one of them loads no cycle.
"""

from __future__ import annotations

from kb_core.features.evaluation.report import METRICS, EvaluationReport, EvaluationSetting
from kb_core.features.evaluation.runs import (
    EvaluationRun,
    EvaluationRunStore,
    RunComparison,
    RunNotFound,
    best_sweep_setting,
    compare_runs,
    kb_fingerprint,
    record_run,
)
from kb_core.session.evaluation.run import (
    EvaluationOutcome,
    EvaluationRequest,
    planned_settings,
    run_evaluation,
    save_best,
)
from kb_core.session.evaluation.scoring import (
    DEFAULT_CHUNK_SIZE,
    DEFAULT_TOP_K,
    EvalProgress,
    build_eval_kb,
    eval_kb_name,
    evaluate_kb,
    evaluate_with_sweep,
    language_warning,
    score_run,
    settings_for,
    sweep_weights,
)

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "DEFAULT_TOP_K",
    "METRICS",
    "EvalProgress",
    "EvaluationOutcome",
    "EvaluationReport",
    "EvaluationRequest",
    "EvaluationRun",
    "EvaluationRunStore",
    "EvaluationSetting",
    "RunComparison",
    "RunNotFound",
    "best_sweep_setting",
    "build_eval_kb",
    "compare_runs",
    "eval_kb_name",
    "evaluate_kb",
    "evaluate_with_sweep",
    "kb_fingerprint",
    "language_warning",
    "planned_settings",
    "record_run",
    "run_evaluation",
    "save_best",
    "score_run",
    "settings_for",
    "sweep_weights",
]
