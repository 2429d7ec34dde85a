"""Screenshots of every page of the app, with English and Chinese content, into docs/screenshots/.

    .venv/bin/python scripts/screenshots.py [--out docs/screenshots] [--home DIR] [--only search-lab ...]

Serves the app as scripts/run.sh does (scripts/serve.sh) on a free loopback port over a fresh home (the first start
builds the demo KB with the real multilingual-e5-small model), then drives Debian's Chromium with Playwright
(scripts/install.sh --browser installs it) at 1280 px wide. ``--only`` takes the first start (always) and the named
groups of pages: import, documents, search-lab, evaluate, graph, transfer.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests.browser.conftest import RunningApp  # noqa: E402  (the one way the app is served)

CHROMIUM = os.environ.get("KB_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update"]

# A small knowledge bundle (default ontology: Document nodes, REFERENCES edges) in English and Chinese.
DEMO_BUNDLE = """\
- type: Document
  doc_uri: overview
  title: KB Workbench overview
  content: "KB Workbench is a local workbench for retrieval-augmented generation over your documents."
- type: Document
  doc_uri: hybrid-search
  title: Hybrid search
  content: "Hybrid search fuses BM25 keyword scores with vector similarity into one ranked list."
- type: Document
  doc_uri: bm25
  title: BM25
  content: "BM25 ranks chunks by the rare query terms they contain."
- type: Document
  doc_uri: embeddings
  title: Embeddings
  content: "Sentence embeddings place chunks and queries in one vector space; cosine measures closeness."
- type: Document
  doc_uri: score-breakdown
  title: Score breakdown
  content: "Every hit carries its raw and normalised scores, ranks and weights."
- type: Document
  doc_uri: 混合检索
  title: 混合检索
  content: "混合检索把关键词得分和向量相似度融合成一个排序。"
- type: Document
  doc_uri: 评估
  title: 评估与调参
  content: "用 nDCG@10 和 Recall@100 评估检索质量，并扫描向量权重。"
- type: Document
  doc_uri: bundles
  title: Knowledge bundles
  content: "A knowledge bundle is a YAML list of typed nodes and edges, validated as a whole before import."
- type: REFERENCES
  source: {doc_uri: overview}
  target: {doc_uri: hybrid-search}
  ref_type: explains
- type: REFERENCES
  source: {doc_uri: overview}
  target: {doc_uri: bundles}
  ref_type: explains
- type: REFERENCES
  source: {doc_uri: hybrid-search}
  target: {doc_uri: bm25}
  ref_type: uses
- type: REFERENCES
  source: {doc_uri: hybrid-search}
  target: {doc_uri: embeddings}
  ref_type: uses
- type: REFERENCES
  source: {doc_uri: score-breakdown}
  target: {doc_uri: hybrid-search}
  ref_type: explains
- type: REFERENCES
  source: {doc_uri: 混合检索}
  target: {doc_uri: hybrid-search}
  ref_type: translation
- type: REFERENCES
  source: {doc_uri: 评估}
  target: {doc_uri: 混合检索}
  ref_type: tunes
- type: REFERENCES
  source: {doc_uri: bundles}
  target: {doc_uri: overview}
  ref_type: part-of
"""
# Three broken items: an unknown type, a missing identity, an edge to a node that exists nowhere.
BROKEN_BUNDLE = """\
- {type: Document, doc_uri: ok-1, content: This item is fine.}
- {type: Human, name: Ada Lovelace}
- {type: Document, title: 没有标识的文档, content: 缺少 doc_uri。}
- {type: REFERENCES, source: {doc_uri: ok-1}, target: {doc_uri: doc-404}}
"""


GROUPS = ("import", "documents", "search-lab", "evaluate", "graph", "transfer")


def wait_idle(page, settle: int = 400) -> None:  # type: ignore[no-untyped-def]
    page.wait_for_timeout(settle)
    page.locator('[data-testid="stStatusWidget"]').wait_for(state="hidden", timeout=180_000)
    page.wait_for_timeout(300)


def go_to(page, title: str) -> None:  # type: ignore[no-untyped-def]
    page.locator('[data-testid="stSidebarNav"]').get_by_role("link", name=title, exact=True).click()
    wait_idle(page)


def shoot(page, out: Path, name: str, full: bool = True) -> None:  # type: ignore[no-untyped-def]
    """Streamlit scrolls inside its main block, so a "full page" shot means a viewport as tall as the content."""
    path = out / f"{name}.png"
    size = page.viewport_size
    if full:
        # Content still arriving (a tab or fragment drawn after the run indicator went) grows the page: measure
        # until two measurements half a second apart agree.
        height, previous = 0, -1
        for _ in range(20):
            if height == previous:
                break
            previous = height
            page.wait_for_timeout(500)
            height = page.evaluate(
                "() => Math.max(...[...document.querySelectorAll('[data-testid=\"stMainBlockContainer\"]')]"
                ".map(e => e.scrollHeight), 800)"
            )
        page.set_viewport_size({"width": size["width"], "height": min(int(height) + 120, 5000)})
    page.wait_for_timeout(1500)  # canvases (tables, charts) draw after layout
    page.screenshot(path=str(path))
    page.set_viewport_size(size)
    print(f"wrote {path.relative_to(REPO) if path.is_relative_to(REPO) else path}")


def shoot_tab(page, out: Path, tab: str, name: str, shows: str | None = None) -> None:  # type: ignore[no-untyped-def]
    page.get_by_role("tab", name=tab).click()
    wait_idle(page)
    if shows:  # a tab that runs only when shown: until its content is there
        page.get_by_text(shows).first.wait_for()
    shoot(page, out, name)


def hover_point(page, point) -> None:  # type: ignore[no-untyped-def]
    """Hover a plotly point so its tooltip shows (the page scrolled to the top, clear of Streamlit's header)."""
    page.evaluate("() => document.querySelectorAll('[data-testid=\"stMain\"]').forEach(e => e.scrollTo(0, 0))")
    page.wait_for_timeout(300)
    box = point.bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.wait_for_timeout(600)


def choose(page, label: str, option: str) -> None:  # type: ignore[no-untyped-def]
    box = page.get_by_role("combobox", name=label)
    box.click()
    box.fill(option)  # typing opens the list even where the click only focused the box
    page.get_by_role("option", name=option, exact=True).click()
    wait_idle(page)


def search(page, query: str) -> None:  # type: ignore[no-untyped-def]
    page.get_by_label("Query", exact=True).fill(query)
    page.get_by_test_id("stBaseButton-primaryFormSubmit").filter(has_text="Search").click()
    wait_idle(page)
    page.get_by_text("Score breakdown —").wait_for()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "screenshots")
    parser.add_argument("--home", type=Path, help="KB home to serve (default: a fresh temporary one)")
    parser.add_argument("--only", nargs="+", choices=GROUPS, help="only these pages (after the first start)")
    args = parser.parse_args()
    wanted = set(args.only or GROUPS)
    args.out.mkdir(parents=True, exist_ok=True)
    if not Path(CHROMIUM).exists():
        print(f"{CHROMIUM} is missing: run scripts/install.sh --browser", file=sys.stderr)
        return 1
    from playwright.sync_api import sync_playwright

    scratch = Path(tempfile.mkdtemp(prefix="kb-screens-"))
    home = args.home or scratch / "home"
    # served as scripts/run.sh serves it (scripts/serve.sh), by the browser tests' helper
    server = RunningApp(home, demo=True, log=scratch / "streamlit.log")
    url = server.url
    try:
        server.wait()
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            context = browser.new_context(viewport={"width": 1280, "height": 1000}, device_scale_factor=1)
            page = context.new_page()
            page.set_default_timeout(180_000)
            page.goto(url)
            # first start: the demo KB is built, the model's loading said before the progress bars
            page.get_by_text("Building the demo knowledge base").wait_for()
            page.get_by_text("Loading the embedding model").wait_for()
            page.wait_for_timeout(500)
            shoot(page, args.out, "00-first-start-demo-build", full=False)
            page.get_by_role("heading", name="Knowledge bases", exact=True).wait_for()
            wait_idle(page)
            shoot(page, args.out, "01-knowledge-bases")

            if "import" in wanted:
                go_to(page, "Import")
                upload = scratch / "uploads"
                upload.mkdir()
                (upload / "release-notes.txt").write_text(
                    "Release notes\n\nThe search lab now compares two settings side by side.\n", encoding="utf-8")
                (upload / "发布说明.txt").write_text(
                    "发布说明\n\n检索实验室现在可以并排比较两组设置。\n", encoding="utf-8")
                (upload / "broken.docx").write_bytes(b"PK\x03\x04 this is not a real DOCX")
                page.locator('[data-testid="stFileUploaderDropzoneInput"]').set_input_files(
                    [str(p) for p in sorted(upload.iterdir())])
                page.get_by_text("release-notes.txt").first.wait_for()
                page.get_by_role("button", name="Import uploaded files").click()
                page.get_by_text("Results", exact=True).wait_for()
                wait_idle(page)
                shoot(page, args.out, "02-import")

            if "documents" in wanted:
                go_to(page, "Documents")
                page.get_by_label("Document", exact=True).click()
                page.get_by_role("option", name="混合检索.docx").click()
                wait_idle(page)
                shoot(page, args.out, "03-documents")

            if "search-lab" in wanted:
                go_to(page, "Search lab")
                search(page, "How does hybrid search combine the vector and keyword scores?")
                # the README's picture: the query, the weights and the score bars, at the top of the page
                page.set_viewport_size({"width": 1280, "height": 1450})
                shoot(page, args.out, "readme-search-lab", full=False)
                page.set_viewport_size({"width": 1280, "height": 1000})
                page.locator('[data-testid="stExpander"] summary').filter(has_text="Score breakdown").first.click()
                wait_idle(page)
                page.get_by_text("Explain this rank").first.click()
                wait_idle(page)
                shoot(page, args.out, "04-search-lab-en")
                shoot_tab(page, args.out, "Rank movement across modes", "06-search-lab-rank-movement",
                          shows="Rank of each chunk in the top")
                shoot_tab(page, args.out, "A/B comparison", "07-search-lab-ab", shows="Shared chunks")
                page.get_by_role("tab", name="Results").click()
                wait_idle(page)
                search(page, "混合检索如何计算得分？")  # the English-only model: the language guard steps in
                shoot(page, args.out, "05-search-lab-zh")
                page.get_by_text("Multi-keyword (rag_search)").click()
                wait_idle(page)
                page.get_by_label("Keywords (comma separated)").fill("权重, BM25, fusion")
                page.get_by_test_id("stBaseButton-primaryFormSubmit").filter(has_text="Search").click()
                wait_idle(page)
                shoot(page, args.out, "08-search-lab-multi-keyword")

            if "evaluate" in wanted:
                go_to(page, "Evaluate")  # the demo judgments are the default on the demo KB
                page.get_by_role("button", name="Run evaluation").click()
                page.get_by_text("Per query, worst first").wait_for()
                wait_idle(page)
                shoot(page, args.out, "09-evaluate")
                # one kept run, two of its settings: where hybrid beats keyword-only search, query by query
                choose(page, "Setting of A", "keyword")
                choose(page, "Setting of B", "hybrid (default)")
                page.get_by_role("heading", name="Compare runs").evaluate("e => e.scrollIntoView({block: 'start'})")
                page.mouse.move(1430, 600)  # clear of the charts' toolbars and the sidebar's button
                shoot(page, args.out, "15-evaluate-compare-runs", full=False)

            if "graph" in wanted:
                go_to(page, "Knowledge graph")
                page.get_by_role("tab", name="Import bundle").click()
                page.get_by_label("Bundle (YAML)").fill(DEMO_BUNDLE)
                page.get_by_role("button", name="Import pasted bundle").click()
                page.get_by_text("Imported the bundle").wait_for()
                wait_idle(page)
                page.get_by_role("tab", name="Graph", exact=True).click()
                wait_idle(page)
                page.get_by_label("Inspect a node").click()
                page.get_by_role("option", name="Document: doc_uri=hybrid-search").click()
                wait_idle(page)
                hover_point(page, page.locator(".js-plotly-plot .scatterlayer .trace .points path").last)
                shoot(page, args.out, "10-knowledge-graph")
                page.get_by_role("tab", name="Import bundle").click()
                page.get_by_label("Bundle (YAML)").fill(BROKEN_BUNDLE)
                page.get_by_role("button", name="Import pasted bundle").click()
                page.get_by_text("The bundle was refused").wait_for()
                wait_idle(page)
                page.get_by_role("tab", name="Import bundle").click()
                wait_idle(page)
                shoot(page, args.out, "11-knowledge-graph-refused-bundle")
                shoot_tab(page, args.out, "Ontology", "12-knowledge-graph-ontology")
                shoot_tab(page, args.out, "Schema", "13-knowledge-graph-schema")

            if "transfer" in wanted:
                go_to(page, "Backup & transfer")
                page.get_by_role("button", name="Prepare export file").click()
                page.get_by_role("button", name="Download").wait_for()
                wait_idle(page)
                backup = scratch / "backup.kbx"
                page.get_by_role("tab", name="Path on the server").nth(0).click()
                page.get_by_label("Export file path (on the machine that runs the app)").nth(0).fill(str(backup))
                page.get_by_label("Export file path (on the machine that runs the app)").nth(0).press("Enter")
                wait_idle(page)
                page.get_by_role("button", name="Export to this path").click()
                page.get_by_text(f"to {backup}").wait_for()
                page.get_by_role("tab", name="Path on the server").nth(1).click()
                page.get_by_label("Export file path (on the machine that runs the app)").nth(1).fill(str(backup))
                page.get_by_label("Export file path (on the machine that runs the app)").nth(1).press("Enter")
                wait_idle(page)
                page.get_by_role("button", name="Import this file").click()
                page.get_by_text("Knowledge bases imported").wait_for()
                wait_idle(page)
                page.get_by_role("tab", name="Download").click()
                wait_idle(page)
                shoot(page, args.out, "14-export-import")
            browser.close()
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
