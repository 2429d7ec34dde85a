"""Issue #25 in real headless Chromium: a result card highlights whole matched words only, never a letter inside a
word (the query holds "I" and "is"; before, `i` lit up ma[i]lserver, sect[i]on, Th[is] [is]). And #37: a bare URL,
``www.`` host or e-mail address in a document's text, name or chapter is never a link in either result view (the
Markdown renderer autolinked them after decoding the character references that kept them inert)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from docx import Document

from kb_core import KnowledgeBaseService
from kb_core.edges.envelopes import Enveloped
from tests.browser.test_app_browser import go_to, wait_idle

pytestmark = pytest.mark.browser

LINKS = (
    "Relay login notes: https://evil.example/login and www.evil.example/reset, write to me@evil.example. "
    "![pixel](https://tracker.example/p.png)"
)
TEXT = (
    "I wrote this: this is a note about the mailserver. It is in this section that the relay host is given, and "
    "configuring it is what the admin checks first."
)


def test_a_result_card_marks_no_highlight_inside_a_word(served, pages, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    document = Document()
    document.add_paragraph(TEXT)
    document.save(str(tmp_path / "mail.docx"))
    hostile = Document()
    hostile.add_heading("Relay [login](https://evil.example/h) www.evil.example", level=1)
    hostile.add_paragraph(LINKS)
    hostile.save(str(tmp_path / "www.evil.example.docx"))
    session = Enveloped(KnowledgeBaseService(served.home).session())
    assert session.create_knowledge_base("Mail", 64, "hashing")["success"]
    files = [str(tmp_path / "mail.docx"), str(tmp_path / "www.evil.example.docx")]
    assert session.import_document(files, kb_name="Mail")["success"]

    page = pages()
    page.goto(served.url)
    page.get_by_role("heading", name="Knowledge bases", exact=True).wait_for()
    wait_idle(page)
    page.get_by_label("Knowledge base", exact=True).click()  # select it, as a person would (sidebar picker)
    page.get_by_role("option", name="Mail", exact=True).click()
    wait_idle(page)
    page.get_by_role("button", name="Select").click()
    page.get_by_text("Selected knowledge base 'Mail'").wait_for()
    wait_idle(page)
    go_to(page, "Search lab")
    page.get_by_label("Query", exact=True).fill("Is I the mailserver section to configure?")
    page.get_by_test_id("stBaseButton-primaryFormSubmit").filter(has_text="Search").click()
    page.locator("mark").first.wait_for()
    card = page.locator("div", has=page.locator("mark")).last
    html = card.inner_html()
    text = card.inner_text()
    marks = [m.lower() for m in re.findall(r"<mark>(.*?)</mark>", html)]
    assert set(marks) == {"mailserver", "section", "configuring"}, marks
    for match in re.finditer(r"<mark>(.*?)</mark>", html):
        before = re.sub(r"<[^>]+>", "", html[: match.start()])[-1:]
        after = re.sub(r"<[^>]+>", "", html[match.end() :])[:1]
        assert not before.isalpha() and not after.isalpha(), (before, match.group(1), after)
    assert "Stop words left out of the keyword query" in page.content()
    assert "I wrote this" in text

    for view in ("single query", "multi-keyword"):
        if view == "multi-keyword":
            page.get_by_text("Multi-keyword (rag_search)", exact=True).click()
            wait_idle(page)
            page.get_by_label("Keywords (comma separated)").fill("relay, login")
            page.get_by_test_id("stBaseButton-primaryFormSubmit").filter(has_text="Search").click()
        else:
            page.get_by_label("Query", exact=True).fill("relay login")
            page.get_by_test_id("stBaseButton-primaryFormSubmit").filter(has_text="Search").click()
        page.get_by_text("me@evil", exact=False).first.wait_for()
        wait_idle(page)
        main = page.locator('[data-testid="stMain"]')
        assert "https://evil.example/login" in main.inner_text()  # shown, as text
        links = main.locator("a").evaluate_all("links => links.map(a => a.getAttribute('href') || '')")
        assert not [href for href in links if "evil" in href], (view, links)
        assert main.locator("img[src*='tracker']").count() == 0
