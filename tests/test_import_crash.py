"""SIGKILL during a 200-file import leaves a consistent KB: documents are fully indexed or absent."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kb_core import KnowledgeBaseService
from kb_core.edges.envelopes import Enveloped
from kb_core.features.results import SearchRequest
from kb_core.store.verify import verify_home

WORKER = Path(__file__).with_name("import_worker.py")


def make_corpus(folder: Path, count: int = 200) -> None:
    folder.mkdir()
    for i in range(count):
        lines = [f"Document {i} paragraph {j}: topic{i}x{j} 主题{i}段落{j}。" for j in range(40)]
        (folder / f"doc{i:03d}.txt").write_text("\n\n".join(lines), encoding="utf-8")


def check_consistent(home: Path) -> int:
    service = KnowledgeBaseService(home)
    assert verify_home(service.home) == []
    session = Enveloped(service.session())
    session.select_knowledge_base("crash")
    documents = session.list_documents()["data"]["documents"]
    assert all(d["status"] == "ready" for d in documents), documents  # nothing half-indexed or in flight
    store = service.kb_store(service.find_kb("crash").id)
    assert list((store.root / "staging").iterdir()) == []
    manifest = store.manifest()
    assert manifest.chunk_count == sum(d["chunk_count"] for d in documents)
    for document in random.Random(0).sample(documents, min(5, len(documents))):
        number = int(document["name"][3:6])
        hits = session.search(SearchRequest(f"topic{number}x7", mode="keyword", top_k=3, doc_names=[document["name"]]))
        assert f"topic{number}x7" in hits["data"]["chunks"][0]["content"]
    return len(documents)


def test_sigkill_during_a_200_file_import(tmp_path: Path) -> None:
    home = tmp_path / "home"
    corpus = tmp_path / "corpus"
    make_corpus(corpus)
    session = Enveloped(KnowledgeBaseService(home).session())
    assert session.create_knowledge_base("crash", 64, embedding_model="hashing")["success"]
    rng = random.Random(7)
    counts = []
    for _ in range(3):
        process = subprocess.Popen(
            [sys.executable, str(WORKER), str(home), str(corpus)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        assert process.stdout is not None
        process.stdout.readline()
        time.sleep(rng.uniform(0.5, 4.0))
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
        counts.append(check_consistent(home))
    # A full run afterwards completes; what the killed runs committed is skipped, not imported twice (#37).
    finished = subprocess.run(
        [sys.executable, str(WORKER), str(home), str(corpus)], capture_output=True, text=True, timeout=300
    )
    assert finished.returncode == 0, finished.stderr
    assert finished.stdout.split()[-1] == "200"
    assert check_consistent(home) == 200


@pytest.mark.parametrize("pause_at", ["parsed", "committed"])
def test_deleting_the_kb_during_an_import_answers_kb_not_found(tmp_path: Path, pause_at: str) -> None:
    home = tmp_path / "home"
    corpus = tmp_path / "corpus"
    make_corpus(corpus)
    service = KnowledgeBaseService(home)
    session = Enveloped(service.session())
    assert session.create_knowledge_base("crash", 64, embedding_model="hashing")["success"]
    kb_id = service.find_kb("crash").id
    process = subprocess.Popen(
        [sys.executable, str(WORKER), str(home), str(corpus), pause_at],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert process.stdout is not None and process.stdin is not None
        assert process.stdout.readline().strip() == b"started"
        assert process.stdout.readline().strip() == b"paused"  # the import stopped at a known point
        assert session.delete_knowledge_base("crash")["success"]  # deleted by another process meanwhile
        time.sleep(1.1)  # past the interval of the import's in-flight list, so its next write happens
        out, err = process.communicate(b"go\n", timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, err.decode()
    lines = out.decode().split()
    assert lines[-2:] == ["KB_NOT_FOUND", "0"], (out.decode(), err.decode()[-3000:])
    reopened = KnowledgeBaseService(home)
    assert verify_home(reopened.home) == []
    assert reopened.home.knowledge_bases() == []
    assert not (home / "kbs" / kb_id).exists()
