"""Compaction merges segments, drops deleted rows and keeps search results identical."""

from __future__ import annotations

from pathlib import Path

import pytest

from kb_core.features.results import SearchRequest


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
    record = kb.operations.current_kb()
    store = service.kb_store(record.id)
    assert len(store.manifest().segments) == 6
    before = kb.search(SearchRequest("topic3 sentence 话题3", top_k=10))["data"]["chunks"]
    result = kb.compact()
    assert result["success"] and result["data"]["segments_merged"] == 6 and result["data"]["rows_dropped"] > 0
    manifest = store.manifest()
    assert len(manifest.segments) == 1 and not manifest.tombstones
    after = kb.search(SearchRequest("topic3 sentence 话题3", top_k=10))["data"]["chunks"]
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
    segments = service.kb_store(kb.operations.current_kb().id).manifest().segments
    assert len(segments) <= 12
    assert kb.list_documents()["data"]["count"] == 15


def _fail_imports(kb, folder: Path, count: int, prefix: str = "empty") -> list[str]:
    """Import ``count`` empty .txt files one call each: every one is recorded as a failed document."""
    names = []
    for i in range(count):
        path = folder / f"{prefix}{i:02d}.txt"
        path.write_text("", encoding="utf-8")
        result = kb.import_document([str(path)])
        assert result["error"]["code"] == "IMPORT_FAILED"
        names.append(path.name)
    return names


def test_failed_document_records_survive_automatic_and_manual_compaction(kb, service, tmp_path: Path) -> None:
    # 13 single-file imports of empty files: the 13th triggers automatic compaction of segments with 0 chunks
    names = _fail_imports(kb, tmp_path, 13)
    (tmp_path / "real.txt").write_text("a real document about compaction 压缩。" * 20, encoding="utf-8")
    assert kb.import_document([str(tmp_path / "real.txt")])["success"]
    store = service.kb_store(kb.operations.current_kb().id)
    assert len(store.manifest().segments) <= 12
    listed = kb.list_documents()["data"]["documents"]
    failed = sorted(d["name"] for d in listed if d["status"] == "failed")
    assert failed == names  # every failed record is still listed ...
    assert all("no text" in d["error"] for d in listed if d["status"] == "failed")  # ... with its error
    assert kb.verify()["success"], kb.verify()
    result = kb.compact()
    assert result["success"] and result["data"]["segments_merged"] >= 2
    listed = kb.list_documents()["data"]["documents"]
    assert sorted(d["name"] for d in listed if d["status"] == "failed") == names
    assert [d["name"] for d in listed if d["status"] == "ready"] == ["real.txt"]
    assert store.manifest().document_count == 14 and len(store.manifest().segments) == 1
    assert kb.verify()["success"], kb.verify()


def test_compaction_of_only_failed_documents_keeps_them(kb, service, tmp_path: Path) -> None:
    names = _fail_imports(kb, tmp_path, 3, "失败")
    kb.delete_document(names[0])
    result = kb.compact()
    assert result["success"] and result["data"]["rows_kept"] == 0
    assert sorted(d["name"] for d in kb.list_documents()["data"]["documents"]) == names[1:]
    manifest = service.kb_store(kb.operations.current_kb().id).manifest()
    assert len(manifest.segments) == 1 and manifest.document_count == 2 and not manifest.tombstones
    assert kb.verify()["success"], kb.verify()


def test_a_merge_that_would_lose_records_is_refused_and_changes_nothing(
    kb, service, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kb_core.store import compaction

    _fail_imports(kb, tmp_path, 2)
    for i in range(2):
        (tmp_path / f"r{i}.txt").write_text(f"ready document {i} 文档。" * 20, encoding="utf-8")
        kb.import_document([str(tmp_path / f"r{i}.txt")])
    store = service.kb_store(kb.operations.current_kb().id)
    before = store.manifest()
    real_write = compaction._write_merged

    def losing_write(store_, manifest, chosen, segment_id, target, analyzer):  # a merge bug: one document vanishes
        kept, dropped = real_write(store_, manifest, chosen, segment_id, target, analyzer)
        return {"chunks": kept["chunks"], "documents": kept["documents"] - 1}, dropped

    monkeypatch.setattr(compaction, "_write_merged", losing_write)
    result = kb.compact()
    assert not result["success"] and result["error"]["code"] == "STORE_ERROR"
    assert "lose" in result["message"]
    assert store.manifest() == before
    assert kb.list_documents()["data"]["count"] == 4


def test_verify_reports_records_a_commit_dropped(kb, service, tmp_path: Path) -> None:
    from kb_core.store import Change

    names = _fail_imports(kb, tmp_path, 2)
    store = service.kb_store(kb.operations.current_kb().id)
    victim = store.manifest().segments[0].id
    store.commit(Change(drop=(victim,)))  # what the compaction bug did: a segment dropped, nothing deleted
    problems = kb.verify()["data"]["problems"]
    assert any("lost 1 document record" in p and names[0] in p for p in problems), problems


def test_verify_reports_tombstones_of_documents_a_segment_does_not_hold(kb, service, tmp_path: Path) -> None:
    from kb_core.store import Change

    _fail_imports(kb, tmp_path, 1)
    store = service.kb_store(kb.operations.current_kb().id)
    segment = store.manifest().segments[0].id
    store.commit(Change(tombstones={segment: {"doc_ghost": 0}}))
    problems = kb.verify()["data"]["problems"]
    assert any("doc_ghost" in p for p in problems), problems
