"""Property tests: generated valid bundles pass validation (and import); mutated ones fail at the right path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft7Validator

from kb_core.edges.envelopes import Enveloped
from kb_core.features import bundles
from kb_core.features.bundles.ontology import default_ontology
from kb_core.features.bundles.validation import BundleValidator
from kb_core.session.service import KnowledgeBaseService

ONTOLOGY = default_ontology()
VALIDATOR = BundleValidator(ONTOLOGY)
SCHEMA = bundles.bundle_schema(ONTOLOGY)

text = st.text(
    alphabet=st.sampled_from(list("abcdefghij klmnop数据库检索向量知识图谱。, ")), min_size=1, max_size=40
).filter(lambda t: t.strip())
uri = st.from_regex(r"[a-z]{1,6}-[0-9]{1,3}", fullmatch=True)


@st.composite
def valid_bundles(draw: Any) -> list[dict[str, Any]]:
    uris = draw(st.lists(uri, min_size=1, max_size=8, unique=True))
    items: list[dict[str, Any]] = []
    for u in uris:
        item: dict[str, Any] = {"type": "Document", "doc_uri": u, "content": draw(text)}
        if draw(st.booleans()):
            item["title"] = draw(text)
        items.append(item)
    for _ in range(draw(st.integers(0, 4))):
        edge: dict[str, Any] = {
            "type": "REFERENCES",
            "source": {"doc_uri": draw(st.sampled_from(uris))},
            "target": {"doc_uri": draw(st.sampled_from(uris))},
        }
        if draw(st.booleans()):
            edge["ref_type"] = draw(text)
        items.append(edge)
    if draw(st.booleans()):
        gone = draw(uri.filter(lambda u: u not in uris))  # deleting an absent node is a no-op
        items.append({"type": "Document", "action": "delete", "doc_uri": gone})
    return draw(st.permutations(items))


@given(valid_bundles())
@settings(max_examples=150, deadline=None)
def test_valid_bundles_validate(items: list[dict[str, Any]]) -> None:
    nodes, edges, errors = VALIDATOR.structural(items)
    assert errors == []
    assert len(nodes) + len(edges) == len(items)
    assert list(Draft7Validator(SCHEMA).iter_errors(items)) == []


MUTATIONS = ("drop_identity", "drop_content", "bad_type", "extra_field", "bad_action", "drop_target_key")


@given(valid_bundles(), st.sampled_from(MUTATIONS), st.integers(0, 10_000))
@settings(max_examples=200, deadline=None)
def test_mutated_bundles_are_refused_at_the_right_path(items: list[dict[str, Any]], mutation: str, seed: int) -> None:
    items = [dict(i) for i in items]
    node_upserts = [i for i, it in enumerate(items) if it["type"] == "Document" and it.get("action") != "delete"]
    edges = [i for i, it in enumerate(items) if it["type"] == "REFERENCES"]
    if mutation == "drop_target_key" and edges:
        at = edges[seed % len(edges)]
        items[at]["target"] = {}
        expected, message = f"[{at}].target.doc_uri", '"doc_uri" is required'
    else:
        at = node_upserts[seed % len(node_upserts)]
        if mutation == "drop_identity":
            del items[at]["doc_uri"]
            expected, message = f"[{at}].doc_uri", '"doc_uri" is required'
        elif mutation == "drop_content":
            del items[at]["content"]
            expected, message = f"[{at}].content", '"content" is required'
        elif mutation == "bad_type":
            items[at]["content"] = seed
            expected, message = f"[{at}].content", "is not of type 'string'"
        elif mutation == "bad_action":
            items[at]["action"] = "merge"
            expected, message = f"[{at}].action", "is not one of ['upsert', 'delete']"
        else:
            items[at]["colour"] = "red"
            expected, message = f"[{at}].colour", "not allowed here"
    _, _, errors = VALIDATOR.structural(items)
    assert [e.path for e in errors] == [expected]
    assert message in errors[0].message
    assert errors[0].text.startswith(f"Validation error at {expected}: ")


@given(valid_bundles())
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_valid_bundles_import_and_shadow_matches_graph(tmp_path: Path, items: list[dict[str, Any]]) -> None:
    service = KnowledgeBaseService(tmp_path / f"home-{abs(hash(str(items)))}")
    session = Enveloped(service.session())
    session.create_knowledge_base("p", 64, embedding_model="hashing")
    session.select_knowledge_base("p")
    path = tmp_path / f"b-{abs(hash(str(items)))}.yaml"
    path.write_text(yaml.safe_dump(items, allow_unicode=True), encoding="utf-8")
    result = session.import_knowledge_bundle(path)
    assert result["success"], result["message"]
    graph = session.graph_view()["data"]
    upserted = {i["doc_uri"] for i in items if i["type"] == "Document" and i.get("action") != "delete"}
    assert {n["identity"]["doc_uri"] for n in graph["nodes"]} == upserted
    assert result["data"]["stats"]["nodes_deleted"] == 0
    names = {d["name"] for d in session.list_documents()["data"]["documents"]}
    assert names == {n["identity"]["doc_uri"] for n in graph["nodes"]}
