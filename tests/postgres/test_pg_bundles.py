"""Knowledge bundles and ontologies on a PostgreSQL store answer as on the folder store: the schema, the ontology
and its change, a bundle import (nodes, edges, indexed texts) with upserts, deletions cascading to edges and to the
index, refusals that change nothing, get_item of a node, graph_view, and searches with graph expansion; the graph
and its documents commit in one transaction and a second host sees them on its next call."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kb_core import KnowledgeBaseService
from kb_core.edges.envelopes import Enveloped
from kb_core.features.bundles.validation import node_id
from kb_core.features.results import SearchRequest
from tests.postgres.test_pg_service import assert_same_hits

PEOPLE_ONTOLOGY = {
    "nodes": {
        "Document": {
            "identity": ["doc_uri"],
            "indexed": ["content"],
            "json_schema": {
                "type": "object",
                "properties": {"doc_uri": {"type": "string"}, "content": {"type": "string"}},
            },
        },
        "Person": {
            "identity": ["email"],
            "indexed": ["bio"],
            "json_schema": {
                "type": "object",
                "properties": {"email": {"type": "string"}, "name": {"type": "string"}, "bio": {"type": "string"}},
                "required": ["name"],
            },
        },
    },
    "edges": {
        "AUTHORED": {"from": "Person", "to": "Document", "json_schema": {"type": "object", "properties": {}}},
        "REFERENCES": {"from": "Document", "to": "Document", "json_schema": {"type": "object", "properties": {}}},
    },
}
ITEMS: list[dict[str, Any]] = [
    {"type": "Document", "doc_uri": "a", "content": "quantum computing basics and 量子计算 入门"},
    {"type": "Document", "doc_uri": "b", "content": "classical error correction 纠错码"},
    {"type": "Document", "doc_uri": "c", "content": "apples grow on trees"},
    {"type": "Person", "email": "ada@example.org", "name": "Ada", "bio": "writes about quantum error correction"},
    {"type": "REFERENCES", "source": {"doc_uri": "a"}, "target": {"doc_uri": "b"}},
    {"type": "REFERENCES", "source": {"doc_uri": "b"}, "target": {"doc_uri": "c"}},
    {"type": "AUTHORED", "source": {"email": "ada@example.org"}, "target": {"doc_uri": "a"}},
]
LATER: list[dict[str, Any]] = [
    {"type": "Document", "doc_uri": "c", "action": "delete"},
    {"type": "Document", "doc_uri": "a", "content": "quantum annealing 量子退火 and error correction"},
]
PER_IMPORT = {"doc_id", "id", "kb_id", "from_chunk_id", "created_at", "updated_at"}  # made anew by each import
QUERIES = [("quantum error correction", {}), ("量子计算 纠错", {"mode": "keyword"}), ("apples", {"fusion": "rrf"})]


@pytest.fixture(scope="module")
def stores(pg_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Enveloped, Enveloped, Path]]:
    root = tmp_path_factory.mktemp("bundles")
    postgres_service = KnowledgeBaseService(root / "pg-home", store=pg_url)
    sessions = []
    for service in (KnowledgeBaseService(root / "folder-home"), postgres_service):
        session = Enveloped(service.session())
        assert session.create_knowledge_base("graph 图谱", 64, embedding_model="hashing")["success"]
        assert session.select_knowledge_base("graph 图谱")["success"]
        sessions.append(session)
    yield sessions[0], sessions[1], root
    postgres_service.close()


def bundle(folder: Path, items: list[dict[str, Any]], name: str) -> str:
    path = folder / name
    path.write_text(yaml.safe_dump(items, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return str(path)


def plain(value: Any) -> Any:
    """An answer without what each import makes anew (document ids, times)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items() if k not in PER_IMPORT}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def assert_close(mine: Any, theirs: Any, label: object) -> None:
    """Equal, floats within 1e-6 (scores and breakdowns, as assert_same_hits compares them)."""
    if isinstance(mine, float) and isinstance(theirs, float):
        assert abs(mine - theirs) <= 1e-6, label
    elif isinstance(mine, dict) and isinstance(theirs, dict):
        assert mine.keys() == theirs.keys(), label
        for key in mine:
            if key not in ("vector_rank", "keyword_rank"):  # ranks may differ by a tie at a list's end
                assert_close(mine[key], theirs[key], (label, key))
    elif isinstance(mine, list) and isinstance(theirs, list):
        assert len(mine) == len(theirs), label
        for a, b in zip(mine, theirs, strict=True):
            assert_close(a, b, label)
    else:
        assert mine == theirs, label


def graph(session: Enveloped) -> str:
    view = session.graph_view(limit=1000)
    assert view["success"], view["message"]
    return json.dumps(plain(view["data"]), sort_keys=True, ensure_ascii=False)


def same_state(folder: Enveloped, postgres: Enveloped) -> None:
    assert graph(postgres) == graph(folder)
    assert plain(postgres.get_ontology()["data"]) == plain(folder.get_ontology()["data"])
    names = [sorted(d["name"] for d in s.list_documents()["data"]["documents"]) for s in (postgres, folder)]
    assert names[0] == names[1]
    for query, settings in QUERIES:
        answers = [s.search(SearchRequest(query, top_k=8, **settings)) for s in (postgres, folder)]
        assert_same_hits(*answers, (query, settings))
        expanded = [
            plain(s.operations.expand_hits(a["data"]["chunks"]))
            for s, a in zip((postgres, folder), answers, strict=True)
        ]
        assert_close(expanded[0], expanded[1], query)


def test_bundles_and_ontologies_answer_as_the_folder_store(stores: tuple[Enveloped, Enveloped, Path]) -> None:
    folder, postgres, root = stores
    assert postgres.get_knowledge_schema()["data"] == folder.get_knowledge_schema()["data"]
    for session in (postgres, folder):
        changed = session.set_ontology(PEOPLE_ONTOLOGY)
        assert changed["success"], changed["message"]
    same_state(folder, postgres)
    assert postgres.get_knowledge_schema()["data"] == folder.get_knowledge_schema()["data"]

    answers = [s.import_knowledge_bundle(bundle(root, ITEMS, f"{i}.yaml")) for i, s in enumerate((postgres, folder))]
    assert answers[0]["success"], answers[0]["message"]
    assert answers[0]["data"]["stats"] == answers[1]["data"]["stats"]
    assert answers[0]["data"]["stats"]["chunks_indexed"] >= 4
    same_state(folder, postgres)
    ada = node_id("Person", {"email": "ada@example.org"})
    assert plain(postgres.get_item(ada)["data"]) == plain(folder.get_item(ada)["data"])

    bad = [{"type": "REFERENCES", "source": {"doc_uri": "a"}, "target": {"doc_uri": "missing"}}]
    refused = [s.import_knowledge_bundle(bundle(root, bad, f"bad{i}.yaml")) for i, s in enumerate((postgres, folder))]
    assert not refused[0]["success"] and refused[0]["error"]["code"] == refused[1]["error"]["code"]
    assert refused[0]["error"]["details"]["errors"] == refused[1]["error"]["details"]["errors"]
    same_state(folder, postgres)

    answers = [s.import_knowledge_bundle(bundle(root, LATER, f"l{i}.yaml")) for i, s in enumerate((postgres, folder))]
    assert answers[0]["success"], answers[0]["message"]
    assert answers[0]["data"]["stats"] == answers[1]["data"]["stats"]
    assert answers[0]["data"]["stats"]["edges_cascaded"] == 1
    same_state(folder, postgres)
    verified = postgres.verify()
    assert verified["success"] and verified["data"]["problems"] == [], verified["message"]

    other = KnowledgeBaseService(root / "host-b", store=postgres.operations.service.store.postgres.db.primary.url)  # type: ignore[union-attr]
    host_b = Enveloped(other.session())
    assert host_b.select_knowledge_base("graph 图谱")["success"]
    assert graph(host_b) == graph(postgres)  # the graph is in the database, not in host A's home
    other.close()


def test_a_failed_graph_commit_leaves_neither_graph_nor_documents(stores: tuple[Enveloped, Enveloped, Path]) -> None:
    """The graph and its bundle documents are one transaction: a commit that fails (here: another writer changed
    the graph meanwhile) leaves both as they were."""
    from kb_core.features.bundles import postgres as pg_bundles

    _, postgres, root = stores
    before_graph, before_docs = graph(postgres), postgres.list_documents()["data"]["documents"]
    original = pg_bundles.PostgresGraphStore.load

    def stale_load(self: pg_bundles.PostgresGraphStore) -> Any:
        state = original(self)
        self._loaded_version = state.version - 1  # as if another host had committed since this writer loaded
        return state

    items = [{"type": "Document", "doc_uri": "z", "content": "zebras are striped"}]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pg_bundles.PostgresGraphStore, "load", stale_load)
        failed = postgres.import_knowledge_bundle(bundle(root, items, "stale.yaml"))
    assert not failed["success"] and failed["error"]["code"] == "GRAPH_CHANGED", failed["message"]
    assert graph(postgres) == before_graph
    assert postgres.list_documents()["data"]["documents"] == before_docs
    assert not postgres.search(SearchRequest("zebras", mode="keyword"))["data"]["chunks"]


def test_a_document_name_taken_meanwhile_fails_the_bundle_commit(stores: tuple[Enveloped, Enveloped, Path]) -> None:
    """The graph names its documents before the commit; if another import took a name meanwhile, the commit fails
    (NAME_TAKEN) instead of committing a document under another name than the graph says."""
    import numpy as np

    from kb_core.store.postgres import StoreChange
    from tests.postgres.helpers import make_document

    _, postgres, _ = stores
    store = postgres.operations.service.store.postgres
    assert store is not None
    record = postgres.operations.current_kb()
    taken = postgres.list_documents()["data"]["documents"][0]["name"]
    before = postgres.list_documents()["data"]["documents"]
    with store.snapshot(record.id) as snapshot:
        dimension = snapshot.tables.dimension
    assert dimension is not None
    rng = np.random.default_rng(3)
    analyzer = postgres.operations.service.analyzer
    document = make_document("doc_clash", ["text"], analyzer, rng, name=taken, dimension=dimension)
    with pytest.raises(Exception) as refused:
        store.commit(record.id, StoreChange(add=(document,), keep_names=True))
    assert getattr(refused.value, "code", None) == "NAME_TAKEN"
    assert postgres.list_documents()["data"]["documents"] == before


def test_a_number_that_is_not_finite_is_a_bundle_error_on_both_stores(
    stores: tuple[Enveloped, Enveloped, Path],
) -> None:
    """``.nan`` passes ``{type: number}``; refused as BUNDLE_INVALID at its place (PostgreSQL once said STORE_ERROR)."""
    folder, postgres, root = stores
    ontology = {"nodes": {"Reading": {"identity": ["id"], "json_schema": {"type": "object", "properties": {
        "id": {"type": "string"}, "value": {"type": "number"}}}}}, "edges": {}}  # fmt: skip
    for number, session in enumerate((postgres, folder)):
        assert session.create_knowledge_base(f"readings {number}", 64, embedding_model="hashing")["success"]
        assert session.set_ontology(ontology, kb_name=f"readings {number}")["success"]
        path = root / f"nan-{number}.yaml"
        path.write_text("- {type: Reading, id: a, value: 1.5}\n- {type: Reading, id: b, value: .nan}\n", "utf-8")
        refused = session.import_knowledge_bundle(str(path), kb_name=f"readings {number}")
        assert refused["error"]["code"] == "BUNDLE_INVALID", refused["message"]
        assert [e["path"] for e in refused["error"]["details"]["errors"]] == ["[1].value"]
        assert "not a finite number" in refused["message"]
        assert session.graph_view(f"readings {number}")["data"]["node_total"] == 0
