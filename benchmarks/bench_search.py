"""Hybrid search latency (query embedding excluded) against a brute-force FAISS flat scan, same run.

    python benchmarks/bench_search.py --chunks 100000
    python benchmarks/bench_search.py --chunks 1000000      # builds an HNSW index: many minutes on 2 cores

A synthetic KB (clustered 384-d unit vectors, zipfian English/Chinese texts) is committed through
the store in one segment; hybrid search runs through the real search path (BM25 candidates, vector
candidates, exact rescoring, fusion, dedup). Reports p50/p95 of both, their ratio (target at 1M:
≤ 0.25× the flat scan), recall@10 of the vector candidates against the exact scan (target ≥ 0.95),
and the peak memory of the search process (target ≤ 2.5 GB at 1M).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import faiss
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_store import commit_synthetic_segment, synthetic_texts
from bench_vector import clustered_vectors

from kb_core import KnowledgeBaseService
from kb_core.edges.envelopes import Enveloped
from kb_core.features.retrieval.search import SearchFilters, SearchSettings, rank
from kb_core.store.folder import FolderSearcher


def memory_mb(field: str = "VmHWM") -> float:
    """A field of /proc/self/status in MB: VmHWM is the peak resident size, RssAnon/RssFile its parts now."""
    for line in Path("/proc/self/status").read_text(encoding="utf-8").splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def percentiles(samples: list[float]) -> tuple[float, float]:
    return float(np.percentile(samples, 50) * 1000), float(np.percentile(samples, 95) * 1000)


def build(home: Path, chunks: int) -> None:
    rng = np.random.default_rng(0)
    service = KnowledgeBaseService(home)
    session = Enveloped(service.session())
    session.create_knowledge_base("big", 256, embedding_model="hashing-384")
    record = service.find_kb("big")
    texts = synthetic_texts(chunks, rng)
    vectors = clustered_vectors(chunks, 1, clusters=max(16, chunks // 2000))
    commit_synthetic_segment(service, record, texts, vectors)
    np.save(home / "queries.npy", clustered_vectors(200, 99, clusters=max(16, chunks // 2000)))


def measure(home: Path, queries: int) -> dict[str, float]:
    service = KnowledgeBaseService(home)
    record = service.find_kb("big")
    snapshot = service.reader(record.id).snapshot()
    searcher = FolderSearcher.for_snapshot(snapshot, service.analyzer, record.embedding_model)
    all_vectors = np.load(home / "queries.npy")
    query_vectors = all_vectors[:queries]
    rng = np.random.default_rng(5)
    words = [f"w{int(i)}" for i in rng.zipf(1.3, size=(queries, 3)).ravel() % 5000]
    query_texts = [" ".join(words[i * 3 : i * 3 + 3]) for i in range(queries)]
    settings = SearchSettings(top_k=10)
    # Warm-up on other queries: the memory-mapped index files come into the page cache, as in a running server.
    for vector in all_vectors[queries:]:
        rank(searcher, "w1 w2", vector, settings, SearchFilters(), "big")
    hybrid = []
    for text, vector in zip(query_texts, query_vectors, strict=True):
        started = time.perf_counter()
        rank(searcher, text, vector, settings, SearchFilters(), "big")
        hybrid.append(time.perf_counter() - started)
    search_peak = memory_mb()  # before the reference flat copy below
    heap, mapped = memory_mb("RssAnon"), memory_mb("RssFile")  # mapped: index files paged in from disk
    segment = snapshot.segments[0].vectors
    matrix = segment.reconstruct(np.arange(segment.size))
    flat = faiss.IndexFlatIP(matrix.shape[1])
    flat.add(matrix)
    flat.search(all_vectors[queries : queries + 5], 10)  # warm-up
    scans, found = [], 0
    for vector in query_vectors:
        started = time.perf_counter()
        _, truth = flat.search(vector[None, :], 10)
        scans.append(time.perf_counter() - started)
        approx = {hit.row for hit in searcher.vector.search(vector, 10)}
        found += len(approx & set(truth[0].tolist()))
    del flat, matrix
    hybrid_p50, hybrid_p95 = percentiles(hybrid)
    flat_p50, flat_p95 = percentiles(scans)
    return {
        "hybrid_p50_ms": round(hybrid_p50, 2),
        "hybrid_p95_ms": round(hybrid_p95, 2),
        "flat_scan_p50_ms": round(flat_p50, 2),
        "flat_scan_p95_ms": round(flat_p95, 2),
        "hybrid_over_flat_p50": round(hybrid_p50 / flat_p50, 3),
        "vector_recall_at_10": round(found / (10 * len(query_vectors)), 4),
        "vector_index": segment.kind,
        "search_process_peak_memory_mb": round(search_peak, 1),
        "search_process_heap_mb": round(heap, 1),
        "search_process_mapped_files_mb": round(mapped, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=100, help="measured queries (the rest of 200 warm up)")
    parser.add_argument("--home", help="reuse (or keep) the synthetic home here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        home = Path(args.home) if args.home else Path(folder) / "home"
        started = time.perf_counter()
        if not (home / "queries.npy").exists():
            build(home, args.chunks)
        build_seconds = time.perf_counter() - started
        report = {"chunks": args.chunks, "build_seconds": round(build_seconds, 1), **measure(home, args.queries)}
        report["peak_memory_mb_with_reference"] = round(memory_mb(), 1)
        print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
