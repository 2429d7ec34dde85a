"""The app's pages driven by Streamlit's AppTest (no browser): each page's logic over a real temp home."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "data" / "demo"
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # the pages import their helpers as `pages._shared`

from streamlit.testing.v1 import AppTest  # noqa: E402

from kb_core import KnowledgeBaseService  # noqa: E402


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "home"
    monkeypatch.setenv("KB_HOME", str(path))
    monkeypatch.setenv("KB_DEMO", "0")
    return path


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Built once: two hashing KBs; "Alpha" holds English and Chinese TXT, DOCX and DOC demo files."""
    path = tmp_path_factory.mktemp("template") / "home"
    session = KnowledgeBaseService(path).session()
    assert session.create_knowledge_base("Alpha", 128, embedding_model="hashing")["success"]
    assert session.create_knowledge_base("Beta", 256, embedding_model="hashing")["success"]
    files = ["kb_workbench_overview.txt", "混合检索.docx", "得分解释.doc", "hybrid_search.docx"]
    result = session.import_document([str(DEMO / f) for f in files], kb_name="Alpha")
    assert result["data"]["success_count"] == 4, result
    return path


@pytest.fixture
def filled(home: Path, template: Path) -> Path:
    """A private copy of the template home (tests change it)."""
    shutil.copytree(template, home)
    return home


def app(page: str | None = None) -> AppTest:
    test = AppTest.from_file(str(REPO / "app.py"), default_timeout=60)
    test.run()
    assert not test.exception, test.exception
    if page:
        test.switch_page(f"pages/{page}.py").run()
        assert not test.exception, test.exception
    return test


def texts(test: AppTest, kind: str) -> list[str]:
    return [str(e.value) for e in getattr(test, kind)]


def current(test: AppTest) -> str | None:
    session = test.session_state["kb_session"]
    return session.current_kb().name if session.current_kb_id else None


# -- knowledge bases -----------------------------------------------------------------------------
def test_create_form_shows_the_service_validation_inline_then_creates_and_selects(home: Path) -> None:
    test = app()
    assert any("no knowledge bases yet" in t for t in texts(test, "info"))

    test.text_input(key="create_name").input("   ")
    test.button(key="FormSubmitter:create_kb-Create").click().run()
    assert any("Kb name:" in e and "must not be empty" in e for e in texts(test, "error")), texts(test, "error")

    test.text_input(key="create_name").input("Manuals · 手册")
    test.number_input(key="create_chunk_size").set_value(10)
    test.button(key="FormSubmitter:create_kb-Create").click().run()
    assert any("Chunk size:" in e and "32" in e and "8192" in e for e in texts(test, "error")), texts(test, "error")

    test.number_input(key="create_chunk_size").set_value(256)
    test.selectbox(key="create_model").set_value("hashing")
    test.button(key="FormSubmitter:create_kb-Create").click().run()
    assert not test.exception
    assert any("Created and selected" in s for s in texts(test, "success"))
    assert current(test) == "Manuals · 手册"
    table = test.dataframe[0].value
    row = table[table["Name"] == "Manuals · 手册"].iloc[0]
    assert row["Current"] == "●" and row["Chunk size"] == 256 and row["Embedding model"] == "hashing"

    # the same name again (names ignore case): the service's message, not a crash
    test.text_input(key="create_name").input("MANUALS · 手册")
    test.button(key="FormSubmitter:create_kb-Create").click().run()
    assert any("already exists" in e for e in texts(test, "error"))


def test_table_counts_select_and_delete_with_confirmation(filled: Path) -> None:
    test = app()
    assert current(test) == "Alpha"  # a new session starts on the first KB when there is no demo
    table = test.dataframe[0].value.set_index("Name")
    assert table.loc["Alpha", "Documents"] == 4 and table.loc["Alpha", "Chunks"] > 4
    assert table.loc["Alpha", "Current"] == "●" and table.loc["Beta", "Current"] == ""

    # refusing to delete the current KB says why
    test.selectbox(key="kb_target").set_value("Alpha")
    test.button(key="kb_delete").click().run()
    errors = texts(test, "error")
    assert any("current one and cannot be deleted" in e and "KB_IS_CURRENT" in e for e in errors), errors

    test.selectbox(key="kb_target").set_value("Beta")
    test.button(key="kb_delete").click().run()
    assert any("cannot be undone" in w for w in texts(test, "warning"))
    test.button(key="kb_cancel_delete").click().run()
    assert "Beta" in list(test.dataframe[0].value["Name"])

    test.selectbox(key="kb_target").set_value("Beta")
    test.button(key="kb_delete").click().run()
    test.button(key="kb_confirm_delete").click().run()
    assert list(test.dataframe[0].value["Name"]) == ["Alpha"]
    assert any("Deleted knowledge base 'Beta'" in s for s in texts(test, "success"))

    # select through the page
    session = KnowledgeBaseService(filled).session()
    session.create_knowledge_base("Gamma", 64, embedding_model="hashing")
    test.run()
    test.selectbox(key="kb_target").set_value("Gamma")
    test.button(key="kb_select").click().run()
    assert current(test) == "Gamma"


# -- import --------------------------------------------------------------------------------------
def test_import_server_paths_reports_names_chunks_and_failures(filled: Path, tmp_path: Path) -> None:
    test = app("import_files")
    broken = tmp_path / "broken.docx"
    broken.write_bytes(b"PK\x03\x04 not really a zip")
    paths = [DEMO / "知识库管理.doc", DEMO / "评估与调参.txt", broken, tmp_path / "missing.txt"]
    test.text_area(key="import_paths").input("\n".join(str(p) for p in paths))
    test.button(key="import_server_paths").click().run()
    assert not test.exception
    # per-file and overall bars finished
    progress = [(p.value, p.proto.text) for p in test.get("progress")]
    assert len(progress) == 5 and all(value == 100 for value, _ in progress), progress
    assert "4 of 4 files" in progress[0][1]
    table = test.dataframe[0].value.set_index("File")
    assert table.loc["知识库管理.doc", "Status"] == "imported" and table.loc["知识库管理.doc", "Chunks"] >= 1
    assert table.loc["评估与调参.txt", "Document name"] == "评估与调参.txt"
    failed = table[table["Status"] == "failed"]
    assert len(failed) == 2 and all(reason for reason in failed["Reason"])
    assert any("does not exist" in r for r in failed["Reason"])
    assert any("2 failed" in w for w in texts(test, "warning"))


# -- documents -----------------------------------------------------------------------------------
def test_documents_table_filter_preview_rechunk_and_delete(filled: Path) -> None:
    test = app("documents")
    table = test.dataframe[0].value
    assert set(table["Name"]) == {"kb_workbench_overview.txt", "混合检索.docx", "得分解释.doc", "hybrid_search.docx"}
    assert set(table["Status"]) == {"ready"} and set(table["Type"]) == {"txt", "docx", "doc"}

    test.text_input(key="doc_filter").input("混合").run()
    assert list(test.dataframe[0].value["Name"]) == ["混合检索.docx"]
    test.text_input(key="doc_filter").input("").run()
    test.multiselect(key="doc_type").set_value(["docx"]).run()
    assert set(test.dataframe[0].value["Name"]) == {"混合检索.docx", "hybrid_search.docx"}
    test.multiselect(key="doc_type").set_value([]).run()
    test.selectbox(key="doc_sort").set_value("Chunks").run()
    test.toggle(key="doc_desc").set_value(False).run()
    chunks = list(test.dataframe[0].value["Chunks"])
    assert chunks == sorted(chunks)

    # chunk preview: every chunk, with its chapter (the DOCX headings)
    test.selectbox(key="doc_chosen").set_value("hybrid_search.docx").run()
    expected = int(table.set_index("Name").loc["hybrid_search.docx", "Chunks"])
    labels = [e.label for e in test.expander if e.label.startswith("Chunk ")]
    assert len(labels) == expected
    assert any("chapter:" in label for label in labels), labels

    # re-chunk with a smaller size
    test.number_input(key="doc_new_size").set_value(40)
    test.button(key="doc_rechunk").click().run()
    assert not test.exception
    assert any("Re-chunked 'hybrid_search.docx'" in s for s in texts(test, "success")), texts(test, "error")
    after = test.dataframe[0].value.set_index("Name").loc["hybrid_search.docx"]
    assert after["Chunk size"] == 40 and after["Chunks"] > expected

    # delete needs the confirmation box
    test.selectbox(key="doc_chosen").set_value("得分解释.doc").run()
    assert test.button(key="doc_delete").disabled
    test.checkbox(key="doc_delete_sure").check().run()
    test.button(key="doc_delete").click().run()
    assert "得分解释.doc" not in set(test.dataframe[0].value["Name"])
    assert any("Deleted document '得分解释.doc'" in s for s in texts(test, "success"))


# -- search lab ----------------------------------------------------------------------------------
def search(test: AppTest, query: str) -> AppTest:
    test.text_input(key="lab_query").input(query)
    test.button(key="FormSubmitter:lab_form-Search").click().run()
    assert not test.exception, test.exception
    return test


def test_search_lab_cards_highlights_breakdowns_rank_moves_and_ab(filled: Path) -> None:
    test = search(app("search_lab"), "混合检索 权重")
    html = " ".join(texts(test, "markdown"))
    assert "<mark>" in html and "混合检索" in html
    cards = [m for m in texts(test, "markdown") if m.startswith("**#")]
    assert cards and "混合检索.docx" in cards[0]
    assert any(e.label == "Score breakdown" for e in test.expander)
    # the caption under each chart: the stacked parts add up to the final score
    sums = [c for c in texts(test, "caption") if "= final" in c]
    assert sums
    for caption in sums:
        parts, final = caption.split("= final")
        total = sum(float(piece.split()[-1]) for piece in parts.split(" + "))
        assert abs(total - float(final)) < 2e-4, caption
    # rank movement: one column per mode
    moves = next(d.value for d in test.dataframe if "semantic" in d.value.columns)
    assert {"hybrid", "semantic", "keyword"} <= set(moves.columns)
    # A/B defaults to the keyword mode for B; overlap metrics shown
    labels = [m.label for m in test.metric]
    assert "Shared chunks" in labels and "Overlap (Jaccard)" in labels


def lab_prefix(home: Path, kb: str = "Alpha") -> str:
    """The search lab's widget keys carry the KB id (they reset to the KB's saved defaults)."""
    return f"lab_{KnowledgeBaseService(home).find_kb(kb).id}_0"


def test_save_as_kb_default_persists_for_the_cli_and_mcp(filled: Path) -> None:
    test = app("search_lab")
    base = lab_prefix(filled)
    test.selectbox(key=f"{base}_mode").set_value("keyword")
    test.slider(key=f"{base}_top_k").set_value(7)
    test.slider(key=f"{base}_jw").set_value(0.25)
    search(test, "hybrid search weights")
    test.button(key="lab_save").click().run()
    assert any("Saved search defaults for 'Alpha'" in s for s in texts(test, "success"))
    saved = KnowledgeBaseService(filled).session().resolve_kb("Alpha").search_settings
    assert saved["mode"] == "keyword" and saved["top_k"] == 7 and saved["jaccard_weight"] == 0.25
    other = KnowledgeBaseService(filled).session()
    other.select_knowledge_base("Alpha")
    assert other.search("hybrid search")["data"]["settings"]["mode"] == "keyword"


def test_search_lab_shows_service_errors_readably(filled: Path) -> None:
    test = app("search_lab")
    base = lab_prefix(filled)
    test.slider(key=f"{base}_vw").set_value(0.0)
    test.slider(key=f"{base}_kw").set_value(0.0)
    search(test, "hybrid")
    errors = texts(test, "error")
    assert any("both 0" in e and "INVALID_ARGUMENT" in e for e in errors), errors
    assert not any("Traceback" in e for e in errors)


def test_multi_keyword_mode_uses_rag_search(filled: Path) -> None:
    test = app("search_lab")
    test.radio(key="lab_kind").set_value("multi-keyword").run()
    test.text_input(key="lab_keywords").input("fusion，BM25")
    test.button(key="FormSubmitter:lab_multi-Search").click().run()
    assert not test.exception
    cards = [m for m in texts(test, "markdown") if m.startswith("**#")]
    assert cards and "of 2 keywords" in cards[0]
    assert any("<mark>" in m for m in texts(test, "markdown"))


# -- evaluate ------------------------------------------------------------------------------------
def write_judgments(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    queries = [
        {"_id": "q1", "text": "how are the vector and keyword scores fused"},
        {"_id": "q2", "text": "混合检索 权重"},
        {"_id": "q3", "text": "what is KB Workbench"},
    ]
    (folder / "queries.jsonl").write_text("\n".join(json.dumps(q, ensure_ascii=False) for q in queries) + "\n",
                                          encoding="utf-8")
    (folder / "qrels.tsv").write_text(
        "query-id\tcorpus-id\tscore\nq1\thybrid_search.docx\t1\nq2\t混合检索.docx\t1\nq3\tkb_workbench_overview.txt\t1\n",
        encoding="utf-8",
    )
    return folder


def test_evaluate_folder_against_the_current_kb(filled: Path, tmp_path: Path) -> None:
    test = app("evaluate")
    test.text_input(key="eval_folder").input(str(write_judgments(tmp_path / "beir")))
    test.run()
    test.slider(key="eval_steps").set_value(4)
    test.button(key="eval_run").click().run()
    assert not test.exception and not texts(test, "error"), texts(test, "error")
    metrics = test.dataframe[0].value
    assert list(metrics["setting"][:3]) == ["hybrid (default)", "semantic", "keyword"]
    assert len(metrics) == 3 + 5  # modes + sweep 0, .25, .5, .75, 1
    assert metrics["ndcg@10"].between(0, 1).all() and (metrics["queries"] == 3).all()
    per_query = test.dataframe[1].value
    assert len(per_query) == 3 and list(per_query["ndcg@10"]) == sorted(per_query["ndcg@10"])
    assert test.get("download_button")


def test_evaluate_reports_bad_judgments_as_a_message(filled: Path, tmp_path: Path) -> None:
    test = app("evaluate")
    empty = tmp_path / "empty"
    empty.mkdir()
    test.text_input(key="eval_folder").input(str(empty))
    test.run()
    test.button(key="eval_run").click().run()
    assert not test.exception
    assert texts(test, "error") and not any("Traceback" in e for e in texts(test, "error"))


# -- sessions ------------------------------------------------------------------------------------
def test_two_browser_sessions_keep_their_own_current_kb(filled: Path) -> None:
    first, second = app(), app()
    first.selectbox(key="kb_target").set_value("Beta")
    first.button(key="kb_select").click().run()
    assert current(first) == "Beta" and current(second) == "Alpha"
    second.run()
    assert current(second) == "Alpha"
    assert first.session_state["kb_session"].service is second.session_state["kb_session"].service
