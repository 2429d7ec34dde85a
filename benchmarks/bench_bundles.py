"""Benchmark: import a 10,000-item knowledge bundle (documents and references), then re-import it.

Run: ``python benchmarks/bench_bundles.py [--items 10000] [--model hashing|all-MiniLM-L6-v2]``.
Reports the time to parse (YAML under limits), validate, index and commit, plus a no-change
re-import, a one-bad-item refusal and the size of the graph state and shadow export.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path

import yaml

from kb_core.edges.envelopes import Enveloped
from kb_core.features.bundles.loading import load_bundle_file
from kb_core.features.results import SearchRequest
from kb_core.session.service import KnowledgeBaseService

WORDS_EN = [
    "vector",
    "search",
    "index",
    "chunk",
    "embedding",
    "graph",
    "node",
    "edge",
    "bundle",
    "schema",
    "ontology",
    "retrieval",
    "hybrid",
    "keyword",
]
WORDS_ZH = ["知识", "图谱", "向量", "检索", "数据库", "分词", "嵌入", "本体", "节点", "关系"]


def make_bundle(n_items: int, seed: int = 7) -> list[dict[str, object]]:
    rng = random.Random(seed)
    n_docs = int(n_items * 0.7)
    items: list[dict[str, object]] = []
    for i in range(n_docs):
        words = [rng.choice(WORDS_EN if i % 3 else WORDS_ZH) for _ in range(rng.randint(20, 80))]
        items.append({"type": "Document", "doc_uri": f"doc-{i:05d}", "title": f"Doc {i}", "content": " ".join(words)})
    for _ in range(n_items - n_docs):
        a, b = rng.randrange(n_docs), rng.randrange(n_docs)
        items.append(
            {
                "type": "REFERENCES",
                "source": {"doc_uri": f"doc-{a:05d}"},
                "target": {"doc_uri": f"doc-{b:05d}"},
                "ref_type": rng.choice(["citation", "see-also"]),
            }
        )
    return items


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--model", default="hashing")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        service = KnowledgeBaseService(root / "home")
        session = Enveloped(service.session())
        session.create_knowledge_base("bench", 256, embedding_model=args.model)
        session.select_knowledge_base("bench")
        items = make_bundle(args.items)
        path = root / "bundle.yaml"
        path.write_text(yaml.safe_dump(items, allow_unicode=True, sort_keys=False), encoding="utf-8")
        figures: dict[str, object] = {"items": len(items), "file_mb": round(path.stat().st_size / 1e6, 2)}

        started = time.perf_counter()
        load_bundle_file(path)
        figures["parse_s"] = round(time.perf_counter() - started, 2)

        started = time.perf_counter()
        result = session.import_knowledge_bundle(path, delete_file=False)
        figures["import_s"] = round(time.perf_counter() - started, 2)
        assert result["success"], result["message"][:500]
        figures["stats"] = result["data"]["stats"]

        started = time.perf_counter()
        again = session.import_knowledge_bundle(path, delete_file=False)
        figures["reimport_unchanged_s"] = round(time.perf_counter() - started, 2)
        assert again["success"] and again["data"]["stats"]["documents_indexed"] == 0

        bad = [*items, {"type": "REFERENCES", "source": {"doc_uri": "doc-00001"}, "target": {"doc_uri": "nope"}}]
        bad[len(bad) // 2] = {"type": "Document", "content": "no identity"}
        bad_path = root / "bad.yaml"
        bad_path.write_text(yaml.safe_dump(bad, allow_unicode=True, sort_keys=False), encoding="utf-8")
        started = time.perf_counter()
        refused = session.import_knowledge_bundle(bad_path)
        figures["refusal_s"] = round(time.perf_counter() - started, 2)
        assert not refused["success"]

        started = time.perf_counter()
        hits = session.search(SearchRequest("向量 检索 graph", top_k=5))["data"]["chunks"]
        expanded = session.operations.expand_hits(hits)
        figures["search_plus_expand_s"] = round(time.perf_counter() - started, 3)
        figures["expanded_hits"] = len(expanded) - len(hits)

        graph_dir = service.home.kb_dir(session.operations.current_kb().id) / "graph"
        state = max(graph_dir.glob("state-*.json"))
        figures["state_mb"] = round(state.stat().st_size / 1e6, 2)
        figures["shadow_mb"] = round(sum(p.stat().st_size for p in (graph_dir / "shadow").rglob("*.jsonl")) / 1e6, 2)
        print(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
