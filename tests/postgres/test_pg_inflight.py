"""An import running on one host is listed on another (PostgreSQL store), as the folder store lists the in-flight
documents of other processes: each file with its status while the import works, the committed documents after;
an importer whose connection dies (killed, crashed) is no longer listed, without any timeout."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from kb_core import KnowledgeBaseService
from kb_core.edges.envelopes import Enveloped
from kb_core.features.ingest.pipeline import FileProgress, ImportProgress


def test_an_import_on_one_host_is_listed_on_another_while_it_runs(pg_url: str, tmp_path: Path) -> None:
    host_a = KnowledgeBaseService(tmp_path / "host-a", store=pg_url)
    host_b = KnowledgeBaseService(tmp_path / "host-b", store=pg_url)
    a, b = Enveloped(host_a.session()), Enveloped(host_b.session())
    assert a.create_knowledge_base("在途 imports", 64, embedding_model="hashing")["success"]
    assert a.select_knowledge_base("在途 imports")["success"] and b.select_knowledge_base("在途 imports")["success"]
    files = []
    for index, name in enumerate(("first.txt", "第二份.txt")):
        path = tmp_path / name
        path.write_text(f"Document {index} about hybrid search 混合检索.\n" * 20, encoding="utf-8")
        files.append(path)
    seen_while_running: list[list[dict[str, Any]]] = []

    def look_from_host_b(progress: ImportProgress) -> None:
        if not seen_while_running:  # the first report: the import has announced its files
            seen_while_running.append(b.list_documents()["data"]["documents"])

    imported = a.import_document([str(p) for p in files], progress=look_from_host_b)
    assert imported["data"]["success_count"] == 2, imported
    listed = seen_while_running[0]
    assert {(d["name"], d["status"], d["id"]) for d in listed} == {
        ("first.txt", "pending", None),
        ("第二份.txt", "pending", None),
    }
    after = b.list_documents()["data"]["documents"]
    assert sorted((d["name"], d["status"]) for d in after) == [("first.txt", "ready"), ("第二份.txt", "ready")]
    host_a.close()
    host_b.close()


def test_an_importer_whose_connection_died_is_not_listed(pg_url: str, tmp_path: Path) -> None:
    from kb_core.store.postgres.inflight import ImportAnnouncement, in_flight_documents

    service = KnowledgeBaseService(tmp_path / "home", store=pg_url)
    session = Enveloped(service.session())
    assert session.create_knowledge_base("killed import", 64, embedding_model="hashing")["success"]
    record = service.find_kb("killed import")
    assert service.store.postgres is not None
    progress = ImportProgress(files=[FileProgress(file_path="/data/lost.txt", doc_name="lost.txt")])
    announcement = ImportAnnouncement(service.store.postgres, record.id, progress)
    announcement.publish(force=True)
    assert [d["name"] for d in in_flight_documents(service.store.postgres, record.id)] == ["lost.txt"]
    assert announcement._conn is not None
    announcement._conn.close()  # as if the importer were killed: the server ends its backend, the row stays
    announcement._conn = None
    deadline = time.monotonic() + 10  # the server notices the closed connection at once; its backend exits soon
    while in_flight_documents(service.store.postgres, record.id) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert in_flight_documents(service.store.postgres, record.id) == []
    assert session.list_documents("killed import")["data"]["documents"] == []
    service.close()
