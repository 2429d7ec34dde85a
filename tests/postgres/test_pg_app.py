"""The Streamlit app on a PostgreSQL store, end to end in real headless Chromium: two ``streamlit run`` processes
with separate homes and ``KB_STORE`` set to one URL (standing in for two hosts); a person creates a KB and uploads
files in one, and in the other selects that KB and searches: the hit and its score breakdown show, with the folder
store's score."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kb_core import KnowledgeBaseService
from kb_core.edges.envelopes import Enveloped
from kb_core.features.results import SearchRequest
from kb_core.store.postgres.embedded import LocalPostgres
from tests.browser.conftest import RunningApp, browser, pages, pytest_runtest_makereport  # noqa: F401 (fixtures)
from tests.browser.test_app_browser import create_in_form, go_to, wait_idle, write_docx
from tests.postgres.conftest import new_database

pytestmark = pytest.mark.browser

KB = "Shared KB · 共享"
QUERY = "reciprocal rank fusion 向量检索"


def test_import_in_one_app_and_search_in_another_on_one_url(  # type: ignore[no-untyped-def]
    postgres_server: LocalPostgres, pages, tmp_path: Path, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    url = new_database(postgres_server, "t_app_hosts")
    monkeypatch.setenv("KB_STORE", url)  # as a deployment sets it for the app
    notes = tmp_path / "notes.txt"
    notes.write_text("BM25 keyword index notes.\n\n关键词索引使用 BM25 打分。\n", encoding="utf-8")
    files = [str(write_docx(tmp_path / "fusion.docx")), str(notes)]
    apps = [RunningApp(tmp_path / "host-a"), RunningApp(tmp_path / "host-b")]
    try:
        for app in apps:
            app.wait()
        importer, searcher = pages(), pages()
        for page, app in ((importer, apps[0]), (searcher, apps[1])):
            page.goto(app.url)
            page.get_by_role("heading", name="Knowledge bases", exact=True).wait_for()
            wait_idle(page)

        page = importer  # host A: create the KB and upload two files
        create_in_form(page, KB)
        page.get_by_text(f"Created and selected knowledge base '{KB}'").wait_for()
        wait_idle(page)
        go_to(page, "Import")
        page.locator('[data-testid="stFileUploaderDropzoneInput"]').set_input_files(files)
        page.get_by_text("fusion.docx").first.wait_for()
        page.get_by_role("button", name="Import uploaded files").click()
        page.get_by_text("Imported 2 of 2 file(s)").wait_for(timeout=90_000)

        page = searcher  # host B, opened before the KB existed: select it and search
        page.reload()
        page.get_by_role("heading", name="Knowledge bases", exact=True).wait_for()
        wait_idle(page)
        page.get_by_label("Knowledge base", exact=True).click()
        page.get_by_role("option", name=KB, exact=True).click()
        wait_idle(page)
        page.get_by_role("button", name="Select").click()
        page.get_by_text(f"Selected knowledge base '{KB}'").wait_for()
        wait_idle(page)
        go_to(page, "Search lab")
        page.get_by_label("Query", exact=True).fill(QUERY)
        page.get_by_test_id("stBaseButton-primaryFormSubmit").filter(has_text="Search").click()
        page.get_by_text("Score breakdown —").wait_for()
        page.locator("mark").first.wait_for()
        page.locator('[data-testid="stExpander"] summary').filter(has_text="Score breakdown").first.click()
        page.get_by_text(re.compile(r"= final \d\.\d{4}")).first.wait_for()
        shown = page.locator("body").inner_text()
    finally:
        for app in apps:
            app.stop()

    monkeypatch.delenv("KB_STORE")
    folder = Enveloped(KnowledgeBaseService(tmp_path / "folder-home").session())
    assert folder.create_knowledge_base(KB, 512, embedding_model="hashing")["success"]
    assert folder.select_knowledge_base(KB)["success"]
    assert folder.import_document(files, source="upload")["data"]["success_count"] == 2
    best = folder.search(SearchRequest(QUERY))["data"]["chunks"][0]
    assert best["doc_name"] in shown
    finals = re.findall(r"= final (\d\.\d{4})|final = fused = (\d\.\d{4})", shown)
    assert finals, shown[-2000:]
    assert next(a or b for a, b in finals) == f"{best['score']:.4f}", "host B shows the folder store's best score"
