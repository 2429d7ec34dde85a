"""What a person feels in the search lab: the real app in headless Chromium, against the service search it shows.

    python benchmarks/bench_app.py                                  # this checkout
    python benchmarks/bench_app.py --root /work/wt/old --root .     # another checkout first, as the reference

For each ``--root`` the app is served exactly as that checkout's ``scripts/run.sh`` serves it (``scripts/serve.sh``, the
one definition the browser tests use too; a checkout older than it as its run.sh did, Streamlit's file watcher on) on
a free loopback port over a new home with the demo KB (``KB_DEMO`` unset: the first page visit builds it with the real
multilingual-e5-small model; that first start is timed too) and driven in Debian's Chromium by Playwright at
1280 × 900 px:

* **click**: type a query (English and Chinese, each new to the app process) and click **Search**;
* **notch**: press the arrow key once on the focused vector-weight slider (0.05), ``--notches`` times down from
  0.70 and as many back up (the way back repeats settings already searched).

Each interaction is timed from the action to **results rendered**: the result cards show the chunk ids and the
scores (3 decimals) that ``Operations.search`` gives for that query and those settings, the "Weights asked" metric
shows the new weights, and Streamlit's running indicator (``[data-testid="stStatusWidget"]``) is gone, i.e. the
script run is over and nothing more will change. "visible" is the moment the ranking is shown (the run may still
be going: the old app went on searching for its other tabs).

The reference is the same search through ``Operations.search`` in this process on the same home, timed right before
the action: for a click the query's first search here (its query vector computed by the model), for a notch a
search with the query vector remembered (as in the app). Reported: p50 / p95 of each, the ratio to the reference
and the issue's target (p50 ≤ 3 × the service search + 300 ms), the load average before and after, where the app
shows it how many service searches each interaction ran, and the CPU time each interaction cost the app's server
process and the browser's processes (user + system from /proc: on a busy machine wall times stretch with the other
tenants' load, CPU times much less). Output: a table, and JSON with ``--json PATH``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from kb_core.features.results import SearchRequest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS, RunningApp  # noqa: E402  (the browser tests' app)

DEMO_KB_NAME = "Demo · 演示"
CLICK_QUERIES = [
    "hybrid search weights",
    "How are keyword and vector scores combined?",
    "chunk size and token limits",
    "evaluate retrieval with nDCG",
    "混合检索如何计算得分",
    "知识库管理",
    "文档如何分块",
    "评估与调参",
]
NOTCH_QUERIES = ["hybrid search weights", "知识库管理", "chunk size and token limits"]

# The page's ranking as (chunk id, score) pairs, top first: each card shows "score 0.523 on a 0–1 scale" and a
# caption ending in "chunk chk_…"; the "Weights asked" metric; whether a script run is going on.
PAGE_STATE = """() => {
  const main = document.querySelector('[data-testid="stMain"]') || document.body;
  const text = main.innerText;
  const ids = [...text.matchAll(/chunk (chk_[0-9a-f]+)/g)].map(m => m[1]);
  const scores = [...text.matchAll(/score ([0-9.]+) on a 0–1 scale/g)].map(m => m[1]);
  let asked = null;
  for (const box of document.querySelectorAll('[data-testid="stMetric"]')) {
    const label = box.querySelector('[data-testid="stMetricLabel"]');
    if (label && label.innerText.trim().startsWith('Weights asked')) {
      asked = box.querySelector('[data-testid="stMetricValue"]').innerText.trim();
    }
  }
  const counter = (text.match(/service: (\\d+) search/) || [])[1];
  return {ids, scores, asked, running: !!document.querySelector('[data-testid="stStatusWidget"]'),
          searches: counter === undefined ? null : Number(counter)};
}"""
MATCHES = """([state, want, idle]) => {
  const s = (PAGE_STATE)();
  const shown = s.ids.length === want.ids.length && s.ids.every((id, i) => id === want.ids[i])
    && s.scores.length === want.scores.length && s.scores.every((x, i) => x === want.scores[i])
    && s.asked === want.asked;
  return shown && (!idle || !s.running);
}""".replace("PAGE_STATE", PAGE_STATE)


TICKS = os.sysconf("SC_CLK_TCK")


def process_tree(root: int) -> list[int]:
    """``root`` and every process below it (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()
            except OSError:
                continue
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds the processes have used so far (those gone since are left out)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / TICKS


def percentiles(samples: list[float]) -> dict[str, float]:
    if not samples:
        return {"p50_ms": float("nan"), "p95_ms": float("nan"), "n": 0}
    return {
        "p50_ms": round(float(np.percentile(samples, 50)) * 1000, 1),
        "p95_ms": round(float(np.percentile(samples, 95)) * 1000, 1),
        "n": len(samples),
    }


class Reference:
    """``Operations.search`` in this process over the app's home (the call the search lab makes): the expected
    ranking and the service time."""

    def __init__(self, home: Path) -> None:
        from kb_core import KnowledgeBaseService

        self.session = KnowledgeBaseService(home).session()
        self.session.select_knowledge_base(DEMO_KB_NAME)
        # the model loads once, as in the app before the first search
        self.session.search(SearchRequest("warm up the model"))

    def search(self, query: str, vector_weight: float) -> tuple[dict[str, Any], float]:
        keyword_weight = round(1.0 - vector_weight, 4)
        start = time.perf_counter()
        result = self.session.search(SearchRequest(query, vector_weight=vector_weight, keyword_weight=keyword_weight))
        elapsed = time.perf_counter() - start
        chunks = result.chunks
        want = {
            "ids": [c["id"] for c in chunks],
            "scores": [f"{c['score']:.3f}" for c in chunks],
            "asked": f"{vector_weight:.2f} / {keyword_weight:.2f}",
        }
        return want, elapsed


def wait_idle(page: Any, timeout: float = 300_000) -> None:
    page.wait_for_timeout(300)
    page.locator('[data-testid="stStatusWidget"]').wait_for(state="hidden", timeout=timeout)


def timed(page: Any, action: Any, want: dict[str, Any], server: list[int], browser: list[int]) -> dict[str, Any]:
    """Seconds from ``action()`` to the expected ranking being visible, and to it with the run over; the CPU seconds
    the server and the browser spent meanwhile; the app's service-search counter after it (None where it shows
    none)."""
    cpu_server, cpu_browser = cpu_seconds(server), cpu_seconds(browser)
    start = time.perf_counter()
    action()
    page.wait_for_function(MATCHES, arg=[None, want, False], polling="raf", timeout=120_000)
    visible = time.perf_counter() - start
    page.wait_for_function(MATCHES, arg=[None, want, True], polling="raf", timeout=120_000)
    idle = time.perf_counter() - start
    page.wait_for_timeout(200)  # what the browser still draws after the last change (charts)
    return {
        "visible": visible,
        "idle": idle,
        "server_cpu": cpu_seconds(server) - cpu_server,
        "browser_cpu": cpu_seconds(browser) - cpu_browser,
        "searches": page.evaluate(PAGE_STATE)["searches"],
    }


def bench_root(root: Path, browser: Any, notches: int) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="bench-app-"))
    app = RunningApp(workdir / "home", demo=True, root=root)
    try:
        app.wait(timeout=120)
        context = browser.new_context(viewport={"width": 1280, "height": 900}, locale="en-US")
        page = context.new_page()
        page.set_default_timeout(60_000)
        start = time.perf_counter()
        page.goto(app.url)
        page.get_by_role("heading", name="Knowledge bases", exact=True).wait_for(timeout=600_000)
        wait_idle(page, 600_000)
        first_start = time.perf_counter() - start
        reference = Reference(app.home)
        page.locator('[data-testid="stSidebarNav"]').get_by_role("link", name="Search lab").click()
        page.get_by_label("Query", exact=True).wait_for()
        wait_idle(page)
        out: dict[str, Any] = {"first_start_s": round(first_start, 1)}
        server = process_tree(app.process.pid)
        browser = [p for p in process_tree(os.getpid()) if p not in server and p != os.getpid()]
        samples: dict[str, list[float]] = {
            f"{kind}_{part}": []
            for kind in ("click", "notch", "back")
            for part in ("visible", "idle", "reference", "server_cpu", "browser_cpu")
        }
        searches: dict[str, list[int]] = {"click": [], "notch": [], "back": []}

        def count(kind: str, before: int | None, after: int | None) -> None:
            if before is not None and after is not None:
                searches[kind].append(after - before)

        submit = page.get_by_test_id("stBaseButton-primaryFormSubmit").filter(has_text="Search")
        for query in CLICK_QUERIES:
            want, reference_s = reference.search(query, 0.7)
            page.get_by_label("Query", exact=True).fill(query)
            before = page.evaluate(PAGE_STATE)["searches"]
            got = timed(page, submit.click, want, server, browser)
            for part in ("visible", "idle", "server_cpu", "browser_cpu"):
                samples[f"click_{part}"].append(got[part])
            samples["click_reference"].append(reference_s)
            count("click", before, got["searches"])
        for query in NOTCH_QUERIES:
            want, _ = reference.search(query, 0.7)
            page.get_by_label("Query", exact=True).fill(query)
            timed(page, submit.click, want, server, browser)
            slider = page.get_by_role("slider", name="Vector weight").first
            weight = 0.7
            for key, kind in [("ArrowLeft", "notch")] * notches + [("ArrowRight", "back")] * notches:
                weight = round(weight + (-0.05 if key == "ArrowLeft" else 0.05), 2)
                want, reference_s = reference.search(query, weight)
                slider.focus()
                before = page.evaluate(PAGE_STATE)["searches"]
                got = timed(page, lambda key=key, slider=slider: slider.press(key), want, server, browser)
                for part in ("visible", "idle", "server_cpu", "browser_cpu"):
                    samples[f"{kind}_{part}"].append(got[part])
                samples[f"{kind}_reference"].append(reference_s)
                count(kind, before, got["searches"])
        for name, values in samples.items():
            out[name] = percentiles(values)
        for kind in ("click", "notch", "back"):
            reference_p50 = out[f"{kind}_reference"]["p50_ms"]
            out[f"{kind}_target_ms"] = round(3 * reference_p50 + 300, 1)
            out[f"{kind}_idle_ratio"] = round(out[f"{kind}_idle"]["p50_ms"] / reference_p50, 1)
            out[f"{kind}_searches_per_interaction"] = statistics.median(searches[kind]) if searches[kind] else None
        context.close()
        return out
    finally:
        app.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", action="append", type=Path, help="a checkout to serve (repeatable; default: this)")
    parser.add_argument("--notches", type=int, default=6, help="slider notches down (and as many back up) per query")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON here")
    args = parser.parse_args()
    if not Path(CHROMIUM).exists():
        sys.exit(f"{CHROMIUM} is missing: run scripts/install.sh --browser (Debian's chromium)")
    from playwright.sync_api import sync_playwright

    roots = [r.resolve() for r in (args.root or [ROOT])]
    results: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "cpus": os.cpu_count(),
        "load_before": [round(x, 2) for x in os.getloadavg()],
        "roots": {},
    }
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        for root in roots:
            results["roots"][str(root)] = bench_root(root, browser, args.notches)
        browser.close()
    results["load_after"] = [round(x, 2) for x in os.getloadavg()]
    print(f"search lab in Chromium at 1280 px; load {results['load_before']} → {results['load_after']}")
    print(
        f"{'root':34}{'interaction':10}{'visible p50/p95 ms':>22}{'idle p50/p95 ms':>20}{'service p50 ms':>16}"
        f"{'target ms':>11}{'searches':>10}{'CPU ms server / browser':>26}"
    )
    for root, out in results["roots"].items():
        print(f"{root[-34:]:34}first start (demo build) {out['first_start_s']} s")
        for kind in ("click", "notch", "back"):
            v, i, r = out[f"{kind}_visible"], out[f"{kind}_idle"], out[f"{kind}_reference"]
            n = out[f"{kind}_searches_per_interaction"]
            target = out[f"{kind}_target_ms"]
            cpu = f"{out[f'{kind}_server_cpu']['p50_ms']:.0f} / {out[f'{kind}_browser_cpu']['p50_ms']:.0f}"
            print(
                f"{'':34}{kind:10}{v['p50_ms']:>12.0f} / {v['p95_ms']:<7.0f}{i['p50_ms']:>10.0f} / "
                f"{i['p95_ms']:<7.0f}{r['p50_ms']:>14.1f}{target:>13.0f}{'' if n is None else n:>10}{cpu:>26}"
            )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
