"""Quality targets of issue 4, part 7: nDCG@10 per search mode on ../shared/eval, at one or more chunk sizes.

Runs the same code as ``kb eval`` (:mod:`kb_core.session.evaluation`) with the default model and default search
settings, and prints one table (markdown) plus the targets. Evaluation KBs and the embedding cache live in
``<home>/cache/eval``, so a second run only searches. On two idle cores the first SciFact build (5,183 abstracts) takes
roughly 15 minutes, mostly embedding.

    python benchmarks/quality.py                          # both datasets, chunk size 256
    python benchmarks/quality.py --chunk-sizes 256 512 --datasets scifact
    python benchmarks/quality.py --max-queries 100 --depth 10   # a quicker look (nDCG@10 and MRR@10 only)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
DATASETS = {"scifact": "scifact", "xquad-zh": "xquad-retrieval-zh"}
TARGETS = {"scifact": 0.72, "xquad-zh": 0.90}  # hybrid nDCG@10 at default settings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", choices=sorted(DATASETS), default=sorted(DATASETS))
    parser.add_argument("--chunk-sizes", nargs="+", type=int, default=[256])
    parser.add_argument("--home", help="KB home (default: $KB_HOME, else data/home); KBs go to <home>/cache/eval")
    parser.add_argument("--max-queries", type=int)
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args(argv)

    from kb_core import KnowledgeBaseService
    from kb_core.base.config import resolve_home
    from kb_core.session.evaluation import EvaluationRequest, run_evaluation

    session = KnowledgeBaseService(resolve_home(args.home)).session()
    rows = []
    for name in args.datasets:
        folder = SHARED / "eval" / DATASETS[name]
        if not folder.is_dir():
            print(f"skip {name}: {folder} is absent", file=sys.stderr)
            continue
        for chunk_size in args.chunk_sizes:
            started = time.perf_counter()
            request = EvaluationRequest(
                folder, build_corpus=True, chunk_size=chunk_size, max_queries=args.max_queries, depth=args.depth
            )
            report = run_evaluation(session, request).report
            for row in report.metrics.to_dict("records"):
                rows.append({"dataset": name, "chunk_size": chunk_size, **row})
            print(f"{name} chunk {chunk_size}: {time.perf_counter() - started:.0f} s", file=sys.stderr)
    print("| dataset | chunk | setting | nDCG@10 | Recall@100 | MRR@10 | queries | target |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        target = TARGETS[row["dataset"]] if row["setting"] == "hybrid (default)" else None
        verdict = "" if target is None else f"≥ {target} {'met' if row['ndcg@10'] >= target else 'MISSED'}"
        print(
            f"| {row['dataset']} | {row['chunk_size']} | {row['setting']} | {row['ndcg@10']:.4f} | "
            f"{row['recall@100']:.4f} | {row['mrr@10']:.4f} | {row['queries']} | {verdict} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2, default=str), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
