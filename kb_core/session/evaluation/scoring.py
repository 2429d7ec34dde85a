"""Retrieval evaluation on BEIR-format folders: build (and cache) a KB from a corpus, run the judged queries
per search mode and weight setting, and score the rankings with nDCG@10, Recall@100 and MRR@10.

A BEIR folder holds ``corpus.jsonl`` (``{"_id", "title", "text"}``), ``queries.jsonl`` (``{"_id", "text"}``)
and ``qrels.tsv`` (header ``query-id  corpus-id  score``; ``qrels/test.tsv`` in the original BEIR layout).

Retrieval goes through the service exactly as a user's search does (``Operations.search_chunks``): chunk hits are
turned into a document ranking by the best chunk score per document (the BEIR/MaxP convention). Only queries
with judgments are run.

Metrics come from ``ir-measures`` on its ``pytrec_eval`` backend (the trec_eval C code BEIR itself uses), so
figures compare with published BEIR numbers. ranx was tried first, but its numba JIT costs 30 s to 2 min of
compilation per fresh process on two cores, which the CLI and the CI notebook would pay every time. Scores
handed to trec_eval are rank-derived, so its tie-breaking (by document id) cannot reorder our ranking.

Caching: :func:`kb_core.session.service.open_eval_service` opens a dedicated home at ``<home>/cache/eval`` so
evaluation KBs (and their embedding cache) never clutter the user's KB list. :func:`build_eval_kb` names each KB after
a fingerprint of the corpus file, chunk size and embedding model; a second run with the same inputs reuses it, and an
interrupted build resumes with the documents still missing.
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from kb_core.base.atomic import file_sha256
from kb_core.base.config import SEARCH_MODES
from kb_core.base.errors import InvalidArgument, KBNotFound
from kb_core.features.beir import BeirDataset
from kb_core.features.evaluation.report import METRICS, EvaluationReport, EvaluationSetting
from kb_core.features.results import SearchRequest
from kb_core.features.retrieval.search import LANGUAGE_NOT_COVERED
from kb_core.store import KnowledgeBaseRecord

if TYPE_CHECKING:
    from kb_core.session.operations import Operations
    from kb_core.session.service import KnowledgeBaseService

logger = logging.getLogger(__name__)

__all__ = [
    "METRICS",
    "EvaluationReport",
    "EvaluationSetting",
    "build_eval_kb",
    "eval_kb_name",
    "evaluate_kb",
    "evaluate_with_sweep",
    "settings_for",
    "sweep_weights",
]

# 512 tokens, the common RAG default (and the spec's own example): whole abstracts or sections per chunk;
# measured on SciFact, hybrid nDCG@10 0.7265 at 512 against 0.7196 at 256 (chunks above the model's 256-token
# window are embedded window by window and pooled).
DEFAULT_CHUNK_SIZE = 512
DEFAULT_TOP_K = 100
RECALL_DEPTH = 100
# The head pass is the search a user runs for 10 results; the deep pass fills any of the 10 places left empty
# because several chunks belong to one document.
HEAD_CHUNKS = 10
HEAD_DOCUMENTS = 10
# The deep pass fetches this many chunks per document of depth, for Recall@100.
CHUNK_OVERFETCH = 2
_FINGERPRINT_VERSION = "1"

# progress(stage, done, total): stage is "import" or a setting label such as "hybrid 0.70/0.30".
EvalProgress = Callable[[str, int, int], None]


# -- building the KB ------------------------------------------------------------------------------
def eval_kb_name(dataset: BeirDataset, chunk_size: int, embedding_model: str) -> str:
    """``eval-<dataset>-<fingerprint>``: the fingerprint covers the corpus file's bytes, chunk size and model."""
    key = "|".join((_FINGERPRINT_VERSION, file_sha256(dataset.corpus_path), str(chunk_size), embedding_model))
    fingerprint = hashlib.sha256(key.encode("utf-8")).hexdigest()[:12]
    safe = re.sub(r"[^\w.-]+", "-", dataset.name).strip("-")[:40] or "dataset"
    return f"eval-{safe}-{fingerprint}"


def document_text(document: dict[str, str]) -> str:
    title, text = document.get("title", "").strip(), document.get("text", "").strip()
    return f"{title}\n\n{text}" if title and text else (title or text)


def build_eval_kb(
    service: KnowledgeBaseService,
    dataset: BeirDataset,
    *,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    embedding_model: str | None = None,
    progress: EvalProgress | None = None,
) -> KnowledgeBaseRecord:
    """The KB holding ``dataset``'s corpus in ``service``'s home, built on first use and reused afterwards.

    Each corpus document becomes one ``.txt`` document (``title``, blank line, ``text``) named by its corpus id,
    so search hits map back to the corpus through ``doc_name``. Pass the evaluation home's service
    (``service.evaluation_service()``) to keep evaluation KBs out of the user's list. ``progress("import", done,
    total)`` follows the documents.
    """
    from kb_core.engines.embedding import DEFAULT_EMBEDDING_MODEL

    model = (embedding_model or "").strip() or DEFAULT_EMBEDDING_MODEL
    name = eval_kb_name(dataset, chunk_size, model)
    operations = service.session()
    try:
        service.find_kb(name)
    except KBNotFound:
        operations.create_knowledge_base(name, chunk_size, model)
        logger.info("Building evaluation KB %s from %s (%d documents)", name, dataset.folder, len(dataset.corpus))
    present = {d["name"] for d in operations.list_documents(kb_name=name).documents if d["status"] == "ready"}
    missing = [doc_id for doc_id in dataset.corpus if doc_id not in present]
    total, done = len(dataset.corpus), len(dataset.corpus) - len(missing)
    if progress is not None:
        progress("import", done, total)
    failed: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="kb-eval-") as scratch:
        paths, names = [], []
        for position, doc_id in enumerate(missing):
            text = document_text(dataset.corpus[doc_id])
            if not text:
                failed.append({"doc_id": doc_id, "error": "empty document"})
                continue
            # File names are positions: corpus ids may hold characters a file name cannot.
            path = Path(scratch) / f"{position}.txt"
            path.write_text(text, encoding="utf-8")
            paths.append(str(path))
            names.append(doc_id)
        if paths:
            # One import: the importer commits every ~2,000 chunks, so an interrupted build keeps its progress.
            def forward(state: Any) -> None:
                if progress is not None:
                    progress("import", done + state.files_done, total)

            report = operations.import_document(paths, display_names=names, kb_name=name, progress=forward)
            failed.extend(report.failed_files)
            expected = dict(zip(paths, names, strict=True))
            for item in report.success_files:
                if item["doc_name"] != expected.get(item["file_path"], item["doc_name"]):
                    logger.warning("a corpus document was imported as %r; its hits will not match", item["doc_name"])
    if failed:
        logger.warning("%d corpus document(s) could not be imported, e.g. %s", len(failed), failed[0])
    return service.find_kb(name)


# -- running and scoring --------------------------------------------------------------------------
def sweep_weights(steps: int = 10) -> list[float]:
    """Vector weights 0, 1/steps, ..., 1 for a sweep (the keyword weight is 1 − vector weight)."""
    return [round(i / steps, 4) for i in range(steps + 1)]


def settings_for(
    modes: Sequence[str] = SEARCH_MODES,
    vector_weights: Sequence[float] | None = None,
    *,
    vector_weight: float | None = None,
    keyword_weight: float | None = None,
    weighting: str | None = None,
    fusion: str | None = None,
    compare_fusion: bool = False,
) -> list[EvaluationSetting]:
    """Settings to run: each mode with the given (or default) settings, then (``compare_fusion``) hybrid with auto
    weights and with RRF, then hybrid at each swept vector weight (fixed weights, weighted fusion)."""
    settings: list[EvaluationSetting] = []
    for mode in modes:
        if mode not in SEARCH_MODES:
            raise InvalidArgument(f"mode {mode!r} is not supported; use one of {', '.join(SEARCH_MODES)}.")
        if mode == "hybrid":
            vw = kw = None
            if vector_weight is not None or keyword_weight is not None:
                vw = float(vector_weight if vector_weight is not None else 1 - float(keyword_weight or 0))
                kw = float(keyword_weight if keyword_weight is not None else 1 - float(vector_weight or 0))
            settings.append(EvaluationSetting("hybrid", vw, kw, weighting, fusion))
        else:
            settings.append(EvaluationSetting(mode))
    if compare_fusion:
        for extra in (EvaluationSetting("hybrid", weighting="auto"), EvaluationSetting("hybrid", fusion="rrf")):
            if extra not in settings:
                settings.append(extra)
    for weight in vector_weights or ():
        value = float(weight)
        if not 0 <= value <= 1 or math.isnan(value):
            raise InvalidArgument(f"vector weight {weight!r} must be a number from 0 to 1.")
        setting = EvaluationSetting("hybrid", value, round(1 - value, 6))
        if setting not in settings:
            settings.append(setting)
    return settings


def score_run(run: dict[str, dict[str, float]], qrels: dict[str, dict[str, int]]) -> dict[str, dict[str, float]]:
    """Per-query ``{qid: {metric: value}}`` for every judged query (a query without results scores 0)."""
    import ir_measures
    from ir_measures import RR, R, nDCG

    measures = {nDCG @ 10: "ndcg@10", R @ 100: "recall@100", RR @ 10: "mrr@10"}
    # Rank-derived scores: trec_eval breaks score ties by document id, which must not reorder our ranking.
    ranked = {
        qid: {doc: float(len(docs) - i) for i, doc in enumerate(sorted(docs, key=lambda d: -docs[d]))}
        for qid, docs in run.items()
        if docs
    }
    values = {qid: dict.fromkeys(METRICS, 0.0) for qid in qrels}
    if ranked:
        for metric in ir_measures.iter_calc(list(measures), qrels, ranked):
            if metric.query_id in values:
                values[metric.query_id][measures[metric.measure]] = float(metric.value)
    return values


def _document_ranking(hits: Sequence[Any], depth: int, ranking: dict[str, float] | None = None) -> dict[str, float]:
    """Append documents to ``ranking`` by their best chunk (hits come best first), up to ``depth`` documents."""
    documents = dict(ranking or {})
    for hit in hits:
        if len(documents) >= depth:
            break
        documents.setdefault(hit.doc_name, float(hit.score))
    return documents


def _merged_scores(head: dict[str, float], deep: dict[str, float]) -> dict[str, float]:
    """One ranking: the head's documents first in their order, then the deep pass's others; rank-derived scores."""
    order = list(head) + [doc for doc in deep if doc not in head]
    return {doc: float(len(order) - i) for i, doc in enumerate(order)}


def evaluate_kb(
    session: Operations,
    queries: dict[str, str],
    qrels: dict[str, dict[str, int]],
    *,
    modes: Sequence[str] = SEARCH_MODES,
    vector_weights: Sequence[float] | None = None,
    settings: Sequence[EvaluationSetting] | None = None,
    top_k: int = DEFAULT_TOP_K,
    kb_name: str | None = None,
    progress: EvalProgress | None = None,
) -> EvaluationReport:
    """Run every judged query under each setting against ``kb_name`` (default: the session's current KB).

    ``settings`` overrides ``modes`` and ``vector_weights``; otherwise each of ``modes`` runs with the KB's
    default settings, then hybrid at each vector weight in ``vector_weights`` (keyword weight 1 − w).

    Two passes per query. The *head* is the search a user runs (``top_k`` of ``HEAD_CHUNKS`` chunks, everything
    else at the KB's defaults), so nDCG@10 and MRR@10 measure what a user sees. The *deep* pass fetches
    ``CHUNK_OVERFETCH · top_k`` chunks without near-duplicate removal (which is quadratic in the window) and
    extends the head's documents to ``top_k`` (for Recall@100, or to fill the top 10 when several of the head's
    chunks belong to one document). Documents are ranked
    by their best chunk (MaxP).
    """
    if not 1 <= top_k <= 1000 // CHUNK_OVERFETCH:
        raise InvalidArgument(f"top_k must be from 1 to {1000 // CHUNK_OVERFETCH}, got {top_k!r}.")
    chosen = list(settings) if settings is not None else settings_for(modes, vector_weights)
    judged = [qid for qid in queries if qid in qrels]
    if not judged:
        raise InvalidArgument("None of the queries has a relevance judgment in qrels; nothing to evaluate.")
    judged_qrels = {qid: qrels[qid] for qid in judged}
    record = session.resolve_kb(kb_name)
    kb = record.name
    uncovered: dict[str, None] = {}  # the queries the embedding model cannot read, in judged order
    metric_rows: list[dict[str, Any]] = []
    query_rows: list[dict[str, Any]] = []
    runs: dict[str, dict[str, dict[str, float]]] = {}
    warnings: list[str] = []
    for setting in chosen:
        label = setting.label
        started = time.perf_counter()
        run: dict[str, dict[str, float]] = {}
        used = None
        overrides = setting.overrides()
        for done, qid in enumerate(judged, start=1):
            outcome = session.search_chunks(SearchRequest(queries[qid], HEAD_CHUNKS, kb_names=(kb,), **overrides))
            notes, used = outcome.warnings, outcome.settings
            head = _document_ranking(outcome.hits, min(top_k, HEAD_DOCUMENTS))
            deep: dict[str, float] = {}
            if top_k > len(head):  # deeper than the head, or the head's 10 chunks held fewer than 10 documents
                deeper = {"top_k": top_k * CHUNK_OVERFETCH, "deduplicate": False, **overrides}
                more = session.search_chunks(SearchRequest(queries[qid], kb_names=(kb,), **deeper)).hits
                deep = _document_ranking(more, top_k, head)
            run[qid] = _merged_scores(head, deep)
            for note in notes:
                if LANGUAGE_NOT_COVERED in note:
                    uncovered[qid] = None
                elif note not in warnings:
                    warnings.append(note)
            if progress is not None:
                progress(label, done, len(judged))
        seconds = time.perf_counter() - started
        per_query = score_run(run, judged_qrels)
        runs[label] = run
        hybrid = used is not None and setting.mode == "hybrid"
        row: dict[str, Any] = {
            "setting": label,
            "mode": setting.mode,
            "vector_weight": used.vector_weight if hybrid else None,
            "keyword_weight": used.keyword_weight if hybrid else None,
            "weighting": used.weighting if hybrid else None,
            "fusion": used.fusion if hybrid else None,
        }
        if top_k < RECALL_DEPTH:  # a ranking shallower than 100 cannot give Recall@100
            for values in per_query.values():
                values["recall@100"] = math.nan
        for metric in METRICS:
            row[metric] = sum(v[metric] for v in per_query.values()) / len(per_query)
        row["queries"] = len(judged)
        row["seconds"] = round(seconds, 2)
        metric_rows.append(row)
        for qid in judged:
            query_rows.append({"setting": label, "query_id": qid, "query": queries[qid], **per_query[qid]})
        logger.info("%s: nDCG@10 %.4f over %d queries in %.1f s", label, row["ndcg@10"], len(judged), seconds)
    metrics = pd.DataFrame(
        metric_rows,
        columns=[
            "setting",
            "mode",
            "vector_weight",
            "keyword_weight",
            "weighting",
            "fusion",
            *METRICS,
            "queries",
            "seconds",
        ],
    )
    per_query_frame = pd.DataFrame(query_rows, columns=["setting", "query_id", "query", *METRICS])
    if uncovered:
        warnings.insert(0, language_warning(record.embedding_model, list(uncovered), len(judged)))
    return EvaluationReport(metrics, per_query_frame, runs, kb_name=kb, warnings=warnings)


def language_warning(model: str, uncovered: Sequence[str], total: int, shown: int = 5) -> str:
    """One warning for all the queries the embedding model cannot read (``uncovered``: their ids in judged order),
    where each search warned once per query and setting: how many, which (the first ``shown``), what it means."""
    listed = ", ".join(uncovered[:shown]) + (f" and {len(uncovered) - shown} more" if len(uncovered) > shown else "")
    return (
        f"The embedding model {model} does not cover the language of {len(uncovered)} of {total} queries "
        f"({listed}): their semantic scores carry little meaning, and with the language guard on (the default) "
        "hybrid search gives their vector signal weight 0, ranking them by keywords."
    )


def evaluate_with_sweep(
    session: Operations,
    queries: dict[str, str],
    qrels: dict[str, dict[str, int]],
    *,
    settings: Sequence[EvaluationSetting],
    sweep: Sequence[float] | None = None,
    top_k: int = DEFAULT_TOP_K,
    kb_name: str | None = None,
    progress: EvalProgress | None = None,
) -> EvaluationReport:
    """:func:`evaluate_kb` for ``settings``, then hybrid at each vector weight of ``sweep`` (fixed weights, keyword
    weight 1 − w) in one report. The sweep is about the top 10: it is evaluated 10 deep, without the Recall@100
    pass (a third of the time)."""
    report = evaluate_kb(session, queries, qrels, settings=settings, top_k=top_k, kb_name=kb_name, progress=progress)
    swept_settings = [s for s in settings_for((), sweep) if s not in settings] if sweep else []
    if not swept_settings:
        return report
    swept = evaluate_kb(
        session, queries, qrels, settings=swept_settings, top_k=10, kb_name=report.kb_name, progress=progress
    )
    return EvaluationReport(
        pd.concat([report.metrics, swept.metrics], ignore_index=True),
        pd.concat([report.per_query, swept.per_query], ignore_index=True),
        {**report.runs, **swept.runs},
        kb_name=report.kb_name,
        warnings=report.warnings + [w for w in swept.warnings if w not in report.warnings],
    )
