"""File names from the outside, and re-running an import (#37, rows 3 and 14).

A name that is not UTF-8 (a Latin-1 ``café.txt`` from an old archive reaches Python as lone surrogates) or that
no file system allows (a name over 255 bytes) fails that one file with its reason; the others are imported.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kb_core.edges.cli.main import main
from kb_core.edges.envelopes import Enveloped


def _cli(capsys: pytest.CaptureFixture[str], home: Path, *args: str) -> tuple[int, dict]:
    code = main(["--home", str(home), "--json", *args])
    out = capsys.readouterr().out
    return code, json.loads(out)


@pytest.fixture
def kb_home(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    home = tmp_path / "home"
    assert _cli(capsys, home, "create", "notes", "--chunk-size", "64", "--embedding-model", "hashing")[0] == 0
    assert _cli(capsys, home, "select", "notes")[0] == 0
    return home


def test_one_odd_name_fails_alone(tmp_path: Path, kb_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "files"
    folder.mkdir()
    paths = []
    for number in range(49):
        (folder / f"note-{number}.txt").write_text(f"note {number} about apples and 梨", encoding="utf-8")
        paths.append(str(folder / f"note-{number}.txt"))
    latin1 = os.fsencode(folder) + b"/caf\xe9.txt"  # as an old archive extracts it
    with open(latin1, "wb") as handle:
        handle.write(b"a file whose name is Latin-1")
    paths.append(os.fsdecode(latin1))  # what Python's argv holds: 'caf\udce9.txt'
    paths.append(str(folder / ("n" * 296 + ".txt")))  # 300 bytes: no file system allows the name

    code, report = _cli(capsys, kb_home, "import", *paths)

    assert report["success"] is True, report["message"]
    data = report["data"]
    assert data["success_count"] == 49 and data["failed_count"] == 2
    failed = {Path(f["file_path"]).name: f["error"] for f in data["failed_files"]}
    assert "caf\\xe9.txt" in failed and "not UTF-8" in failed["caf\\xe9.txt"]
    assert "at most 255 bytes" in failed["n" * 296 + ".txt"]
    assert "caf\\xe9.txt" in report["message"] and "255 bytes" in report["message"]
    assert code != 0  # some files failed (row 12): a script can tell
    listed = _cli(capsys, kb_home, "docs")[1]["data"]
    assert len(listed["documents"]) == 49


def test_a_path_of_5000_characters_fails_alone(tmp_path: Path, kb_home: Path, capsys: pytest.CaptureFixture[str]):
    """Row 16: it used to reach the pipeline and fail the whole MCP call with -32603 (file name too long)."""
    from kb_core import KnowledgeBaseService

    good = tmp_path / "good.txt"
    good.write_text("apples", encoding="utf-8")
    session = Enveloped(KnowledgeBaseService(kb_home).session())
    result = session.import_document([str(good), "/" + "a" * 5000], kb_name="notes")
    assert result["success"] and result["data"]["success_count"] == 1
    (failed,) = result["data"]["failed_files"]
    assert "at most 4,096" in failed["error"]


def test_rerunning_a_killed_import_imports_nothing_twice(tmp_path: Path) -> None:
    """Row 14: after kill -9 of an import that had committed some files, running the same import again stored every
    committed file a second time (byte-identical, timestamp-suffixed names)."""
    import signal
    import subprocess
    import sys

    from kb_core import KnowledgeBaseService
    from tests.test_import_crash import WORKER, make_corpus

    home, corpus = tmp_path / "home", tmp_path / "corpus"
    make_corpus(corpus, count=40)
    session = Enveloped(KnowledgeBaseService(home).session())
    assert session.create_knowledge_base("crash", 64, embedding_model="hashing")["success"]
    worker = subprocess.Popen(
        [sys.executable, str(WORKER), str(home), str(corpus), "committed"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    assert worker.stdout is not None
    assert worker.stdout.readline().strip() == b"started"
    assert worker.stdout.readline().strip() == b"paused"  # a first segment is committed
    os.kill(worker.pid, signal.SIGKILL)
    worker.wait()
    committed = {d["name"] for d in session.list_documents(kb_name="crash")["data"]["documents"]}
    assert 0 < len(committed) < 40

    (corpus / "doc001.txt").write_text("changed after the first run", encoding="utf-8")  # same name, new content
    files = sorted(str(p) for p in corpus.iterdir())
    result = session.import_document(files, kb_name="crash")

    data = result["data"]
    assert data["success_count"] == 40 and data["failed_count"] == 0
    skipped = {f["doc_name"] for f in data["success_files"] if f.get("already_imported")}
    assert skipped == committed - {"doc001.txt"}
    assert f"{len(skipped)} already there with the same name and content" in result["message"]
    names = [d["name"] for d in session.list_documents(kb_name="crash")["data"]["documents"]]
    expected = 40 + (1 if "doc001.txt" in committed else 0)  # a changed file still gets a name of its own
    assert len(names) == expected, sorted(names)
