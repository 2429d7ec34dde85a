"""The app's pages driven by Streamlit's AppTest (no browser): each page's logic over a real temp home."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path

import pytest

from kb_core.edges.envelopes import Enveloped
from kb_core.features.results import SearchRequest

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "data" / "demo"
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # the pages import their helpers from `pages` (pages/_service.py, _picker.py …)

from streamlit.testing.v1 import AppTest  # noqa: E402

from kb_core import KnowledgeBaseService  # noqa: E402
from kb_core.features.beir import load_beir_queries_qrels  # noqa: E402
from kb_core.session.demo import DEMO_KB_NAME, ensure_demo_kb  # noqa: E402
from kb_core.session.evaluation import (  # noqa: E402
    EvaluationSetting,
    best_sweep_setting,
    evaluate_with_sweep,
    record_run,
    settings_for,
)


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
    session = Enveloped(KnowledgeBaseService(path).session())
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


def finish_imports(test: AppTest, timeout: float = 120) -> AppTest:
    """Wait for the import jobs the page started (the service runs them), then run the page again."""
    jobs = test.session_state["kb_session"].service.jobs
    for job in jobs.all():
        assert job.done.wait(timeout), f"import job {job.id} still running after {timeout:.0f} s"
    test.run()
    assert not test.exception, test.exception
    return test


def texts(test: AppTest, kind: str) -> list[str]:
    return [str(e.value) for e in getattr(test, kind)]


def html_text(markdown: str) -> str:
    """What a person reads of Markdown whose document text was made inert (character references, empty elements)."""
    return html.unescape(re.sub(r"<[^>]+>", "", markdown))


def current(test: AppTest) -> str | None:
    session = test.session_state["kb_session"]
    return session.current_kb().name if session.current_kb_id else None


# -- knowledge bases -----------------------------------------------------------------------------
def test_create_form_shows_the_service_validation_inline_then_creates_and_selects(home: Path) -> None:
    test = app()
    assert any("no knowledge bases yet" in t for t in texts(test, "info"))

    test.text_input(key="create_name").input("   ")
    test.button(key="create_submit").click().run()
    assert any("Kb name:" in e and "must not be empty" in e for e in texts(test, "error")), texts(test, "error")

    test.text_input(key="create_name").input("Manuals · 手册")
    test.number_input(key="create_chunk_size").set_value(10)
    test.button(key="create_submit").click().run()
    assert any("Chunk size:" in e and "32" in e and "8192" in e for e in texts(test, "error")), texts(test, "error")

    test.number_input(key="create_chunk_size").set_value(256)
    # the test embedder is no choice a user is offered; it is typed as another model (the real models: elsewhere)
    assert "hashing" not in test.radio(key="create_model").options
    test.text_input(key="create_other_model").input("hashing")
    test.button(key="create_submit").click().run()
    assert not test.exception
    assert any("Created and selected" in s for s in texts(test, "success"))
    assert current(test) == "Manuals · 手册"
    table = test.dataframe[0].value
    row = table[table["Name"] == "Manuals · 手册"].iloc[0]
    assert row["Current"] == "●" and row["Chunk size"] == 256 and row["Embedding model"] == "hashing"

    # the same name again (names ignore case): the service's message, not a crash
    test.text_input(key="create_name").input("MANUALS · 手册")
    test.button(key="create_submit").click().run()
    assert any("already exists" in e for e in texts(test, "error"))


def test_a_kb_deleted_by_another_session_is_named_and_no_other_kb_is_used(filled: Path) -> None:
    """Once, the page warned once and the next search ran against another KB, only the header changing (#34)."""
    test = app("search_lab")
    assert current(test) == "Alpha"
    other = Enveloped(KnowledgeBaseService(filled).session())
    assert other.select_knowledge_base("Beta")["success"] and other.delete_knowledge_base("Alpha")["success"]
    for _ in range(2):  # and it stays so: the session is not moved to another KB behind the user's back
        test.run()
        assert not test.exception, test.exception
        warnings = texts(test, "warning")
        assert any("**Alpha**" in w and "no longer exists" in w and "Choose a knowledge base" in w for w in warnings)
        assert not test.text_input  # no search form: nothing is searched
        session = Enveloped(test.session_state["kb_session"])
        existing = [kb["id"] for kb in session.list_knowledge_bases()["data"]["knowledge_bases"]]
        assert session.operations.current_kb_id not in existing
    # (AppTest runs app.py's sidebar on the first run only: the picker's part is in the browser tests)
    assert session.select_knowledge_base("Beta")["success"]  # what choosing in the sidebar does
    test.run()
    assert not texts(test, "warning") and test.text_input(key="lab_query").value is not None


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
    session = Enveloped(KnowledgeBaseService(filled).session())
    session.create_knowledge_base("Gamma", 64, embedding_model="hashing")
    test.run()
    test.selectbox(key="kb_target").set_value("Gamma")
    test.button(key="kb_select").click().run()
    assert current(test) == "Gamma"


# -- import --------------------------------------------------------------------------------------
def test_import_server_paths_reports_names_chunks_and_failures(
    filled: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KB_ALLOW_DIRS", os.pathsep.join([str(DEMO), str(tmp_path)]))
    test = app("import_files")
    broken = tmp_path / "broken.docx"
    broken.write_bytes(b"PK\x03\x04 not really a zip")
    paths = [DEMO / "知识库管理.doc", DEMO / "评估与调参.txt", broken, tmp_path / "missing.txt"]
    test.text_area(key="import_paths").input("\n".join(str(p) for p in paths))
    test.button(key="import_server_paths").click().run()
    assert not test.exception
    finish_imports(test)
    assert not test.get("progress")  # the job ended: its results, no bars
    table = test.dataframe[0].value.set_index("File")
    assert table.loc["知识库管理.doc", "Status"] == "imported" and table.loc["知识库管理.doc", "Chunks"] >= 1
    assert table.loc["评估与调参.txt", "Document name"] == "评估与调参.txt"
    failed = table[table["Status"] == "failed"]
    assert len(failed) == 2 and all(reason for reason in failed["Reason"])
    assert any("does not exist" in r for r in failed["Reason"])
    assert any("2 failed" in w for w in texts(test, "warning"))


def test_import_page_offers_the_executors_that_can_run_and_says_why_not_the_others(filled: Path) -> None:
    from importlib.util import find_spec

    test = app("import_files")
    radio = test.radio(key="import_executor")
    assert radio.value == "local"
    captions = " ".join(texts(test, "caption"))
    if find_spec("ray") is not None and find_spec("ray.data") is not None:
        assert radio.options == ["local", "ray"]
        assert test.text_input(key="import_ray_address").disabled  # an address is for the ray executor only
        radio.set_value("ray").run()
        assert not test.text_input(key="import_ray_address").disabled
    else:
        assert radio.options == ["local"]
        assert "ray: not available here" in captions and "kb-workbench[ray]" in captions


def test_server_paths_are_off_by_default_and_confined_to_the_allowed_folders(
    filled: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once any file the server could read was importable from the browser, the home's secrets/*.key included."""
    monkeypatch.delenv("KB_ALLOW_DIRS", raising=False)
    test = app("import_files")
    assert not [a for a in test.text_area if a.key == "import_paths"]
    assert any("KB_ALLOW_DIRS" in i for i in texts(test, "info"))

    secret = next((filled / "secrets").glob("*"), None) or filled / "secrets" / "kb_x.key"
    if not secret.exists():
        secret.write_text("sk-never-import-me", encoding="utf-8")
    outside = tmp_path / "outside.txt"
    outside.write_text("not in an allowed folder", encoding="utf-8")
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    (allowed / "notes.txt").write_text("notes in the allowed folder", encoding="utf-8")
    # the home lies inside an allowed folder here: still refused
    monkeypatch.setenv("KB_ALLOW_DIRS", os.pathsep.join([str(allowed), str(filled.parent)]))
    test = app("import_files")
    test.text_area(key="import_paths").input("\n".join(str(p) for p in (allowed / "notes.txt", secret)))
    test.button(key="import_server_paths").click().run()
    table = finish_imports(test).dataframe[0].value.set_index("File")
    assert table.loc["notes.txt", "Status"] == "imported"
    assert table.loc[secret.name, "Status"] == "failed" and "knowledge-base home" in table.loc[secret.name, "Reason"]
    monkeypatch.setenv("KB_ALLOW_DIRS", str(allowed))
    test = app("import_files")
    test.text_area(key="import_paths").input(str(outside))
    test.button(key="import_server_paths").click().run()
    table = finish_imports(test).dataframe[0].value.set_index("File")
    assert table.loc["outside.txt", "Status"] == "failed"
    assert "outside the folders" in table.loc["outside.txt", "Reason"]
    documents = Enveloped(KnowledgeBaseService(filled).session()).list_documents("Alpha")["data"]["documents"]
    assert not any(d["name"] in (secret.name, "outside.txt") for d in documents)


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


def lab_prefix(home: Path, kb: str = "Alpha", saved_round: int = 0) -> str:
    """The search lab's widget keys carry the KB id (they reset to the KB's saved defaults)."""
    return f"lab_{KnowledgeBaseService(home).find_kb(kb).id}_{saved_round}"


def metric(test: AppTest, label: str) -> str:
    return next(str(m.value) for m in test.metric if m.label == label)


def pair(weights: dict[str, float]) -> str:
    return f"{weights['vector']:.2f} / {weights['keyword']:.2f}"


def shown_chunk_ids(test: AppTest) -> list[str]:
    """The chunk ids of the result cards, in the order shown (each card's caption ends with its id)."""
    return [c.split("chunk `")[1].rstrip("`") for c in texts(test, "caption") if "chunk `chk_" in c]


def open_breakdowns(test: AppTest, count: int) -> AppTest:
    """Unfold the first ``count`` cards' score breakdowns (drawn only when open), as clicking them does."""
    for rank in range(1, count + 1):
        test.session_state[f"lab_breakdown_{rank}"] = True
    return test.run()


def show_tab(test: AppTest, label: str) -> AppTest:
    """Switch the result tabs (each runs its searches only when shown), as clicking the tab does."""
    test.session_state["lab_tabs"] = label
    return test.run()


def service_counters(test: AppTest) -> tuple[int, int]:
    """The service's counters as the page shows them under the weights: searches run, query vectors computed."""
    line = next(c for c in texts(test, "caption") if "this app's service:" in c)
    searches, vectors = line.split("this app's service: ")[1].split(", ")
    return int(searches.split()[0]), int(vectors.split()[0])


def searches_so_far(test: AppTest) -> int:
    return service_counters(test)[0]


def test_search_lab_cards_highlights_breakdowns_rank_moves_and_ab(filled: Path) -> None:
    test = search(app("search_lab"), "混合检索 权重")
    html = " ".join(texts(test, "markdown"))
    assert "<mark>" in html and "混合检索" in html
    cards = [m for m in texts(test, "markdown") if m.startswith("**#")]
    assert cards and "混合检索.docx" in html_text(cards[0])
    assert sum("on a 0–1 scale" in m for m in texts(test, "markdown")) == len(cards)
    # the overview draws one bar per card, in the cards' order, ending at the card's score
    bars = next(m for m in texts(test, "markdown") if m.startswith("<div class='kb-bars'>"))
    finals = re.findall(r"= final (\d\.\d{4})'", bars)
    assert [f"{float(f):.3f}" for f in finals] == [re.search(r"score \*\*(\d\.\d{3})\*\*", c).group(1) for c in cards]
    assert any(e.label == "Score breakdown" for e in test.expander)
    assert not any("= final" in c for c in texts(test, "caption"))  # folded breakdowns are not computed
    open_breakdowns(test, len(cards))
    # the caption under each chart: the stacked parts add up to the final score
    sums = [c for c in texts(test, "caption") if "= final" in c]
    assert len(sums) == len(cards)
    for caption in sums:
        parts, final = caption.split("= final")
        total = sum(float(piece.split()[-1]) for piece in parts.split(" + "))
        assert abs(total - float(final)) < 2e-4, caption
        assert 0 <= float(final) <= 1
    # no trace of the old z-scores: the scale is stated in words
    assert not any("z-score" in c or "standard deviation" in c for c in texts(test, "caption"))
    assert any("0–1 scale" in c for c in texts(test, "caption"))
    # rank movement: one column per mode, searched when its tab is shown
    assert not any("semantic" in d.value.columns for d in test.dataframe)
    before = searches_so_far(test)
    show_tab(test, "Rank movement across modes")
    moves = next(d.value for d in test.dataframe if "semantic" in d.value.columns)
    assert {"hybrid", "semantic", "keyword"} <= set(moves.columns)
    assert searches_so_far(test) - before == 3  # the three modes, ten deep; the main search is remembered
    # A/B defaults to the keyword mode for B; overlap metrics shown; the score column comes right after the rank
    show_tab(test, "A/B comparison")
    labels = [m.label for m in test.metric]
    assert "Shared chunks" in labels and "Overlap (Jaccard)" in labels
    sides = [d.value for d in test.dataframe if "both" in d.value.columns]
    assert len(sides) == 2 and all(list(side.columns[:2]) == ["#", "score (0–1)"] for side in sides)


def recomputed(step: str) -> tuple[float, float]:
    """``fused: 0.20 × 0.5123 + 0.80 × 0.4000 = 0.4225`` → (the sum recomputed from the line, the stated result)."""
    terms, stated = step.removeprefix("- fused: ").split(" = ")
    total = sum(float(w) * float(v) for w, v in (t.split(" × ") for t in terms.split(" + ")))
    return total, float(stated)


def test_one_vector_weight_slider_sets_both_weights_and_every_hit_uses_them(filled: Path) -> None:
    test = search(app("search_lab"), "hybrid search weights")
    base = lab_prefix(filled)
    assert metric(test, "Keyword weight") == "0.30"
    assert metric(test, "Weights used · vector / keyword") == "0.70 / 0.30"
    open_breakdowns(test, 5)
    test.slider(key=f"{base}_vw").set_value(0.2).run()
    assert not test.exception
    assert metric(test, "Keyword weight") == "0.80"
    assert metric(test, "Weights used · vector / keyword") == "0.20 / 0.80"
    assert metric(test, "Weights asked") == "0.20 / 0.80"
    # the cards are the service's hits for exactly these weights, in its order
    session = Enveloped(KnowledgeBaseService(filled).session())
    session.select_knowledge_base("Alpha")
    expected = session.search(SearchRequest("hybrid search weights", vector_weight=0.2))["data"]
    assert shown_chunk_ids(test) == [c["id"] for c in expected["chunks"]]
    # each breakdown shows its arithmetic with the weights used, and it adds up
    steps = [line for m in texts(test, "markdown") for line in m.splitlines() if line.startswith("- fused:")]
    assert len(steps) == len(expected["chunks"])
    for step in steps:
        assert step.startswith("- fused: 0.20 × ") and " + 0.80 × " in step, step
        total, stated = recomputed(step)
        assert abs(total - stated) < 1e-3, step
    # auto weighting: the weights used are the ones the service calls auto, beside the ones asked
    test.radio(key=f"{base}_weighting").set_value("auto").run()
    asked = SearchRequest("hybrid search weights", vector_weight=0.2, weighting="auto")
    auto = session.search(asked)["data"]["weights"]
    assert metric(test, "Weights asked") == "0.20 / 0.80"
    assert metric(test, "Weights used · vector / keyword") == pair(auto["used"])
    assert metric(test, "Auto weighting would use") == pair(auto["auto"])


def test_one_search_per_change_none_for_settings_seen_before_until_the_kb_changes(filled: Path) -> None:
    test = search(app("search_lab"), "hybrid search weights")
    base = lab_prefix(filled)
    searches, vectors = service_counters(test)
    test.slider(key=f"{base}_vw").set_value(0.2).run()
    assert service_counters(test) == (searches + 1, vectors)  # one search; the query's vector is remembered
    test.slider(key=f"{base}_vw").set_value(0.7).run()
    assert service_counters(test) == (searches + 1, vectors)  # back to a setting searched before: nothing runs
    assert any("from memory" in c for c in texts(test, "caption"))
    # another process imports a document: the KB's version moves on, so the same settings search again
    other = Enveloped(KnowledgeBaseService(filled).session())
    other.select_knowledge_base("Alpha")
    assert other.import_document([str(DEMO / "evaluation_guide.docx")])["success"]
    test.run()
    assert service_counters(test) == (searches + 2, vectors)
    expected = other.search(SearchRequest("hybrid search weights"))["data"]["chunks"]
    assert shown_chunk_ids(test) == [c["id"] for c in expected]
    assert any("evaluation_guide.docx" in html_text(m) for m in texts(test, "markdown"))


def test_the_search_lab_says_the_notes_the_search_itself_says(filled: Path) -> None:
    """One narrative (#38): what min_score hid, the candidates left out and the stop words are said under the weights
    as the search says them to the CLI and MCP (its message), not in a wording of the page's own."""
    query = "what is hybrid"
    test = search(app("search_lab"), query)
    test.slider(key=f"{lab_prefix(filled)}_min_score").set_value(0.3).run()
    assert not test.exception, test.exception
    session = Enveloped(KnowledgeBaseService(filled).session())
    session.select_knowledge_base("Alpha")
    result = session.search(SearchRequest(query, min_score=0.3))
    facts = result["data"]
    assert facts["below_min_score"] and facts["without_evidence"] and facts["query_terms"]["stop_words"], facts
    notes = [c for c in texts(test, "caption") if c in result["message"]]
    assert len(notes) == 3, (texts(test, "caption"), result["message"])  # hidden, left out, stop words
    assert any("not shown" in n for n in notes) and any("left out" in n for n in notes)


def test_explain_shows_why_a_hit_ranks_where_it_does(filled: Path) -> None:
    test = search(app("search_lab"), "hybrid search weights")
    second = shown_chunk_ids(test)[1]
    test.toggle(key=f"lab_explain_{second}").set_value(True).run()
    assert not test.exception
    session = Enveloped(KnowledgeBaseService(filled).session())
    session.select_knowledge_base("Alpha")
    expected = session.explain_search(SearchRequest("hybrid search weights"), second)["data"]["explanation"]
    assert expected[0].startswith("Ranked 2 of")
    assert "\n".join(f"- {line}" for line in expected) in texts(test, "markdown")


def test_save_as_kb_default_persists_every_setting_for_the_cli_and_mcp(filled: Path) -> None:
    test = app("search_lab")
    base = lab_prefix(filled)
    test.slider(key=f"{base}_top_k").set_value(7)
    test.slider(key=f"{base}_vw").set_value(0.35)
    test.radio(key=f"{base}_weighting").set_value("auto")
    test.radio(key=f"{base}_fusion").set_value("rrf")
    test.slider(key=f"{base}_jw").set_value(0.25)
    test.toggle(key=f"{base}_guard").set_value(False)
    test.slider(key=f"{base}_min_score").set_value(0.1)
    search(test, "hybrid search weights")
    test.button(key="lab_save").click().run()
    assert any("Saved search defaults for 'Alpha'" in s for s in texts(test, "success"))
    saved = KnowledgeBaseService(filled).session().resolve_kb("Alpha").search_settings
    assert saved == {"mode": "hybrid", "top_k": 7, "vector_weight": 0.35, "keyword_weight": 0.65,
                     "jaccard_weight": 0.25, "fusion": "rrf", "weighting": "auto", "language_guard": False,
                     "min_score": 0.1}
    # the page starts from the saved defaults now
    again = lab_prefix(filled, saved_round=1)
    assert test.slider(key=f"{again}_vw").value == 0.35 and test.radio(key=f"{again}_fusion").value == "rrf"
    assert test.toggle(key=f"{again}_guard").value is False
    # and a search that gives no settings (CLI, MCP) uses them
    other = Enveloped(KnowledgeBaseService(filled).session())
    other.select_knowledge_base("Alpha")
    used = other.search(SearchRequest("hybrid search"))["data"]
    assert used["settings"]["fusion"] == "rrf" and used["weights"]["requested"]["vector"] == pytest.approx(0.35)
    # keyword mode: the saved weights stay for hybrid
    test.selectbox(key=f"{again}_mode").set_value("keyword").run()
    test.button(key="lab_save").click().run()
    saved = KnowledgeBaseService(filled).session().resolve_kb("Alpha").search_settings
    assert saved["mode"] == "keyword" and saved["vector_weight"] == 0.35


@pytest.mark.model
def test_language_guard_is_shown_where_the_user_looks_and_can_be_switched_off(home: Path) -> None:
    session = Enveloped(KnowledgeBaseService(home).session())
    assert session.create_knowledge_base("英文模型", 128, "all-MiniLM-L6-v2")["success"]  # English only
    files = [str(DEMO / f) for f in ("混合检索.docx", "hybrid_search.docx")]
    assert session.import_document(files, kb_name="英文模型")["success"]
    test = search(app("search_lab"), "混合检索的默认权重是多少")
    base = lab_prefix(home, "英文模型")
    warnings = texts(test, "warning")
    assert any("language guard gave the vector signal weight 0" in w and "Switch the language guard off" in w
               for w in warnings), warnings
    assert metric(test, "Weights used · vector / keyword") == "0.00 / 1.00"
    assert metric(test, "Weights asked") == "0.70 / 0.30"
    assert any("Why the weights used differ" in c for c in texts(test, "caption"))
    test.toggle(key=f"{base}_guard").set_value(False).run()
    assert metric(test, "Weights used · vector / keyword") == "0.70 / 0.30"
    assert any("the requested weights are used" in w for w in texts(test, "warning"))
    assert not any("Why the weights used differ" in c for c in texts(test, "caption"))


def test_multi_keyword_mode_uses_rag_search(filled: Path) -> None:
    test = app("search_lab")
    test.radio(key="lab_kind").set_value("multi-keyword").run()
    test.text_input(key="lab_keywords").input("fusion，BM25")
    test.button(key="FormSubmitter:lab_multi-Search").click().run()
    assert not test.exception
    cards = [m for m in texts(test, "markdown") if m.startswith("**#")]
    assert cards and "of 2 keywords" in cards[0]
    assert any("<mark>" in m for m in texts(test, "markdown"))


HOSTILE_TEXT = (
    "fusion notes ![pixel](https://tracker.example/p.png) [click here](https://evil.example/x) "
    "www.evil.example <img src=https://tracker.example/i.png> # heading\n- item **bold** me@evil.example"
)


def test_document_text_is_shown_as_text_never_as_markdown(filled: Path, tmp_path: Path) -> None:
    """Once the rag_search view rendered chunk text as Markdown: an image in a document loaded from any host (a
    tracking pixel) and links rendered. Both result views must show the text, and only the text."""
    (tmp_path / "hostile.txt").write_text(HOSTILE_TEXT, encoding="utf-8")
    session = Enveloped(KnowledgeBaseService(filled).session())
    assert session.import_document([str(tmp_path / "hostile.txt")], kb_name="Alpha")["success"]
    test = app("search_lab")
    test.radio(key="lab_kind").set_value("multi-keyword").run()
    test.text_input(key="lab_keywords").input("fusion, pixel")
    test.button(key="FormSubmitter:lab_multi-Search").click().run()
    single = search(app("search_lab"), "fusion notes pixel tracker")
    for page in (test, single):
        shown = [m for m in texts(page, "markdown") if "&#91;" in m or "tracker" in m]
        assert shown, texts(page, "markdown")
        for markdown in shown:
            for markup in ("![", "](", "http://", "https://", "www.", "<img", "**", "# ", "@evil"):
                assert markup not in markdown, (markup, markdown)
            assert "<mark>" in markdown


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


def run_id_shown(test: AppTest) -> str:
    kept = next(s for s in texts(test, "success") if s.startswith("Kept as run "))
    return kept.split()[3]


def test_evaluate_folder_sweeps_keeps_the_run_and_saves_the_best_weights(
    filled: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KB_ALLOW_DIRS", str(tmp_path))
    test = app("evaluate")
    assert test.radio(key="eval_source").value == "Folder on the server"  # the current KB is not the demo
    test.text_input(key="eval_folder").input(str(write_judgments(tmp_path / "beir")))
    test.run()
    test.slider(key="eval_steps").set_value(4)
    test.button(key="eval_run").click().run()
    assert not test.exception and not texts(test, "error"), texts(test, "error")
    metrics = test.dataframe[0].value
    assert list(metrics["setting"]) == [
        "hybrid (default)", "semantic", "keyword", "hybrid auto", "hybrid rrf",
        "hybrid 0.00/1.00", "hybrid 0.25/0.75", "hybrid 0.50/0.50", "hybrid 0.75/0.25", "hybrid 1.00/0.00",
    ]
    assert metrics["ndcg@10"].between(0, 1).all() and (metrics["queries"] == 3).all()
    assert metrics["recall@100"].notna().all()  # the sweep was ranked 100 deep too
    per_query = test.dataframe[1].value
    assert len(per_query) == 3 and list(per_query["ndcg@10"]) == sorted(per_query["ndcg@10"])
    assert test.get("download_button")
    # the run is kept in the user's home with what it measured
    service = KnowledgeBaseService(filled)
    run = service.evaluation_runs.load(run_id_shown(test))
    assert run.kb_name == "Alpha" and run.query_count == 3 and list(run.metrics["setting"]) == list(metrics["setting"])
    # the best sweep point becomes the KB's default: hybrid, those weights, fixed, weighted
    best = best_sweep_setting(run.metrics)
    assert any(f"vector **{best['vector_weight']:.2f}**" in m for m in texts(test, "markdown"))
    test.button(key="eval_save_best").click().run()
    assert any("Saved search defaults for 'Alpha'" in s for s in texts(test, "success"))
    saved = service.find_kb("Alpha").search_settings
    assert saved == {"mode": "hybrid", "vector_weight": best["vector_weight"],
                     "keyword_weight": best["keyword_weight"], "weighting": "fixed", "fusion": "weighted"}


def test_demo_judgments_are_offered_and_chosen_for_the_demo_kb(home: Path) -> None:
    built = ensure_demo_kb(KnowledgeBaseService(home).session(), embedding_model="hashing")
    assert built is not None and built.succeeded()
    test = app("evaluate")
    assert test.radio(key="eval_source").value == "Demo judgments"
    test.toggle(key="eval_sweep").set_value(False)
    test.toggle(key="eval_compare_fusion").set_value(False)
    test.multiselect(key="eval_modes").set_value(["hybrid"])
    test.button(key="eval_run").click().run()
    assert not test.exception and not texts(test, "error"), texts(test, "error")
    assert list(test.dataframe[0].value["queries"]) == [24]
    run = KnowledgeBaseService(home).evaluation_runs.load(run_id_shown(test))
    assert run.dataset == "demo judgments" and run.kb_name == DEMO_KB_NAME
    # without a sweep there is nothing to save as a default
    assert not [b for b in test.button if b.key == "eval_save_best"]


def keep_run(home: Path, settings: list, *, sweep: list[float] | None = None) -> str:
    """A kept run of the first two test judgments against Alpha, as `kb eval --kb Alpha` keeps one."""
    service = KnowledgeBaseService(home)
    session = service.session()
    queries, qrels = load_beir_queries_qrels(write_judgments(home.parent / "beir"))
    report = evaluate_with_sweep(session, queries, qrels, settings=settings, sweep=sweep, kb_name="Alpha")
    everything = list(settings) + [s for s in settings_for((), sweep) if s not in settings] if sweep else settings
    return record_run(service.evaluation_runs, service, report, dataset="beir", settings=everything).id


def test_two_kept_runs_compare_query_by_query_as_the_service_does(filled: Path) -> None:
    first = keep_run(filled, [EvaluationSetting("keyword"), EvaluationSetting("hybrid", 0.3, 0.7)], sweep=[0.0, 1.0])
    time.sleep(1.1)  # runs are listed newest first by their creation time, kept to the second
    second = keep_run(filled, [EvaluationSetting("semantic")])
    test = app("evaluate")
    # newest run is B, the one before it A; each with its first setting
    assert test.selectbox(key=f"cmp_run_a_{second}").value == first
    assert test.selectbox(key=f"cmp_run_b_{second}").value == second
    test.selectbox(key=f"cmp_setting_a_{first}").set_value("hybrid 0.30/0.70").run()
    session = Enveloped(KnowledgeBaseService(filled).session())
    expected = session.compare_evaluation_runs(first, second, "hybrid 0.30/0.70", "semantic", top=1000)["data"]
    shown = {m.label: str(m.value) for m in test.metric}
    assert shown["Wins (B better)"] == str(expected["wins"]) and shown["Losses (B worse)"] == str(expected["losses"])
    assert shown["Ties"] == str(expected["ties"])
    assert shown["Mean nDCG@10: A → B"] == f"{expected['mean_a']:.4f} → {expected['mean_b']:.4f}"
    table = test.dataframe[-1].value
    assert list(table["query id"]) == [m["query_id"] for m in expected["moved_most"]]
    assert list(table["B − A"]) == pytest.approx([m["delta"] for m in expected["moved_most"]])
    assert set(table["query"]) == {
        "how are the vector and keyword scores fused", "混合检索 权重", "what is KB Workbench"
    }

    # the same run twice compares two of its settings; B starts on the run's second setting
    test.selectbox(key=f"cmp_run_b_{second}").set_value(first).run()
    assert test.selectbox(key=f"cmp_setting_b_{first}").value == "hybrid 0.30/0.70"
    test.selectbox(key=f"cmp_setting_a_{first}").set_value("keyword").run()
    expected = session.compare_evaluation_runs(first, first, "keyword", "hybrid 0.30/0.70")["data"]
    assert {m.label: str(m.value) for m in test.metric}["Wins (B better)"] == str(expected["wins"])
    assert not texts(test, "warning")  # one KB: the fingerprints agree

    # Recall@100 of a sweep point that was ranked 10 deep: the service's reason, readably
    test.selectbox(key=f"cmp_setting_b_{first}").set_value("hybrid 1.00/0.00")
    test.radio(key="cmp_metric").set_value("recall@100").run()
    assert not test.exception
    errors = texts(test, "error")
    assert any("recall@100" in e and "INVALID_ARGUMENT" in e for e in errors), errors


def test_runs_of_different_knowledge_bases_warn_when_compared(filled: Path) -> None:
    first = keep_run(filled, [EvaluationSetting("keyword")])
    session = Enveloped(KnowledgeBaseService(filled).session())
    session.select_knowledge_base("Alpha")
    assert session.delete_document("得分解释.doc")["success"]  # the KB the next run searches differs
    time.sleep(1.1)
    second = keep_run(filled, [EvaluationSetting("keyword")])
    test = app("evaluate")
    assert test.selectbox(key=f"cmp_run_a_{second}").value == first
    assert test.selectbox(key=f"cmp_run_b_{second}").value == second
    assert any("searched different knowledge bases" in w for w in texts(test, "warning")), texts(test, "warning")


@pytest.mark.model
def test_a_kb_built_from_a_corpus_is_evaluated_but_not_offered_a_default(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KB_ALLOW_DIRS", str(tmp_path))
    Enveloped(KnowledgeBaseService(home).session()).create_knowledge_base("Mine", 128, embedding_model="hashing")
    folder = write_judgments(tmp_path / "corpus")
    corpus = {
        "hybrid_search.docx": "Hybrid search fuses BM25 keyword scores and vector cosine scores with weights.",
        "混合检索.docx": "混合检索按权重融合关键词得分和向量得分。",
        "kb_workbench_overview.txt": "KB Workbench is a local knowledge-base workbench for RAG.",
    }
    (folder / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": k, "text": v}, ensure_ascii=False) + "\n" for k, v in corpus.items()),
        encoding="utf-8",
    )
    test = app("evaluate")
    test.text_input(key="eval_folder").input(str(folder)).run()
    assert test.toggle(key="eval_build").value is True
    test.slider(key="eval_steps").set_value(2)
    test.button(key="eval_run").click().run()
    assert not test.exception and not texts(test, "error"), texts(test, "error")
    assert any("not offered as a default" in i for i in texts(test, "info"))
    assert not [b for b in test.button if b.key == "eval_save_best"]
    run = KnowledgeBaseService(home).evaluation_runs.load(run_id_shown(test))
    assert run.kb_name.startswith("eval-corpus-") and run.dataset == "corpus"
    assert [kb.name for kb in KnowledgeBaseService(home).home.knowledge_bases()] == ["Mine"]


def test_evaluate_reports_bad_judgments_as_a_message(
    filled: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KB_ALLOW_DIRS", str(tmp_path))
    test = app("evaluate")
    empty = tmp_path / "empty"
    empty.mkdir()
    test.text_input(key="eval_folder").input(str(empty))
    test.run()
    test.button(key="eval_run").click().run()
    assert not test.exception
    assert texts(test, "error") and not any("Traceback" in e for e in texts(test, "error"))


def test_evaluate_reads_a_server_folder_only_inside_kb_allow_dirs(
    filled: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """#37 row 9: with KB_ALLOW_DIRS unset, "Folder on the server" told a visitor whether <any path>/corpus.jsonl
    existed, built a KB from it and showed that folder's queries.jsonl texts in the per-query table."""
    secret = write_judgments(tmp_path / "private")
    (secret / "queries.jsonl").write_text('{"_id": "q1", "text": "the payroll of 2026"}\n', encoding="utf-8")
    (secret / "corpus.jsonl").write_text('{"_id": "d1", "text": "salaries"}\n', encoding="utf-8")
    monkeypatch.delenv("KB_ALLOW_DIRS", raising=False)
    test = app("evaluate")
    test.session_state["eval_folder"] = str(secret)  # whatever the field holds, nothing there is looked at
    test.run()
    assert not [t for t in test.toggle if t.key == "eval_build"]  # once offered: corpus.jsonl was there
    assert test.button(key="eval_run").disabled and test.text_input(key="eval_folder").disabled
    assert any("KB_ALLOW_DIRS" in i for i in texts(test, "info"))

    allowed = tmp_path / "allowed"
    allowed.mkdir()
    (allowed / "linked").symlink_to(secret, target_is_directory=True)
    monkeypatch.setenv("KB_ALLOW_DIRS", str(allowed))
    refusals = []
    for typed in (secret, tmp_path / "no-such-folder", allowed / "linked"):
        test = app("evaluate")
        test.text_input(key="eval_folder").input(str(typed)).run()
        assert not test.exception
        assert not [t for t in test.toggle if t.key == "eval_build"] and test.button(key="eval_run").disabled
        (error,) = texts(test, "error")
        refusals.append(error.replace(str(typed), "PATH"))
    assert len(set(refusals)) == 1 and "not inside the folders" in refusals[0]  # exists or not: the same answer

    # inside the allowed folder, a file that is a link to one outside is refused as the file is opened
    inside = write_judgments(allowed / "beir")
    (inside / "queries.jsonl").unlink()
    (inside / "queries.jsonl").symlink_to(secret / "queries.jsonl")
    test = app("evaluate")
    test.text_input(key="eval_folder").input(str(inside)).run()
    test.button(key="eval_run").click().run()
    assert not test.exception
    shown = " ".join(texts(test, "error") + texts(test, "markdown") + texts(test, "success"))
    assert "payroll" not in shown and texts(test, "error")
    assert all("payroll" not in frame.value.to_string() for frame in test.dataframe)


# -- sessions ------------------------------------------------------------------------------------
def test_two_browser_sessions_keep_their_own_current_kb(filled: Path) -> None:
    first, second = app(), app()
    first.selectbox(key="kb_target").set_value("Beta")
    first.button(key="kb_select").click().run()
    assert current(first) == "Beta" and current(second) == "Alpha"
    second.run()
    assert current(second) == "Alpha"
    assert first.session_state["kb_session"].service is second.session_state["kb_session"].service
