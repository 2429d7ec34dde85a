"""End to end in real headless Chromium: the app as scripts/run.sh serves it, driven like a person would."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from docx import Document

from kb_core import KnowledgeBaseService
from kb_core.edges.envelopes import Enveloped

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "data" / "demo"


def wait_idle(page) -> None:  # type: ignore[no-untyped-def]
    """Until the script run finishes (Streamlit shows a running indicator while it works)."""
    page.wait_for_timeout(300)
    page.locator('[data-testid="stStatusWidget"]').wait_for(state="hidden", timeout=90_000)


def go_to(page, title: str) -> None:  # type: ignore[no-untyped-def]
    page.locator('[data-testid="stSidebarNav"]').get_by_role("link", name=title).click()
    page.get_by_role("heading", level=1).filter(has_text=re.compile(title.split()[0], re.I)).wait_for()
    wait_idle(page)


def create_in_form(page, name: str, model: str = "hashing") -> None:  # type: ignore[no-untyped-def]
    """Create a KB with the Knowledge bases page's form; ``model`` typed as another model (the test embedder is
    never one of the choices a user is offered)."""
    page.get_by_label("Name", exact=True).fill(name)
    page.get_by_text("Another model or an embedding endpoint (optional)").click()
    page.get_by_label("Model", exact=True).fill(model)
    page.get_by_label("Model", exact=True).press("Enter")
    wait_idle(page)
    page.get_by_role("button", name="Create", exact=True).click()


def choose(page, label: str, option: str) -> None:  # type: ignore[no-untyped-def]
    page.get_by_label(label, exact=True).click()
    page.get_by_role("option", name=option).first.click()
    wait_idle(page)


def write_docx(path: Path) -> Path:
    document = Document()
    document.add_heading("Reciprocal rank fusion", level=1)
    document.add_paragraph("Reciprocal rank fusion combines ranked lists by summing one over sixty plus the rank.")
    document.add_heading("向量检索", level=1)
    document.add_paragraph("向量检索使用余弦相似度比较问题和文本块。")
    document.save(str(path))
    return path


def write_beir(folder: Path) -> Path:
    folder.mkdir()
    queries = [{"_id": "q1", "text": "reciprocal rank fusion"}, {"_id": "q2", "text": "BM25 keyword index"}]
    (folder / "queries.jsonl").write_text("\n".join(json.dumps(q) for q in queries) + "\n", encoding="utf-8")
    (folder / "qrels.tsv").write_text(
        "query-id\tcorpus-id\tscore\nq1\tfusion.docx\t1\nq2\tnotes.txt\t1\n", encoding="utf-8"
    )
    return folder


def test_create_upload_search_breakdown_and_evaluate(served, pages, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    page = pages()
    page.goto(served.url)
    page.get_by_role("heading", name="Knowledge bases", exact=True).wait_for()
    wait_idle(page)

    # create a KB (the fast hashing embedder keeps the test quick; the real model is tested elsewhere)
    create_in_form(page, "Browser KB · 浏览器")
    page.get_by_text("Created and selected knowledge base 'Browser KB · 浏览器'").wait_for()
    wait_idle(page)

    # upload a DOCX and a TXT: the import is a job of the service; its results stay on the page
    go_to(page, "Import")
    notes = tmp_path / "notes.txt"
    notes.write_text("BM25 keyword index notes.\n\n关键词索引使用 BM25 打分。\n", encoding="utf-8")
    page.locator('[data-testid="stFileUploaderDropzoneInput"]').set_input_files(
        [str(write_docx(tmp_path / "fusion.docx")), str(notes)]
    )
    page.get_by_text("fusion.docx").first.wait_for()
    page.get_by_role("button", name="Import uploaded files").click()
    page.get_by_text("Imported 2 of 2 file(s)").wait_for(timeout=90_000)
    results = page.locator('[data-testid="stDataFrame"]').last
    results.wait_for()
    # the uploader is empty again, ready for the next import
    assert page.locator('[data-testid="stFileUploaderFile"]').count() == 0
    assert page.get_by_role("button", name="Import uploaded files").is_disabled()
    # the sidebar counts the new documents once the import ended
    wait_idle(page)
    counts = page.locator('[data-testid="stSidebar"] [data-testid="stCaptionContainer"]').filter(
        has_text="documents ·").first.inner_text()
    assert counts.startswith("2 documents · "), counts

    # search, then open a score breakdown
    go_to(page, "Search lab")
    page.get_by_label("Query", exact=True).fill("reciprocal rank fusion 向量检索")
    page.get_by_test_id("stBaseButton-primaryFormSubmit").filter(has_text="Search").click()
    page.get_by_text("Score breakdown —").wait_for()
    first_card = page.locator("mark").first
    first_card.wait_for()
    page.locator('[data-testid="stExpander"] summary').filter(has_text="Score breakdown").first.click()
    page.locator(".kb-bars").nth(1).wait_for()  # the overview's score bars, then the unfolded card's
    assert page.get_by_text(re.compile(r"= final \d\.\d{4}")).first.is_visible()
    page.get_by_role("tab", name="Rank movement across modes").click()
    page.get_by_role("tab", name="A/B comparison").click()
    page.get_by_text("Shared chunks").wait_for()

    # evaluate with a tiny BEIR folder on the server
    go_to(page, "Evaluate")
    page.get_by_label("BEIR folder", exact=True).fill(str(write_beir(tmp_path / "server" / "beir")))
    page.get_by_label("BEIR folder", exact=True).press("Enter")
    wait_idle(page)
    page.get_by_role("button", name="Run evaluation").click()
    page.get_by_text("Per query, worst first").wait_for(timeout=90_000)
    page.get_by_text("best nDCG@10").first.wait_for()
    page.get_by_text("Kept as run ").wait_for()
    page.get_by_text("Download metrics (CSV)").wait_for()


def test_two_sessions_keep_different_current_kbs(served, pages, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    session = Enveloped(KnowledgeBaseService(served.home).session())
    for name, file in (("English docs", "kb_workbench_overview.txt"), ("中文文档", "知识库工作台概述.txt")):
        session.create_knowledge_base(name, 128, embedding_model="hashing")
        assert session.import_document([str(DEMO / file)], kb_name=name)["success"]

    first, second = pages(), pages()
    for page in (first, second):
        page.goto(served.url)
        page.get_by_role("heading", name="Knowledge bases", exact=True).wait_for()
        wait_idle(page)
    for page, name in ((first, "English docs"), (second, "中文文档")):
        page.get_by_label("Knowledge base", exact=True).click()
        page.get_by_role("option", name=name, exact=True).click()
        wait_idle(page)
        page.get_by_role("button", name="Select").click()
        page.get_by_text(f"Selected knowledge base '{name}'").wait_for()
        wait_idle(page)

    # both sessions search at once without disturbing each other
    for page in (first, second):
        go_to(page, "Search lab")
        page.get_by_label("Query", exact=True).fill("knowledge base workbench 知识库")
        page.get_by_test_id("stBaseButton-primaryFormSubmit").filter(has_text="Search").click()
    for page, doc, other in ((first, "kb_workbench_overview.txt", "知识库工作台概述.txt"),
                             (second, "知识库工作台概述.txt", "kb_workbench_overview.txt")):
        page.get_by_text("Score breakdown —").wait_for()
        wait_idle(page)
        cards = page.locator('[data-testid="stMarkdownContainer"]').filter(has_text=re.compile(r"^#1"))
        assert doc in cards.first.inner_text()
        assert other not in page.locator("section.main, [data-testid='stMain']").first.inner_text()
    for page, name in ((first, "English docs"), (second, "中文文档")):
        assert f"Knowledge base {name}" in page.locator('[data-testid="stMain"]').inner_text()
        assert page.get_by_role("combobox", name="Current knowledge base").input_value() == name

    # another session deletes the first one's KB: its page says so and asks for a choice, never moving it to another
    # KB (#34: the next search used to run silently against a different KB, only the header changing)
    assert session.delete_knowledge_base("English docs")["success"]
    first.locator('[data-testid="stSidebarNav"]').get_by_role("link", name="Documents").click()
    first.get_by_text("no longer exists").first.wait_for()
    wait_idle(first)
    assert "English docs" in first.locator('[data-testid="stMain"]').inner_text()
    assert first.get_by_role("heading", name="Documents").count() == 0  # no page of another KB
    assert first.get_by_role("combobox", name="Current knowledge base").input_value() == ""
    first.locator('[data-testid="stSidebar"]').get_by_text("no longer exists (deleted elsewhere)").wait_for()
    choose(first, "Current knowledge base", "中文文档")
    first.get_by_role("heading", name="Documents").wait_for()
    assert "In knowledge base 中文文档" in first.locator('[data-testid="stMain"]').inner_text()
