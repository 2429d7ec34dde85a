"""Start-up time of the ``kb`` command: each command run as a whole process, several times, as a person runs it.

    python benchmarks/bench_cli.py                                   # this checkout, 7 runs of each command
    python benchmarks/bench_cli.py --root /work/wt/old --root .      # another checkout as the reference, same run

A home with the demo KB (data/demo, all-MiniLM-L6-v2) is built once in a temporary folder (or ``--home``). Each
command then runs ``--runs`` times as ``python -m kb_core.edges.cli --home HOME …`` (what the ``kb`` script runs) with
``PYTHONPATH`` and the working directory set to each ``--root``, the roots taking turns run by run so drift of the
machine's speed hits them alike. ``kb search`` is cold every time: each process loads the model for its query
(queries are never in the embedding cache). Reported per root and command: p50 and min wall seconds, the p50 of
CPU seconds (user + system: less sensitive than wall time to other processes on the machine), whether the process
imported torch and transformers (one extra run with ``-X importtime``), the ratio of each p50 to the first root's,
and the load average (``os.getloadavg``) before and after. Output: a table, and JSON with ``--json PATH``.

Targets (issue #26, 2 cores): ``kb --help`` ≤ 0.4 s, ``kb list`` ≤ 0.8 s, a cold ``kb search`` ≤ 3 s.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kb_core.edges.envelopes import Enveloped

ROOT = Path(__file__).resolve().parent.parent
QUERY = "How are keyword and vector scores combined?"
TARGETS = {"--help": 0.4, "list": 0.8, "search (cold)": 3.0}


def commands(home: Path) -> dict[str, list[str]]:
    base = ["--home", str(home)]
    return {
        "--help": ["--help"],
        "list": [*base, "list"],
        "docs": [*base, "docs"],
        "info": [*base, "info"],
        "verify": [*base, "verify"],
        "token list": [*base, "token", "list"],
        "search (cold)": [*base, "search", QUERY],
    }


def environment(root: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(root),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "PYTHONDONTWRITEBYTECODE": "0",
    }


def run_once(root: Path, argv: list[str]) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system) of one run of ``kb ARGV``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "kb_core.edges.cli", *argv],
        cwd=root, env=environment(root), capture_output=True, text=True, encoding="utf-8", timeout=600,
    )
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"kb {' '.join(argv)} failed in {root}: {done.stderr[-2000:]}")
    return elapsed, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def heavy_imports(root: Path, argv: list[str]) -> dict[str, bool]:
    """Which heavy libraries the command imports (one run with ``-X importtime``)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "kb_core.edges.cli", *argv],
        cwd=root, env=environment(root), capture_output=True, text=True, encoding="utf-8", timeout=600,
    )
    names = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    return {lib: lib in names for lib in ("torch", "transformers", "sentence_transformers", "pandas")}


def build_home(home: Path) -> None:
    """The demo KB, selected as the CLI's current KB (built with this checkout's code)."""
    sys.path.insert(0, str(ROOT))
    from kb_core import KnowledgeBaseService
    from kb_core.session.demo import DEMO_KB_NAME, ensure_demo_kb

    session = Enveloped(KnowledgeBaseService(home).session("cli"))
    if not any(kb["name"] == DEMO_KB_NAME for kb in session.list_knowledge_bases()["data"]["knowledge_bases"]):
        result = ensure_demo_kb(session, embedding_model="all-MiniLM-L6-v2")  # a model every compared checkout reads
        if result is not None and not result["success"]:
            raise RuntimeError(result["message"])
    session.select_knowledge_base(DEMO_KB_NAME)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", action="append", type=Path, help="a checkout to run (repeatable; default: this one)")
    parser.add_argument("--home", type=Path, help="a home to reuse (default: a new temporary one with the demo KB)")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--only", action="append", help="run only these commands (names as in the table)")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON here")
    args = parser.parse_args()
    roots = [r.resolve() for r in (args.root or [ROOT])]
    temporary = None
    if args.home is None:
        temporary = tempfile.TemporaryDirectory(prefix="bench-cli-")
        args.home = Path(temporary.name) / "home"
    build_home(args.home)
    table = {name: argv for name, argv in commands(args.home).items() if not args.only or name in args.only}
    load_before = os.getloadavg()
    wall: dict[str, dict[str, list[float]]] = {str(r): {name: [] for name in table} for r in roots}
    cpu: dict[str, dict[str, list[float]]] = {str(r): {name: [] for name in table} for r in roots}
    for name, argv in table.items():
        for root in roots:  # a first, untimed run per command: the OS file cache, .pyc files
            run_once(root, argv)
        for turn in range(args.runs):
            for root in roots if turn % 2 == 0 else list(reversed(roots)):
                seconds, cpu_seconds = run_once(root, argv)
                wall[str(root)][name].append(seconds)
                cpu[str(root)][name].append(cpu_seconds)
    load_after = os.getloadavg()
    imports = {str(r): {name: heavy_imports(r, argv) for name, argv in table.items()} for r in roots}
    reference = str(roots[0])
    results: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "cpus": os.cpu_count(),
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in load_after],
        "runs": args.runs,
        "roots": {},
    }
    for root in roots:
        rows = {}
        for name in table:
            p50 = statistics.median(wall[str(root)][name])
            rows[name] = {
                "p50_s": round(p50, 3),
                "min_s": round(min(wall[str(root)][name]), 3),
                "cpu_p50_s": round(statistics.median(cpu[str(root)][name]), 3),
                "ratio_to_reference_p50": round(p50 / statistics.median(wall[reference][name]), 3),
                "target_s": TARGETS.get(name),
                **{f"imports_{lib}": loaded for lib, loaded in imports[str(root)][name].items()},
            }
        results["roots"][str(root)] = rows
    print(f"kb start-up, {args.runs} runs each; load {results['load_before']} → {results['load_after']}")
    print(f"{'command':15}{'root':28}{'p50 s':>8}{'min s':>8}{'cpu s':>8}{'÷ ref':>7}{'target':>8}  torch"
          "  transformers")
    for name in table:
        for root in roots:
            row = results["roots"][str(root)][name]
            target = f"{row['target_s']:.1f}" if row["target_s"] else "–"
            print(
                f"{name:15}{str(root)[-28:]:28}{row['p50_s']:8.3f}{row['min_s']:8.3f}{row['cpu_p50_s']:8.3f}"
                f"{row['ratio_to_reference_p50']:7.2f}{target:>8}  {'yes' if row['imports_torch'] else 'no':5}  "
                f"{'yes' if row['imports_transformers'] else 'no'}"
            )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2), encoding="utf-8")
    if temporary is not None:
        temporary.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
