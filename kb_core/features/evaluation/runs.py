"""Kept evaluation runs: every evaluation is recorded so two runs can be compared query by query.

A run holds what produced it (dataset, KB, KB fingerprint, embedding model, chunk size, the settings evaluated)
and what it measured (metrics per setting, and each query's metrics per setting). Runs live in
``HOME/evaluations/RUN_ID/``: ``run.json`` (metadata and metrics) and ``per_query.parquet`` (one row per setting and
query: setting, query_id, query, ndcg@10, recall@100, mrr@10), readable with pandas. A run folder is written in a
temporary folder and renamed into place, so a killed writer leaves no half run.

:func:`compare_runs` sets one setting of a run against one setting of another (or of the same run) on the queries
both judged: wins, losses and ties per query on a metric, the mean difference, and the queries that moved most.
The KB fingerprint tells whether the two runs searched the same documents, chunked the same way, with the same
model; a comparison across different fingerprints says so.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import secrets
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from kb_core.base.config import DEFAULT_VECTOR_WEIGHT
from kb_core.base.errors import InvalidArgument, KBError, StoreError
from kb_core.base.json_text import json_text
from kb_core.base.removal import remove_tree
from kb_core.features.evaluation.report import METRICS, EvaluationReport, EvaluationSetting
from kb_core.features.seams import Resources

logger = logging.getLogger(__name__)

__all__ = [
    "EvaluationRun",
    "EvaluationRunStore",
    "RunComparison",
    "best_sweep_setting",
    "compare_runs",
    "kb_fingerprint",
    "record_run",
]

RUNS_FOLDER = "evaluations"
_RUN_ID = re.compile(r"^run_\d{8}-\d{6}_[0-9a-f]{6}$")
_FORMAT_VERSION = 1


class RunNotFound(KBError):
    def __init__(self, run_id: str) -> None:
        super().__init__(
            f"Evaluation run {run_id!r} does not exist; list the kept runs with list_evaluation_runs.",
            code="RUN_NOT_FOUND",
            details={"run_id": run_id},
        )


@dataclass
class EvaluationRun:
    """One kept evaluation: what produced it and what it measured."""

    id: str
    created_at: str
    dataset: str
    kb_name: str
    kb_id: str
    kb_fingerprint: str
    embedding_model: str
    chunk_size: int
    query_count: int
    settings: list[dict[str, Any]]
    metrics: pd.DataFrame
    per_query: pd.DataFrame
    note: str = ""

    def summary(self) -> dict[str, Any]:
        """JSON-ready metadata and metrics, without the per-query rows."""
        best = None
        if not self.metrics.empty:
            row = self.metrics.sort_values("ndcg@10", ascending=False).iloc[0]
            best = {"setting": row["setting"], "ndcg@10": float(row["ndcg@10"])}
        return {
            "id": self.id,
            "created_at": self.created_at,
            "dataset": self.dataset,
            "kb_name": self.kb_name,
            "kb_id": self.kb_id,
            "kb_fingerprint": self.kb_fingerprint,
            "embedding_model": self.embedding_model,
            "chunk_size": self.chunk_size,
            "query_count": self.query_count,
            "settings": [str(s["label"]) for s in self.settings],
            "best": best,
            "note": self.note,
        }

    def setting_labels(self) -> list[str]:
        return list(self.metrics["setting"]) if not self.metrics.empty else []


@dataclass
class RunComparison:
    """Setting ``a`` of one run against setting ``b`` of another, per query, on ``metric``.

    ``per_query`` has query_id, query, a, b, delta (b − a), sorted by |delta|, largest first. A win is a query where
    ``b`` scores higher than ``a`` by more than ``tolerance``.
    """

    run_a: str
    setting_a: str
    run_b: str
    setting_b: str
    metric: str
    wins: int
    losses: int
    ties: int
    mean_a: float
    mean_b: float
    same_kb: bool
    per_query: pd.DataFrame
    warnings: list[str] = field(default_factory=list)

    @property
    def mean_delta(self) -> float:
        return self.mean_b - self.mean_a

    def moved_most(self, n: int = 10) -> pd.DataFrame:
        return self.per_query.head(n).reset_index(drop=True)

    def to_json(self, top: int = 10) -> dict[str, Any]:
        moved = [
            {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}
            for row in self.moved_most(top).to_dict("records")
        ]
        return {
            "run_a": self.run_a,
            "setting_a": self.setting_a,
            "run_b": self.run_b,
            "setting_b": self.setting_b,
            "metric": self.metric,
            "queries": len(self.per_query),
            "wins": self.wins,
            "losses": self.losses,
            "ties": self.ties,
            "mean_a": self.mean_a,
            "mean_b": self.mean_b,
            "mean_delta": self.mean_delta,
            "same_kb": self.same_kb,
            "moved_most": moved,
            "warnings": self.warnings,
        }


def kb_fingerprint(documents: pd.DataFrame, chunk_size: int, embedding_model: str) -> str:
    """A short hash of what a KB searches: its live documents (content hash, chunk size, status), the KB's chunk
    size and embedding model. Two runs with the same fingerprint searched the same chunks with the same model."""
    rows = sorted(
        f"{row['sha256']}|{int(row['chunk_size'])}|{row['status']}"
        for row in documents[["sha256", "chunk_size", "status"]].to_dict("records")
    )
    digest = hashlib.sha256()
    digest.update(f"{chunk_size}|{embedding_model}\n".encode())
    for row in rows:
        digest.update(row.encode("utf-8") + b"\n")
    return digest.hexdigest()[:16]


def best_sweep_setting(report_or_metrics: EvaluationReport | pd.DataFrame, metric: str = "ndcg@10") -> dict[str, Any]:
    """The sweep point (fixed weights, weighted fusion) with the best ``metric``: its setting label, weights and
    value. Raises INVALID_ARGUMENT when the evaluation had no sweep."""
    metrics = report_or_metrics.metrics if isinstance(report_or_metrics, EvaluationReport) else report_or_metrics
    if metric not in METRICS:
        raise InvalidArgument(f"metric {metric!r} is not one of {', '.join(METRICS)}.")
    swept = metrics[
        (metrics["mode"] == "hybrid")
        & metrics["setting"].str.match(r"hybrid \d")
        & metrics["vector_weight"].notna()
    ]
    swept = swept[swept[metric].notna()]
    if swept.empty:
        raise InvalidArgument("This evaluation has no weight sweep; run it with the sweep to find the best weights.")
    # Ties go to the weight closest to the default, so an equal result does not move a user's setting.
    ordered = swept.assign(_distance=(swept["vector_weight"] - DEFAULT_VECTOR_WEIGHT).abs()).sort_values(
        [metric, "_distance"], ascending=[False, True]
    )
    row = ordered.iloc[0]
    return {
        "setting": str(row["setting"]),
        "vector_weight": float(row["vector_weight"]),
        "keyword_weight": float(row["keyword_weight"]),
        metric: float(row[metric]),
        "metric": metric,
    }


class EvaluationRunStore:
    """The kept runs of one home (``HOME/evaluations``)."""

    def __init__(self, home_root: str | Path) -> None:
        self.root = Path(home_root) / RUNS_FOLDER

    def save(
        self,
        report: EvaluationReport,
        *,
        dataset: str,
        kb_id: str,
        kb_fingerprint: str,
        embedding_model: str,
        chunk_size: int,
        settings: Sequence[EvaluationSetting],
        note: str = "",
    ) -> EvaluationRun:
        now = datetime.now(UTC)
        run = EvaluationRun(
            id=f"run_{now:%Y%m%d-%H%M%S}_{secrets.token_hex(3)}",
            created_at=now.isoformat(timespec="microseconds"),  # orders runs made within one second
            dataset=dataset,
            kb_name=report.kb_name or "",
            kb_id=kb_id,
            kb_fingerprint=kb_fingerprint,
            embedding_model=embedding_model,
            chunk_size=int(chunk_size),
            query_count=int(report.per_query["query_id"].nunique()) if not report.per_query.empty else 0,
            settings=[{**asdict(s), "label": s.label} for s in settings],
            metrics=report.metrics.copy(),
            per_query=report.per_query.copy(),
            note=note,
        )
        self.root.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=".writing-", dir=self.root))
        try:
            meta = {**run.summary(), "format_version": _FORMAT_VERSION, "settings": run.settings}
            meta["metrics"] = _records(run.metrics)
            with open(scratch / "run.json", "w", encoding="utf-8") as handle:
                handle.write(json_text(meta, indent=1))
                handle.flush()
                os.fsync(handle.fileno())
            run.per_query.to_parquet(scratch / "per_query.parquet", index=False)
            os.replace(scratch, self.root / run.id)
        except BaseException:
            remove_tree(scratch, within=self.root)
            raise
        logger.info("Kept evaluation run %s (%s on %s)", run.id, dataset, run.kb_name)
        return run

    def list(self) -> list[dict[str, Any]]:
        """Summaries of the kept runs, newest first; unreadable or malformed run folders are skipped with a log
        line (one damaged run never hides the others)."""
        if not self.root.is_dir():
            return []
        summaries = []
        for folder in self.root.iterdir():
            if not _RUN_ID.match(folder.name):
                continue
            try:
                meta = _read_meta(folder)
            except (OSError, ValueError) as exc:
                logger.warning("evaluation run %s cannot be read (%s); skipped", folder.name, exc)
                continue
            meta.pop("metrics", None)
            meta.pop("format_version", None)
            meta["settings"] = [s["label"] if isinstance(s, dict) else s for s in meta["settings"]]
            summaries.append(meta)
        return sorted(summaries, key=lambda m: (m["created_at"], m["id"]), reverse=True)

    def load(self, run_id: str) -> EvaluationRun:
        folder = self._folder(run_id)
        try:
            meta = _read_meta(folder)
            per_query = pd.read_parquet(folder / "per_query.parquet")
        except FileNotFoundError:
            raise RunNotFound(run_id) from None
        except (OSError, ValueError) as exc:
            raise KBError(f"Evaluation run {run_id} cannot be read: {exc}.", code="STORE_ERROR") from exc
        return EvaluationRun(
            id=meta["id"],
            created_at=meta["created_at"],
            dataset=meta["dataset"],
            kb_name=meta["kb_name"],
            kb_id=meta["kb_id"],
            kb_fingerprint=meta["kb_fingerprint"],
            embedding_model=meta["embedding_model"],
            chunk_size=int(meta["chunk_size"]),
            query_count=int(meta["query_count"]),
            settings=list(meta["settings"]),
            metrics=pd.DataFrame(meta["metrics"]),
            per_query=per_query,
            note=meta.get("note", ""),
        )

    def delete(self, run_id: str) -> None:
        """Delete the run folder named by ``run_id`` (checked against the run id pattern), whatever its
        ``run.json`` says: a path is never built from file contents."""
        folder = self._folder(run_id)
        if folder.is_symlink() or not folder.is_dir():
            raise RunNotFound(run_id)
        # Renamed first, so a listing meanwhile never sees a half-deleted run.
        doomed = self.root / f".deleting-{run_id}-{secrets.token_hex(3)}"
        try:
            os.rename(folder, doomed)
        except FileNotFoundError:
            raise RunNotFound(run_id) from None
        if not remove_tree(doomed, within=self.root):
            raise StoreError(f"Evaluation run {run_id} could not be removed completely ({doomed} is left).")

    def _folder(self, run_id: str) -> Path:
        if not isinstance(run_id, str) or not _RUN_ID.match(run_id):
            raise RunNotFound(str(run_id))
        return self.root / run_id


_META_TEXT_FIELDS = ("id", "created_at", "dataset", "kb_name", "kb_id", "kb_fingerprint", "embedding_model")


def _read_meta(folder: Path) -> dict[str, Any]:
    """A run folder's ``run.json``, checked field by field; ValueError names what is malformed."""
    try:
        meta = json.loads((folder / "run.json").read_text(encoding="utf-8"))
    except RecursionError:
        raise ValueError("run.json nests too deeply") from None
    if not isinstance(meta, dict):
        raise ValueError(f"run.json holds a {type(meta).__name__}, not an object")
    for name in _META_TEXT_FIELDS:
        if not isinstance(meta.get(name), str):
            raise ValueError(f"run.json field {name!r} is missing or not text")
    if meta["id"] != folder.name:
        raise ValueError(f"run.json names run {meta['id']!r}, not its folder {folder.name!r}")
    for name in ("chunk_size", "query_count"):
        if isinstance(meta.get(name), bool) or not isinstance(meta.get(name), int):
            raise ValueError(f"run.json field {name!r} is missing or not a whole number")
    settings = meta.get("settings")
    if not isinstance(settings, list) or not all(
        isinstance(s, str) or (isinstance(s, dict) and isinstance(s.get("label"), str)) for s in settings
    ):
        raise ValueError("run.json field 'settings' is not a list of settings with labels")
    metrics = meta.get("metrics", [])
    if not isinstance(metrics, list) or not all(isinstance(m, dict) for m in metrics):
        raise ValueError("run.json field 'metrics' is not a list of objects")
    if not isinstance(meta.get("note", ""), str):
        raise ValueError("run.json field 'note' is not text")
    return meta


def compare_runs(
    a: EvaluationRun,
    b: EvaluationRun,
    *,
    setting_a: str | None = None,
    setting_b: str | None = None,
    metric: str = "ndcg@10",
    tolerance: float = 1e-9,
) -> RunComparison:
    """Compare setting ``setting_a`` of run ``a`` with ``setting_b`` of run ``b`` on the queries both judged.

    A setting left out is the run's first (its main setting, e.g. ``hybrid (default)``)."""
    if metric not in METRICS:
        raise InvalidArgument(f"metric {metric!r} is not one of {', '.join(METRICS)}.")
    label_a = _setting(a, setting_a, "setting_a")
    label_b = _setting(b, setting_b, "setting_b")
    left = a.per_query[a.per_query["setting"] == label_a][["query_id", "query", metric]]
    right = b.per_query[b.per_query["setting"] == label_b][["query_id", metric]]
    joined = left.merge(right, on="query_id", suffixes=("_a", "_b"))
    joined = joined.rename(columns={f"{metric}_a": "a", f"{metric}_b": "b"}).dropna(subset=["a", "b"])
    if joined.empty:
        raise InvalidArgument(
            f"The two runs share no judged query with a {metric} value; compare runs of the same judgments."
        )
    joined["delta"] = joined["b"] - joined["a"]
    joined = joined.assign(_size=joined["delta"].abs()).sort_values(["_size", "query_id"], ascending=[False, True])
    joined = joined.drop(columns="_size").reset_index(drop=True)
    warnings = []
    same_kb = a.kb_fingerprint == b.kb_fingerprint
    if not same_kb:
        warnings.append(
            "The runs searched different knowledge bases (documents, chunk size or model differ: fingerprints "
            f"{a.kb_fingerprint} and {b.kb_fingerprint}); differences mix the KB change with the setting change."
        )
    left_only = len(left) - len(joined)
    if left_only > 0:
        warnings.append(f"{left_only} query(ies) of run {a.id} are not in run {b.id}; they are left out.")
    return RunComparison(
        run_a=a.id,
        setting_a=label_a,
        run_b=b.id,
        setting_b=label_b,
        metric=metric,
        wins=int((joined["delta"] > tolerance).sum()),
        losses=int((joined["delta"] < -tolerance).sum()),
        ties=int((joined["delta"].abs() <= tolerance).sum()),
        mean_a=float(joined["a"].mean()),
        mean_b=float(joined["b"].mean()),
        same_kb=same_kb,
        per_query=joined,
        warnings=warnings,
    )


def _setting(run: EvaluationRun, label: str | None, field_name: str) -> str:
    labels = run.setting_labels()
    if not labels:
        raise InvalidArgument(f"Run {run.id} holds no results.")
    if label is None:
        return labels[0]
    if label not in labels:
        raise InvalidArgument(
            f"Run {run.id} has no setting {label!r}; its settings are {', '.join(map(repr, labels))}.",
            details={"field": field_name},
        )
    return label


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    return [
        {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}
        for row in frame.to_dict("records")
    ]


def record_run(
    store: EvaluationRunStore,
    kb_service: Resources,
    report: EvaluationReport,
    *,
    dataset: str,
    settings: Sequence[EvaluationSetting],
    note: str = "",
) -> EvaluationRun:
    """Keep ``report`` in ``store``. ``kb_service`` is the service whose home holds the evaluated KB (the user's
    service, or the evaluation service of :meth:`kb_core.session.service.KnowledgeBaseService.evaluation_service`)."""
    record = kb_service.find_kb(report.kb_name)
    documents = pd.DataFrame(kb_service.store.kb(record).documents())  # either store (#28)
    return store.save(
        report,
        dataset=dataset,
        kb_id=record.id,
        kb_fingerprint=kb_fingerprint(documents, record.chunk_size, record.embedding_model),
        embedding_model=record.embedding_model,
        chunk_size=record.chunk_size,
        settings=settings,
        note=note,
    )
