"""Imports as people run them (#34), in real headless Chromium against the app served as scripts/run.sh serves it
(scripts/serve.sh), with the real multilingual-e5-small model: an import is a job of the server, so it goes on while
the user visits other pages and reloads, a cancel stops its work within seconds, and SIGTERM stops the server
within seconds, leaving the knowledge base consistent. One app serves the module; the last test stops it."""

from __future__ import annotations

import os
import random
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from docx import Document

from kb_core import KnowledgeBaseService
from kb_core.edges.envelopes import Enveloped
from tests.browser.conftest import RunningApp

pytestmark = [pytest.mark.browser, pytest.mark.model, pytest.mark.slow]

KB = "Jobs · 任务"
TICKS = os.sysconf("SC_CLK_TCK")
WORDS = ["hybrid", "search", "weights", "keyword", "vector", "score", "chunk", "token", "model", "import",
         "document", "knowledge", "retrieval", "fusion", "ranking", "index", "query", "answer", "混合", "检索", "权重",
         "关键词", "向量", "文档", "知识库"]


def wait_idle(page) -> None:  # type: ignore[no-untyped-def]
    page.wait_for_timeout(300)
    page.locator('[data-testid="stStatusWidget"]').wait_for(state="hidden", timeout=90_000)


def go_to(page, title: str) -> None:  # type: ignore[no-untyped-def]
    page.locator('[data-testid="stSidebarNav"]').get_by_role("link", name=title).click()
    page.get_by_role("heading", level=1).filter(has_text=re.compile(title.split()[0], re.I)).wait_for()


def text_file(path: Path, paragraphs: int, seed: int) -> Path:
    chooser = random.Random(seed)
    path.write_text(
        "\n\n".join(" ".join(chooser.choice(WORDS) for _ in range(90)) + "." for _ in range(paragraphs)),
        encoding="utf-8",
    )
    return path


def process_tree_cpu(pid: int) -> float:
    """CPU seconds used so far by ``pid`` and every process below it (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()
            except OSError:
                continue
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        todo += children.get(current, [])
        try:
            fields = Path(f"/proc/{current}/stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / TICKS


def in_flight(app: RunningApp) -> list[tuple[str, str]]:
    session = Enveloped(KnowledgeBaseService(app.home).session())
    return [(d["name"], d["status"]) for d in session.list_documents(KB)["data"]["documents"]
            if d["status"] not in ("ready", "failed")]


def leftovers(app: RunningApp) -> list[str]:
    """Staging copies, uploads and in-flight files of imports that ended, and upload folders in the server's TMPDIR."""
    found = [str(p) for p in app.home.glob("kbs/*/staging/*")] + [str(p) for p in app.home.glob("kbs/*/jobs/*")]
    return found + [str(p) for p in Path(app.environment["TMPDIR"]).glob("kb-upload-*")]


@pytest.fixture(scope="module")
def jobs_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningApp]:
    root = tmp_path_factory.mktemp("jobs")
    (root / "tmp").mkdir()
    session = Enveloped(KnowledgeBaseService(root / "home").session())
    assert session.create_knowledge_base(KB, 256, embedding_model="multilingual-e5-small")["success"]
    app = RunningApp(root / "home", environment={"TMPDIR": str(root / "tmp")})
    try:
        app.wait()
        yield app
    finally:
        if app.process.poll() is None:
            app.stop()


def open_import_page(app: RunningApp, pages):  # type: ignore[no-untyped-def]
    page = pages()
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(app.url)
    page.get_by_role("heading", name="Knowledge bases", exact=True).wait_for()
    assert page.get_by_role("combobox", name="Current knowledge base").input_value() == KB
    go_to(page, "Import")
    wait_idle(page)
    return page


def upload(page, files: list[Path]) -> None:  # type: ignore[no-untyped-def]
    page.locator('[data-testid="stFileUploaderDropzoneInput"]').set_input_files([str(f) for f in files])
    page.get_by_text(files[0].name).first.wait_for()
    page.get_by_role("button", name="Import uploaded files").click()
    page.get_by_role("heading", name="Running").wait_for()


def test_an_import_goes_on_across_pages_and_a_reload_and_shows_its_results(
    jobs_app: RunningApp, pages, tmp_path: Path  # type: ignore[no-untyped-def]
) -> None:
    files = [text_file(tmp_path / f"notes-{i}.txt", 20, i) for i in range(3)]
    files.append(text_file(tmp_path / "笔记.txt", 20, 7))
    document = Document()
    document.add_heading("Fusion 融合", level=1)
    for paragraph in text_file(tmp_path / "body", 20, 9).read_text(encoding="utf-8").split("\n\n"):
        document.add_paragraph(paragraph)
    document.save(str(tmp_path / "report.docx"))
    files.append(tmp_path / "report.docx")

    page = open_import_page(jobs_app, pages)
    upload(page, files)
    # the uploader is cleared at once: the files are the job's now
    assert page.locator('[data-testid="stFileUploaderFile"]').count() == 0

    # other pages: the import goes on, and the sidebar shows it on each
    for title in ("Documents", "Search lab"):
        go_to(page, title)
        page.locator('[data-testid="stSidebar"]').get_by_text(f"Importing into {KB}").wait_for()
    go_to(page, "Import")
    page.get_by_role("heading", name="Running").wait_for()  # re-attached to the running job
    assert page.get_by_role("button", name="Cancel import").is_visible()

    # a reload is a new browser session: it finds its job again by the id in the address
    assert "job=job_" in page.url
    page.reload()
    page.get_by_role("heading", name="Import documents").wait_for()
    page.get_by_role("heading", name="Running").wait_for(timeout=10_000)
    page.get_by_text(re.compile(r"notes-0\.txt: (waiting|parsing|embedding|done)")).first.wait_for()

    page.get_by_text("Imported 5 of 5 file(s)").wait_for(timeout=300_000)
    results = page.locator('[data-testid="stDataFrame"]').last
    results.wait_for()
    wait_idle(page)
    session = Enveloped(KnowledgeBaseService(jobs_app.home).session())
    listed = session.list_documents(KB)["data"]["documents"]
    assert sorted(d["name"] for d in listed) == sorted(f.name for f in files)
    # every upload is known by its own name, never by a temporary path
    assert all(d["status"] == "ready" and d["file_path"] == d["name"] for d in listed)
    counts = page.locator('[data-testid="stSidebar"] [data-testid="stCaptionContainer"]').filter(
        has_text="documents ·").first.inner_text()
    assert counts.startswith("5 documents · "), counts
    assert leftovers(jobs_app) == []


def test_cancel_stops_the_work_within_seconds_and_leaves_no_embedding_document(
    jobs_app: RunningApp, pages, tmp_path: Path  # type: ignore[no-untyped-def]
) -> None:
    big = text_file(tmp_path / "big.txt", 800, 3)  # ~0.7 MB: minutes of embedding
    page = open_import_page(jobs_app, pages)
    upload(page, [big])
    page.get_by_text(re.compile(r"big\.txt: embedding \(\d+/\d+ chunks\)")).wait_for(timeout=180_000)
    page.get_by_role("button", name="Cancel import").click()
    clicked = time.monotonic()
    page.get_by_text(f"Import into '{KB}' cancelled").wait_for(timeout=10_000)
    assert time.monotonic() - clicked < 10
    page.wait_for_timeout(max(0, int((clicked + 5 - time.monotonic()) * 1000)))
    before = process_tree_cpu(jobs_app.process.pid)
    time.sleep(2)
    used = process_tree_cpu(jobs_app.process.pid) - before
    # 5 s after the click, the app's processes (server and parser processes) are idle: 0.4-0.8 CPU-s per second
    # went on for minutes before #34
    assert used < 0.3, f"the app used {used:.2f} CPU-s in 2 s, 5 s after the cancel"
    assert in_flight(jobs_app) == []  # never listed as "embedding"
    session = Enveloped(KnowledgeBaseService(jobs_app.home).session())
    assert "big.txt" not in [d["name"] for d in session.list_documents(KB)["data"]["documents"]]
    assert session.verify()["data"]["problems"] == []
    assert leftovers(jobs_app) == []


def test_sigterm_stops_the_served_app_mid_import_within_seconds(
    jobs_app: RunningApp, pages, tmp_path: Path  # type: ignore[no-untyped-def]
) -> None:
    big = text_file(tmp_path / "large.txt", 500, 5)
    page = open_import_page(jobs_app, pages)
    upload(page, [big])
    page.get_by_text(re.compile(r"large\.txt: embedding \(\d+/\d+ chunks\)")).wait_for(timeout=180_000)
    seconds = jobs_app.stop()  # SIGTERM, as a service manager (or Ctrl-C at run.sh) stops it
    assert seconds is not None and seconds <= 10, f"the app took {seconds} s to stop (None: it had to be killed)"
    session = Enveloped(KnowledgeBaseService(jobs_app.home).session())
    assert "large.txt" not in [d["name"] for d in session.list_documents(KB)["data"]["documents"]]
    assert in_flight(jobs_app) == []
    assert session.verify()["data"]["problems"] == []
    assert leftovers(jobs_app) == []
