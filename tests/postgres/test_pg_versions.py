"""The KB version on the PostgreSQL store: every commit, from any host, moves it on, so what a front end remembers
under it (the search lab's results) is never stale."""

from __future__ import annotations

from pathlib import Path

from kb_core import KnowledgeBaseService
from kb_core.edges.envelopes import Enveloped


def test_the_kb_version_moves_with_every_commit_from_any_host(pg_url: str, tmp_path: Path) -> None:
    host_a = Enveloped(KnowledgeBaseService(tmp_path / "a", store=pg_url).session())
    host_b = Enveloped(KnowledgeBaseService(tmp_path / "b", store=pg_url).session())
    assert host_a.create_knowledge_base("versions", 64, embedding_model="hashing")["success"]
    for session in (host_a, host_b):
        session.select_knowledge_base("versions")
    empty = host_b.operations.kb_version()
    note = tmp_path / "note.txt"
    note.write_text("Hybrid search mixes BM25 and vectors. 混合检索。", encoding="utf-8")
    assert host_a.import_document([str(note)])["success"]
    imported = host_b.operations.kb_version()
    assert imported > empty
    assert host_b.operations.kb_version() == imported  # reading changes nothing
    assert host_a.delete_document("note.txt")["success"]
    assert host_b.operations.kb_version() > imported
