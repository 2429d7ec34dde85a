"""Run a snippet in a child interpreter under an address-space cap and a time limit.

Hostile-input regression tests run their reproducer this way, so a regression (a loop that allocates
without end, an exponential expansion) fails the test with a clear reason instead of eating the machine.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


def run_bounded(code: str, *, memory_mb: int = 1024, timeout_s: float = 60.0, file_mb: int | None = None) -> str:
    """stdout of ``python -c code`` run with RLIMIT_AS of ``memory_mb`` (and RLIMIT_FSIZE of ``file_mb``: no file it
    writes may grow larger); fails the test on a crash or time-out.

    The child prints its peak resident memory as the last line ``peak_rss_mb=N`` (see :func:`peak_mb`).
    """
    limit = memory_mb * 1024 * 1024

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        if file_mb is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_mb << 20, file_mb << 20))

    # VmHWM, not ru_maxrss: after fork+exec ru_maxrss still counts the parent's (pytest's) resident set.
    script = textwrap.dedent(code) + (
        "\n_hwm = [l for l in open('/proc/self/status', encoding='utf-8') if l.startswith('VmHWM:')][0]"
        "\nprint(f'peak_rss_mb={int(_hwm.split()[1]) // 1024}')\n"
    )
    # Few malloc arenas and one thread per pool: the cap then measures the work, not thread reservations.
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO_ROOT),
        "MALLOC_ARENA_MAX": "2",
        "OMP_NUM_THREADS": "1",
        "RAYON_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "HF_HUB_OFFLINE": "1",
    }
    try:
        done = subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            preexec_fn=cap,
            env=env,
            cwd=REPO_ROOT,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"the reproducer ran longer than {timeout_s:g} s (under a {memory_mb} MB cap)")
    if done.returncode != 0:
        caps = f"a {memory_mb} MB cap" + (f" and a {file_mb} MB file size cap" if file_mb is not None else "")
        reason = f"the reproducer failed (exit {done.returncode}) under {caps}"
        pytest.fail(f"{reason}:\n{done.stderr[-3000:]}")
    return done.stdout


def peak_mb(stdout: str) -> int:
    return int(stdout.rsplit("peak_rss_mb=", 1)[1].split()[0])
