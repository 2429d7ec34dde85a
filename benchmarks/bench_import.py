"""End-to-end import time against the model's own encode() on the same chunk texts, and re-import time.

    python benchmarks/bench_import.py --documents 1200 --chunk-size 160
    python benchmarks/bench_import.py --model hashing --documents 3000        # the pipeline without a model
    python benchmarks/bench_import.py --model hashing --ray                   # + the ray executor, 1 and 2 nodes
    python benchmarks/bench_import.py --model hashing,all-MiniLM-L6-v2 --documents 3000 --model-documents 300
    python benchmarks/bench_import.py --corpus PATH/scifact --documents 5183 --encode-batches 256,512,1024 \
        --encode-sampled-batches 32 --import-runs 2 --json-out result.json    # a GPU run (#29)
    python benchmarks/bench_import.py --documents 300 --import-only --device-batch-tokens 32768   # its CPU rehearsal
    python benchmarks/bench_import.py --model all-MiniLM-L6-v2,multilingual-e5-small --documents 300

Reads SciFact abstracts from ``--corpus`` (a BEIR ``corpus.jsonl`` or its folder; default
../shared/eval/scifact) as the corpus (one .txt per abstract). Targets: import ≤ 1.15 × encode (the pipeline
adds at most 15 % to the model's time); re-import of the same files ≥ 20 × faster than the first import (the
embedding cache answers). Figures from one run.

A real model's reference is the library's own ``SentenceTransformer.encode`` of the same chunk texts on the same
device at each of ``--encode-batches``, before and after the import; the
report gives each rate, the best, the import's rate against the best (#29's target: >= 0.8x), the batch sizes
the import fed the model (``import_batches``, and each call of the first import: ``import_embed_calls``), the device,
the cosine of the stored vectors against the library's encode (``import_vs_encode_cosine_min``, >= 0.9999, or
in float16 as close as the library's encode at its smallest and largest batch are to each other:
``encode_self_cosine_min``), where the import's time went (``stages``: wall and CPU per stage from the pipeline's
own timing, the workers' too) and its fill and drain (``timeline``: when the model got its first chunks, what the
import did after its last call). Batch sizes in ``--encode-sampled-batches`` are timed on the first 4,096 chunk texts
only (the library's default 32 takes ~15 s for SciFact on an H200).

With ``--model hashing`` the reference is the hashing embedder's own ``embed_documents`` on the same chunk
texts, each figure starting with an empty feature memo: its ratio says how close the pipeline comes to keeping an
encoder busy (the GPU proxy: an import at >= 0.8x the encoder's rate). The load average is reported with each
figure (the machine may be shared).

Deleting files: on ext4 without a journal, creating a file within a minute (six while the freed inodes' table blocks
are unwritten) of deleting many in the same block group costs 20-30 times more kernel CPU (0.5-0.9 ms instead of
~30 µs here: the inode allocator looks up each recently freed inode it passes, ``recently_deleted``); an import
creates a file per document (its staging copy).
One run removing its temporary folder (thousands of files) just before the next creates its corpus and imports
would charge that to the next run: runs compared with each other should use ``--keep-files-in`` (and the caller
removes the folder after the last run).

With ``--ray`` the same files are imported again with ``--executor ray`` on a local Ray cluster of one, then two
nodes (``ray.cluster_utils.Cluster``, each node given ``--ray-cpus`` logical CPUs), each against the local
executor's import measured in the same run; cluster start-up is not timed, actor start-up is (every
import starts its actor pool). On one machine a second node adds no cores: the figure shows Ray's overhead,
not a cluster's speed-up.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from kb_core import KnowledgeBaseService
from kb_core.edges.envelopes import Enveloped

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
SAMPLE = 4096  # chunk texts for the stored-vector check and the sampled encode() batches


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
    parser.add_argument("--corpus", type=Path, default=SHARED / "eval" / "scifact", help="BEIR corpus.jsonl or folder")
    parser.add_argument(
        "--encode-batches", default="64", help="batch sizes of the library's encode() reference (real model)"
    )
    parser.add_argument("--import-runs", type=int, default=1, help="first imports, each into a fresh home")
    parser.add_argument("--no-reimport", action="store_true", help="skip the re-import (embedding cache) figure")
    parser.add_argument(
        "--encode-sampled-batches",
        default="",
        help="more batch sizes of encode(), each timed on the first 4,096 chunk texts only (e.g. 32, the library's "
        "default, which is slow on a whole corpus): reported apart, never the best",
    )
    parser.add_argument(
        "--import-only",
        "--hashing-import-only",
        action="store_true",
        help="the import's figures only (no reference encode, no chunking of the files here)",
    )
    parser.add_argument(
        "--device-batch-tokens",
        type=int,
        default=None,
        help="feed a CPU model like a GPU (token-budget batches, a GPU's call sizes): a CPU rehearsal of the GPU path",
    )
    parser.add_argument(
        "--keep-files-in",
        type=Path,
        default=None,
        help="write the corpus files and homes into a new folder here and leave them (default: a temporary folder, "
        "removed at the end); see 'Deleting files' below",
    )
    parser.add_argument("--json-out", type=Path, default=None, help="also write the report to this file")
    args = parser.parse_args()
    corpus = args.corpus / "corpus.jsonl" if args.corpus.is_dir() else args.corpus
    if not corpus.exists():
        raise SystemExit(f"{corpus} is absent; this benchmark reads a BEIR corpus (default: the shared SciFact)")
    reports = []
    kept = args.keep_files_in
    if kept is not None:
        kept.mkdir(parents=True, exist_ok=True)
    with contextlib.nullcontext(tempfile.mkdtemp(dir=kept)) if kept else tempfile.TemporaryDirectory() as folder:
        files = []
        with open(corpus, encoding="utf-8") as handle:
            for line, _ in zip(handle, range(args.documents), strict=False):
                record = json.loads(line)
                path = Path(folder) / f"{record['_id']}.txt"
                path.write_text(f"{record['title']}\n\n{record['text']}", encoding="utf-8")
                files.append(str(path))
        for model in args.model.split(","):
            from kb_core.engines.embedding import is_hashing_model

            subset = files if is_hashing_model(model) or not args.model_documents else files[: args.model_documents]
            reports.append(measure(model.strip(), subset, args, Path(folder) / f"home-{len(reports)}"))
    report = reports[0] if len(reports) == 1 else reports
    print(json.dumps(report, indent=2))
    if args.json_out is not None:
        args.json_out.write_text(json.dumps(report, indent=2), encoding="utf-8")


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def measure(model_name: str, files: list[str], args: argparse.Namespace, home: Path) -> dict[str, Any]:
    """Import ``files`` into a new KB of ``model_name`` against the model's own encode() of the same chunk texts."""
    load_before = load_average()
    service = KnowledgeBaseService(home)
    session = Enveloped(service.session())
    session.create_knowledge_base("bench", args.chunk_size, embedding_model=model_name)
    session.select_knowledge_base("bench")
    record = session.operations.current_kb()
    embedder = service.embedder(record)
    from kb_core.engines.embedding import is_hashing_model
    from kb_core.engines.parsing import parse_file

    parse_file(Path(files[0]))  # starting the parser (and segment writer) processes is not part of any figure
    hashing = is_hashing_model(model_name)
    if args.device_batch_tokens is not None and not hashing:
        embedder.inner.device_batch_tokens = args.device_batch_tokens
    batches = [int(b) for b in str(args.encode_batches).split(",") if b.strip()] if not hashing else [0]
    if hashing:
        inner = embedder.inner

        def encode(texts: list[str], batch: int) -> Any:
            inner.forget_features()  # each figure starts with an empty feature memo, as an import does
            return inner.embed_documents(texts)
    else:
        model = embedder.inner.model  # the SentenceTransformer behind the cache (loaded now, not timed)
        prompt = embedder.inner.document_prompt or None  # e5's "passage: ", which the import puts before each text

        def encode(texts: list[str], batch: int) -> Any:
            out = model.encode(
                texts, prompt=prompt, batch_size=batch, normalize_embeddings=True, show_progress_bar=False
            )
            _synchronise()
            return out

    def encode_seconds(texts: list[str], batch: int) -> float:
        started = time.perf_counter()
        encode(texts, batch)
        return time.perf_counter() - started

    # The reference runs before and after the import (this machine's speed drifts); the ratio uses their mean.
    import_only = args.import_only
    planned = [] if import_only else _chunk_texts(files, embedder.tokenizer, args.chunk_size)
    sampled = [int(b) for b in str(args.encode_sampled_batches).split(",") if b.strip()] if planned else []
    for batch in [*batches, *sampled] if planned else []:
        encode(planned[:256], batch)  # warm torch's thread pool and allocator (and the GPU's kernels) up
    before = {batch: encode_seconds(planned, batch) if planned else float("nan") for batch in batches}
    subset = planned[:SAMPLE]  # the same texts before and after
    before_sampled = {batch: encode_seconds(subset, batch) for batch in sampled}

    # Every first import's home, each with its KB's semantic floors measured already: an import measures them after
    # it, once per home and model (kept there); here that is the home's cost, not the pipeline's, so it is reported
    # apart (floors_seconds, the first home's) and no timed import pays it.
    targets = [(service, "bench")]
    targets += [_fresh(home, run, model_name, args.chunk_size) for run in range(1, max(1, args.import_runs))]
    floors_seconds = [_measure_floors(target) for target, _ in targets]

    # The model's batches during the import (a real model; the embedder records each call's), and when each call of
    # the first import ran (seconds since it began) with its windows.
    fed: list[int] = []
    calls: list[list[float]] = []
    import_started = [0.0]
    local = getattr(embedder, "inner", None)
    if not hashing and hasattr(local, "_embed_windows"):
        original_windows = local._embed_windows

        def recording(*a: Any, **k: Any) -> Any:
            started = time.perf_counter()
            out = original_windows(*a, **k)
            fed.extend(local.last_batches)
            ended = time.perf_counter()
            if len(import_seconds_each) == 0:
                start = round(started - import_started[0], 3)
                calls.append([start, round(ended - import_started[0], 3), sum(local.last_batches)])
            return out

        local._embed_windows = recording
    import_seconds_each: list[float] = []
    stages: dict[str, Any] = {}
    pipeline_start_s = math.nan  # when the pipeline's clock started, after the call began (the first import)
    importing_cpu_s: list[float] = []  # this process's CPU (every thread) during each import
    for target, kb in targets:
        if hashing:
            embedder.inner.forget_features()
        last: dict[str, Any] = {}
        cpu_started = time.process_time()
        started = import_started[0] = time.perf_counter()
        progress = functools.partial(last.__setitem__, "p")
        result = Enveloped(target.session()).import_document(files, kb_name=kb, progress=progress)
        _synchronise()
        import_seconds_each.append(time.perf_counter() - started)
        importing_cpu_s.append(time.process_time() - cpu_started)
        assert result["data"]["success_count"] == len(files), result["message"]
        if target is service and "p" in last:
            stages = last["p"].stages.report(last["p"].chunks_total)
            pipeline_start_s = last["p"].stages.origin - started
    import_seconds = min(import_seconds_each)

    snapshot = service.reader(record.id).snapshot()
    texts = [t for s in snapshot.segments for t in s.chunks.column("content").to_pylist()]
    assert import_only or sorted(texts) == sorted(planned), "the reference encoded other texts than the import"
    after = {batch: encode_seconds(texts, batch) if planned else float("nan") for batch in batches}
    after_sampled = {batch: encode_seconds(subset, batch) for batch in sampled}
    encode_mean = {batch: (before[batch] + after[batch]) / 2 for batch in batches}
    report: dict[str, Any] = {}
    if not hashing:
        report.update(
            import_batches=_batch_summary(fed),
            import_from_token_ids=getattr(local, "_template", None) is not None,  # False: through model.encode
            device_batch_tokens=getattr(local, "device_batch_tokens", None) or _budget(local),
            import_embed_calls=calls,
        )
    if not hashing and not import_only:
        # The stored vectors against the library's own encode of the same texts on the same device, and the library
        # against itself at its smallest and largest batch (its own precision there: float16 rounds per batch shape).
        sample = slice(0, min(len(texts), SAMPLE))
        stored = np.vstack([s.vectors.reconstruct(np.arange(s.chunks.num_rows)) for s in snapshot.segments])[sample]
        reference = np.asarray(encode(texts[sample], max(batches)), dtype=np.float32)
        smallest = min([*batches, *sampled])
        itself = np.asarray(encode(texts[sample], smallest), dtype=np.float32)
        rates = {str(b): round(len(texts) / encode_mean[b], 1) for b in batches}
        best = max(batches, key=lambda b: len(texts) / encode_mean[b])
        report.update(
            encode_batches=batches,
            chunks_per_second_encode_by_batch=rates,
            chunks_per_second_encode_by_batch_before=_rates(texts, before),
            chunks_per_second_encode_by_batch_after=_rates(texts, after),
            encode_best_batch=best,
            chunks_per_second_encode_best=rates[str(best)],
            import_over_best_encode_rate=round(len(texts) / import_seconds / float(rates[str(best)]), 3),
            chunks_per_second_encode_sampled_by_batch={
                str(b): round(len(subset) * 2 / (before_sampled[b] + after_sampled[b]), 1) for b in sampled
            },
            encode_sample_texts=len(subset),
            import_vs_encode_cosine_min=round(float(_cosines(stored, reference).min()), 6),
            import_vs_encode_cosine_mean=round(float(_cosines(stored, reference).mean()), 6),
            import_vs_encode_cosine_texts=len(stored),
            encode_self_cosine_batches=[smallest, max(batches)],
            encode_self_cosine_min=round(float(_cosines(itself, reference).min()), 6),
        )
    reference_batch = 64 if 64 in batches else batches[0]
    encode_mean_seconds = encode_mean[reference_batch] if planned else float("nan")
    encode_before = before[reference_batch] if planned else float("nan")
    encode_after = after[reference_batch] if planned else float("nan")

    reimport_seconds = float("nan")
    if not args.no_reimport:
        started = time.perf_counter()
        again = session.import_document(files)
        reimport_seconds = time.perf_counter() - started
        assert again["data"]["success_count"] == len(files)
    if args.ray:
        report["ray"] = ray_figures(files, model_name, args.chunk_size, args.ray_cpus, home.parent / f"{home.name}-ray")
    return {
        "documents": len(files),
        "model": model_name,
        "device": service.embedding_device(record),
        "cpu_cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)),
        "parser_processes": _parser_processes(),
        "import_seconds_each": [round(s, 2) for s in import_seconds_each],
        "chunks": len(texts),
        "chunks_per_second_import": round(len(texts) / import_seconds, 1),
        "chunks_per_second_encode": round(len(texts) / encode_mean_seconds, 1),
        "chunk_size": args.chunk_size,
        "encode_seconds_before_import": round(encode_before, 2),
        "encode_seconds_after_import": round(encode_after, 2),
        "import_seconds": round(import_seconds, 2),
        "import_over_encode": round(import_seconds / encode_mean_seconds, 3),
        "encode_rate_over_import_rate": round(encode_mean_seconds / import_seconds, 3),
        "reimport_seconds": round(reimport_seconds, 2),
        "first_over_reimport": round(import_seconds / reimport_seconds, 1) if reimport_seconds > 0 else None,
        "targets": "import_over_encode <= 1.15 (import >= 0.87x the encode rate); hashing: >= 2000 chunks/s; "
        "first_over_reimport >= 20 (a real model)",
        "load_average_before": load_before,
        "load_average_after": load_average(),
        "floors_seconds": round(floors_seconds[0], 3),
        # Amdahl's serial part: this process's CPU (all its threads; the workers are other processes) per chunk, each
        # import, from the operating system's count (the stages' figures count only the timed stages)
        "importing_process_cpu_us_per_chunk_each": [round(s / max(1, len(texts)) * 1e6, 1) for s in importing_cpu_s],
        **report,
        "timeline": _timeline(stages, import_seconds_each[0], pipeline_start_s),
        "stages": stages,
    }


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(axis=1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def _chunk_texts(files: list[str], tokenizer: Any, chunk_size: int) -> list[str]:
    """The chunk texts of ``files`` as an import makes them, parsed and chunked in the parser processes (requests of
    16 files, one thread per process, as the pipeline sends them)."""
    from concurrent.futures import ThreadPoolExecutor

    from kb_core.engines.parsing import ParseLimits, parse_and_chunk_files
    from kb_core.engines.parsing.isolation import PARSER_PROCESSES

    requests = [files[i : i + 16] for i in range(0, len(files), 16)]

    def chunk(paths: list[str]) -> list[str]:
        out = parse_and_chunk_files([Path(p) for p in paths], ParseLimits(), tokenizer, chunk_size)
        return [c.content for outcome in out if not isinstance(outcome, Exception) for c in outcome[1]]

    with ThreadPoolExecutor(PARSER_PROCESSES) as pool:
        return [text for texts in pool.map(chunk, requests) for text in texts]


def _timeline(stages: dict[str, Any], import_seconds: float, pipeline_start_s: float = math.nan) -> dict[str, float]:
    """The first import's fill and drain from its stage spans (seconds since the pipeline started): when the model got
    its first chunks and when its last call ended, when the last parser request ended, when the last commit ended, the
    drain (from the last embedding call or parser answer, whichever came later, to that commit) and what the import
    took after it (removing its staging copies, an automatic compaction). With ``pipeline_start_s`` (when the
    pipeline started, after the call began: the files' checks, the job's start) also ``tail_s``: from the last parser
    answer to the import's return, the part of an import that does not shrink with more parser processes (#29)."""
    embed, parsed, commit = (stages.get(name, {}) for name in ("embed", "parse_requests", "commit"))
    out: dict[str, float] = {}
    if "first_start_s" in embed:
        out.update(first_embed_start_s=embed["first_start_s"], last_embed_end_s=embed["last_end_s"])
    if "last_end_s" in parsed:
        out["last_parse_end_s"] = parsed["last_end_s"]
    if "last_end_s" in commit:
        out["last_commit_end_s"] = commit["last_end_s"]
        last_work = max(out.get("last_embed_end_s", 0.0), out.get("last_parse_end_s", 0.0))
        out["drain_s"] = round(commit["last_end_s"] - last_work, 3)
        out["after_last_commit_s"] = round(import_seconds - commit["last_end_s"], 3)
    if not math.isnan(pipeline_start_s):
        out["pipeline_start_s"] = round(pipeline_start_s, 3)
        if "last_parse_end_s" in out:
            out["tail_s"] = round(import_seconds - pipeline_start_s - out["last_parse_end_s"], 3)
    return out


def _fresh(home: Path, run: int, model: str, chunk_size: int) -> tuple[KnowledgeBaseService, str]:
    """A new home (an empty embedding cache) with a new KB, for another first import."""
    service = KnowledgeBaseService(home.parent / f"{home.name}-run{run}")
    Enveloped(service.session()).create_knowledge_base("bench", chunk_size, embedding_model=model)
    return service, "bench"


def _measure_floors(service: KnowledgeBaseService) -> float:
    """Measure the semantic floors of ``service``'s KB "bench" as an import into it would after the import (both
    scripts); the seconds it took."""
    session = Enveloped(service.session())
    session.select_knowledge_base("bench")
    record = session.operations.current_kb()
    started = time.perf_counter()
    try:
        for query in ("floor", "下限"):
            service.semantic_scale(record, query)
    except Exception as exc:  # best effort, as after an import (which then tries again, timed)
        print(f"semantic floors not measured before the import: {type(exc).__name__}: {exc}", file=sys.stderr)
        return float("nan")
    _synchronise()
    return time.perf_counter() - started


def _synchronise() -> None:
    """Wait for a GPU's queued work, so a timing ends when the card is done (nothing on a CPU)."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def _rates(texts: list[str], seconds: dict[int, float]) -> dict[str, float]:
    return {str(b): round(len(texts) / s, 1) for b, s in seconds.items()}


def _batch_summary(rows: list[int]) -> dict[str, Any]:
    if not rows:
        return {}
    ordered = sorted(rows)
    return {
        "batches": len(rows),
        "rows_min": ordered[0],
        "rows_median": ordered[len(ordered) // 2],
        "rows_max": ordered[-1],
        "rows_total": sum(rows),
    }


def _budget(local: Any) -> int | None:
    from kb_core.engines.embedding.local import DEVICE_BATCH_TOKENS

    device = getattr(getattr(local, "model", None), "device", None)
    return DEVICE_BATCH_TOKENS if device is not None and device.type != "cpu" else None


def _parser_processes() -> dict[str, int]:
    from kb_core.engines.parsing.isolation import PARSER_PROCESSES, WRITER_PROCESSES

    return {"parsers": PARSER_PROCESSES, "segment_writers": WRITER_PROCESSES}


def ray_figures(files: list[str], model: str, chunk_size: int, cpus: int, folder: Path) -> dict[str, Any]:
    """chunks/s of the local executor and of the ray executor on 1 and 2 local nodes, in this run."""
    import ray
    from ray.cluster_utils import Cluster

    def timed_import(service: KnowledgeBaseService, name: str, executor: str) -> tuple[float, dict[str, Any]]:
        session = Enveloped(service.session())
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
