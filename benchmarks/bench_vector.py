"""Benchmark kb_core.engines.vector_index: approximate (HNSW, IVF) against an exact flat scan of the same vectors.

Data: a synthetic mixture of Gaussian clusters in 384 dimensions, L2-normalised. Within-cluster noise has a
power-law spectrum under a random rotation (like real sentence embeddings, whose variance is concentrated in
few directions), so nearest neighbours are meaningful and recall is not the degenerate case of uniform noise.
Queries are fresh draws from the same mixture, not rows of the index.

Per size it reports build time, recall@10 against exact top-10 (from the flat index), single-query latency
p50/p95 through ``VectorSegment.search`` (also with 10 % of rows deleted, i.e. with an ID selector), and the
peak RSS of a separate process that loads the saved index (memory-mapped) and searches it.

    python benchmarks/bench_vector.py                   # quick: 20k and 100k
    python benchmarks/bench_vector.py --sizes 1000000   # the 1M run (HNSW build takes many minutes on 2 cores)
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kb_core.engines.vector_index import VectorIndexSettings, VectorSegment

DIM = 384


def clustered_vectors(rows: int, seed: int, *, clusters: int, dim: int = DIM, centre_seed: int = 1234) -> np.ndarray:
    """``rows`` normalised points from a fixed Gaussian mixture (same centres for every ``seed``)."""
    structure = np.random.default_rng(centre_seed)
    centres = structure.standard_normal((clusters, dim)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    rotation, _ = np.linalg.qr(structure.standard_normal((dim, dim)))
    spectrum = (np.arange(1, dim + 1, dtype=np.float64) ** -0.7).astype(np.float32)
    spectrum *= 1.1 / np.linalg.norm(spectrum)  # total noise norm ≈ 1.1 × centre norm: overlapping clusters
    rotation = (spectrum[:, None] * rotation.T).astype(np.float32)
    rng = np.random.default_rng(seed)
    out = np.empty((rows, dim), dtype=np.float32)
    for start in range(0, rows, 100_000):
        n = min(100_000, rows - start)
        labels = rng.integers(0, clusters, size=n)
        noise = rng.standard_normal((n, dim), dtype=np.float32) @ rotation
        block = centres[labels] + noise
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        out[start : start + n] = block
    return out


def percentiles(samples: list[float]) -> tuple[float, float]:
    values = np.asarray(samples) * 1000.0
    return float(np.percentile(values, 50)), float(np.percentile(values, 95))


def latency(segment: VectorSegment, queries: np.ndarray, live: np.ndarray | None, k: int = 10) -> tuple[float, float]:
    segment.search(queries[0], k, live)  # warm-up
    samples = []
    for q in queries:
        start = time.perf_counter()
        segment.search(q, k, live)
        samples.append(time.perf_counter() - start)
    return percentiles(samples)


def recall(segment: VectorSegment, queries: np.ndarray, truth: np.ndarray, live: np.ndarray | None) -> float:
    found = 0
    for q, expected in zip(queries, truth, strict=True):
        _, rows = segment.search(q, truth.shape[1], live)
        found += len(set(rows.tolist()) & set(expected.tolist()))
    return found / truth.size


def exact_truth(flat: VectorSegment, queries: np.ndarray, live: np.ndarray | None, k: int = 10) -> np.ndarray:
    return np.stack([flat.search(q, k, live)[1] for q in queries])


MEMORY_PROBE = """
import json, resource, sys, time
import numpy as np
sys.path.insert(0, {root!r})
from kb_core.engines.vector_index import VectorSegment
seg = VectorSegment.load({directory!r}, mmap={mmap!r})
queries = np.load({queries!r})
lat = []
for q in queries:
    t = time.perf_counter(); seg.search(q, 10, None); lat.append(time.perf_counter() - t)
# VmHWM, not ru_maxrss: Linux carries the parent's ru_maxrss across fork+exec.
hwm = next(int(l.split()[1]) for l in open("/proc/self/status", encoding="utf-8") if l.startswith("VmHWM"))
print(json.dumps({{"peak_rss_mb": hwm / 1024,
                  "p50_ms": float(np.percentile(lat, 50) * 1000)}}))
"""


def memory_probe(segment: VectorSegment, queries: np.ndarray, mmap: bool) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="kb_bench_") as tmp:
        segment.save(Path(tmp))
        np.save(Path(tmp) / "q.npy", queries)
        code = MEMORY_PROBE.format(
            root=str(Path(__file__).resolve().parents[1]), directory=tmp, mmap=mmap, queries=str(Path(tmp) / "q.npy")
        )
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        return json.loads(result.stdout.strip().splitlines()[-1])


def run(size: int, args: argparse.Namespace) -> dict:
    report: dict = {"rows": size}
    clusters = max(50, size // 1000)
    t0 = time.perf_counter()
    data = clustered_vectors(size, seed=1, clusters=clusters)
    queries = clustered_vectors(args.queries, seed=2, clusters=clusters)
    report["generate_s"] = round(time.perf_counter() - t0, 1)
    lat_queries = queries[: args.latency_queries]
    live = np.random.default_rng(3).random(size) >= 0.10  # 10 % tombstoned

    t0 = time.perf_counter()
    flat = VectorSegment.build(data, VectorIndexSettings(kind="flat"))
    report["flat"] = {"build_s": round(time.perf_counter() - t0, 1)}
    truth = exact_truth(flat, queries, None)
    truth_live = exact_truth(flat, queries, live)
    report["flat"]["p50_ms"], report["flat"]["p95_ms"] = latency(flat, lat_queries, None)
    report["flat"]["p50_ms_10pct_deleted"], _ = latency(flat, lat_queries, live)
    print(json.dumps({"rows": size, "flat": report["flat"]}), flush=True)

    for kind in args.kinds:
        settings = VectorIndexSettings(kind=kind, hnsw_m=args.hnsw_m, hnsw_ef_construction=args.ef_construction)
        t0 = time.perf_counter()
        segment = VectorSegment.build(data, settings)
        entry: dict = {"build_s": round(time.perf_counter() - t0, 1), "sweep": []}
        knobs = args.ef_search if kind == "hnsw" else args.nprobe
        for knob in knobs:
            if kind == "hnsw":
                segment.ef_search = knob
            else:
                segment.nprobe = knob
            p50, p95 = latency(segment, lat_queries, None)
            row = {
                "knob": knob,
                "recall@10": round(recall(segment, queries, truth, None), 4),
                "recall@10_10pct_deleted": round(recall(segment, queries, truth_live, live), 4),
                "p50_ms": round(p50, 3),
                "p95_ms": round(p95, 3),
                "p50_vs_flat": round(p50 / report["flat"]["p50_ms"], 4),
            }
            entry["sweep"].append(row)
            print(json.dumps({"rows": size, "kind": kind, **row}), flush=True)
        segment.ef_search = settings.hnsw_ef_search
        segment.nprobe = settings.ivf_nprobe
        if not args.skip_memory:
            entry["memory_mmap"] = memory_probe(segment, lat_queries, mmap=True)
            entry["memory_heap"] = memory_probe(segment, lat_queries, mmap=False)
            print(
                json.dumps(
                    {
                        "rows": size,
                        "kind": kind,
                        "memory_mmap": entry["memory_mmap"],
                        "memory_heap": entry["memory_heap"],
                    }
                ),
                flush=True,
            )
        report[kind] = entry
        del segment
    report["bench_peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[20_000, 100_000])
    parser.add_argument("--kinds", nargs="+", default=["hnsw", "ivf"], choices=["hnsw", "ivf"])
    parser.add_argument("--queries", type=int, default=500, help="queries for recall")
    parser.add_argument("--latency-queries", type=int, default=200)
    parser.add_argument("--hnsw-m", type=int, default=VectorIndexSettings.hnsw_m)
    parser.add_argument("--ef-construction", type=int, default=VectorIndexSettings.hnsw_ef_construction)
    parser.add_argument("--ef-search", type=int, nargs="+", default=[16, 32, 64, 128])
    parser.add_argument("--nprobe", type=int, nargs="+", default=[8, 16, 32, 64])
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--out", type=Path, help="also write the JSON report here")
    args = parser.parse_args()
    reports = [run(size, args) for size in args.sizes]
    text = json.dumps(reports, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
