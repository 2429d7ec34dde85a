"""Compaction merges segments, drops deleted rows and keeps search results identical."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def kb(session):
    session.create_knowledge_base("c", 64, embedding_model="hashing")
    session.select_knowledge_base("c")
    return session


def test_compaction_keeps_results_and_drops_deleted_rows(kb, service, tmp_path: Path) -> None:
    for i in range(6):
        path = tmp_path / f"d{i}.txt"
        path.write_text(" ".join(f"topic{i} sentence {j} 话题{i}。" for j in range(60)), encoding="utf-8")
        kb.import_document([str(path)])
    kb.delete_document("d2.txt")
    record = kb.current_kb()
    store = service.kb_store(record.id)
    assert len(store.manifest().segments) == 6
    before = kb.search("topic3 sentence 话题3", top_k=10)["data"]["chunks"]
    result = kb.compact()
    assert result["success"] and result["data"]["segments_merged"] == 6 and result["data"]["rows_dropped"] > 0
    manifest = store.manifest()
    assert len(manifest.segments) == 1 and not manifest.tombstones
    after = kb.search("topic3 sentence 话题3", top_k=10)["data"]["chunks"]
    assert [h["id"] for h in after] == [h["id"] for h in before]
    assert [h["score"] for h in after] == pytest.approx([h["score"] for h in before], abs=1e-6)
    assert sorted(d["name"] for d in kb.list_documents()["data"]["documents"]) == [f"d{i}.txt" for i in (0, 1, 3, 4, 5)]
    assert kb.update_document("d4.txt", 128)["success"]  # originals survive the merge
    assert kb.verify()["success"]


def test_many_small_imports_are_merged_automatically(kb, service, tmp_path: Path) -> None:
    for i in range(15):
        path = tmp_path / f"s{i}.txt"
        path.write_text(f"small document {i}", encoding="utf-8")
        kb.import_document([str(path)])
    segments = service.kb_store(kb.current_kb().id).manifest().segments
    assert len(segments) <= 12
    assert kb.list_documents()["data"]["count"] == 15
