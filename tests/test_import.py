"""Import pipeline through the service: per-file results, names, documents, update, delete."""

from __future__ import annotations

import csv
import itertools
import os
from pathlib import Path

import pytest

from kb_core.edges.envelopes import Enveloped
from kb_core.features.results import SearchRequest
from tests.conftest import shared_path


@pytest.fixture
def kb(session):
    assert session.create_knowledge_base("docs", 128, embedding_model="hashing")["success"]
    session.select_knowledge_base("docs")
    return session


def write(folder: Path, name: str, text: str, encoding: str = "utf-8") -> Path:
    path = folder / name
    path.write_bytes(text.encode(encoding))
    return path


def test_result_has_exactly_the_spec_shape(kb, tmp_path: Path) -> None:
    good = write(tmp_path, "notes.txt", "Hybrid search mixes BM25 with vectors.\n\n混合检索结合关键词与向量。")
    bad = tmp_path / "binary.txt"
    bad.write_bytes(bytes(range(256)) * 10)
    result = kb.import_document([str(good), str(bad), str(tmp_path / "missing.docx")])
    assert result["success"] is True
    data = result["data"]
    assert set(data) == {"total", "success_count", "failed_count", "success_files", "failed_files"}
    assert (data["total"], data["success_count"], data["failed_count"]) == (3, 1, 2)
    assert data["success_files"] == [{"file_path": str(good), "doc_name": "notes.txt", "chunk_count": 1}]
    errors = {f["file_path"]: f["error"] for f in data["failed_files"]}
    assert "binary" in errors[str(bad)].lower()
    assert "does not exist" in errors[str(tmp_path / "missing.docx")]
    assert "1 of 3" in result["message"] and "2 failed" in result["message"]


def test_all_failed_is_a_failure(kb, tmp_path: Path) -> None:
    result = kb.import_document([str(tmp_path / "nope.txt")])
    assert result["success"] is False and result["data"]["failed_count"] == 1


def test_unsupported_suffix_is_refused_with_a_readable_reason(kb, tmp_path: Path) -> None:
    paper = tmp_path / "paper.pdf"
    paper.write_bytes(b"no magic bytes here")
    result = kb.import_document([str(paper)])
    assert result["success"] is False
    assert result["data"]["failed_files"][0]["error"] == (
        "Cannot import 'paper.pdf': it is a file ending in '.pdf'; supported are text files "
        "(.txt, .md, .csv and the like), .docx and .doc (Word)"
    )


def test_a_long_line_without_spaces_imports_as_bounded_chunks(kb, tmp_path: Path) -> None:
    """One 1 MB word is one hashing token: it used to become a single 1 MB chunk."""
    line = write(tmp_path, "blob.txt", "z" * 1_000_000 + "\n\n后记：一段中文。")
    result = kb.import_document([str(line)])
    assert result["data"]["success_count"] == 1, result
    chunks = kb.list_chunks("blob.txt")["data"]["chunks"]
    assert max(len(c["content"]) for c in chunks) <= 16 * 128
    assert sum(c["content"].count("z") for c in chunks) >= 1_000_000  # nothing lost
    assert chunks[-1]["content"].endswith("后记：一段中文。")


def test_clashing_names_get_a_timestamp_and_the_result_shows_it(kb, tmp_path: Path) -> None:
    first = write(tmp_path, "报告.txt", "第一版。")
    other = tmp_path / "other"
    other.mkdir()
    second = write(other, "报告.txt", "第二版。")
    kb.import_document([str(first)])
    result = kb.import_document([str(second)])
    name = result["data"]["success_files"][0]["doc_name"]
    assert name != "报告.txt" and name.startswith("报告_") and name.endswith(".txt")
    names = sorted(d["name"] for d in kb.list_documents()["data"]["documents"])
    assert names == sorted(["报告.txt", name])


def test_documents_list_has_the_spec_fields(kb, tmp_path: Path) -> None:
    path = write(tmp_path, "a.txt", "alpha beta gamma " * 100)
    kb.import_document([str(path)])
    document = kb.list_documents()["data"]["documents"][0]
    assert {
        "id",
        "name",
        "file_path",
        "file_type",
        "chunk_size",
        "created_at",
        "updated_at",
        "status",
        "chunk_count",
        "size_bytes",
    } <= set(document)
    assert document["status"] == "ready" and document["file_type"] == "txt"
    assert document["size_bytes"] == path.stat().st_size and document["chunk_count"] > 1


def test_update_rechunks_from_the_kept_original_after_the_source_is_gone(kb, tmp_path: Path) -> None:
    path = write(tmp_path, "long.txt", " ".join(f"Sentence number {i} talks about topic {i * 7}." for i in range(200)))
    first = kb.import_document([str(path)])["data"]["success_files"][0]["chunk_count"]
    path.unlink()
    updated = kb.update_document("long.txt", 64)
    assert updated["success"], updated
    assert updated["data"]["chunk_size"] == 64 and updated["data"]["chunk_count"] > first
    documents = kb.list_documents()["data"]["documents"]
    assert len(documents) == 1 and documents[0]["chunk_size"] == 64
    assert documents[0]["id"] == updated["data"]["doc_id"]
    chunks = kb.list_chunks("long.txt")["data"]["chunks"]
    assert len(chunks) == updated["data"]["chunk_count"] and all(c["tokens"] <= 64 for c in chunks)
    assert [c["chunk_index"] for c in chunks] == list(range(len(chunks)))
    assert chunks[0]["start_char"] == 0 and chunks[-1]["end_char"] > chunks[0]["end_char"]


def test_delete_removes_chunks_from_search(kb, tmp_path: Path) -> None:
    kb.import_document(
        [str(write(tmp_path, "keep.txt", "apples and pears")), str(write(tmp_path, "drop.txt", "apples and bananas"))]
    )
    assert len(kb.search(SearchRequest("apples", mode="keyword"))["data"]["chunks"]) == 2
    assert kb.delete_document("DROP.txt")["data"] == {"doc_name": "drop.txt"}
    hits = kb.search(SearchRequest("apples", mode="keyword"))["data"]["chunks"]
    assert [h["doc_name"] for h in hits] == ["keep.txt"]
    assert kb.delete_document("drop.txt")["error"]["code"] == "DOCUMENT_NOT_FOUND"


def test_a_deleted_documents_name_is_free_again_while_its_segments_other_names_stay_taken(kb, tmp_path: Path) -> None:
    # A commit decides names against the KB's live documents, kept per segment (#29): a deleted document of a segment
    # must free its name, and only its own.
    paths = [str(write(tmp_path, "keep.txt", "apples and pears")), str(write(tmp_path, "drop.txt", "apples"))]
    kb.import_document(paths)
    kb.delete_document("drop.txt")
    write(tmp_path, "keep.txt", "apples, pears and plums")  # new content: a file of the same bytes would be skipped
    again = kb.import_document(paths)["data"]["success_files"]
    names = {Path(f["file_path"]).name: f["doc_name"] for f in again}
    assert names["drop.txt"] == "drop.txt"
    assert names["keep.txt"] != "keep.txt" and names["keep.txt"].startswith("keep_")
    listed = sorted(d["name"] for d in kb.list_documents()["data"]["documents"])
    assert listed == sorted(["keep.txt", "drop.txt", names["keep.txt"]])


def test_every_shared_fixture_imports_or_fails_with_a_reason_in_one_call(kb) -> None:
    folder = shared_path("fixtures", "docs")
    files = sorted(p for p in folder.rglob("*") if p.suffix in (".doc", ".docx"))
    result = kb.import_document([str(p) for p in files])
    data = result["data"]
    assert data["total"] == len(files) == data["success_count"] + data["failed_count"]
    failed = {Path(f["file_path"]).name: f["error"] for f in data["failed_files"]}
    for name in ("PasswordProtected.doc", "bug53475-password-is-pass.docx", "password_tika_binaryrc4.doc"):
        assert "encrypted" in failed[name].lower()
    assert "truncated62886.docx" in failed
    assert all(len(reason) > 20 for reason in failed.values())
    # The Chinese text of a .doc comes out exactly.
    request = SearchRequest("解析Word文档", mode="keyword", top_k=10, doc_names=["test11.doc"])
    hits = kb.search(request)["data"]["chunks"]
    assert any("这是一个用来测试nodejs解析Word文档" in h["content"] for h in hits)
    with open(folder / "MANIFEST.tsv", encoding="utf-8") as handle:
        assert sum(1 for _ in csv.reader(handle, delimiter="\t")) > 1


def test_progress_reports_every_stage(kb, tmp_path: Path) -> None:
    paths = [
        str(write(tmp_path, f"f{i}.txt", " ".join(f"document {i} line {j}." for j in range(150)))) for i in range(5)
    ]
    seen: list[tuple[int, int, int]] = []
    statuses: set[str] = set()

    def progress(state) -> None:
        seen.append((state.files_done, state.chunks_embedded, state.chunks_total))
        statuses.update(f.status for f in state.files)

    result = kb.import_document(paths, progress=progress)
    assert result["data"]["success_count"] == 5
    assert {"parsing", "embedding", "ready"} <= statuses
    assert seen[-1][0] == 5 and seen[-1][1] == seen[-1][2] > 0
    assert all(a[1] <= b[1] for a, b in itertools.pairwise(seen))


def test_chunk_size_override_is_validated(kb, tmp_path: Path) -> None:
    path = write(tmp_path, "a.txt", "text")
    assert kb.import_document([str(path)], chunk_size=5)["error"]["code"] == "INVALID_ARGUMENT"
    assert kb.import_document(str(path))["error"]["code"] == "INVALID_ARGUMENT"


def test_import_without_current_kb_says_what_to_do(session, tmp_path: Path) -> None:
    result = session.import_document([str(write(tmp_path, "a.txt", "x"))])
    assert result["error"]["code"] == "NO_CURRENT_KB" and "select_knowledge_base" in result["message"]


def test_failed_files_are_listed_with_their_reason_and_replaced_by_a_later_import(kb, tmp_path: Path) -> None:
    bad = tmp_path / "notes.txt"
    bad.write_bytes(bytes(range(256)) * 10)
    kb.import_document([str(bad)])
    listed = kb.list_documents()["data"]["documents"]
    assert [(d["name"], d["status"], d["chunk_count"]) for d in listed] == [("notes.txt", "failed", 0)]
    assert "binary" in listed[0]["error"]
    bad.write_text("Now it is text. 现在是文本。", encoding="utf-8")
    result = kb.import_document([str(bad)])
    assert result["data"]["success_files"][0]["doc_name"] == "notes.txt"
    listed = kb.list_documents()["data"]["documents"]
    assert [(d["name"], d["status"], d["error"]) for d in listed] == [("notes.txt", "ready", None)]


def test_staging_copies_are_removed_after_the_import_and_by_the_next_open_if_it_died(
    kb, service, home: Path, tmp_path: Path
) -> None:
    from kb_core import KnowledgeBaseService
    from kb_core.features.ingest import files

    paths = [str(write(tmp_path, f"s{i}.txt", f"staging copy {i}. 副本{i}。")) for i in range(20)]
    assert kb.import_document(paths)["data"]["success_count"] == 20
    files.wait_for_staging_removals()  # the removal runs after the import returned
    staging = service.kb_store(service.find_kb("docs").id).root / "staging"
    assert list(staging.iterdir()) == []
    # A process that died while removing leaves a folder no process owns: the next open removes it.
    leftover = staging / "removing-0123abcd"
    (leftover / "0").mkdir(parents=True)
    (leftover / "0" / "a.txt").write_text("copy", encoding="utf-8")
    reopened = Enveloped(KnowledgeBaseService(home).session())
    reopened.select_knowledge_base("docs")
    assert reopened.search(SearchRequest("副本3", mode="keyword"))["data"]["chunks"]  # its first read cleans up
    assert list(staging.iterdir()) == []


def test_a_homes_import_staging_left_by_dead_processes_is_removed_when_the_home_opens(home: Path) -> None:
    """On PostgreSQL an import stages its copies in the home (``<home>/staging/<pid>-import-…``): a dead process's
    folder, and a removal (``removing-…``) its process did not finish, go when the home next opens; a live
    process's import stays."""
    import subprocess
    import sys

    from kb_core import KnowledgeBaseService

    KnowledgeBaseService(home)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    staging = home / "staging"
    leftovers = [staging / f"{dead.stdout.strip()}-import-0badc0de", staging / "removing-0123abcd"]
    live = staging / f"{os.getpid()}-import-1234abcd"
    for folder in [*leftovers, live]:
        (folder / "0").mkdir(parents=True)
        (folder / "0" / "copy.txt").write_text("a staged copy", encoding="utf-8")
    KnowledgeBaseService(home)
    assert sorted(p.name for p in staging.iterdir()) == [live.name]


@pytest.mark.parametrize(
    ("given", "name"),
    [
        ("notes.txt", "notes.txt"),
        ("folder/sub\\report.docx", "report.docx"),
        ("  .hidden notes.txt", "hidden notes.txt"),
        ("bell\x07 and del\x7f.txt", "bell and del.txt"),  # ASCII control characters go, printable ASCII stays
        ("zero\u200bwidth.txt", "zerowidth.txt"),  # a format character
        ("cafe\u0301.txt", "café.txt"),  # composed (NFC)
        ("报告\u202e.txt", "报告.txt"),
        ("...", "document"),
    ],
)
def test_a_file_name_becomes_a_safe_document_name(given: str, name: str) -> None:
    from kb_core.features.ingest.files import safe_document_name

    assert safe_document_name(given) == name
