"""``kb eval DIR``: evaluate retrieval on a BEIR-format folder (see :mod:`kb_core.session.evaluation`).

The evaluation KB is built in (and reused from) ``<home>/cache/eval``, not the user's KB list.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kb_core.base.config import DEFAULT_VECTOR_WEIGHT, FUSION_METHODS, SEARCH_MODES, WEIGHTINGS
from kb_core.base.i18n import msg
from kb_core.edges.cli.common import Commands, say, t
from kb_core.edges.envelopes import Envelope, envelope_of
from kb_core.features.results import JSONResult

if TYPE_CHECKING:
    from kb_core.edges.envelopes import Enveloped
    from kb_core.session.operations import Operations

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


def eval_handler(session: Enveloped, args: argparse.Namespace) -> Envelope:
    """``kb eval``: :func:`run_eval`'s envelope."""
    return envelope_of(run_eval, session.operations, args)


def run_eval(session: Operations, args: argparse.Namespace) -> JSONResult:
    from kb_core.base.errors import InvalidArgument
    from kb_core.session.evaluation import EvaluationRequest, best_sweep_setting, run_evaluation, save_best

    weights_given = args.vector_weight is not None or args.keyword_weight is not None
    for name in ("vector_weight", "keyword_weight"):
        value = getattr(args, name)
        if value is not None and not 0 <= value <= 1:
            raise InvalidArgument(
                msg("{option} must be from 0 to 1, got {value!r}.", option="--" + name.replace("_", "-"), value=value)
            )
    if args.save_best and not args.kb:
        raise InvalidArgument(
            msg("--save-best needs --kb NAME: the sweep must run on the knowledge base whose default it sets.")
        )
    if args.mode:
        modes: tuple[str, ...] = (args.mode,)
    elif weights_given:
        modes = ("hybrid",)
    else:
        modes = SEARCH_MODES
    request = EvaluationRequest(
        folder=Path(args.folder),
        build_corpus=not args.kb,
        kb_name=args.kb,
        modes=modes,
        vector_weight=args.vector_weight,
        keyword_weight=args.keyword_weight,
        weighting=args.weighting,
        fusion=args.fusion,
        compare_fusion=args.compare_fusion,
        sweep_steps=10 if args.sweep or args.save_best else None,
        max_queries=args.max_queries,
        split=args.split,
        depth=args.depth,
        chunk_size=args.chunk_size,
        embedding_model=args.model,
    )
    outcome = run_evaluation(session, request, progress=_progress)
    record, report, run = outcome.record, outcome.report, outcome.run
    data = {
        "run_id": run.id,
        "dataset": outcome.dataset_name,
        "folder": str(Path(args.folder).resolve()),
        "documents": outcome.documents,
        "queries": outcome.queries,
        "chunk_size": record.chunk_size,
        "embedding_model": record.embedding_model,
        "embedding_device": outcome.kb_service.embedding_device(record),
        "kb_fingerprint": run.kb_fingerprint,
        "eval_home": str(outcome.kb_service.home.root),
        **report.to_json(),
    }
    best = report.metrics.sort_values("ndcg@10", ascending=False).iloc[0]
    message: str = msg(
        "Evaluated {settings} setting(s) on {dataset} ({queries} judged queries) against '{name}'; best nDCG@10 "
        "{ndcg:.4f} ({setting}). Kept as run {run}.",
        settings=len(outcome.settings), dataset=outcome.dataset_name, queries=outcome.queries, name=record.name,
        ndcg=best["ndcg@10"], setting=best["setting"], run=run.id,
    )
    if args.save_best:
        chosen = best_sweep_setting(report)
        save_best(session, record.name, chosen, mode=None)  # the CLI keeps the KB's saved mode
        data["saved_default"] = chosen
        saved = msg(
            "Saved vector {vector:.2f} / keyword {keyword:.2f} (sweep best, nDCG@10 {ndcg:.4f}) as the default of "
            "'{name}'.",
            vector=chosen["vector_weight"], keyword=chosen["keyword_weight"], ndcg=chosen["ndcg@10"], name=record.name,
        )
        message = msg("{first} {then}", first=message, then=saved)
    return JSONResult(message, data)


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
        rows,
        headers=[
            t("setting"), t("vector w"), t("keyword w"), "nDCG@10", "Recall@100", "MRR@10", t("queries"), t("seconds")
        ],
    )
    lines = [
        t(
            "KB {name} (chunk size {chunk_size}, model {model})",
            name=data["kb_name"], chunk_size=data["chunk_size"], model=data["embedding_model"],
        )
    ]
    if data.get("embedding_device"):
        lines.append(t("embedding device: {device}", device=data["embedding_device"]))
    lines.append(table)
    lines += [t("note: {note}", note=say(w)) for w in data["warnings"]]
    lines.append(t("kept as run {run} (compare runs with: kb eval-compare RUN_A RUN_B)", run=data["run_id"]))
    if data.get("saved_default"):
        chosen = data["saved_default"]
        lines.append(
            t(
                "saved as the KB default: vector {vector:.2f} / keyword {keyword:.2f}",
                vector=chosen["vector_weight"], keyword=chosen["keyword_weight"],
            )
        )
    return "\n".join(lines)


def render_runs(envelope: Envelope) -> str:
    from tabulate import tabulate

    rows = [
        [
            r["id"],
            r["created_at"][:19].replace("T", " "),
            r["dataset"],
            r["kb_name"],
            r["kb_fingerprint"],
            r["query_count"],
            "" if not r.get("best") else f"{r['best']['ndcg@10']:.4f} ({r['best']['setting']})",
        ]
        for r in envelope["data"]["runs"]
    ]
    headers = [t("run"), t("created (UTC)"), t("dataset"), "KB", t("fingerprint"), t("queries"), t("best nDCG@10")]
    return tabulate(rows, headers=headers) if rows else t("(no evaluation runs kept yet)")


def render_comparison(envelope: Envelope) -> str:
    from tabulate import tabulate

    data = envelope["data"]
    lines = [say(envelope["message"]), "", t("queries that moved most ({metric}):", metric=data["metric"])]
    rows = [
        [m["query_id"], textwrap_short(m["query"]), f"{m['a']:.4f}", f"{m['b']:.4f}", f"{m['delta']:+.4f}"]
        for m in data["moved_most"]
    ]
    lines.append(tabulate(rows, headers=[t("query"), t("text"), "A", "B", "B − A"]))
    return "\n".join(lines)


def textwrap_short(text: str, width: int = 60) -> str:
    import textwrap

    return textwrap.shorten(" ".join(str(text).split()), width, placeholder=" …")


def register(commands: Commands) -> None:
    parser = commands.add_parser(
        "eval",
        help="evaluate retrieval on a BEIR folder (nDCG@10, Recall@100, MRR@10)",
        description="Build (or reuse) an evaluation KB from a BEIR folder's corpus.jsonl and score the judged "
        "queries of queries.jsonl against qrels.tsv, per search mode. Evaluation KBs live in <home>/cache/eval.",
    )
    parser.add_argument("folder", metavar="DIR", help="BEIR folder: corpus.jsonl, queries.jsonl, qrels.tsv")
    parser.add_argument(
        "--kb",
        help="evaluate this knowledge base of the home instead of one built from corpus.jsonl (the folder's qrels "
        "name its documents by document name)",
    )
    parser.add_argument(
        "--save-best",
        action="store_true",
        help="sweep the weights and save the best as the default of --kb (what the app's 'save as default' does)",
    )
    parser.add_argument("--mode", choices=SEARCH_MODES, help="only this mode (default: all)")
    parser.add_argument(
        "--vector-weight", type=float, help=f"hybrid vector weight (default: the KB default, {DEFAULT_VECTOR_WEIGHT})"
    )
    parser.add_argument("--keyword-weight", type=float, help="hybrid keyword weight (default: 1 - vector weight)")
    parser.add_argument(
        "--weighting", choices=WEIGHTINGS, help="hybrid weighting (default: the KB default, fixed)"
    )
    parser.add_argument("--fusion", choices=FUSION_METHODS, help="hybrid fusion (default: weighted)")
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
    parser.add_argument(
        "--model", help="embedding model of the evaluation KB, e.g. all-MiniLM-L6-v2 (default multilingual-e5-small)"
    )
    parser.set_defaults(handler=eval_handler, renderer=render_eval)

    runs = commands.add_parser("eval-runs", help="list the kept evaluation runs, newest first")
    runs.set_defaults(handler=lambda s, a: s.list_evaluation_runs(), renderer=render_runs)

    compare = commands.add_parser(
        "eval-compare", help="compare two evaluation runs query by query (wins, losses, ties, largest moves)"
    )
    compare.add_argument("run_a", metavar="RUN_A")
    compare.add_argument("run_b", metavar="RUN_B", help="may be RUN_A again, to compare two of its settings")
    compare.add_argument("--setting-a", help="setting of RUN_A (default: its first, e.g. 'hybrid (default)')")
    compare.add_argument("--setting-b", help="setting of RUN_B (default: its first)")
    compare.add_argument("--metric", default="ndcg@10", choices=("ndcg@10", "recall@100", "mrr@10"))
    compare.add_argument("--top", type=int, default=10, help="how many of the queries that moved most to show")
    compare.set_defaults(
        handler=lambda s, a: s.compare_evaluation_runs(
            a.run_a, a.run_b, setting_a=a.setting_a, setting_b=a.setting_b, metric=a.metric, top=a.top
        ),
        renderer=render_comparison,
    )
