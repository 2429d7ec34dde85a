"""Imports as jobs the service owns (#34): started and polled through sessions, cancelled within seconds (parser
processes killed, the model stopped between layers), closed with the service; uploads known by their own names;
a file whose import failed is no document."""

from __future__ import annotations

import os
import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from kb_core import KnowledgeBaseService
from kb_core.edges.envelopes import Enveloped
from kb_core.features.results import EmbeddingSource

TICKS = os.sysconf("SC_CLK_TCK")


def finished(session: Any, job_id: str, timeout: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        status = session.import_job(job_id)
        assert status["success"], status
        if status["data"]["state"] not in ("running", "cancelling"):
            return status["data"]
        assert time.monotonic() < deadline, f"job {job_id} still {status['data']['state']} after {timeout:.0f} s"
        time.sleep(0.05)


def text(path: Path, paragraphs: int, seed: int = 1) -> Path:
    chooser = random.Random(seed)
    words = ["alpha", "beta", "gamma", "delta", "search", "index", "token", "vector", "混合", "检索", "权重"]
    path.write_text(
        "\n\n".join(" ".join(chooser.choice(words) for _ in range(80)) + "." for _ in range(paragraphs)),
        encoding="utf-8",
    )
    return path


def children_cpu() -> float:
    """CPU seconds used so far by this process's child processes that are still running (the parser processes)."""
    total = 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == os.getpid():
                total += int(fields[11]) + int(fields[12])
    return total / TICKS


@pytest.fixture
def session(tmp_path: Path) -> Any:
    opened = Enveloped(KnowledgeBaseService(tmp_path / "home").session())
    assert opened.create_knowledge_base("kb", 64, embedding_model="hashing")["success"]
    assert opened.select_knowledge_base("kb")["success"]
    return opened


def test_a_started_import_runs_on_the_service_and_reports_as_import_document_does(session: Any, tmp_path: Path) -> None:
    files = [text(tmp_path / f"note-{i}.txt", 20, i) for i in range(3)]
    (tmp_path / "empty.docx").write_bytes(b"PK\x03\x04 not a real docx")
    files.append(tmp_path / "empty.docx")
    started = session.start_import([str(f) for f in files])
    assert started["success"] and started["data"]["state"] == "running"  # returned at once
    job = finished(session, started["data"]["job_id"])
    assert job["state"] == "finished" and job["phase"] == "done"
    assert [f["name"] for f in job["files"]] == [f.name for f in files]
    assert [f["status"] for f in job["files"]] == ["ready", "ready", "ready", "failed"]
    assert job["files"][3]["error"] and job["report"]["success_count"] == 3 and job["report"]["failed_count"] == 1
    result = session.import_job_result(started["data"]["job_id"])
    assert result["success"] and result["data"] == job["report"]  # exactly import_document's envelope
    assert result["message"].startswith("Imported 3 of 4 file(s) into 'kb'; 1 failed.")
    assert [j["job_id"] for j in session.import_jobs()["data"]["jobs"]] == [job["job_id"]]
    assert session.dismiss_import_job(job["job_id"])["success"]
    assert session.import_jobs()["data"]["jobs"] == []


def test_a_file_refused_before_the_pipeline_keeps_its_own_row(session: Any, tmp_path: Path) -> None:
    """A name refused where it enters (not UTF-8) never reaches the pipeline: the rows stay each file's own."""
    good = text(tmp_path / "good.txt", 5)
    job = finished(session, session.start_import([str(tmp_path / "bad\udcff.txt"), str(good)])["data"]["job_id"])
    assert [(f["name"], f["status"]) for f in job["files"]] == [("bad\udcff.txt", "failed"), ("good.txt", "ready")]
    assert job["files"][0]["error"] and not job["files"][1]["error"]


def test_each_session_lists_its_own_jobs_and_finds_another_by_id_within_its_scope(session: Any, tmp_path: Path) -> None:
    service = session.operations.service
    other = Enveloped(service.session())
    job_id = session.start_import([str(text(tmp_path / "a.txt", 5))])["data"]["job_id"]
    finished(session, job_id)
    assert other.import_jobs()["data"]["jobs"] == []  # not its job
    assert other.import_job(job_id, watch=True)["success"]  # a reload finds it by the id in its address
    assert [j["job_id"] for j in other.import_jobs()["data"]["jobs"]] == [job_id]
    assert service.create_kb("elsewhere", 64, EmbeddingSource("hashing"))
    scoped = Enveloped(service.session(scope=frozenset({service.find_kb("elsewhere").id})))
    unknown = scoped.import_job(job_id)
    assert not unknown["success"] and unknown["error"]["code"] == "JOB_NOT_FOUND"
    assert scoped.cancel_import(job_id)["error"]["code"] == "JOB_NOT_FOUND"


def test_uploads_are_known_by_their_names_and_their_files_are_removed(session: Any, tmp_path: Path) -> None:
    started = session.start_import(uploads=[("报告.txt", "混合检索的权重。".encode() * 50), ("notes.txt", b"x" * 10)])
    job = finished(session, started["data"]["job_id"])
    assert [f["name"] for f in job["files"]] == ["报告.txt", "notes.txt"]
    assert [r["file_path"] for r in job["report"]["success_files"]] == ["报告.txt", "notes.txt"]
    documents = session.list_documents()["data"]["documents"]
    assert sorted((d["name"], d["file_path"]) for d in documents) == [("notes.txt", "notes.txt"),
                                                                      ("报告.txt", "报告.txt")]
    info = session.get_document_info([d["id"] for d in documents])["data"]["documents"]
    assert {d["file_name"] for d in info} == {"报告.txt", "notes.txt"}
    assert all(d["source_label"] == "文件上传" for d in info)  # as the tool specification words it
    item = session.get_item(documents[0]["id"])["data"]
    assert "kb-upload" not in str(item) and "staging" not in str(item)
    from kb_core.features.ingest.files import wait_for_staging_removals

    wait_for_staging_removals()
    assert list(session.operations.service.home.root.glob("kbs/*/staging/*")) == []


def test_cancel_kills_the_parser_process_at_once_and_keeps_what_was_committed(session: Any, tmp_path: Path) -> None:
    first = session.start_import([str(text(tmp_path / "small.txt", 5))])["data"]["job_id"]
    finished(session, first)
    big = text(tmp_path / "big.txt", 20_000)  # 10 MB: many seconds of parsing and chunking in a parser process
    job_id = session.start_import([str(big)])["data"]["job_id"]
    deadline = time.monotonic() + 60
    while session.import_job(job_id)["data"]["files"][0]["status"] != "parsing":
        assert time.monotonic() < deadline
        time.sleep(0.02)
    time.sleep(0.5)
    asked = time.monotonic()
    cancelling = session.cancel_import(job_id)["data"]
    assert cancelling["state"] == "cancelling" and cancelling["phase"] == "cancelling"
    job = finished(session, job_id, timeout=30)
    took = time.monotonic() - asked
    assert job["state"] == "cancelled" and took < 5, f"the cancel took {took:.1f} s"
    assert job["files"][0]["error"].startswith("cancelled")
    assert job["message"].startswith("Import into 'kb' cancelled: 0 of 1 file(s)")
    before = children_cpu()
    time.sleep(1.0)
    assert children_cpu() - before < 0.2  # the parser process that worked on it was killed: nothing works on
    assert [d["name"] for d in session.list_documents()["data"]["documents"]] == ["small.txt"]
    assert session.verify()["data"]["problems"] == []


def test_closing_the_service_cancels_started_and_running_imports(tmp_path: Path) -> None:
    service = KnowledgeBaseService(tmp_path / "home")
    session = Enveloped(service.session())
    session.create_knowledge_base("kb", 64, embedding_model="hashing")
    session.select_knowledge_base("kb")
    started = session.start_import([str(text(tmp_path / "one.txt", 20_000, 1))])["data"]["job_id"]
    direct: dict[str, Any] = {}
    caller = threading.Thread(
        target=lambda: direct.update(session.import_document([str(text(tmp_path / "two.txt", 20_000, 2))]))
    )
    caller.start()
    deadline = time.monotonic() + 60
    while len([j for j in service.jobs.all() if j.progress is not None]) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    closing = time.monotonic()
    service.close(timeout=8)
    assert time.monotonic() - closing < 8
    caller.join(10)
    assert session.import_job(started)["data"]["state"] == "cancelled"
    assert direct["data"]["failed_files"][0]["error"].startswith("cancelled")
    refused = session.start_import([str(tmp_path / "one.txt")])
    assert not refused["success"] and "stopping" in refused["message"]
    assert list(service.home.root.glob("kbs/*/staging/*")) == []


def test_a_file_whose_import_failed_is_no_document(session: Any, tmp_path: Path) -> None:
    (tmp_path / "empty.docx").write_bytes(b"PK\x03\x04 not a real docx")
    good = text(tmp_path / "good.txt", 3)
    session.import_document([str(good), str(tmp_path / "empty.docx")])
    kb = session.list_knowledge_bases()["data"]["knowledge_bases"][0]
    assert (kb["document_count"], kb["failed_document_count"]) == (1, 1)
    assert session.select_knowledge_base("kb")["data"]["document_count"] == 1
    listed = {d["name"]: d["status"] for d in session.list_documents()["data"]["documents"]}
    assert listed == {"good.txt": "ready", "empty.docx": "failed"}  # the failure stays readable, with its reason


@pytest.mark.model
def test_cancel_stops_the_model_within_seconds_and_progress_moves_per_batch(tmp_path: Path) -> None:
    """multilingual-e5-small on a CPU: a batch of 4,096 tokens takes seconds on busy cores; the files' counts move
    per batch (no bar at 0 while chunks are embedded), and a cancel stops the model before its next layer."""
    service = KnowledgeBaseService(tmp_path / "home")
    session = Enveloped(service.session())
    assert session.create_knowledge_base("e5", 128, embedding_model="multilingual-e5-small")["success"]
    session.select_knowledge_base("e5")
    job_id = session.start_import([str(text(tmp_path / "long.txt", 120))])["data"]["job_id"]
    seen: set[int] = set()
    deadline = time.monotonic() + 300
    while True:
        row = session.import_job(job_id)["data"]["files"][0]
        if row["status"] == "embedding":
            seen.add(row["chunks_embedded"])
            if len(seen - {0}) >= 2:  # two batches back
                break
        assert time.monotonic() < deadline and row["status"] in ("pending", "parsing", "embedding"), row
        time.sleep(0.05)
    assert max(seen) < row["chunks_total"]  # counts moved before the call ended
    asked = time.monotonic()
    session.cancel_import(job_id)
    job = finished(session, job_id, timeout=60)
    took = time.monotonic() - asked
    assert job["state"] == "cancelled" and took < 5, f"the model went on for {took:.1f} s after the cancel"
    busy = [t.name for t in threading.enumerate() if t.name.startswith("kb-embed")]
    assert busy == []
    assert session.list_documents()["data"]["documents"] == []
    assert session.verify()["data"]["problems"] == []
