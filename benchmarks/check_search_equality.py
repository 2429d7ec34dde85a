"""Search results before and after a change: exactly equal, or the first difference. Folder and PostgreSQL stores.

    python benchmarks/check_search_equality.py build H                  # once: the evaluation KBs in H/cache/eval
    python benchmarks/check_search_equality.py dump H/cache/eval OUT.json      # on main: the reference run
    python benchmarks/check_search_equality.py dump H/cache/eval NEW.json      # on the branch
    python benchmarks/check_search_equality.py compare OUT.json NEW.json
    python benchmarks/check_search_equality.py dump H/cache/eval OUT-pg.json --postgres   # the same on PostgreSQL

``HOME`` holds evaluation KBs of SciFact and XQuAD-zh (``build H``, ``bench_latency.py --home H`` and ``kb --home H
eval`` build them in ``H/cache/eval``: all-MiniLM-L6-v2, chunk size 512). For every KB in ``HOME``, the first
``--queries`` judged queries of its dataset go through ``session.search`` in every mode at top_k 10 and 100 (and 1,000
for the first ``--deep`` queries); hybrid also with auto weighting, RRF fusion and a Jaccard weight. Dumped per
search: each hit's id, score, breakdown, matched terms, flags and a hash of its content, and the envelope's weights
and warnings. ``compare`` exits 1 on any difference, key order included (floats compared exactly: faster must not
mean approximated).

``--postgres`` searches the same KBs in PostgreSQL: they are exported from ``HOME`` (``session.export_database``)
into a throwaway PostgreSQL 18 + pgvector (:class:`~kb_core.store.postgres.embedded.LocalPostgres`, started and
removed here) with ``session.import_database``, which keeps every document and chunk id and the rows' order; a
PostgreSQL KB gets a new id, so there each hit's ``kb_id`` is replaced by its KB's name. Compare a PostgreSQL dump
with a PostgreSQL dump: the two stores agree within 1e-6 (``tests/postgres/test_pg_equality.py``), not bit for bit.
The copy goes through the code under test (export and import-db), so it is checked as well.

``search_answer`` is the one place that reads the session's answer; if the session's return type changes (#28), adapt
it there so that it dumps the same fields in the same order.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from kb_core import KnowledgeBaseService
from kb_core.edges.envelopes import Enveloped
from kb_core.features.results import SearchRequest

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


def search_answer(session: Any, text: str, top_k: int, mode: str, variant: dict[str, Any]) -> dict[str, Any]:
    """The dumped form of one search: its hits, weights and warnings."""
    envelope = session.search(SearchRequest(text, top_k=top_k, mode=mode, **variant))
    assert envelope["success"], envelope
    data = envelope["data"]
    return {
        "hits": [hit_record(chunk) for chunk in data["chunks"]],
        "weights": data.get("weights"),
        "warnings": data.get("warnings"),
    }


def eval_kb_names(service: KnowledgeBaseService) -> list[str]:
    return [r.name for r in service.store.knowledge_bases() if any(r.name.startswith(p) for p in DATASETS)]


def dump(home: Path, out: Path, queries: int, deep: int, postgres: bool = False) -> None:
    if not postgres:
        dump_service(KnowledgeBaseService(home), out, queries, deep, home)
        return
    import tempfile

    from kb_core.store.postgres.embedded import LocalPostgres

    folder = KnowledgeBaseService(home)
    names = eval_kb_names(folder)
    if not names:
        dump_service(folder, out, queries, deep, home)  # says what is missing
    with tempfile.TemporaryDirectory(prefix="kb-equality-") as scratch, LocalPostgres.start() as server:
        export = Path(scratch) / "eval.kbx"
        exported = Enveloped(folder.session()).export_database(str(export), names)
        assert exported["success"], exported["message"]
        service = KnowledgeBaseService(Path(scratch) / "home", store=server.url())
        try:
            imported = Enveloped(service.session()).import_database(str(export))
            assert imported["success"], imported["message"]
            print(f"copied {', '.join(names)} into PostgreSQL {server.url()}")
            dump_service(service, out, queries, deep, home, stable_kb_ids=True)
        finally:
            service.close()


def dump_service(
    service: KnowledgeBaseService, out: Path, queries: int, deep: int, home: Path, stable_kb_ids: bool = False
) -> None:
    session = Enveloped(service.session())
    results: dict[str, Any] = {}
    for record in service.store.knowledge_bases():
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
                        key = f"{record.name}|{text}|{mode}|{top_k}|{sorted(variant.items())}"
                        results[key] = search_answer(session, text, top_k, mode, variant)
                        if stable_kb_ids:  # a copied KB has an id of its own
                            for hit in results[key]["hits"]:
                                hit["kb_id"] = f"<{record.name}>"
    if not results:
        names = ", ".join(f"{prefix}*" for prefix in DATASETS)
        raise SystemExit(f"no evaluation KB ({names}) in {home}: `build H` builds them in H/cache/eval")
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


def build(home: Path, datasets: list[str]) -> None:
    """The evaluation KBs ``dump`` reads, in ``home/cache/eval``: the corpus of each dataset of ``../shared/eval``,
    all-MiniLM-L6-v2, chunk size 512 (what ``bench_latency.py --home`` and ``kb --home H eval`` build)."""
    from kb_core.features.beir import load_beir
    from kb_core.session.evaluation import build_eval_kb
    from kb_core.session.service import EVAL_HOME, open_eval_service

    service = open_eval_service(home)
    for name in datasets:
        record = build_eval_kb(service, load_beir(SHARED / name))
        print(f"{record.name} ready in {home / EVAL_HOME}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    building = commands.add_parser("build", help="build the evaluation KBs in HOME/cache/eval")
    building.add_argument("home", type=Path)
    building.add_argument(
        "--datasets", nargs="+", default=["scifact", "xquad-retrieval-zh"], help="folders of ../shared/eval"
    )
    dumping = commands.add_parser("dump")
    dumping.add_argument("home", type=Path)
    dumping.add_argument("out", type=Path)
    dumping.add_argument("--queries", type=int, default=30)
    dumping.add_argument("--deep", type=int, default=6, help="queries also searched at top_k 1,000")
    dumping.add_argument(
        "--postgres", action="store_true", help="search copies of the KBs in a throwaway PostgreSQL instead"
    )
    comparing = commands.add_parser("compare")
    comparing.add_argument("reference", type=Path)
    comparing.add_argument("candidate", type=Path)
    args = parser.parse_args()
    if args.command == "build":
        build(args.home, args.datasets)
    elif args.command == "dump":
        dump(args.home, args.out, args.queries, args.deep, args.postgres)
    else:
        sys.exit(compare(args.reference, args.candidate))


if __name__ == "__main__":
    main()
