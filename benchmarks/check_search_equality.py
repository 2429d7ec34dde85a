"""Search results before and after a latency change: exactly equal, or the first difference.

    python benchmarks/check_search_equality.py dump HOME OUT.json      # on main: the reference run
    python benchmarks/check_search_equality.py dump HOME NEW.json      # on the branch
    python benchmarks/check_search_equality.py compare OUT.json NEW.json

``HOME`` holds evaluation KBs of SciFact and XQuAD-zh (``bench_latency.py --home H`` builds them in
``H/cache/eval``). For every KB in ``HOME``, the first ``--queries`` judged queries of its dataset go through
``session.search`` in every mode at top_k 10 and 100 (and 1,000 for the first ``--deep`` queries); hybrid also with
auto weighting, RRF fusion and a Jaccard weight. Dumped per search: each hit's id, score, breakdown, matched terms,
flags and a hash of its content, and the envelope's weights and warnings. ``compare`` exits 1 on any difference,
key order included (floats compared exactly: faster must not mean approximated).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from kb_core import KnowledgeBaseService

SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "eval"
DATASETS = {
    "eval-scifact-": "scifact/queries.test.jsonl",
    "eval-xquad-retrieval-zh-": "xquad-retrieval-zh/queries.jsonl",
}
MODES = ("hybrid", "semantic", "keyword")
HYBRID_VARIANTS: tuple[dict[str, Any], ...] = ({}, {"weighting": "auto"}, {"fusion": "rrf"}, {"jaccard_weight": 0.2})


def hit_record(chunk: dict[str, Any]) -> dict[str, Any]:
    record = {key: value for key, value in chunk.items() if key != "content"}
    record["content_sha1"] = hashlib.sha1(chunk["content"].encode("utf-8")).hexdigest()
    return record


def dump(home: Path, out: Path, queries: int, deep: int) -> None:
    service = KnowledgeBaseService(home)
    session = service.session()
    results: dict[str, Any] = {}
    for record in service.registry.knowledge_bases():
        relative = next((path for prefix, path in DATASETS.items() if record.name.startswith(prefix)), None)
        if relative is None:
            continue
        session.select_knowledge_base(record.name)
        lines = (SHARED / relative).read_text(encoding="utf-8").splitlines()
        texts = [json.loads(line)["text"] for line in lines if line.strip()][:queries]
        for number, text in enumerate(texts):
            for mode in MODES:
                for top_k in (10, 100) + ((1000,) if number < deep else ()):
                    for variant in HYBRID_VARIANTS if mode == "hybrid" else ({},):
                        envelope = session.search(text, top_k=top_k, mode=mode, **variant)
                        assert envelope["success"], envelope
                        data = envelope["data"]
                        key = f"{record.name}|{text}|{mode}|{top_k}|{sorted(variant.items())}"
                        results[key] = {
                            "hits": [hit_record(chunk) for chunk in data["chunks"]],
                            "weights": data.get("weights"),
                            "warnings": data.get("warnings"),
                        }
    if not results:
        names = ", ".join(f"{prefix}*" for prefix in DATASETS)
        raise SystemExit(f"no evaluation KB ({names}) in {home}: bench_latency.py --home H builds them in H/cache/eval")
    out.write_text(json.dumps(results, ensure_ascii=False), encoding="utf-8")
    print(f"{len(results)} searches written to {out}")


def compare(reference: Path, candidate: Path) -> int:
    old = json.loads(reference.read_text(encoding="utf-8"))
    new = json.loads(candidate.read_text(encoding="utf-8"))
    if not old:
        print("the reference holds no search: nothing was compared")
        return 1
    if old.keys() != new.keys():
        print(f"different searches: {len(old.keys() - new.keys())} only in the reference, "
              f"{len(new.keys() - old.keys())} only in the candidate")
        return 1
    # compared as JSON text: key order (what the CLI and MCP print) counts too
    differing = [key for key in old if json.dumps(old[key]) != json.dumps(new[key])]
    hits = sum(len(value["hits"]) for value in old.values())
    print(f"{len(old)} searches, {hits} hits; {len(differing)} differ")
    for key in differing[:3]:
        before, after = old[key], new[key]
        print(key[:140])
        for field in ("weights", "warnings"):
            if before[field] != after[field]:
                print(f"  {field}: {before[field]} != {after[field]}")
        if len(before["hits"]) != len(after["hits"]):
            print(f"  {len(before['hits'])} hits != {len(after['hits'])}")
        for rank, (x, y) in enumerate(zip(before["hits"], after["hits"], strict=False)):
            if json.dumps(x) != json.dumps(y):
                fields = sorted(f for f in x.keys() | y.keys() if x.get(f) != y.get(f))
                if not fields:
                    print(f"  rank {rank}: same values, key order {list(x)} != {list(y)}"[:600])
                print(f"  rank {rank}: {[(f, x.get(f), y.get(f)) for f in fields]}"[:600])
                break
    return 1 if differing else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    dumping = commands.add_parser("dump")
    dumping.add_argument("home", type=Path)
    dumping.add_argument("out", type=Path)
    dumping.add_argument("--queries", type=int, default=30)
    dumping.add_argument("--deep", type=int, default=6, help="queries also searched at top_k 1,000")
    comparing = commands.add_parser("compare")
    comparing.add_argument("reference", type=Path)
    comparing.add_argument("candidate", type=Path)
    args = parser.parse_args()
    if args.command == "dump":
        dump(args.home, args.out, args.queries, args.deep)
    else:
        sys.exit(compare(args.reference, args.candidate))


if __name__ == "__main__":
    main()
