"""``kb eval DIR``: evaluate retrieval on a BEIR-format folder (see :mod:`kb_core.evaluation`).

The evaluation KB is built in (and reused from) ``<home>/cache/eval``, not the user's KB list.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from kb_core.envelope import Envelope, enveloped, ok

_BAR: Any = None


def _progress(stage: str, done: int, total: int) -> None:
    """A tqdm bar on stderr per stage, only when stderr is a terminal (stdout stays clean for --json)."""
    global _BAR
    if not sys.stderr.isatty():
        return
    from tqdm import tqdm

    if _BAR is None or _BAR.desc != stage:
        if _BAR is not None:
            _BAR.close()
        _BAR = tqdm(total=total, desc=stage, file=sys.stderr, leave=False)
    _BAR.n = done
    _BAR.refresh()
    if done >= total:
        _BAR.close()
        _BAR = None


@enveloped
def run_eval(session: Any, args: argparse.Namespace) -> Envelope:
    import pandas as pd

    from kb_core.errors import InvalidArgument
    from kb_core.evaluation import (
        MODES,
        EvaluationReport,
        evaluate_folder,
        evaluate_kb,
        open_eval_service,
        settings_for,
        sweep_weights,
    )

    weights_given = args.vector_weight is not None or args.keyword_weight is not None
    for name in ("vector_weight", "keyword_weight"):
        value = getattr(args, name)
        if value is not None and not 0 <= value <= 1:
            raise InvalidArgument(f"--{name.replace('_', '-')} must be from 0 to 1, got {value!r}.")
    if args.mode:
        modes: tuple[str, ...] = (args.mode,)
    elif weights_given:
        modes = ("hybrid",)
    else:
        modes = MODES
    settings = settings_for(
        modes,
        vector_weight=args.vector_weight,
        keyword_weight=args.keyword_weight,
        weighting=args.weighting,
        fusion=args.fusion,
        compare_fusion=args.compare_fusion and "hybrid" in modes,
    )
    service = open_eval_service(session.service)
    dataset, report = evaluate_folder(
        service,
        args.folder,
        settings=settings,
        chunk_size=args.chunk_size,
        embedding_model=args.model,
        max_queries=args.max_queries,
        top_k=args.depth,
        progress=_progress,
        split=args.split,
    )
    if args.sweep:
        # The sweep is about the top 10: evaluated 10 deep, without the Recall@100 pass (a third of the time).
        swept = evaluate_kb(
            service.session(),
            dataset.queries,
            dataset.qrels,
            settings=[s for s in settings_for((), sweep_weights()) if s not in settings],
            top_k=10,
            kb_name=report.kb_name,
            progress=_progress,
        )
        report = EvaluationReport(
            pd.concat([report.metrics, swept.metrics], ignore_index=True),
            pd.concat([report.per_query, swept.per_query], ignore_index=True),
            {**report.runs, **swept.runs},
            kb_name=report.kb_name,
            warnings=report.warnings + [w for w in swept.warnings if w not in report.warnings],
        )
    record = service.find_kb(report.kb_name)
    data = {
        "dataset": dataset.name,
        "folder": str(dataset.folder),
        "documents": len(dataset.corpus),
        "queries": len(dataset.queries),
        "chunk_size": record.chunk_size,
        "embedding_model": record.embedding_model,
        "eval_home": str(service.home.root),
        **report.to_json(),
    }
    best = report.metrics.sort_values("ndcg@10", ascending=False).iloc[0]
    message = (
        f"Evaluated {len(settings)} setting(s) on {dataset.name} ({len(dataset.queries)} judged queries, "
        f"{len(dataset.corpus)} documents); best nDCG@10 {best['ndcg@10']:.4f} ({best['setting']})."
    )
    return ok(message, data)


def render_eval(envelope: Envelope) -> str:
    from tabulate import tabulate

    data = envelope["data"]
    rows = [
        [
            m["setting"],
            "" if m["vector_weight"] is None else f"{m['vector_weight']:.2f}",
            "" if m["keyword_weight"] is None else f"{m['keyword_weight']:.2f}",
            f"{m['ndcg@10']:.4f}",
            "" if m["recall@100"] is None else f"{m['recall@100']:.4f}",
            f"{m['mrr@10']:.4f}",
            m["queries"],
            f"{m['seconds']:.1f}",
        ]
        for m in data["metrics"]
    ]
    table = tabulate(
        rows, headers=["setting", "vector w", "keyword w", "nDCG@10", "Recall@100", "MRR@10", "queries", "seconds"]
    )
    lines = [f"KB {data['kb_name']} (chunk size {data['chunk_size']}, model {data['embedding_model']})", table]
    lines += [f"note: {w}" for w in data["warnings"]]
    return "\n".join(lines)


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "eval",
        help="evaluate retrieval on a BEIR folder (nDCG@10, Recall@100, MRR@10)",
        description="Build (or reuse) an evaluation KB from a BEIR folder's corpus.jsonl and score the judged "
        "queries of queries.jsonl against qrels.tsv, per search mode. Evaluation KBs live in <home>/cache/eval.",
    )
    parser.add_argument("folder", metavar="DIR", help="BEIR folder: corpus.jsonl, queries.jsonl, qrels.tsv")
    parser.add_argument("--mode", choices=("hybrid", "semantic", "keyword"), help="only this mode (default: all)")
    parser.add_argument("--vector-weight", type=float, help="hybrid vector weight (default: the KB default, 0.7)")
    parser.add_argument("--keyword-weight", type=float, help="hybrid keyword weight (default: 1 - vector weight)")
    parser.add_argument(
        "--weighting", choices=("fixed", "auto"), help="hybrid weighting (default: the KB default, fixed)"
    )
    parser.add_argument("--fusion", choices=("weighted", "rrf"), help="hybrid fusion (default: weighted)")
    parser.add_argument(
        "--compare-fusion",
        action="store_true",
        help="also run hybrid with auto weights and with reciprocal rank fusion",
    )
    parser.add_argument(
        "--sweep",
        action="store_true",
        help="also run hybrid at vector weights 0, 0.1, ..., 1 (10 deep: no Recall@100)",
    )
    parser.add_argument("--max-queries", type=int, help="evaluate only the first N judged queries")
    parser.add_argument(
        "--split",
        help="judgments from qrels.SPLIT.tsv (or qrels/SPLIT.tsv) instead of qrels.tsv, e.g. train: other queries "
        "over the same corpus and the same cached KB",
    )
    parser.add_argument(
        "--depth",
        type=int,
        default=100,
        help="documents ranked per query (default 100; below 100 skips Recall@100 and is much faster)",
    )
    parser.add_argument(
        "--chunk-size", type=int, default=512, help="chunk size of the evaluation KB (default 512)"
    )
    parser.add_argument("--model", help="embedding model of the evaluation KB (default all-MiniLM-L6-v2)")
    parser.set_defaults(handler=run_eval, renderer=render_eval)
