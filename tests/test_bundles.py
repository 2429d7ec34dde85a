"""Knowledge bundles: the spec's schema, examples and error messages, atomic import, graph, shadow round-trip."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft7Validator

from kb_core.base.errors import ImportFormatError
from kb_core.edges.envelopes import Enveloped
from kb_core.features.bundles.loading import load_bundle_text
from kb_core.features.bundles.validation import node_id
from kb_core.features.results import SearchRequest
from kb_core.session.service import KnowledgeBaseService

SPEC_BUNDLE = """\
- type: Document
  doc_uri: "doc-001"
  content: "DuckDB 是一个嵌入式分析数据库..."

- type: Document
  action: delete
  doc_uri: "doc-old"

- type: REFERENCES
  source: { doc_uri: "doc-001" }
  target: { doc_uri: "doc-002" }
  ref_type: "citation"
"""

PEOPLE_ONTOLOGY = {
    "nodes": {
        "Person": {
            "identity": ["email"],
            "aliases": ["Human"],
            "indexed": ["bio"],
            "json_schema": {
                "type": "object",
                "properties": {"email": {"type": "string"}, "name": {"type": "string"}, "bio": {"type": "string"}},
                "required": ["name"],
            },
        },
        "Organization": {
            "identity": ["org_code"],
            "json_schema": {
                "type": "object",
                "properties": {"org_code": {"type": "string"}, "name": {"type": "string"}},
            },
        },
    },
    "edges": {
        "EMPLOYED_BY": {
            "from": "Person",
            "to": "Organization",
            "json_schema": {"type": "object", "properties": {"position": {"type": "string"}}},
        }
    },
}


@pytest.fixture
def session(tmp_path: Path) -> Any:
    service = KnowledgeBaseService(tmp_path / "home")
    session = Enveloped(service.session())
    assert session.create_knowledge_base("graph", 128, embedding_model="hashing")["success"]
    assert session.select_knowledge_base("graph")["success"]
    return session


def write(tmp_path: Path, text: str, name: str = "bundle.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def dump(tmp_path: Path, items: list[dict[str, Any]], name: str = "bundle.yaml") -> Path:
    return write(tmp_path, yaml.safe_dump(items, allow_unicode=True, sort_keys=False), name)


def doc_names(session: Any) -> set[str]:
    return {d["name"] for d in session.list_documents()["data"]["documents"]}


def graph_snapshot(session: Any) -> dict[str, Any]:
    view = session.graph_view(limit=100_000)["data"]
    return {
        "nodes": sorted((n["id"], n["type"], json.dumps(n["properties"], sort_keys=True)) for n in view["nodes"]),
        "edges": sorted((e["id"], e["source"], e["target"], json.dumps(e["properties"])) for e in view["edges"]),
    }


# -- schema ------------------------------------------------------------------------------------------
def test_schema_has_the_spec_shape(session: Any) -> None:
    result = session.get_knowledge_schema()
    assert result["success"], result
    schema = result["data"]["full_bundle_schema"]
    Draft7Validator.check_schema(schema)
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    assert schema["type"] == "array"
    document, references = schema["items"]["oneOf"]
    assert document["title"] == "Document Node"
    assert document["properties"]["type"] == {"const": "Document"}
    assert document["properties"]["action"] == {"type": "string", "enum": ["upsert", "delete"], "default": "upsert"}
    assert document["required"] == ["type", "doc_uri"]
    assert document["additionalProperties"] is False
    assert references["title"] == "REFERENCES Edge"
    assert references["required"] == ["type", "source", "target"]
    assert references["properties"]["source"]["required"] == ["doc_uri"]
    assert references["properties"]["target"]["properties"] == {"doc_uri": document["properties"]["doc_uri"]}
    assert "ref_type" in references["properties"]
    assert references["additionalProperties"] is False


def test_spec_example_validates_including_the_delete_without_content(session: Any) -> None:
    schema = session.get_knowledge_schema()["data"]["full_bundle_schema"]
    items = yaml.safe_load(SPEC_BUNDLE)
    assert list(Draft7Validator(schema).iter_errors(items)) == []
    # but an upsert without content is refused
    assert list(Draft7Validator(schema).iter_errors([{"type": "Document", "doc_uri": "x"}]))


def test_example_yaml_validates_and_imports(session: Any, tmp_path: Path) -> None:
    data = session.get_knowledge_schema()["data"]
    items = yaml.safe_load(data["example_yaml"])
    assert list(Draft7Validator(data["full_bundle_schema"]).iter_errors(items)) == []
    result = session.import_knowledge_bundle(write(tmp_path, data["example_yaml"]))
    assert result["success"], result["message"]


def test_custom_ontology_schema_and_example(session: Any, tmp_path: Path) -> None:
    assert session.set_ontology(PEOPLE_ONTOLOGY)["success"]
    data = session.get_knowledge_schema()["data"]
    titles = [s["title"] for s in data["full_bundle_schema"]["items"]["oneOf"]]
    assert titles == ["Organization Node", "Person Node", "EMPLOYED_BY Edge"]  # stored sorted by name
    edge = data["full_bundle_schema"]["items"]["oneOf"][2]
    assert edge["properties"]["source"]["required"] == ["email"]
    assert edge["properties"]["target"]["required"] == ["org_code"]
    items = yaml.safe_load(data["example_yaml"])
    assert list(Draft7Validator(data["full_bundle_schema"]).iter_errors(items)) == []
    assert session.import_knowledge_bundle(write(tmp_path, data["example_yaml"]))["success"]


# -- import -------------------------------------------------------------------------------------------
def test_spec_bundle_imports_once_its_target_exists(session: Any, tmp_path: Path) -> None:
    refused = session.import_knowledge_bundle(write(tmp_path, SPEC_BUNDLE))
    assert not refused["success"]
    assert (
        "Cannot create 'REFERENCES' relation: Target 'Document' with identity {doc_uri: \"doc-002\"} not found."
        in refused["message"]
    )
    assert refused["error"]["details"]["errors"][0]["path"] == "[2].target"

    first = "- type: Document\n  doc_uri: doc-002\n  content: 向量检索与全文检索的混合。\n"
    assert session.import_knowledge_bundle(write(tmp_path, first, "first.yaml"))["success"]
    path = write(tmp_path, SPEC_BUNDLE)
    result = session.import_knowledge_bundle(path)
    assert result["success"], result["message"]
    assert result["data"]["status"] == "success"
    stats = result["data"]["stats"]
    assert (stats["nodes_upserted"], stats["nodes_deleted"], stats["edges_upserted"]) == (1, 0, 1)
    assert stats["chunks_indexed"] >= 1
    assert not path.exists()  # temp file deleted after success
    hits = session.search(SearchRequest("嵌入式分析数据库", mode="keyword"))["data"]["chunks"]
    assert hits and hits[0]["doc_name"] == "doc-001"


def test_missing_identity_error_has_the_spec_form_and_all_errors_are_reported(session: Any, tmp_path: Path) -> None:
    items: list[dict[str, Any]] = [{"type": "Document", "doc_uri": f"d{i}", "content": "text"} for i in range(6)]
    del items[4]["doc_uri"]
    items[1]["content"] = 42
    items[5]["colour"] = "red"
    path = dump(tmp_path, items)
    result = session.import_knowledge_bundle(path)
    assert not result["success"]
    assert result["error"]["code"] == "BUNDLE_INVALID"
    assert 'Validation error at [4].doc_uri: "doc_uri" is required' in result["message"]
    paths = [e["path"] for e in result["error"]["details"]["errors"]]
    assert paths == ["[1].content", "[4].doc_uri", "[5].colour"]
    assert path.exists()  # kept for the agent to fix


def test_unknown_type_suggests_the_closest(session: Any, tmp_path: Path) -> None:
    session.set_ontology(PEOPLE_ONTOLOGY)
    result = session.import_knowledge_bundle(write(tmp_path, "- type: Human\n  email: a@b.c\n"))
    assert "Entity type 'Human' is not defined. Did you mean 'Person'?" in result["message"]
    assert result["error"]["details"]["errors"][0]["path"] == "[0].type"
    typo = session.import_knowledge_bundle(write(tmp_path, "- type: Persn\n  email: a@b.c\n"))
    assert "Entity type 'Persn' is not defined. Did you mean 'Person'?" in typo["message"]
    lower = session.import_knowledge_bundle(write(tmp_path, "- type: employed_by\n"))
    assert "Did you mean 'EMPLOYED_BY'?" in lower["message"]
    nothing = session.import_knowledge_bundle(write(tmp_path, "- type: Zebra\n"))
    assert "Entity type 'Zebra' is not defined. Defined types: Organization, Person, EMPLOYED_BY." in nothing["message"]


def test_one_bad_item_changes_nothing(session: Any, tmp_path: Path) -> None:
    good = [{"type": "Document", "doc_uri": "a", "content": "alpha text"}]
    assert session.import_knowledge_bundle(dump(tmp_path, good))["success"]
    before_graph, before_docs = graph_snapshot(session), doc_names(session)
    items = [{"type": "Document", "doc_uri": f"n{i}", "content": f"new {i}"} for i in range(20)]
    items.append({"type": "Document", "action": "delete", "doc_uri": "a"})
    items.append({"type": "REFERENCES", "source": {"doc_uri": "n1"}, "target": {"doc_uri": "missing"}})
    result = session.import_knowledge_bundle(dump(tmp_path, items))
    assert not result["success"]
    assert graph_snapshot(session) == before_graph
    assert doc_names(session) == before_docs


def test_upsert_replaces_and_delete_cascades_to_edges_and_index(session: Any, tmp_path: Path) -> None:
    items = [
        {"type": "Document", "doc_uri": "a", "content": "apples grow on trees", "title": "A"},
        {"type": "Document", "doc_uri": "b", "content": "bananas are yellow"},
        {"type": "REFERENCES", "source": {"doc_uri": "a"}, "target": {"doc_uri": "b"}, "ref_type": "see-also"},
    ]
    assert session.import_knowledge_bundle(dump(tmp_path, items))["success"]
    again = session.import_knowledge_bundle(dump(tmp_path, items))
    assert again["data"]["stats"]["documents_indexed"] == 0  # unchanged texts are not re-indexed
    replace = [{"type": "Document", "doc_uri": "a", "content": "cherries are red"}]
    assert session.import_knowledge_bundle(dump(tmp_path, replace))["success"]
    node = session.get_node(node_id("Document", {"doc_uri": "a"}))["data"]
    assert node["properties"] == {"doc_uri": "a", "content": "cherries are red"}  # title gone: replaced
    assert [n["edge_type"] for n in node["neighbours"]] == ["REFERENCES"]
    assert not session.search(SearchRequest("apples", mode="keyword"))["data"]["chunks"]
    assert session.search(SearchRequest("cherries", mode="keyword"))["data"]["chunks"][0]["doc_name"] == "a"
    delete = [{"type": "Document", "action": "delete", "doc_uri": "b"}]
    result = session.import_knowledge_bundle(dump(tmp_path, delete))
    assert result["data"]["stats"]["nodes_deleted"] == 1 and result["data"]["stats"]["edges_cascaded"] == 1
    assert doc_names(session) == {"a"}
    assert session.get_node(node_id("Document", {"doc_uri": "a"}))["data"]["neighbours"] == []


def test_missing_file_and_non_list(session: Any, tmp_path: Path) -> None:
    missing = session.import_knowledge_bundle(str(tmp_path / "nope.yaml"))
    assert not missing["success"] and "does not exist" in missing["message"]
    mapping = session.import_knowledge_bundle(write(tmp_path, "type: Document\n"))
    assert "Validation error at root: the bundle must be a YAML list" in mapping["message"]


def test_billion_laughs_is_refused_quickly(session: Any, tmp_path: Path) -> None:
    text = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    previous = "a"
    for name in "bcdefghi":
        text += f"{name}: &{name} [" + ",".join([f"*{previous}"] * 9) + "]\n"
        previous = name
    path = write(tmp_path, text)
    started = time.perf_counter()
    result = session.import_knowledge_bundle(path)
    assert time.perf_counter() - started < 2.0
    assert not result["success"] and "aliases" in result["message"]
    with pytest.raises(ImportFormatError):
        load_bundle_text("[" * 1000 + "]" * 1000)


def test_yaml_dates_stay_strings_and_duplicate_keys_are_refused() -> None:
    assert load_bundle_text("- {type: Document, doc_uri: 2024-01-01}") == [
        {"type": "Document", "doc_uri": "2024-01-01"}
    ]
    with pytest.raises(ImportFormatError, match="Duplicate key 'content'"):
        load_bundle_text("- type: Document\n  content: a\n  content: b\n")


# -- ontology -------------------------------------------------------------------------------------------
def test_invalid_ontology_is_refused(session: Any) -> None:
    bad = {"nodes": {"Person": {"identity": ["email"], "json_schema": {"type": "object", "properties": {}}}}}
    result = session.set_ontology(bad)
    assert not result["success"] and "identity field 'email' is not a declared property" in result["message"]
    edge_bad = {**PEOPLE_ONTOLOGY, "edges": {"X": {"from": "Person", "to": "Robot"}}}
    assert "must name a node type" in session.set_ontology(edge_bad)["message"]
    assert session.get_ontology()["data"]["ontology"]["nodes"].keys() == {"Document"}


def test_ontology_change_must_fit_existing_nodes(session: Any, tmp_path: Path) -> None:
    items = [{"type": "Document", "doc_uri": "a", "content": "text"}]
    assert session.import_knowledge_bundle(dump(tmp_path, items))["success"]
    result = session.set_ontology(PEOPLE_ONTOLOGY)
    assert not result["success"] and "'Document' is not in the new ontology" in result["message"]


def test_ontology_from_yaml_file(session: Any, tmp_path: Path) -> None:
    path = write(tmp_path, yaml.safe_dump(PEOPLE_ONTOLOGY), "ontology.yaml")
    assert session.set_ontology(str(path))["success"]
    shown = session.get_ontology()["data"]["ontology"]
    assert shown["edges"]["EMPLOYED_BY"]["from"] == "Person"


# -- graph use and shadow export ----------------------------------------------------------------------------
def people_bundle() -> list[dict[str, Any]]:
    return [
        {"type": "Person", "email": "li@example.cn", "name": "李雷", "bio": "李雷是一名数据库工程师，研究向量检索。"},
        {"type": "Person", "email": "ann@example.com", "name": "Ann", "bio": "Ann writes search engines in Rust."},
        {"type": "Organization", "org_code": "ACME", "name": "Acme"},
        {"type": "EMPLOYED_BY", "source": {"email": "li@example.cn"}, "target": {"org_code": "ACME"}},
        {
            "type": "EMPLOYED_BY",
            "source": {"email": "ann@example.com"},
            "target": {"org_code": "ACME"},
            "position": "engineer",
        },
    ]


def test_get_node_and_search_expansion(session: Any, tmp_path: Path) -> None:
    items = [
        {"type": "Document", "doc_uri": "a", "content": "quantum computing basics"},
        {"type": "Document", "doc_uri": "b", "content": "classical error correction"},
        {"type": "REFERENCES", "source": {"doc_uri": "a"}, "target": {"doc_uri": "b"}, "ref_type": "citation"},
    ]
    assert session.import_knowledge_bundle(dump(tmp_path, items))["success"]
    node = session.get_node(node_id("Document", {"doc_uri": "b"}))["data"]
    assert node["neighbours"][0]["direction"] == "in"
    assert node["neighbours"][0]["node"]["identity"] == {"doc_uri": "a"}
    assert session.get_node("node_missing")["error"]["code"] == "ITEM_NOT_FOUND"
    hits = session.search(SearchRequest("quantum", mode="keyword", top_k=1))["data"]["chunks"]
    expanded = session.operations.expand_hits(hits)
    assert len(expanded) == 2 and "graph" not in hits[0]  # input untouched
    assert expanded[0]["graph"]["related"][0]["edge_type"] == "REFERENCES"
    added = expanded[1]
    assert added["expanded"] is True and added["doc_name"] == "b"
    assert added["breakdown"]["graph_expansion"]["edge_type"] == "REFERENCES"
    assert "graph expansion" in added["breakdown"]["notes"][0]


def test_shadow_export_rebuilds_an_identical_graph_and_search(tmp_path: Path) -> None:
    service = KnowledgeBaseService(tmp_path / "home")
    one, two = Enveloped(service.session()), Enveloped(service.session())
    for name, sess in (("one", one), ("two", two)):
        sess.create_knowledge_base(name, 64, embedding_model="hashing")
        sess.select_knowledge_base(name)
    assert one.set_ontology(PEOPLE_ONTOLOGY)["success"]
    assert one.import_knowledge_bundle(dump(tmp_path, people_bundle()))["success"]
    shadow = service.home.kb_dir(one.operations.current_kb().id) / "graph" / "shadow"
    files = sorted(p.relative_to(shadow).as_posix() for p in shadow.rglob("*") if p.is_file())
    assert files == [
        "edges/EMPLOYED_BY.jsonl",
        "nodes/Organization.jsonl",
        "nodes/Person.jsonl",
        "ontology.json",
        "shadow.json",
    ]
    result = two.rebuild_from_shadow(shadow)
    assert result["success"], result["message"]
    assert graph_snapshot(one) == graph_snapshot(two)
    for query in ("向量检索", "search engines", "Rust 数据库"):
        request = SearchRequest(query)
        a = [(h["doc_name"], h["content"], round(h["score"], 9)) for h in one.search(request)["data"]["chunks"]]
        b = [
            (h["doc_name"], h["content"], round(h["score"], 9))
            for h in two.search(SearchRequest(query))["data"]["chunks"]
        ]
        assert a == b and a
    other = service.home.kb_dir(two.operations.current_kb().id) / "graph" / "shadow"
    for path in shadow.rglob("*.jsonl"):
        assert path.read_bytes() == (other / path.relative_to(shadow)).read_bytes()


def test_cli_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from kb_core.edges.cli.main import main

    home = str(tmp_path / "home")
    assert main(["--home", home, "create", "c", "--chunk-size", "64", "--embedding-model", "hashing"]) == 0
    assert main(["--home", home, "select", "c"]) == 0
    capsys.readouterr()
    assert main(["--home", home, "--json", "schema"]) == 0
    envelope = json.loads(capsys.readouterr().out)
    assert envelope["data"]["full_bundle_schema"]["type"] == "array"
    path = dump(tmp_path, [{"type": "Document", "doc_uri": "x", "content": "hello"}])
    assert main(["--home", home, "bundle", "import", str(path)]) == 0
    assert path.exists()  # the CLI keeps the user's file unless --delete
    assert main(["--home", home, "ontology", "show"]) == 0
    assert "Document" in capsys.readouterr().out
    ontology = write(tmp_path, json.dumps({"nodes": {"Document": {"identity": ["doc_uri"]}}}), "o.json")
    assert main(["--home", home, "ontology", "set", str(ontology)]) == 1


# -- a kill between the index commit and the graph commit ------------------------------------------------------------
BUNDLE_WORKER = Path(__file__).with_name("bundle_worker.py")


def test_a_kill_between_index_and_graph_commit_is_found_by_verify_and_rolled_back_by_repair(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import subprocess
    import sys

    from kb_core.edges.cli.main import main

    home = tmp_path / "home"
    session = Enveloped(KnowledgeBaseService(home).session())
    assert session.create_knowledge_base("graph", 128, embedding_model="hashing")["success"]
    assert session.select_knowledge_base("graph")["success"]
    first = [
        {"type": "Document", "doc_uri": "a", "content": "apples grow on trees"},
        {"type": "Document", "doc_uri": "b", "content": "bananas are yellow 香蕉是黄色的"},
        {"type": "REFERENCES", "source": {"doc_uri": "a"}, "target": {"doc_uri": "b"}, "ref_type": "see-also"},
    ]
    assert session.import_knowledge_bundle(dump(tmp_path, first, "first.yaml"))["success"]
    before_graph, before_docs = graph_snapshot(session), doc_names(session)
    assert session.verify()["success"]
    second = [
        {"type": "Document", "doc_uri": "a", "content": "cherries are red"},  # a changed text
        {"type": "Document", "doc_uri": "c", "content": "durian smells strong 榴莲很臭"},  # a new node
        {"type": "Document", "action": "delete", "doc_uri": "b"},  # a deleted node
    ]
    bundle = dump(tmp_path, second, "second.yaml")
    killed = subprocess.run(
        [sys.executable, str(BUNDLE_WORKER), str(home), "graph", str(bundle)], capture_output=True, timeout=120
    )
    assert killed.returncode == -9, killed.stderr.decode()
    # the index holds the bundle, the graph does not: search shows texts no node has
    assert session.search(SearchRequest("durian", mode="keyword"))["data"]["chunks"]
    assert graph_snapshot(session) == before_graph
    result = session.verify()
    assert not result["success"]
    problem = "\n".join(result["data"]["problems"])
    assert "'graph'" in problem or "graph:" in problem
    assert "interrupted between its index and graph commits" in problem and "kb verify --repair" in problem
    capsys.readouterr()
    assert main(["--home", str(home), "verify"]) == 1
    assert "kb verify --repair" in capsys.readouterr().err  # the CLI shows the problem and the remedy
    assert main(["--home", str(home), "verify", "--repair"]) == 0
    assert "rolled" in capsys.readouterr().out
    # rolled back to the committed graph: the old texts are searchable again, the new ones are gone
    assert not session.search(SearchRequest("durian", mode="keyword"))["data"]["chunks"]
    assert not session.search(SearchRequest("cherries", mode="keyword"))["data"]["chunks"]
    assert session.search(SearchRequest("apples", mode="keyword"))["data"]["chunks"][0]["doc_name"] == "a"
    assert session.search(SearchRequest("香蕉", mode="keyword"))["data"]["chunks"][0]["doc_name"] == "b"
    assert graph_snapshot(session) == before_graph and doc_names(session) == before_docs
    assert session.verify()["success"]
    # and the interrupted bundle can simply be imported again
    assert session.import_knowledge_bundle(bundle)["success"]
    assert session.search(SearchRequest("durian", mode="keyword"))["data"]["chunks"][0]["doc_name"] == "c"
    assert doc_names(session) == {"a", "c"} and session.verify()["success"]
