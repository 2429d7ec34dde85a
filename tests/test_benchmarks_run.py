"""The benchmarks still run against the current library, at tiny sizes (their figures are not checked here).

A benchmark is only run when someone needs its figure, so an API change that breaks it goes unnoticed until
then (a segment-writer signature change once broke ``bench_store`` and ``bench_search`` silently). Each runs as
its own process, as a person runs it, and must print its JSON report.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, shared_path

BENCHMARKS = REPO_ROOT / "benchmarks"


def run_benchmark(script: str, *arguments: str, timeout: float = 240) -> object:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": str(REPO_ROOT)}
    completed = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *arguments],
        capture_output=True,
        text=True,
        encoding="utf-8",
        env=env,
        timeout=timeout,
        check=False,
    )
    assert completed.returncode == 0, f"{script} failed:\n{completed.stderr[-3000:]}"
    start = completed.stdout.find("{")
    start = min(s for s in (start, completed.stdout.find("[")) if s >= 0)
    return json.loads(completed.stdout[start:])


def test_bench_store_commits_a_synthetic_segment_and_reports_its_ratio() -> None:
    report = run_benchmark("bench_store.py", "--chunks", "1500", "--repeats", "1")
    assert isinstance(report, dict) and report, report


def test_bench_search_builds_a_synthetic_kb_and_compares_with_a_flat_scan(tmp_path: Path) -> None:
    report = run_benchmark("bench_search.py", "--chunks", "3000", "--queries", "20", "--home", str(tmp_path / "home"))
    assert isinstance(report, dict)
    assert report["chunks"] == 3000
    assert 0 < report["vector_recall_at_10"] <= 1


def test_bench_import_with_the_hashing_embedder_reports_throughput() -> None:
    shared_path("eval", "scifact", "corpus.jsonl")
    report = run_benchmark("bench_import.py", "--model", "hashing", "--documents", "20")
    assert isinstance(report, dict)
    assert report["documents"] == 20


# txtai_hybrid.py runs in txtai's own venv (txtai is not a dependency), served by bench_latency.py.
@pytest.mark.parametrize("script", sorted(p.name for p in BENCHMARKS.glob("*.py") if p.name != "txtai_hybrid.py"))
def test_every_benchmark_explains_its_usage(script: str) -> None:
    completed = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), "--help"],
        capture_output=True,
        text=True,
        encoding="utf-8",
        env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO_ROOT)},
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert "usage:" in completed.stdout
