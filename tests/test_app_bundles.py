"""The Knowledge graph page driven by Streamlit's AppTest: bundle paste and import, refusals shown against their
items, ontology edit with validation, schema view and the graph of nodes and edges, over a real temp home."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from kb_core.edges.envelopes import Enveloped
from kb_core.features.results import SearchRequest

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # the pages import their helpers from `pages` (pages/_service.py, _picker.py …)

from streamlit.testing.v1 import AppTest  # noqa: E402

from kb_core import KnowledgeBaseService  # noqa: E402

PAGE = "pages/knowledge_graph.py"

BUNDLE = """\
- type: Document
  doc_uri: guide-en
  title: Hybrid search guide
  content: Hybrid search fuses BM25 keyword scores with vector similarity.
- type: Document
  doc_uri: 指南-zh
  title: 混合检索指南
  content: 混合检索把关键词得分和向量相似度融合在一起。
- type: REFERENCES
  source: {doc_uri: 指南-zh}
  target: {doc_uri: guide-en}
  ref_type: translation
"""

BROKEN = """\
- type: Document
  doc_uri: ok-1
  content: fine
- type: Human
  name: Ada
- type: Document
  title: 没有标识
- type: REFERENCES
  source: {doc_uri: ok-1}
  target: {doc_uri: doc-404}
"""


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "home"
    monkeypatch.setenv("KB_HOME", str(path))
    monkeypatch.setenv("KB_DEMO", "0")
    session = Enveloped(KnowledgeBaseService(path).session())
    assert session.create_knowledge_base("Graph 图谱", 128, embedding_model="hashing")["success"]
    return path


def temp_bundles() -> set[Path]:
    """The page's temporary bundle files (it writes them with this prefix)."""
    return set(Path(tempfile.gettempdir()).glob("kb-bundle-*"))


def page() -> AppTest:
    test = AppTest.from_file(str(REPO / "app.py"), default_timeout=60)
    test.run()
    test.switch_page(PAGE).run()
    assert not test.exception, test.exception
    return test


def texts(test: AppTest, kind: str) -> list[str]:
    return [str(e.value) for e in getattr(test, kind)]


def session_of(test: AppTest):  # type: ignore[no-untyped-def]
    return Enveloped(test.session_state["kb_session"])


def paste_and_import(test: AppTest, text: str) -> None:
    test.text_area(key="bundle_text").input(text)
    test.button(key="bundle_import_text").click().run()
    assert not test.exception, test.exception


def test_example_bundle_pasted_imports_and_is_drawn_and_searchable(home: Path) -> None:
    before = temp_bundles()
    test = page()
    assert any("no nodes yet" in t for t in texts(test, "info"))
    test.button(key="bundle_use_example").click().run()
    example = test.text_area(key="bundle_text").value
    assert example == session_of(test).get_knowledge_schema()["data"]["example_yaml"]

    test.button(key="bundle_import_text").click().run()
    assert not test.exception, test.exception
    assert any("Imported the bundle" in s for s in texts(test, "success")), texts(test, "success")
    metrics = {m.label: m.value for m in test.metric}
    assert metrics["Nodes upserted"] == "2" and metrics["Edges upserted"] == "1" and metrics["Chunks indexed"] == "2"
    assert any("2 node(s) · 1 edge(s)" in c for c in texts(test, "caption"))
    assert len(test.get("plotly_chart")) == 1
    assert temp_bundles() <= before  # the temp bundle file is gone


def test_bundle_with_chinese_nodes_graph_hover_and_node_inspector(home: Path) -> None:
    test = page()
    paste_and_import(test, BUNDLE)
    assert any("2 node(s) upserted" in s for s in texts(test, "success"))

    figure = test.get("plotly_chart")[0].proto.spec
    assert "混合检索指南" in figure and "translation" in figure  # hover text: properties of nodes and edges
    assert "REFERENCES" in figure

    view = session_of(test).graph_view()["data"]
    zh = next(n for n in view["nodes"] if n["identity"]["doc_uri"] == "指南-zh")
    test.selectbox(key="graph_node").set_value(zh["id"]).run()
    assert not test.exception, test.exception
    neighbours = next(d.value for d in test.dataframe if "Edge" in d.value.columns)
    assert list(neighbours["Edge"]) == ["REFERENCES"] and neighbours["Direction"].iloc[0] == "→ out"
    assert "guide-en" in neighbours["Node"].iloc[0]

    # indexed content is searchable like any document, Chinese too
    hits = session_of(test).search(SearchRequest("关键词得分", mode="keyword"))["data"]["chunks"]
    assert hits and hits[0]["doc_name"] == "指南-zh"


def test_refused_bundle_lists_every_error_against_its_item_and_changes_nothing(home: Path) -> None:
    before = temp_bundles()
    test = page()
    paste_and_import(test, BROKEN)
    errors = texts(test, "error")
    assert any("refused and nothing was changed" in e and "BUNDLE_INVALID" in e for e in errors), errors
    table = test.dataframe[0].value
    assert set(table["Item"]) == {1, 2}  # every error, each against its item
    assert "[1].type" in set(table["Path"]) and "[2].doc_uri" in set(table["Path"])
    assert any("'Human' is not defined" in m for m in table["Message"])
    assert any('"doc_uri" is required' in m for m in table["Message"])
    snippets = [c.value for c in test.code]
    assert any("Human" in s and "Ada" in s for s in snippets) and any("没有标识" in s for s in snippets)
    assert session_of(test).graph_view()["data"]["node_total"] == 0  # nothing applied, not even item 0
    assert temp_bundles() <= before  # the service keeps a refused file; the page removes its own

    # the edge's missing endpoint is reported once the items themselves are valid
    paste_and_import(test, BROKEN.split("- type: Human")[0] + BROKEN.split("没有标识\n")[1])
    table = test.dataframe[0].value
    assert list(table["Item"]) == [1]
    assert "not found" in table["Message"].iloc[0] and "doc-404" in table["Message"].iloc[0]


def test_unreadable_yaml_is_a_readable_error(home: Path) -> None:
    test = page()
    paste_and_import(test, "- type: Document\n  doc_uri: [unclosed\n")
    errors = texts(test, "error")
    assert errors and all("Traceback" not in e for e in errors)
    assert any("INVALID_IMPORT_FILE" in e or "BUNDLE_INVALID" in e for e in errors), errors

    test.text_area(key="bundle_text").input("   ")
    test.button(key="bundle_import_text").click().run()
    assert any("Paste a YAML bundle first" in w for w in texts(test, "warning"))


def test_ontology_edit_is_validated_then_saved_and_changes_the_schema(home: Path) -> None:
    test = page()
    text_area = next(t for t in test.text_area if t.key.startswith("ontology_text_"))
    current = yaml.safe_load(text_area.value)
    assert current["nodes"]["Document"]["identity"] == ["doc_uri"]

    text_area.input("nodes: {}\nedges: {}\n")
    test.button(key="ontology_save").click().run()
    assert any("nodes" in e and "INVALID_ARGUMENT" in e for e in texts(test, "error")), texts(test, "error")
    assert "Person" not in session_of(test).get_ontology()["data"]["ontology"]["nodes"]

    current["nodes"]["Person"] = {
        "identity": ["name"],
        "indexed": [],
        "json_schema": {"type": "object", "properties": {"name": {"type": "string", "minLength": 1}}},
        "description": "A person (人物).",
    }
    current["edges"]["WROTE"] = {"from": "Person", "to": "Document", "json_schema": {"type": "object"}}
    text_area = next(t for t in test.text_area if t.key.startswith("ontology_text_"))
    text_area.input(yaml.safe_dump(current, allow_unicode=True))
    test.button(key="ontology_save").click().run()
    assert not test.exception, test.exception
    assert any("Set the ontology" in s for s in texts(test, "success")), texts(test, "error")
    node_types = test.dataframe[0].value
    assert list(node_types["Node type"]) == ["Document", "Person"]
    assert "WROTE" in list(test.dataframe[1].value["Edge type"])
    saved = next(t for t in test.text_area if t.key.startswith("ontology_text_"))
    assert "Person" in saved.value  # the editor shows the saved ontology
    assert any("Person" in c.value and "WROTE" in c.value for c in test.code)  # the example follows the ontology
    schema_text = str(test.json[0].value)
    assert "Person" in schema_text and "WROTE" in schema_text


def test_schema_tab_shows_the_schema_and_the_example_with_downloads(home: Path) -> None:
    test = page()
    schema = session_of(test).get_knowledge_schema()["data"]
    assert any(c.value.strip() == schema["example_yaml"].strip() for c in test.code)
    assert '"oneOf"' in str(test.json[0].value)
    labels = [b.label for b in test.get("download_button")]
    assert labels == ["Download example.yaml", "Download bundle-schema.json"]
