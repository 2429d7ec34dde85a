"""A public demo in real headless Chromium, started as the README starts one (`scripts/run.sh --demo`): two visitors
and the operator, each in a browser of their own (#36); and a visitor's KB gone after a shortened expiry.

The demo KB is built beforehand with the hashing embedder (what a visitor may do does not depend on the model, and
the real model's first start is timed by test_app_demo.py); the app finds it and publishes it."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from kb_core import KnowledgeBaseService
from kb_core.session.demo import DEMO_KB_NAME, ensure_demo_kb
from tests.browser.conftest import ARTIFACTS, RunningApp

pytestmark = [pytest.mark.browser]

OPERATOR_TOKEN = "operator-token-for-the-browser-test"


def demo_home(home: Path) -> Path:
    built = ensure_demo_kb(KnowledgeBaseService(home).session(), embedding_model="hashing")
    assert built is not None and built.succeeded()
    return home


@pytest.fixture(scope="module")
def demo_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningApp]:
    home = demo_home(tmp_path_factory.mktemp("public") / "home")
    app = RunningApp(
        home,
        public={
            "KB_DEMO_OPERATOR_TOKEN": OPERATOR_TOKEN,
            "KB_DEMO_MAX_FILE_MB": "1",
            "KB_DEMO_FILES_PER_IMPORT": "2",
        },
    )
    try:
        app.wait(120)
        yield app
    finally:
        app.stop()


def wait_idle(page) -> None:  # type: ignore[no-untyped-def]
    page.wait_for_timeout(300)
    page.locator('[data-testid="stStatusWidget"]').wait_for(state="hidden", timeout=120_000)


def open_app(page, url: str) -> None:  # type: ignore[no-untyped-def]
    page.goto(url)
    page.get_by_role("heading", name="Knowledge bases", exact=True).wait_for(timeout=120_000)
    wait_idle(page)


def go_to(page, title: str) -> None:  # type: ignore[no-untyped-def]
    page.locator('[data-testid="stSidebarNav"]').get_by_role("link", name=title).click()
    wait_idle(page)


def picker_options(page) -> list[str]:  # type: ignore[no-untyped-def]
    """The names the sidebar's current-KB picker offers."""
    page.get_by_role("combobox", name="Current knowledge base").click()
    options = [o.strip() for o in page.get_by_role("option").all_inner_texts()]
    page.keyboard.press("Escape")
    return options


def alert(page, kind: str, text: str | re.Pattern[str]):  # type: ignore[no-untyped-def]
    return page.locator(f'[data-testid="stAlertContent{kind}"]').filter(has_text=text)


def create_kb(page, name: str) -> str:  # type: ignore[no-untyped-def]
    page.get_by_label("Name", exact=True).fill(name)
    page.get_by_role("button", name="Create", exact=True).click()
    flash = alert(page, "Success", "Created and selected knowledge base")
    flash.wait_for()
    return re.search(r"'(.+)'", flash.inner_text()).group(1)  # type: ignore[union-attr]


def test_two_visitors_and_the_operator(demo_app: RunningApp, pages, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    a, b, operator = pages(), pages(), pages()
    try:
        # A: the banner, the shared demo KB read-only, a KB of A's own
        open_app(a, demo_app.url)
        banner = alert(a, "Info", "Public demo.")
        assert "read-only" in banner.inner_text() and "deleted 24 h after you create them" in banner.inner_text()
        assert a.get_by_role("combobox", name="Current knowledge base").input_value() == DEMO_KB_NAME
        assert a.get_by_role("button", name="Delete…").is_disabled()
        alpha = create_kb(a, "alpha")
        assert re.fullmatch(r"alpha \[[0-9a-f]{6}\]", alpha), alpha
        a.reload()  # the cookie: the same visitor finds its KB again
        wait_idle(a)
        assert picker_options(a) == [DEMO_KB_NAME, alpha]

        # B: never sees A's KB; the demo KB refuses every change; no server folder anywhere
        open_app(b, demo_app.url)
        assert picker_options(b) == [DEMO_KB_NAME]
        go_to(b, "Search lab")
        b.get_by_label("Query", exact=True).fill("hybrid search weights")
        b.get_by_role("button", name="Search", exact=True).click()
        wait_idle(b)
        # offered disabled, with the reason as its help (the service refuses it too: test_public_demo.py)
        assert b.get_by_role("button", name="Save as KB default").is_disabled()

        go_to(b, "Import")
        upload = b.locator('[data-testid="stFileUploaderDropzoneInput"]').first
        note = tmp_path / "note.txt"
        note.write_text("A note about hybrid search. 关于混合检索的笔记。", encoding="utf-8")
        upload.set_input_files([str(note)])
        b.get_by_role("button", name="Import uploaded files").click()
        alert(b, "Error", "not import documents into it").wait_for()
        b.get_by_role("tab", name="Paths on the server").click()
        assert alert(b, "Info", "Files on the server are off in this public demo").is_visible()
        go_to(b, "Evaluate")
        assert b.get_by_text("Folder on the server").count() == 0
        go_to(b, "Backup & transfer")
        b.get_by_role("tab", name="Path on the server").first.click()
        assert alert(b, "Info", "Files on the server are off in this public demo").first.is_visible()

        # B's own KB: the quotas, each refusal naming its limit
        go_to(b, "Knowledge bases")
        beta = create_kb(b, "beta")
        assert picker_options(b) == [DEMO_KB_NAME, beta]
        go_to(b, "Import")
        caption = b.get_by_text(re.compile(r"^Demo limits per visitor"))
        assert "files up to 1 MB, 2 files per import" in caption.inner_text()
        big = tmp_path / "big.txt"
        big.write_bytes(b"x" * (1024 * 1024 + 100_000))
        upload = b.locator('[data-testid="stFileUploaderDropzoneInput"]').first
        upload.set_input_files([str(big)])
        assert b.get_by_text(re.compile(r"File must be 1(\.0)?\s?MB or smaller")).first.is_visible()
        small = [tmp_path / f"small-{n}.txt" for n in range(3)]
        for path in small:
            path.write_text("Hybrid search notes. 混合检索。", encoding="utf-8")
        upload.set_input_files([str(p) for p in small])
        wait_idle(b)
        b.get_by_role("button", name="Import uploaded files").click()
        # (the page loads the KB's model before it imports: the refusal follows the load)
        alert(b, "Error", "This demo imports at most 2 files at a time; 3 were given").wait_for(timeout=300_000)
        # an import within the limits; no page shows where the server kept the upload
        # (after an import the page's uploader is replaced at its next run: files added before that are lost, so
        # the page is run again first)
        go_to(b, "Documents")
        go_to(b, "Import")
        b.locator('[data-testid="stFileUploaderDropzoneInput"]').first.set_input_files([str(small[0])])
        wait_idle(b)
        b.get_by_role("button", name="Import uploaded files").click()
        alert(b, "Success", f"Imported 1 of 1 file(s) into '{beta}'").wait_for(timeout=300_000)
        shown = [b.content()]
        go_to(b, "Documents")
        b.get_by_text("small-0.txt").first.wait_for(state="attached")  # in the table's accessible grid
        shown.append(b.content())
        go_to(b, "Search lab")
        b.get_by_label("Query", exact=True).fill("hybrid search notes")
        b.get_by_role("button", name="Search", exact=True).click()
        wait_idle(b)
        b.get_by_text(re.compile(r"small-0\.txt")).first.wait_for()
        shown.append(b.content())
        for html in shown:
            assert "kb-upload-" not in html and "kb-demo-files-" not in html and str(tmp_path) not in html

        # the operator: signs in, sees every KB and the visitors' usage, deletes A's KB
        open_app(operator, demo_app.url)
        operator.get_by_text("Operator", exact=True).click()
        operator.get_by_label("Operator token").fill("not the token")
        operator.get_by_role("button", name="Sign in").click()
        alert(operator, "Error", "That is not the operator's token").wait_for()
        operator.get_by_label("Operator token").fill(OPERATOR_TOKEN)
        operator.get_by_role("button", name="Sign in").click()
        alert(operator, "Warning", "signed in as the operator").wait_for()
        wait_idle(operator)
        assert set(picker_options(operator)) == {DEMO_KB_NAME, alpha, beta}
        operator.get_by_role("heading", name="Demo management").wait_for()
        operator.get_by_role("combobox", name="Knowledge base", exact=True).first.click()
        operator.get_by_role("option", name=alpha).click()
        operator.get_by_role("button", name="Delete…").click()
        operator.get_by_role("button", name="Yes, delete").click()
        alert(operator, "Success", f"Deleted knowledge base '{alpha}'").wait_for()
        assert set(picker_options(operator)) == {DEMO_KB_NAME, beta}

        a.reload()
        wait_idle(a)
        assert picker_options(a) == [DEMO_KB_NAME]
    except BaseException:
        ARTIFACTS.mkdir(exist_ok=True)
        shutil.copy(demo_app.log_path, ARTIFACTS / "test_two_visitors_and_the_operator-streamlit.log")
        raise


def test_a_visitor_kb_is_gone_after_its_expiry(tmp_path: Path, pages) -> None:  # type: ignore[no-untyped-def]
    app = RunningApp(demo_home(tmp_path / "home"), public={"KB_DEMO_EXPIRY": "12s"})
    try:
        app.wait(120)
        page = pages()
        open_app(page, app.url)
        assert "deleted 12 s after you create them" in alert(page, "Info", "Public demo.").inner_text()
        mine = create_kb(page, "brief")
        assert alert(page, "Info", "Public demo.").filter(has_text=f"Next: {mine}").count() == 1
        assert picker_options(page) == [DEMO_KB_NAME, mine]
        page.wait_for_timeout(14_000)  # the app sweeps every second with this expiry
        page.reload()
        wait_idle(page)
        assert picker_options(page) == [DEMO_KB_NAME]
        assert mine not in [r.name for r in KnowledgeBaseService(app.home).store.knowledge_bases()]
    except BaseException:
        ARTIFACTS.mkdir(exist_ok=True)
        shutil.copy(app.log_path, ARTIFACTS / "test_a_visitor_kb_is_gone_after_its_expiry-streamlit.log")
        raise
    finally:
        app.stop()
