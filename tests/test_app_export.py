"""The Export / import page driven by Streamlit's AppTest: export to a download or a server path, import from a
server path with renaming, readable refusals of damaged files, over real temp homes."""

from __future__ import annotations

import io
import shutil
import sys
import zipfile
from pathlib import Path

import pytest

from kb_core.edges.envelopes import Enveloped
from kb_core.features.results import SearchRequest

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # the pages import their helpers from `pages` (pages/_service.py, _picker.py …)

from streamlit.testing.v1 import AppTest  # noqa: E402

from kb_core import KnowledgeBaseService  # noqa: E402

PAGE = "pages/export_import.py"


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Built once: "Alpha" (English and Chinese TXT) and an empty "Beta 乙", both with the hashing embedder."""
    root = tmp_path_factory.mktemp("export-template")
    files = root / "files"
    files.mkdir()
    (files / "guide.txt").write_text("Hybrid search\n\nBM25 keyword scores are fused with vectors.\n", encoding="utf-8")
    (files / "指南.txt").write_text("混合检索\n\n关键词得分与向量相似度融合。\n", encoding="utf-8")
    session = Enveloped(KnowledgeBaseService(root / "home").session())
    assert session.create_knowledge_base("Alpha", 128, embedding_model="hashing")["success"]
    assert session.create_knowledge_base("Beta 乙", 256, embedding_model="hashing")["success"]
    result = session.import_document([str(p) for p in sorted(files.iterdir())], kb_name="Alpha")
    assert result["data"]["success_count"] == 2, result
    return root / "home"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, template: Path) -> Path:
    path = tmp_path / "home"
    shutil.copytree(template, path)
    monkeypatch.setenv("KB_HOME", str(path))
    monkeypatch.setenv("KB_DEMO", "0")
    monkeypatch.setenv("KB_ALLOW_DIRS", str(tmp_path))  # the "path on the server" tabs are off without it
    return path


def page() -> AppTest:
    test = AppTest.from_file(str(REPO / "app.py"), default_timeout=60)
    test.run()
    test.switch_page(PAGE).run()
    assert not test.exception, test.exception
    return test


def texts(test: AppTest, kind: str) -> list[str]:
    return [str(e.value) for e in getattr(test, kind)]


def kb_names(test: AppTest) -> list[str]:
    listing = Enveloped(test.session_state["kb_session"]).list_knowledge_bases()["data"]
    return [kb["name"] for kb in listing["knowledge_bases"]]


def import_path(test: AppTest, path: Path | str) -> None:
    test.text_input(key="import_db_path").input(str(path))
    test.button(key="import_db_path_go").click().run()
    assert not test.exception, test.exception


def test_prepare_download_of_every_kb(home: Path) -> None:
    test = page()
    test.button(key="export_prepare").click().run()
    assert not test.exception, test.exception
    message = next(s for s in texts(test, "success") if s.startswith("Exported"))
    assert "2 knowledge base(s) (2 document(s)" in message and "API keys are never exported" in message
    assert str(home) not in message and "/tmp" not in message  # the temp path is replaced by the file's name
    stored = test.session_state["export_result"]
    with zipfile.ZipFile(io.BytesIO(stored["bytes"])) as archive:
        assert "manifest.json" in archive.namelist()
    button = next(b for b in test.get("download_button") if b.key == "export_download")
    assert stored["name"] in button.label and "KB)" in button.label  # the size is shown
    assert stored["name"].endswith(".kbx")


def test_export_one_kb_to_a_server_path_then_import_it_back_renamed(home: Path, tmp_path: Path) -> None:
    test = page()
    target = tmp_path / "alpha 备份.kbx"
    test.multiselect(key="export_kbs").select("Alpha")
    test.text_input(key="export_path").input(str(target))
    test.button(key="export_to_path").click().run()
    assert any("Exported 1 knowledge base(s)" in s and str(target) in s for s in texts(test, "success"))
    assert target.is_file()

    import_path(test, target)
    assert any("Imported 1 knowledge base(s) with 2 document(s)" in s for s in texts(test, "success"))
    metrics = {m.label: m.value for m in test.metric}
    assert metrics == {"Knowledge bases imported": "1", "Documents imported": "2"}
    table = next(d.value for d in test.dataframe if "Imported as" in d.value.columns)
    copy = table["Imported as"].iloc[0]
    assert copy != "Alpha" and copy.startswith("Alpha") and table["Renamed from"].iloc[0] == "Alpha"
    assert any("nothing was overwritten" in c for c in texts(test, "caption"))
    assert sorted(kb_names(test)) == sorted(["Alpha", "Beta 乙", copy])

    session = Enveloped(test.session_state["kb_session"])
    original = session.search(SearchRequest("关键词", kb_names=["Alpha"], mode="keyword"))["data"]["chunks"]
    copied = session.search(SearchRequest("关键词", kb_names=[copy], mode="keyword"))["data"]["chunks"]
    assert [c["content"] for c in copied] == [c["content"] for c in original] and original
    assert [c["score"] for c in copied] == pytest.approx([c["score"] for c in original], abs=1e-6)


def test_damaged_or_missing_files_are_refused_readably_and_change_nothing(home: Path, tmp_path: Path) -> None:
    test = page()
    good = tmp_path / "good.kbx"
    assert Enveloped(test.session_state["kb_session"]).export_database(str(good))["success"]
    truncated = tmp_path / "truncated.kbx"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    before = kb_names(test)

    import_path(test, truncated)
    errors = texts(test, "error")
    assert any("truncated.kbx" in e and "INVALID_IMPORT_FILE" in e for e in errors), errors
    assert all("Traceback" not in e for e in errors)

    import_path(test, tmp_path / "missing.kbx")
    assert any("does not exist" in e and "INVALID_ARGUMENT" in e for e in texts(test, "error")), texts(test, "error")

    test.text_input(key="import_db_path").input("  ")
    test.button(key="import_db_path_go").click().run()
    assert any("Give the path of an export file" in w for w in texts(test, "warning"))
    assert kb_names(test) == before


def test_import_into_an_empty_home_keeps_the_names(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    export = tmp_path / "all.kbx"
    assert Enveloped(KnowledgeBaseService(home).session()).export_database(str(export))["success"]
    monkeypatch.setenv("KB_HOME", str(tmp_path / "empty"))
    test = page()
    assert any("no knowledge bases to export" in i for i in texts(test, "info"))

    import_path(test, export)
    assert any("Imported 2 knowledge base(s) with 2 document(s)" in s for s in texts(test, "success"))
    table = next(d.value for d in test.dataframe if "Imported as" in d.value.columns)
    assert list(table["Imported as"]) == ["Alpha", "Beta 乙"] and set(table["Renamed from"]) == {""}
    assert sorted(kb_names(test)) == ["Alpha", "Beta 乙"]


def test_server_paths_are_off_without_allowed_folders_and_never_reach_the_home(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A demo deployment must not export to, or import from, any file the server can reach."""
    monkeypatch.delenv("KB_ALLOW_DIRS")
    test = page()
    keys = {e.key for e in test.text_input}
    assert "export_path" not in keys and "import_db_path" not in keys
    assert sum("KB_ALLOW_DIRS" in i for i in texts(test, "info")) == 2

    allowed = tmp_path / "allowed"
    allowed.mkdir()
    monkeypatch.setenv("KB_ALLOW_DIRS", str(allowed))
    test = page()
    outside = tmp_path / "outside.kbx"
    test.text_input(key="export_path").input(str(outside))
    test.button(key="export_to_path").click().run()
    assert not outside.exists() and any("PERMISSION_DENIED" in e for e in texts(test, "error")), texts(test, "error")
    monkeypatch.setenv("KB_ALLOW_DIRS", str(tmp_path))  # holds the home: the home itself stays out of reach
    test = page()
    inside_home = home / "stolen.kbx"
    test.text_input(key="export_path").input(str(inside_home))
    test.button(key="export_to_path").click().run()
    assert not inside_home.exists()
    assert any("inside the knowledge-base home" in e for e in texts(test, "error")), texts(test, "error")
