"""End-to-end import time against the model's own encode() on the same chunk texts, and re-import time.

    python benchmarks/bench_import.py --documents 1200 --chunk-size 160
    python benchmarks/bench_import.py --model hashing --documents 3000        # the pipeline without a model
    python benchmarks/bench_import.py --model hashing --ray                   # + the ray executor, 1 and 2 nodes
    python benchmarks/bench_import.py --model hashing,all-MiniLM-L6-v2 --documents 3000 --model-documents 300
    python benchmarks/bench_import.py --model all-MiniLM-L6-v2,multilingual-e5-small --documents 300

Reads SciFact abstracts from ../shared/eval/scifact as the corpus (one .txt per abstract). Targets:
import ≤ 1.15 × encode (the pipeline adds at most 15 % to the model's time); re-import of the same
files ≥ 20 × faster than the first import (the embedding cache answers). Figures from one run.

With ``--model hashing`` the reference is the hashing embedder's own ``embed_documents`` on the same chunk
texts, each figure starting with an empty feature memo: its ratio says how close the pipeline comes to keeping an
encoder busy (the GPU proxy: an import at >= 0.8x the encoder's rate). The load average is reported with each
figure (the machine may be shared).

With ``--ray`` the same files are imported again with ``--executor ray`` on a local Ray cluster of one, then two
nodes (``ray.cluster_utils.Cluster``, each node given ``--ray-cpus`` logical CPUs), each against the local
executor's import measured in the same run; cluster start-up is not timed, actor start-up is (every
import starts its actor pool). On one machine a second node adds no cores: the figure shows Ray's overhead,
not a cluster's speed-up.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from kb_core import KnowledgeBaseService

SHARED = Path(__file__).resolve().parents[1].parent / "shared"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--documents", type=int, default=1200)
    parser.add_argument("--chunk-size", type=int, default=160)
    parser.add_argument(
        "--model",
        default="all-MiniLM-L6-v2",
        help="the KB's model; 'hashing' runs no model; several, comma-separated, are measured one after another",
    )
    parser.add_argument("--model-documents", type=int, default=None, help="documents for a real model (default: all)")
    parser.add_argument("--ray", action="store_true", help="also import with the ray executor on 1 and 2 nodes")
    parser.add_argument("--ray-cpus", type=int, default=2, help="logical CPUs per Ray node")
    args = parser.parse_args()
    corpus = SHARED / "eval" / "scifact" / "corpus.jsonl"
    if not corpus.exists():
        raise SystemExit(f"{corpus} is absent; this benchmark reads the shared SciFact corpus")
    reports = []
    with tempfile.TemporaryDirectory() as folder:
        files = []
        with open(corpus, encoding="utf-8") as handle:
            for line, _ in zip(handle, range(args.documents), strict=False):
                record = json.loads(line)
                path = Path(folder) / f"{record['_id']}.txt"
                path.write_text(f"{record['title']}\n\n{record['text']}", encoding="utf-8")
                files.append(str(path))
        for model in args.model.split(","):
            from kb_core.embedding import is_hashing_model

            subset = files if is_hashing_model(model) or not args.model_documents else files[: args.model_documents]
            reports.append(measure(model.strip(), subset, args, Path(folder) / f"home-{len(reports)}"))
    print(json.dumps(reports[0] if len(reports) == 1 else reports, indent=2))


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def measure(model_name: str, files: list[str], args: argparse.Namespace, home: Path) -> dict[str, Any]:
    """Import ``files`` into a new KB of ``model_name`` against the model's own encode() of the same chunk texts."""
    load_before = load_average()
    service = KnowledgeBaseService(home)
    session = service.session()
    session.create_knowledge_base("bench", args.chunk_size, embedding_model=model_name)
    session.select_knowledge_base("bench")
    record = session.current_kb()
    embedder = service.embedder(record)
    from kb_core.embedding import is_hashing_model
    from kb_core.ingest.chunking import chunk_document
    from kb_core.ingest.parsing import parse_file

    parse_file(Path(files[0]))  # starting the parser worker is not part of either figure
    hashing = is_hashing_model(model_name)
    if hashing:
        inner = embedder.inner

        def encode(texts: list[str]) -> Any:
            inner.forget_features()  # each figure starts with an empty feature memo, as an import does
            return inner.embed_documents(texts)
    else:
        model = embedder.inner.model  # the SentenceTransformer behind the cache (loaded now, not timed)
        prompt = embedder.inner.document_prompt or None  # e5's "passage: ", which the import puts before each text

        def encode(texts: list[str]) -> Any:
            return model.encode(texts, prompt=prompt, batch_size=64, normalize_embeddings=True)

    def encode_seconds(texts: list[str]) -> float:
        started = time.perf_counter()
        encode(texts)
        return time.perf_counter() - started

    # The reference runs before and after the import (this machine's speed drifts); the ratio uses their mean.
    planned = [
        c.content for f in files for c in chunk_document(parse_file(Path(f)), embedder.tokenizer, args.chunk_size)
    ]
    encode(planned[:256])  # warm torch's thread pool and allocator up for both figures
    encode_before = encode_seconds(planned)

    if hashing:
        embedder.inner.forget_features()
    started = time.perf_counter()
    result = session.import_document(files)
    import_seconds = time.perf_counter() - started
    assert result["data"]["success_count"] == len(files), result["message"]

    snapshot = service.reader(record.id).snapshot()
    texts = [t for s in snapshot.segments for t in s.chunks.column("content").to_pylist()]
    assert sorted(texts) == sorted(planned), "the reference encoded other texts than the import"
    encode_after = encode_seconds(texts)
    encode_mean = (encode_before + encode_after) / 2

    started = time.perf_counter()
    again = session.import_document(files)
    reimport_seconds = time.perf_counter() - started
    assert again["data"]["success_count"] == len(files)
    report: dict[str, Any] = {}
    if args.ray:
        report["ray"] = ray_figures(files, model_name, args.chunk_size, args.ray_cpus, home.parent / f"{home.name}-ray")
    return {
        "documents": len(files),
        "model": model_name,
        "device": service.embedding_device(record),
        "cpu_cores": os.cpu_count(),
        "chunks": len(texts),
        "chunks_per_second_import": round(len(texts) / import_seconds, 1),
        "chunks_per_second_encode": round(len(texts) / encode_mean, 1),
        "chunk_size": args.chunk_size,
        "encode_seconds_before_import": round(encode_before, 2),
        "encode_seconds_after_import": round(encode_after, 2),
        "import_seconds": round(import_seconds, 2),
        "import_over_encode": round(import_seconds / encode_mean, 3),
        "encode_rate_over_import_rate": round(encode_mean / import_seconds, 3),
        "reimport_seconds": round(reimport_seconds, 2),
        "first_over_reimport": round(import_seconds / reimport_seconds, 1),
        "targets": "import_over_encode <= 1.15 (import >= 0.87x the encode rate); hashing: >= 2000 chunks/s; "
        "first_over_reimport >= 20 (a real model)",
        "load_average_before": load_before,
        "load_average_after": load_average(),
        **report,
    }


def ray_figures(files: list[str], model: str, chunk_size: int, cpus: int, folder: Path) -> dict[str, Any]:
    """chunks/s of the local executor and of the ray executor on 1 and 2 local nodes, in this run."""
    import ray
    from ray.cluster_utils import Cluster

    def timed_import(service: KnowledgeBaseService, name: str, executor: str) -> tuple[float, dict[str, Any]]:
        session = service.session()
        session.create_knowledge_base(name, chunk_size, embedding_model=model)
        started = time.perf_counter()
        result = session.import_document(files, kb_name=name, executor=executor)
        seconds = time.perf_counter() - started
        assert result["data"]["success_count"] == len(files), result["message"]
        chunks = sum(f["chunk_count"] for f in result["data"]["success_files"])
        return chunks / seconds, result["data"]

    figures: dict[str, Any] = {}
    for nodes in (1, 2):
        # A fresh home each time: the embedding cache must not answer for the previous run.
        service = KnowledgeBaseService(folder / f"home-{nodes}")
        local_rate, _ = timed_import(service, "local", "local")
        if ray.is_initialized():
            ray.shutdown()
        small = {"num_cpus": cpus, "object_store_memory": 200 * 1024**2}
        cluster = Cluster(initialize_head=True, head_node_args={**small, "include_dashboard": False})
        for _ in range(nodes - 1):
            cluster.add_node(**small)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False)
        try:
            rate, data = timed_import(service, "ray", "ray")
        finally:
            ray.shutdown()
            cluster.shutdown()
        figures[f"{nodes}_node"] = {
            "chunks_per_second_local_executor": round(local_rate, 1),
            "chunks_per_second_ray": round(rate, 1),
            "ray_over_local": round(rate / local_rate, 3),
            "chunks_embedded_per_node": list(data["executor"]["chunks_embedded_per_node"].values()),
        }
    return figures


if __name__ == "__main__":
    main()
