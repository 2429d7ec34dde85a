"""What a score means on each model (#35): the scores of answers and of the rest, per model, on a BEIR folder.

For each judged query, one search as a user runs it (the KB's default settings, hybrid 0.7/0.3, top 10) over the
evaluation KB of the corpus (built or reused as ``kb eval`` builds it, in ``HOME/cache/eval``); reported per model:
the quartiles of the best score of a relevant chunk among the hits, those of the best hit that is not relevant, the
median of every hit's score, and how many relevant and not-relevant best hits score at least ``--min-score``. Since
#35 the semantic part of a score is the cosine on the model's measured scale, so the same figure means the same
evidence on every model.

    python benchmarks/score_scale.py ../shared/eval/scifact --home HOME --model all-MiniLM-L6-v2 \\
        --model multilingual-e5-small
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", help="BEIR folder: corpus.jsonl, queries.jsonl, qrels.tsv")
    parser.add_argument("--home", required=True, help="the kb home whose evaluation home holds the KBs")
    parser.add_argument("--model", action="append", help="embedding model (repeat; default: the default model)")
    parser.add_argument("--max-queries", type=int, help="only the first N judged queries")
    parser.add_argument("--min-score", type=float, default=0.3, help="the threshold counted (default 0.3)")
    args = parser.parse_args()

    from kb_core.features.beir import load_beir
    from kb_core.features.results import SearchRequest
    from kb_core.session.evaluation.scoring import build_eval_kb
    from kb_core.session.service import open_eval_service

    dataset = load_beir(args.folder)
    service = open_eval_service(args.home)
    session = service.session()
    judged = list(dataset.queries.items())[: args.max_queries]
    report: dict[str, object] = {"folder": str(args.folder), "queries": len(judged), "min_score": args.min_score}
    for model in args.model or [None]:
        record = build_eval_kb(service, dataset, embedding_model=model)
        relevant_best: list[float] = []
        other_best: list[float] = []
        every: list[float] = []
        for query_id, text in judged:
            hits = session.search_chunks(SearchRequest(text, 10, kb_names=(record.name,))).hits
            relevant = dataset.qrels.get(query_id, {})
            every += [hit.score for hit in hits]
            mine = [hit.score for hit in hits if relevant.get(hit.doc_name, 0) > 0]
            rest = [hit.score for hit in hits if relevant.get(hit.doc_name, 0) <= 0]
            if mine:
                relevant_best.append(max(mine))
            if rest:
                other_best.append(max(rest))

        def quartiles(values: list[float]) -> list[float]:
            return [round(float(v), 3) for v in np.percentile(values, [25, 50, 75])] if values else []

        report[record.embedding_model] = {
            "relevant_best_quartiles": quartiles(relevant_best),
            "queries_with_a_relevant_hit": len(relevant_best),
            "not_relevant_best_quartiles": quartiles(other_best),
            "every_hit_median": round(float(np.median(every)), 3) if every else None,
            "relevant_best_at_least_min": sum(v >= args.min_score for v in relevant_best),
            "not_relevant_best_at_least_min": sum(v >= args.min_score for v in other_best),
        }
    print(json.dumps(report, indent=2, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
