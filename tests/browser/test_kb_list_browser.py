"""The list of knowledge bases (each with its counts: a read of every KB's catalog) is read once per script run, in
real Chromium against the app as scripts/run.sh serves it: the sidebar's picker, its counts and the page share it.
It was read up to 5 times per run (#38)."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from kb_core import KnowledgeBaseService
from kb_core.edges.envelopes import Enveloped
from tests.browser.conftest import RunningApp

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
# Each page's link in the sidebar, and its heading.
PAGES = {
    "Import": "Import documents", "Documents": "Documents", "Search lab": "Search lab",
    "Evaluate": "Evaluate retrieval", "Knowledge graph": "Knowledge graph",
    "Backup & transfer": "Export / import knowledge bases", "Knowledge bases": "Knowledge bases",
}

# Loaded by the server's interpreter at start (PYTHONPATH): one line per read of the KB list, in the file named.
COUNTER = textwrap.dedent(
    '''
    import os

    from kb_core.session.operations import Operations

    _read = Operations.list_knowledge_bases


    def _counted(self):  # type: ignore[no-untyped-def]
        with open(os.environ["KB_LIST_READS"], "a", encoding="utf-8") as out:
            out.write("read\\n")
        return _read(self)


    Operations.list_knowledge_bases = _counted
    '''
)


@pytest.fixture
def counted(tmp_path: Path) -> Iterator[tuple[RunningApp, Path]]:
    session = Enveloped(KnowledgeBaseService(tmp_path / "home").session())
    for name in ("Alpha", "Beta"):
        assert session.create_knowledge_base(name, 128, embedding_model="hashing")["success"]
    assert session.import_document([str(REPO / "data/demo/kb_workbench_overview.txt")], kb_name="Alpha")["success"]
    (tmp_path / "counter").mkdir()
    (tmp_path / "counter" / "sitecustomize.py").write_text(COUNTER, encoding="utf-8")
    reads = tmp_path / "reads.txt"
    app = RunningApp(
        tmp_path / "home",
        environment={"PYTHONPATH": f"{REPO}:{tmp_path / 'counter'}", "KB_LIST_READS": str(reads)},
    )
    try:
        app.wait()
        yield app, reads
    finally:
        app.stop()


def wait_idle(page) -> None:  # type: ignore[no-untyped-def]
    page.wait_for_timeout(300)
    page.locator('[data-testid="stStatusWidget"]').wait_for(state="hidden", timeout=90_000)


def test_every_page_reads_the_kb_list_once_per_run(counted: tuple[RunningApp, Path], pages) -> None:  # type: ignore[no-untyped-def]
    app, reads = counted
    page = pages()
    page.goto(app.url)
    page.get_by_role("heading", name="Knowledge bases", exact=True).wait_for()
    wait_idle(page)
    assert reads.exists(), app.log_path.read_text(encoding="utf-8")[-3000:]
    seen = {}
    for title, heading in PAGES.items():
        reads.write_text("", encoding="utf-8")
        page.locator('[data-testid="stSidebarNav"]').get_by_role("link", name=title).click()
        page.get_by_role("heading", level=1, name=heading, exact=True).wait_for()
        wait_idle(page)
        seen[title] = reads.read_text(encoding="utf-8").count("read")
    # the sidebar shows the list's counts: it was read, and only once
    assert page.get_by_text("1 document · ").first.is_visible()
    assert seen == dict.fromkeys(PAGES, 1), seen
