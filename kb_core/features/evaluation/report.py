"""What an evaluation measures and reports: the metrics, one search configuration (:class:`EvaluationSetting`) and
the report of a run (:class:`EvaluationReport`). Plain data: the kept runs (:mod:`kb_core.features.evaluation.runs`,
below the session) and the scoring that drives a session (:mod:`kb_core.session.evaluation.scoring`) both use them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

METRICS = ("ndcg@10", "recall@100", "mrr@10")


@dataclass(frozen=True)
class EvaluationSetting:
    """One search configuration. ``None`` means the KB's default (its saved settings, else 0.7/0.3 fixed weights
    with weighted fusion)."""

    mode: str
    vector_weight: float | None = None
    keyword_weight: float | None = None
    weighting: str | None = None  # fixed | auto
    fusion: str | None = None  # weighted | rrf

    @property
    def label(self) -> str:
        if self.mode != "hybrid":
            return self.mode
        parts = ["hybrid"]
        if self.fusion == "rrf":
            parts.append("rrf")
        if self.weighting == "auto":
            parts.append("auto")
        if self.vector_weight is not None or self.keyword_weight is not None:
            parts.append(f"{self.vector_weight or 0:.2f}/{self.keyword_weight or 0:.2f}")
        elif len(parts) == 1:
            parts.append("(default)")
        return " ".join(parts)

    @property
    def is_sweep_point(self) -> bool:
        """A plain fixed-weight hybrid setting with explicit weights: one point of a weight sweep."""
        return (
            self.mode == "hybrid"
            and self.vector_weight is not None
            and self.weighting in (None, "fixed")
            and self.fusion in (None, "weighted")
        )

    def overrides(self) -> dict[str, Any]:
        """The search settings this configuration sets explicitly."""
        values = {
            "mode": self.mode,
            "vector_weight": self.vector_weight,
            "keyword_weight": self.keyword_weight,
            "weighting": self.weighting,
            "fusion": self.fusion,
        }
        if self.mode == "hybrid" and self.vector_weight is not None:
            # a sweep point is the weights exactly as given, not the KB's saved auto weighting or RRF
            values["weighting"] = self.weighting or "fixed"
            values["fusion"] = self.fusion or "weighted"
        return {k: v for k, v in values.items() if v is not None}


@dataclass
class EvaluationReport:
    """``metrics``: one row per setting (setting, mode, vector_weight, keyword_weight, weighting, fusion, ndcg@10,
    recall@100, mrr@10, queries, seconds); recall@100 is NaN when the ranking was evaluated less than 100 deep.
    ``per_query``: one row per setting and query (setting, query_id, query, ndcg@10,
    recall@100, mrr@10); sort by a metric for the worst queries. ``runs``: ``{setting: {qid: {doc_id: score}}}``.
    """

    metrics: pd.DataFrame
    per_query: pd.DataFrame
    runs: dict[str, dict[str, dict[str, float]]]
    kb_name: str | None = None
    warnings: list[str] = field(default_factory=list)

    def worst_queries(self, setting: str | None = None, n: int = 10, metric: str = "ndcg@10") -> pd.DataFrame:
        frame = self.per_query if setting is None else self.per_query[self.per_query["setting"] == setting]
        return frame.sort_values([metric, "query_id"]).head(n).reset_index(drop=True)

    def to_json(self, worst: int = 10) -> dict[str, Any]:
        first = self.metrics["setting"].iloc[0] if not self.metrics.empty else None
        worst_rows = self.worst_queries(first, worst) if first is not None else self.per_query.head(0)
        return {
            "kb_name": self.kb_name,
            "metrics": _records(self.metrics),
            "worst_queries": _records(worst_rows),
            "warnings": self.warnings,
        }


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """Rows as JSON-ready dicts: NaN (a metric that was not measured) becomes None."""
    return [
        {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}
        for row in frame.to_dict("records")
    ]
