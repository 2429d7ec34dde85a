"""Issue #35 in real headless Chromium at 1280 px: the create form's model descriptions are whole and readable, and
a result card shows the passage that holds the matched words, with "show all" for the rest."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kb_core import KnowledgeBaseService
from kb_core.edges.envelopes import Enveloped
from tests.browser.test_app_browser import go_to, wait_idle

pytestmark = pytest.mark.browser

FILLER = "本公司坚持以客户为中心的服务理念，服务网点遍布全国，客服热线全天开放。" * 10
CLAIM = "申请保险理赔需要准备以下材料：保单、身份证、事故证明和维修发票。"
GUIDE = FILLER + CLAIM + "其他说明：请妥善保管原件。" * 20


@pytest.fixture
def page_1280(browser: object) -> Iterator[object]:
    # English interface (the Chinese one has its own test, test_i18n_browser.py); the documents are Chinese.
    context = browser.new_context(viewport={"width": 1280, "height": 900}, locale="en-US")  # type: ignore[attr-defined]
    page = context.new_page()
    page.set_default_timeout(30_000)
    yield page
    context.close()


def test_the_create_form_shows_each_models_whole_description_at_1280_px(served, page_1280) -> None:  # type: ignore[no-untyped-def]
    page = page_1280
    page.goto(served.url)
    page.get_by_role("heading", name="Knowledge bases", exact=True).wait_for()
    wait_idle(page)
    group = page.get_by_role("radiogroup", name="Embedding model")
    options = group.locator('[data-testid="stRadioOption"]')
    options.first.wait_for()
    assert options.count() == 2  # the built-in models; never the test embedder
    assert options.nth(0).inner_text().strip() == "multilingual-e5-small"  # the default first, and chosen
    assert options.nth(0).get_attribute("data-selected") == "true"
    assert options.nth(1).inner_text().strip() == "all-MiniLM-L6-v2"
    assert "hashing" not in group.inner_text()
    captions = group.locator('[data-testid="stRadioCaption"]')
    for index, line in enumerate(("Reads Chinese, English and about 100 other languages", "Reads English only")):
        caption = captions.nth(index)
        assert caption.is_visible() and line in caption.inner_text(), line
        # wrapped, not cut: the whole description fits its box, and the box fits the window
        box = caption.bounding_box()
        assert box is not None and box["x"] + box["width"] <= 1280
        assert caption.evaluate("e => e.scrollWidth <= e.clientWidth + 1 && e.scrollHeight <= e.clientHeight + 1")
        assert caption.inner_text().rstrip().endswith("."), caption.inner_text()  # the description's last words


def test_a_card_shows_the_passage_with_the_answer_and_all_of_the_chunk_on_demand(  # type: ignore[no-untyped-def]
    served, page_1280, tmp_path: Path
) -> None:
    (tmp_path / "理赔指南.txt").write_text(GUIDE, encoding="utf-8")
    session = Enveloped(KnowledgeBaseService(served.home).session())
    assert session.create_knowledge_base("保险", 1024, "hashing")["success"]
    assert session.import_document([str(tmp_path / "理赔指南.txt")], kb_name="保险")["success"]
    page = page_1280
    page.goto(served.url)
    page.get_by_role("heading", name="Knowledge bases", exact=True).wait_for()
    wait_idle(page)
    page.get_by_role("button", name="Select").click()
    page.get_by_text("Selected knowledge base '保险'").wait_for()
    wait_idle(page)
    go_to(page, "Search lab")
    page.get_by_label("Query", exact=True).fill("保险理赔需要哪些材料？")
    page.get_by_test_id("stBaseButton-primaryFormSubmit").filter(has_text="Search").click()
    card = page.locator("details.kb-chunk").first
    card.wait_for()
    passage = card.locator(".kb-passage")
    assert passage.is_visible() and not card.locator(".kb-full").is_visible()
    marks = [m.inner_text() for m in passage.locator("mark").all()]
    assert marks == ["保险", "理赔", "需要", "材料"]  # whole words, visible without unfolding anything
    assert all(m.is_visible() for m in passage.locator("mark").all())
    assert CLAIM in passage.inner_text() and not passage.inner_text().startswith(FILLER[:20])
    matched = page.get_by_text("Matched terms:", exact=False).first.inner_text()
    assert "险理" not in matched and "赔需" not in matched
    assert card.locator(".kb-more").inner_text().strip() == "show all ▾"
    card.locator("summary").click()
    assert card.locator(".kb-full").is_visible() and not passage.is_visible()
    assert card.locator(".kb-full").inner_text().startswith(FILLER[:20])
    assert card.locator(".kb-more").inner_text().strip() == "show less ▴"


def test_the_card_unfolds_in_chinese(served, browser, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """With a Chinese browser the card's "show all" / "show less" are Chinese text (once CSS content, which no
    catalogue reaches), and the search lab's labels are Chinese."""
    (tmp_path / "理赔指南.txt").write_text(GUIDE, encoding="utf-8")
    session = Enveloped(KnowledgeBaseService(served.home).session())
    assert session.create_knowledge_base("保险", 1024, "hashing")["success"]  # the only KB: a new session's current one
    assert session.import_document([str(tmp_path / "理赔指南.txt")], kb_name="保险")["success"]
    context = browser.new_context(viewport={"width": 1280, "height": 900}, locale="zh-CN")
    try:
        page = context.new_page()
        page.set_default_timeout(30_000)
        page.goto(served.url)
        page.get_by_role("heading", level=1).first.wait_for()
        wait_idle(page)
        go_to(page, "检索实验室")
        page.get_by_label("查询", exact=True).fill("保险理赔需要哪些材料？")
        page.get_by_test_id("stBaseButton-primaryFormSubmit").filter(has_text="检索").click()
        card = page.locator("details.kb-chunk").first
        card.wait_for()
        more = card.locator(".kb-more")
        assert more.inner_text().strip() == "展开全文 ▾" and not card.locator(".kb-full").is_visible()
        page.get_by_text("匹配词：", exact=False).first.wait_for()
        card.locator("summary").click()
        assert card.locator(".kb-full").is_visible() and more.inner_text().strip() == "收起 ▴"
    finally:
        context.close()
