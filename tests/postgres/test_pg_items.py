"""Item reads and updates on a PostgreSQL store answer as the folder store on the same documents (English and
Chinese, .txt/.docx/.doc): ``get_item`` of a document (its full text) and of a chunk (with its neighbours),
``get_document_info``, and ``update_document`` (re-chunking the original kept in the database under the same id),
after which both stores still give the same hits and breakdowns."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kb_core import KnowledgeBaseService
from kb_core.edges.envelopes import Enveloped
from kb_core.features.results import SearchRequest
from tests.postgres.test_pg_service import DEMO, assert_same_hits, open_kb

FILES = [str(DEMO / n) for n in ("hybrid_search.docx", "得分解释.doc", "知识库工作台概述.txt", "score_breakdown.doc")]
# ids and timestamps are made per import; everything else must agree
PER_IMPORT = {"id", "doc_id", "created_at", "updated_at"}


@pytest.fixture(scope="module")
def stores(pg_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Enveloped, Enveloped]]:
    root = tmp_path_factory.mktemp("items")
    postgres_service = KnowledgeBaseService(root / "pg-home", store=pg_url)
    folder, postgres = open_kb(KnowledgeBaseService(root / "folder-home")), open_kb(postgres_service)
    for session in (folder, postgres):
        result = session.import_document(FILES)
        assert result["data"]["success_count"] == len(FILES), result["data"]["failed_files"]
    yield folder, postgres
    postgres_service.close()


def documents(session: Enveloped) -> dict[str, dict[str, Any]]:
    return {d["name"]: d for d in session.list_documents()["data"]["documents"]}


def without(value: dict[str, Any], keys: set[str]) -> dict[str, Any]:
    return {k: v for k, v in value.items() if k not in keys}


def chunk_view(item: dict[str, Any]) -> dict[str, Any]:
    """A get_item answer for a chunk without its per-import ids."""
    return {
        "kb_name": item["kb_name"],
        "doc_name": item["doc_name"],
        "chunk": without(item["chunk"], PER_IMPORT),
        "previous": [without(c, PER_IMPORT) for c in item["previous"]],
        "next": [without(c, PER_IMPORT) for c in item["next"]],
    }


def test_get_item_and_document_info_answer_as_the_folder_store(stores: tuple[Enveloped, Enveloped]) -> None:
    folder, postgres = stores
    folder_docs, pg_docs = documents(folder), documents(postgres)
    assert folder_docs.keys() == pg_docs.keys() and len(pg_docs) == len(FILES)
    for name, folder_doc in folder_docs.items():
        pg_doc = pg_docs[name]
        mine, theirs = postgres.get_item(pg_doc["id"]), folder.get_item(folder_doc["id"])
        assert mine["success"], mine["message"]
        assert mine["data"]["text"], name  # the full parsed text, kept in the database
        assert without(mine["data"], PER_IMPORT) == without(theirs["data"], PER_IMPORT), name
        pg_chunks = postgres.list_chunks(name)["data"]["chunks"]
        folder_chunks = folder.list_chunks(name)["data"]["chunks"]
        assert len(pg_chunks) == len(folder_chunks) >= 1
        for at in sorted({0, len(pg_chunks) // 2, len(pg_chunks) - 1}):
            mine = postgres.get_item(pg_chunks[at]["id"], neighbours=2)
            theirs = folder.get_item(folder_chunks[at]["id"], neighbours=2)
            assert mine["success"], mine["message"]
            assert chunk_view(mine["data"]) == chunk_view(theirs["data"]), (name, at)
    ids = [d["id"] for d in pg_docs.values()][:3]
    mine = postgres.get_document_info([*ids, "doc_unknown"])
    theirs = folder.get_document_info(
        [folder_docs[pg_docs_name]["id"] for pg_docs_name in list(pg_docs)[:3]] + ["doc_unknown"]
    )
    assert mine["success"] and mine["data"]["total_docs"] == 3
    assert [without(d, PER_IMPORT) for d in mine["data"]["documents"]] == [
        without(d, PER_IMPORT) for d in theirs["data"]["documents"]
    ]
    assert mine["data"]["errors"] == theirs["data"]["errors"]
    missing = postgres.get_item("chk_unknown")
    assert not missing["success"] and missing["error"]["code"] == folder.get_item("chk_unknown")["error"]["code"]


def test_update_document_rechunks_the_kept_original_as_the_folder_store(stores: tuple[Enveloped, Enveloped]) -> None:
    folder, postgres = stores
    name = Path(FILES[1]).name  # a legacy .doc in Chinese
    before = documents(postgres)[name]
    text_before = postgres.get_item(before["id"])["data"]["text"]
    answers = [session.update_document(name, 32) for session in (postgres, folder)]
    assert answers[0]["success"], answers[0]["message"]
    assert without(answers[0]["data"], PER_IMPORT) == without(answers[1]["data"], PER_IMPORT)
    after = documents(postgres)[name]
    assert after["id"] == before["id"] and after["chunk_size"] == 32 and after["chunk_count"] > before["chunk_count"]
    assert without(after, PER_IMPORT) == without(documents(folder)[name], PER_IMPORT)
    assert postgres.get_item(after["id"])["data"]["text"] == text_before
    assert [c["content"] for c in postgres.list_chunks(name)["data"]["chunks"]] == [
        c["content"] for c in folder.list_chunks(name)["data"]["chunks"]
    ]
    info = [s.get_document_info([documents(s)[name]["id"]])["data"]["documents"][0] for s in (postgres, folder)]
    assert info[0]["file_name"] == info[1]["file_name"]
    for query, settings in (("得分解释 混合检索", {}), ("score breakdown", {"mode": "keyword"})):
        assert_same_hits(
            postgres.search(SearchRequest(query, top_k=8, **settings)),
            folder.search(SearchRequest(query, top_k=8, **settings)),
            query,
        )
    verified = postgres.verify()
    assert verified["success"] and verified["data"]["problems"] == [], verified["message"]


@pytest.mark.parametrize("item_id", ["doc_\x00", "chk_abc\x00def", "\x00", "doc_" + "x" * 300, "chk_../../x"])
def test_an_id_that_cannot_exist_is_not_found_on_both_stores(stores: tuple[Enveloped, Enveloped], item_id: str) -> None:
    """A NUL in an id once reached PostgreSQL, which answered STORE_ERROR naming the database."""
    for session in stores:
        item = session.get_item(item_id)
        assert item["error"]["code"] == "ITEM_NOT_FOUND", item
        info = session.get_document_info([item_id])
        assert info["error"]["code"] == "DOCUMENT_NOT_FOUND" and info["data"]["errors"][0]["id"] == item_id, info
        explained = session.explain_search(SearchRequest("hybrid"), item_id)
        assert explained["error"]["code"] == "ITEM_NOT_FOUND", explained
        assert "postgresql" not in json.dumps([item, info, explained]).lower()


def test_sql_metacharacters_are_stored_and_searched_literally(
    stores: tuple[Enveloped, Enveloped], tmp_path: Path
) -> None:
    """What held in the attack pass, kept tested: names, texts and queries made of SQL are data, never SQL."""
    _, postgres = stores
    name = "x'); DROP TABLE kb_workbench.knowledge_bases; --"
    assert postgres.create_knowledge_base(name, 64, embedding_model="hashing")["success"]
    text = "Robert'); DROP TABLE students; -- 100% $1 %s \\\\ \" ` ; 数据"
    document = tmp_path / "a'b\";--%s.txt"
    document.write_text(text, encoding="utf-8")
    assert postgres.import_document([str(document)], kb_name=name)["data"]["success_count"] == 1
    listed = {kb["name"] for kb in postgres.list_knowledge_bases()["data"]["knowledge_bases"]}
    assert name in listed and len(listed) >= 2  # the other KBs are all still there
    for query in ("DROP TABLE students", "' OR 1=1 --", "100% $1 %s"):
        found = postgres.search(SearchRequest(query, kb_names=[name], mode="keyword"))
        assert found["success"], found["message"]
    hits = postgres.search(SearchRequest("Robert DROP students", kb_names=[name], mode="keyword"))["data"]["chunks"]
    assert hits and hits[0]["content"] == text and hits[0]["doc_name"] == document.name
    assert postgres.delete_knowledge_base(name)["success"]
