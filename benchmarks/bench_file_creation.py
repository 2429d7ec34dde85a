"""Creating many files from several processes at once: in one folder, or spread over a folder per process (#29).

    python benchmarks/bench_file_creation.py                          # parser processes as an import starts them
    python benchmarks/bench_file_creation.py --processes 15 --files 5183 --rounds 3

An import's parser processes each make staging copies of the files they parse (open with ``O_CREAT | O_EXCL |
O_NOFOLLOW``, copy with ``sendfile``), several thousand of them at once. Creating a name takes the folder's inode
lock for the whole lookup, inode allocation and directory insertion, so processes creating files in one folder
queue behind each other, and a waiter spins on that lock while the holder runs (CPU charged to the waiter). Here
each process copies its share of ``--files`` small files (``--size`` bytes, like a SciFact abstract) into
``one_folder`` (all into the same folder, as staging did before) or ``folder_per_process`` (each into its own),
alternating, each round into new folders. Reported per layout: wall seconds and the processes' CPU (user + system)
per file, best of the rounds; ``one_over_spread`` > 1 means one folder is slower.

``--delete-between`` deletes each round's copies before the next round: on ext4 without a journal the inode
allocator then looks up every inode freed in the last minute or so that it passes (``recently_deleted``), so
creating a file costs 20-30 times more CPU in either layout (and holds the folder's lock that much longer).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

LAYOUTS = ("one_folder", "folder_per_process")
CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def copy_files(sources: list[str], folder: str, start: Any, results: Any) -> None:
    """Copy ``sources`` into ``folder`` once ``start`` is set; put (wall, cpu) on ``results``."""
    os.makedirs(folder, exist_ok=True)
    start.wait()
    wall, cpu = time.perf_counter(), time.process_time()
    for index, source in enumerate(sources):
        fd_in = os.open(source, os.O_RDONLY | os.O_CLOEXEC)
        fd_out = os.open(os.path.join(folder, f"{index}-{os.path.basename(source)}"), CREATE, 0o600)
        try:
            offset = 0
            while sent := os.sendfile(fd_out, fd_in, offset, 1 << 20):
                offset += sent
        finally:
            os.close(fd_in)
            os.close(fd_out)
    results.put((time.perf_counter() - wall, time.process_time() - cpu))


def one_round(sources: list[str], target: Path, processes: int, spread: bool) -> dict[str, float]:
    context = multiprocessing.get_context("fork")
    start, results = context.Event(), context.Queue()
    shares = [sources[p::processes] for p in range(processes)]
    workers = [
        context.Process(
            target=copy_files,
            args=(share, str(target / (f"files-{p}" if spread else "files")), start, results),
        )
        for p, share in enumerate(shares)
    ]
    for worker in workers:
        worker.start()
    time.sleep(0.5)  # every process started and waiting
    started = time.perf_counter()
    start.set()
    figures = [results.get() for _ in workers]
    wall = time.perf_counter() - started
    for worker in workers:
        worker.join()
    cpu = sum(c for _, c in figures)
    return {"wall_s": wall, "cpu_s": cpu, "cpu_us_per_file": cpu / len(sources) * 1e6}


def main() -> None:
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", type=int, default=max(2, min(32, cores - 1)), help="as PARSER_PROCESSES")
    parser.add_argument("--files", type=int, default=5183)
    parser.add_argument("--size", type=int, default=1500, help="bytes per file")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of both layouts, alternating")
    parser.add_argument("--layouts", default=",".join(LAYOUTS), help="the layouts to run, comma-separated")
    parser.add_argument("--delete-between", action="store_true", help="delete each round's copies before the next")
    parser.add_argument("--folder", type=Path, default=None, help="where to work (default: a temporary folder)")
    parser.add_argument("--json-out", type=Path, default=None)
    args = parser.parse_args()
    load_before = " ".join(f"{x:.2f}" for x in os.getloadavg())
    with tempfile.TemporaryDirectory(dir=args.folder) as work:
        root = Path(work)
        corpus = root / "corpus"
        corpus.mkdir()
        sources = []
        for i in range(args.files):
            path = corpus / f"{i}.txt"
            path.write_bytes(bytes([97 + i % 26]) * args.size)
            sources.append(str(path))
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in args.layouts.split(",")}
        previous = None
        for round_number in range(args.rounds):
            for layout in runs:
                if previous is not None and args.delete_between:
                    shutil.rmtree(previous)
                target = previous = root / f"staging-{round_number}-{layout}"
                target.mkdir()
                runs[layout].append(one_round(sources, target, args.processes, layout == "folder_per_process"))
    best = {layout: min(r["wall_s"] for r in rounds) for layout, rounds in runs.items()}
    cpu = {layout: min(r["cpu_us_per_file"] for r in rounds) for layout, rounds in runs.items()}
    report: dict[str, Any] = {
        "processes": args.processes,
        "usable_cores": cores,
        "files": args.files,
        "file_bytes": args.size,
        "delete_between": args.delete_between,
        "rounds": {layout: [{k: round(v, 4) for k, v in r.items()} for r in rounds] for layout, rounds in runs.items()},
        "wall_s_best": {k: round(v, 4) for k, v in best.items()},
        "cpu_us_per_file_best": {k: round(v, 1) for k, v in cpu.items()},
        "load_average_before": load_before,
        "load_average_after": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }
    if len(runs) == 2:
        report["one_over_spread_wall"] = round(best["one_folder"] / best["folder_per_process"], 2)
        report["one_over_spread_cpu"] = round(cpu["one_folder"] / cpu["folder_per_process"], 2)
    print(json.dumps(report, indent=2))
    if args.json_out is not None:
        args.json_out.write_text(json.dumps(report, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
