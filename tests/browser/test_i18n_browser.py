"""#35 item 1 in real headless Chromium: the interface speaks the browser's language (``zh-CN``: Simplified Chinese,
``en-US``: English), the sidebar's switch changes it, and the service's validation errors are said in it too.

One app for the module (KB_DEMO=0: no demo build) over a home holding one KB, so that the pages that need a current
knowledge base show their own text; each test is a new browser context (a new session with its own language)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

import pytest

from kb_core import KnowledgeBaseService
from kb_core.edges.envelopes import Enveloped
from tests.browser.conftest import ARTIFACTS, RunningApp
from tests.browser.test_app_browser import choose, wait_idle

pytestmark = pytest.mark.browser

KB = "手册"
CJK = re.compile(r"[\u4e00-\u9fff]")
# The sidebar's pages, in the order app.py lists them. Written out here, not read from the catalogue: a missing
# translation must fail this test, not change what it expects.
PAGES_EN = ["Knowledge bases", "Import", "Documents", "Search lab", "Evaluate", "Knowledge graph", "Backup & transfer"]
PAGES_ZH = ["知识库", "导入", "文档", "检索实验室", "评估", "知识图谱", "备份与迁移"]


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningApp]:
    home = tmp_path_factory.mktemp("i18n") / "home"
    session = Enveloped(KnowledgeBaseService(home).session())
    assert session.create_knowledge_base(KB, 256, "hashing")["success"]
    served = RunningApp(home)
    try:
        served.wait()
        yield served
    finally:
        served.stop()


@pytest.fixture
def open_app(request: pytest.FixtureRequest, browser: object, app: RunningApp) -> Iterator[Callable[[str], object]]:
    """A new browser context with ``locale`` as the browser's language, on the app's first page; a screenshot under
    test-artifacts/ when the test fails."""
    contexts: list = []
    opened: list = []

    def factory(locale: str):  # type: ignore[no-untyped-def]
        context = browser.new_context(viewport={"width": 1280, "height": 1000}, locale=locale)  # type: ignore[attr-defined]
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(30_000)
        opened.append(page)
        page.goto(app.url)
        page.locator('[data-testid="stSidebarNav"]').wait_for()
        wait_idle(page)
        return page

    yield factory
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        ARTIFACTS.mkdir(exist_ok=True)
        for index, page in enumerate(opened):
            page.screenshot(path=str(ARTIFACTS / f"{request.node.name}-{index}.png"), full_page=True)
    for context in contexts:
        context.close()


def sidebar_pages(page) -> list[str]:  # type: ignore[no-untyped-def]
    links = page.locator('[data-testid="stSidebarNav"] [data-testid="stSidebarNavLink"]')
    return [text.strip().splitlines()[-1] for text in links.all_inner_texts()]  # after the icon's name


def title(page) -> str:  # type: ignore[no-untyped-def]
    return page.get_by_role("heading", level=1).first.inner_text().strip()


def go_to(page, name: str, heading: str) -> None:  # type: ignore[no-untyped-def]
    page.locator('[data-testid="stSidebarNav"]').get_by_role("link", name=name, exact=True).click()
    page.get_by_role("heading", level=1, name=heading, exact=True).wait_for()
    wait_idle(page)


def visible_texts(page, selector: str) -> list[str]:  # type: ignore[no-untyped-def]
    """The visible, non-empty texts of the main area's elements matching ``selector``."""
    found = page.locator(f'[data-testid="stMainBlockContainer"] {selector}')
    return [e.inner_text().strip() for e in found.all() if e.is_visible() and e.inner_text().strip()]


def create_error(page, name_label: str, create: str, name: str) -> str:  # type: ignore[no-untyped-def]
    """Submit the create form with ``name``; the error it shows."""
    page.get_by_label(name_label, exact=True).fill(name)
    page.get_by_label(name_label, exact=True).press("Enter")
    wait_idle(page)
    page.get_by_role("button", name=create, exact=True).click()
    error = page.locator('[data-testid="stAlertContentError"]').filter(has_text=name)
    error.wait_for()
    return str(error.inner_text())


def test_a_chinese_browser_gets_the_chinese_interface(open_app) -> None:  # type: ignore[no-untyped-def]
    page = open_app("zh-CN")
    page.get_by_role("heading", level=1, name="知识库", exact=True).wait_for()
    page.get_by_role("button", name="创建", exact=True).wait_for()  # the page's last element: it is all there
    assert sidebar_pages(page) == PAGES_ZH
    # every heading, widget label and button of the Knowledge bases page is Chinese
    for selector in (":is(h2, h3)", '[data-testid="stWidgetLabel"]', "button"):
        texts = visible_texts(page, selector)
        assert texts, selector
        assert all(CJK.search(text) for text in texts), (selector, texts)
    for button in ("创建", "选择", "删除…"):
        assert page.get_by_role("button", name=button, exact=True).is_visible(), button
    assert page.get_by_role("button", name="Create", exact=True).count() == 0
    sidebar = page.locator('[data-testid="stSidebar"]')
    assert "当前知识库" in sidebar.inner_text() and "0 篇文档 · 0 个文本块" in sidebar.inner_text()

    # the service's validation error, said in Chinese (the bad name as typed, quoted)
    error = create_error(page, "名称", "创建", "测试/斜杠")
    assert "知识库名称" in error and "'测试/斜杠'" in error and "不允许" in error, error
    assert "not allowed" not in error and "contains" not in error, error

    # the other pages of this part of the app
    go_to(page, "导入", "导入文档")
    assert page.get_by_role("tab", name="上传文件").is_visible()
    assert page.get_by_role("button", name="导入上传的文件").is_visible()
    go_to(page, "文档", "文档")
    assert page.get_by_text("此知识库还没有文档").is_visible()
    go_to(page, "备份与迁移", "导出 / 导入知识库")
    assert page.get_by_role("button", name="生成导出文件").is_visible()


def test_an_english_browser_gets_the_english_interface(open_app) -> None:  # type: ignore[no-untyped-def]
    page = open_app("en-US")
    page.get_by_role("heading", level=1, name="Knowledge bases", exact=True).wait_for()
    page.get_by_role("button", name="Create", exact=True).wait_for()
    assert sidebar_pages(page) == PAGES_EN
    for selector in (":is(h2, h3)", '[data-testid="stWidgetLabel"]', "button"):
        texts = visible_texts(page, selector)
        assert texts and not any(CJK.search(text) for text in texts), (selector, texts)
    for button in ("Create", "Select", "Delete…"):
        assert page.get_by_role("button", name=button, exact=True).is_visible(), button
    assert "0 documents · 0 chunks" in page.locator('[data-testid="stSidebar"]').inner_text()
    error = create_error(page, "Name", "Create", "测试/斜杠")
    assert "contains '/'; path separators and control characters are not allowed" in error, error
    assert not CJK.search(error.replace("测试/斜杠", "")), error
    go_to(page, "Import", "Import documents")
    assert page.get_by_role("button", name="Import uploaded files").is_visible()


def test_the_sidebar_switch_changes_the_language(open_app) -> None:  # type: ignore[no-untyped-def]
    page = open_app("en-US")
    page.get_by_role("heading", level=1, name="Knowledge bases", exact=True).wait_for()
    choose(page, "Language · 语言", "简体中文")
    page.get_by_role("heading", level=1, name="知识库", exact=True).wait_for()
    assert sidebar_pages(page) == PAGES_ZH
    assert page.get_by_role("button", name="创建", exact=True).is_visible()
    # the choice holds on the other pages of this session
    go_to(page, "导入", "导入文档")
    choose(page, "Language · 语言", "English")
    page.get_by_role("heading", level=1, name="Import documents", exact=True).wait_for()
    assert sidebar_pages(page) == PAGES_EN
    assert title(page) == "Import documents"
