"""The pipelined import stores exactly what parsing, chunking and embedding each file on its own gives."""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from kb_core.edges.envelopes import Enveloped
from kb_core.engines.chunking import chunk_document
from kb_core.engines.embedding import HashingEmbedder
from kb_core.engines.keyword_index import KeywordSegment
from kb_core.engines.near_duplicates import text_signatures
from kb_core.engines.parsing import parse_file
from kb_core.engines.payloads import FilePayload
from kb_core.features.ingest import pipeline as importer_module
from kb_core.features.ingest.files import wait_for_staging_removals
from kb_core.features.results import SearchRequest
from kb_core.store import catalog

EN = (
    "Retrieval-augmented generation answers a question from retrieved passages. "
    "The index keeps keyword postings and vectors for every chunk. "
)
ZH = "知识库把文档切成片段，每个片段都有关键词索引和向量。检索时先找相关片段，再生成回答。"


def corpus(folder: Path) -> list[Path]:
    files = []
    for i in range(24):
        body = (EN * (1 + i % 5) + f"Document {i} talks about topic {i * 7}.\n\n") * (1 + i % 3)
        if i % 2:
            body += (ZH * (1 + i % 4) + f"第{i}篇文档。\n\n") * 2
        path = folder / (f"文档_{i}.txt" if i % 3 == 0 else f"doc_{i}.txt")
        path.write_text(body, encoding="utf-8")
        files.append(path)
    (folder / "empty.txt").write_text("", encoding="utf-8")  # fails, and is recorded as failed
    return [*files, folder / "empty.txt"]


@pytest.mark.parametrize(
    "embed_batch,commit_chunks,prepared_by,writers",
    [(7, 40, "parser", 1), (512, 2048, "parser", 1), (7, 40, "importer", 1), (7, 40, "parser", 3)],
)
def test_pipelined_import_equals_file_by_file_reference(
    session,
    service,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    embed_batch: int,
    commit_chunks: int,
    prepared_by: str,
    writers: int,
) -> None:
    # Small batches and segments make embedding calls span files and commits overlap the next batches; several
    # segment writers write at once and commit in order, several segments per commit when they are ready (#29).
    monkeypatch.setattr(importer_module, "EMBED_BATCH", embed_batch)
    monkeypatch.setattr(importer_module, "COMMIT_CHUNKS", commit_chunks)
    monkeypatch.setattr(importer_module, "WRITER_PROCESSES", writers)
    if prepared_by == "importer":  # no preparation from the parser processes: this process embeds and analyses
        import kb_core.engines.parsing

        real = kb_core.engines.parsing.parse_and_chunk_files

        def without_preparation(*args, **kwargs):
            outcomes = real(*args, **kwargs)
            for o in outcomes:
                if isinstance(o, FilePayload):
                    o.prepared, o.embedded = None, False
            return [o if isinstance(o, Exception | FilePayload) else (*o[:2], None) for o in outcomes]

        monkeypatch.setattr(kb_core.engines.parsing, "parse_and_chunk_files", without_preparation)
    folder = tmp_path / "files"
    folder.mkdir()
    files = corpus(folder)
    session.create_knowledge_base("kb", 48, embedding_model="hashing-32")
    session.select_knowledge_base("kb")
    result = session.import_document([str(f) for f in files])
    assert result["data"]["success_count"] == len(files) - 1
    assert [f["file_path"] for f in result["data"]["failed_files"]] == [str(files[-1])]

    record = session.operations.current_kb()
    snapshot = service.reader(record.id).snapshot()
    documents = snapshot.documents()
    name_of = dict(zip(documents["doc_id"], documents["name"], strict=True))
    stored: dict[tuple[str, int], dict] = {}
    for segment in snapshot.segments:
        rows = segment.chunks.to_pylist()
        vectors = segment.vectors.reconstruct(np.arange(len(rows)))
        keyword = segment.keyword
        terms = {i: t for t, i in keyword.vocabulary.items()}
        matrix = keyword.term_frequencies.tocsr()
        for row, (chunk, vector) in enumerate(zip(rows, vectors, strict=True)):
            line = matrix.getrow(row)
            postings = Counter({terms[int(c)]: int(v) for c, v in zip(line.indices, line.data, strict=True)})
            key = (name_of[chunk["doc_id"]], chunk["chunk_index"])
            assert key not in stored, f"chunk {key} stored twice"
            stored[key] = {**chunk, "vector": vector, "postings": postings, "length": int(keyword.lengths[row])}
    assert len({c["chunk_id"] for c in stored.values()}) == len(stored)  # chunk ids are unique
    # Each segment's keyword index (term ids included) and near-duplicate signatures are what building them from
    # its chunk texts in this process gives (parser processes prepared them, file by file).
    for segment in snapshot.segments:
        contents = segment.chunks.column("content").to_pylist()
        built = KeywordSegment.build(contents, service.analyzer)
        assert segment.keyword.vocabulary == built.vocabulary
        assert (segment.keyword.term_frequencies != built.term_frequencies).nnz == 0
        stored_signatures, expected_signatures = catalog.signatures_of(segment.row_store), text_signatures(contents)
        for name in ("text_hash", "shingle_count", "sketch"):
            assert np.array_equal(getattr(stored_signatures, name), getattr(expected_signatures, name)), name

    reference_embedder = HashingEmbedder(32)  # a fresh instance: nothing shared with the import's embedder
    analyzer = service.analyzer
    expected_keys = set()
    for path in files[:-1]:
        chunks = chunk_document(parse_file(path), reference_embedder.tokenizer, 48)
        vectors = reference_embedder.embed_documents([c.content for c in chunks])
        for chunk, vector in zip(chunks, vectors, strict=True):
            key = (path.name, chunk.chunk_index)
            expected_keys.add(key)
            got = stored[key]
            assert (got["content"], got["tokens"], got["start_char"], got["end_char"]) == (
                chunk.content,
                chunk.tokens,
                chunk.start,
                chunk.end,
            ), key
            assert (got["chapter"], got["page"]) == (chunk.chapter, chunk.page), key
            assert np.array_equal(got["vector"], vector), key
            tokens = analyzer.tokens(chunk.content)
            assert got["postings"] == Counter(tokens) and got["length"] == len(tokens), key
    assert set(stored) == expected_keys


def test_cancel_stops_the_import_keeps_what_was_committed_and_reports_the_rest(
    session, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    monkeypatch.setattr(importer_module, "EMBED_BATCH", 8)
    monkeypatch.setattr(importer_module, "COMMIT_CHUNKS", 16)  # several segments: some commit before the cancel
    folder = tmp_path / "files"
    folder.mkdir()
    files = corpus(folder)[:-1]
    session.create_knowledge_base("kb", 48, embedding_model="hashing")
    session.select_knowledge_base("kb")
    cancel = threading.Event()

    def progress(state) -> None:
        if state.files_parsed >= len(files) // 2 and not cancel.is_set():
            # half-way: wait for the writer thread's first commit, then cancel (files remain to be yielded)
            deadline = time.monotonic() + 60
            while not any(f.status == "ready" for f in state.files) and time.monotonic() < deadline:
                time.sleep(0.01)
            cancel.set()

    result = session.import_document([str(f) for f in files], progress=progress, cancel=cancel)
    data = result["data"]
    assert cancel.is_set() and 1 <= data["success_count"] < len(files)
    assert data["success_count"] + data["failed_count"] == len(files)
    assert all(f["error"].startswith("cancelled") for f in data["failed_files"])
    listed = session.list_documents()["data"]["documents"]
    assert sorted(d["name"] for d in listed) == sorted(f["doc_name"] for f in data["success_files"])
    assert all(d["status"] == "ready" for d in listed)  # a cancelled file is not recorded as a failed document
    assert session.verify()["data"]["problems"] == []
    again = session.import_document([str(f) for f in files])  # a re-run imports the rest (the others get new names)
    assert again["data"]["success_count"] == len(files)


def test_progress_gives_an_honest_rate_and_time_left(session, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(importer_module, "EMBED_BATCH", 8)
    folder = tmp_path / "files"
    folder.mkdir()
    files = corpus(folder)[:-1]
    session.create_knowledge_base("kb", 48, embedding_model="hashing")
    session.select_knowledge_base("kb")
    seen: list[tuple[int, int, int, float | None, float | None, str]] = []

    def progress(state) -> None:
        seen.append(
            (
                state.files_parsed,
                state.chunks_embedded,
                state.chunks_expected,
                state.chunks_per_second,
                state.seconds_left,
                state.summary(),
            )
        )

    result = session.import_document([str(f) for f in files], progress=progress)
    total = sum(f["chunk_count"] for f in result["data"]["success_files"])
    assert seen[0][3] is None and seen[0][4] is None  # no rate before a chunk is embedded
    rated = [s for s in seen if s[1]]
    assert rated and all(s[3] is not None and s[3] > 0 for s in rated)
    # once every file is parsed the expected count is exact, and the time left is what is left at that rate
    final = [s for s in rated if s[0] == len(files)]
    assert final and all(s[2] == total for s in final)
    assert all(abs(s[4] - (total - s[1]) / s[3]) < 1e-6 * max(1.0, s[4]) + 1e-9 for s in final)
    assert seen[-1][1] == total and seen[-1][4] == 0
    assert "chunks/s" in seen[-1][5] and f"{total}/{total} chunks embedded" in seen[-1][5]


def test_kb_import_cancels_on_ctrl_c_keeping_the_kb_consistent(tmp_path: Path) -> None:
    """The first SIGINT cancels the import cleanly: the result lists the rest as cancelled, the KB verifies."""
    import json
    import os
    import signal
    import subprocess
    import sys

    from kb_core import KnowledgeBaseService

    home = tmp_path / "home"
    session = Enveloped(KnowledgeBaseService(home).session())
    assert session.create_knowledge_base("kb", 48, embedding_model="hashing")["success"]
    folder = tmp_path / "files"
    folder.mkdir()
    for i in range(400):
        (folder / f"note_{i}.txt").write_text(f"Note {i}: {EN} 第{i}条笔记。{ZH}", encoding="utf-8")
    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo), os.environ.get("PYTHONPATH", "")])}
    from kb_core.edges.cli.main import main as kb_main

    assert kb_main(["--home", str(home), "select", "kb"]) == 0
    command = [sys.executable, "-m", "kb_core.edges.cli", "--home", str(home), "--json", "import"]
    process = subprocess.Popen(
        [*command, *sorted(str(p) for p in folder.iterdir())], stdout=subprocess.PIPE, text=True, env=env
    )
    jobs = home / "kbs"
    deadline = time.monotonic() + 120
    while not any(jobs.glob("*/jobs/*.json")) and time.monotonic() < deadline:  # the import has begun
        time.sleep(0.02)
    process.send_signal(signal.SIGINT)
    out, _ = process.communicate(timeout=120)
    result = json.loads(out)
    data = result["data"]
    assert data["failed_count"] >= 1 and all(f["error"].startswith("cancelled") for f in data["failed_files"])
    assert data["success_count"] + data["failed_count"] == 400
    listed = session.list_documents("kb")["data"]["documents"]
    assert len(listed) == data["success_count"]
    assert session.verify()["data"]["problems"] == []


def test_a_front_end_that_stops_its_script_mid_import_leaves_the_kb_consistent(session, tmp_path: Path) -> None:
    """The app's Cancel button: Streamlit stops the page's script by raising a BaseException in the next call the
    script makes, which is the import's progress report. The import must stop there, not log and go on."""

    class ScriptStopped(BaseException):  # like streamlit's StopException / RerunException
        pass

    folder = tmp_path / "files"
    folder.mkdir()
    files = corpus(folder)[:-1]
    session.create_knowledge_base("kb", 48, embedding_model="hashing")
    session.select_knowledge_base("kb")
    reports = []

    def progress(state) -> None:
        reports.append(state.files_parsed)
        if state.files_parsed >= 3:
            raise ScriptStopped

    with pytest.raises(ScriptStopped):
        session.import_document([str(f) for f in files], progress=progress)
    assert reports[-1] == 3  # no report after the stop: the import did not go on
    assert session.verify()["data"]["problems"] == []
    assert all(d["status"] == "ready" for d in session.list_documents()["data"]["documents"])
    kb_root = session.operations.service.kb_store(session.operations.current_kb().id).root
    wait_for_staging_removals()  # removed after the import returns, on a thread of their own
    assert not list((kb_root / "staging").iterdir())  # the private copies and staged segments are gone
    assert not list((kb_root / "jobs").glob("*.json"))  # nothing is shown as in flight any more


def test_segments_written_at_once_commit_in_order_so_clashing_names_are_as_one_after_another(
    session, service, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """#29: segments are written by several worker processes at once and committed in order (several per commit
    when they are ready): the first file of a name keeps it, the later ones get a timestamp, as sequentially."""
    monkeypatch.setattr(importer_module, "COMMIT_CHUNKS", 6)
    monkeypatch.setattr(importer_module, "WRITER_PROCESSES", 3)
    files = []
    for i in range(24):
        folder = tmp_path / f"folder_{i}"
        folder.mkdir()
        path = folder / ("same.txt" if i % 4 == 0 else f"note_{i}.txt")
        path.write_text((EN + f"Note {i}.\n\n") * (1 + i % 3), encoding="utf-8")
        files.append(path)
    session.create_knowledge_base("kb", 48, embedding_model="hashing-32")
    session.select_knowledge_base("kb")
    result = session.import_document([str(f) for f in files])
    assert result["data"]["success_count"] == len(files), result
    named = [f["doc_name"] for f in result["data"]["success_files"]]
    same = [name for name, path in zip(named, files, strict=True) if path.name == "same.txt"]
    assert same[0] == "same.txt" and all(n.startswith("same_") for n in same[1:]) and len(set(same)) == len(same)
    snapshot = service.reader(session.operations.current_kb().id).snapshot()
    documents = snapshot.documents()
    assert sorted(documents["name"]) == sorted(named) and (documents["status"] == "ready").all()
    assert session.verify()["success"]


def test_an_import_says_where_its_time_went_in_this_process_and_in_its_workers(session, tmp_path: Path) -> None:
    """#29: per-stage wall and CPU seconds, the worker processes' stages among them, per chunk for the profile."""
    files = corpus(tmp_path)[:6]
    session.create_knowledge_base("kb", 48, embedding_model="hashing-32")
    session.select_knowledge_base("kb")
    seen: list[object] = []
    result = session.import_document([str(f) for f in files], progress=seen.append)
    assert result["data"]["success_count"] == len(files)
    progress = seen[-1]
    report = progress.stages.report(progress.chunks_total)
    for stage in ("parse_requests", "write_segment", "commit", "worker.stage_copy", "worker.parse", "worker.chunk"):
        assert report[stage]["calls"] >= 1 and report[stage]["wall_s"] >= 0, stage
    assert report["worker.prepare"]["cpu_s"] > 0 and report["worker.write_segment"]["calls"] >= 1
    total = report["total"]
    assert total["workers_cpu_s"] > 0 and total["importing_process_cpu_us_per_chunk"] > 0


def test_an_imports_last_documents_are_split_over_the_writers_short_of_a_compaction(
    session, service, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """#29: nothing overlaps the write of an import's last documents, so they go to every worker process at once (the
    parser processes are idle by then; the import's end waits for a part of that write), in pieces of a quarter of
    ``COMMIT_CHUNKS`` at least (documents stay whole), and never into more segments than the KB holds before an
    automatic compaction."""
    from kb_core.engines.parsing.isolation import PARSER_PROCESSES
    from kb_core.store import compaction

    monkeypatch.setattr(importer_module, "COMMIT_CHUNKS", 40)
    monkeypatch.setattr(importer_module, "WRITER_PROCESSES", 3)
    submitted = _record_submissions(monkeypatch)
    folder = tmp_path / "files"
    folder.mkdir()
    files = [str(f) for f in corpus(folder)[:-1]]
    session.create_knowledge_base("kb", 48, embedding_model="hashing-32")
    session.select_knowledge_base("kb")
    assert session.import_document(files[:12])["data"]["success_count"] == 12
    store = service.kb_store(session.operations.current_kb().id)
    rows = [s.rows for s in store.manifest().segments]
    full = [chunks for chunks, parsing, _ in submitted if parsing and chunks >= 40]
    early = [chunks for chunks, parsing, _ in submitted if parsing and chunks < 40]  # cut while the last files parsed
    last = [chunks for chunks, parsing, _ in submitted if not parsing]
    assert rows == full + early + last and all(chunks >= 13 for chunks in early), submitted  # 13: 40 // 3 writers
    # at most a piece per worker process, of about 10 chunks at least (documents stay whole); more than the 3 writers
    assert 3 < len(last) <= min(3 + PARSER_PROCESSES, sum(last) // 10), last

    # A KB one segment short of its automatic compaction: the last documents stay one segment.
    before = len(store.manifest().segments)
    monkeypatch.setattr(compaction, "AUTO_COMPACT_SEGMENTS", before + 1)  # read by the compaction and the sink
    monkeypatch.setattr(importer_module, "COMMIT_CHUNKS", 1000)
    assert session.import_document(files[12:])["data"]["success_count"] == len(files) - 12
    assert len(store.manifest().segments) == before + 1  # no compaction ran: one segment was added
    assert session.verify()["data"]["problems"] == []


def _notes(folder: Path, count: int) -> list[str]:
    """``count`` files of 4 chunks each at chunk size 48 (hashing tokenizer): the chunks to come estimate exactly."""
    files = []
    for i in range(count):
        path = folder / f"note_{i:03d}.txt"
        path.write_text(f"Note {i:03d} on topic {i * 7:04d}.\n\n" + EN * 4, encoding="utf-8")
        files.append(str(path))
    return files


def _record_submissions(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, bool, list[str]]]:
    """Each segment the committer hands over: its chunks, whether files were still unparsed, its documents' ids."""
    submitted: list[tuple[int, bool, list[str]]] = []
    original = importer_module._Committer._submit

    def recording(self: importer_module._Committer) -> None:
        progress = self.progress
        chunks = sum(d.chunk_count for d in self.pending)
        submitted.append((chunks, progress.files_parsed < progress.files_total, [d.doc_id for d in self.pending]))
        original(self)

    monkeypatch.setattr(importer_module._Committer, "_submit", recording)
    return submitted


def test_an_imports_last_segment_goes_out_in_pieces_while_its_last_files_are_parsed(
    session, service, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """#29: once the chunks still to come fit in one segment, the pending documents go out as a piece of it (half a
    segment with one writer) while the last files are parsed, so the import's end waits only for the write of what
    came after; the KB holds the same documents and verifies."""
    monkeypatch.setattr(importer_module, "COMMIT_CHUNKS", 40)
    monkeypatch.setattr(importer_module, "WRITER_PROCESSES", 1)
    submitted = _record_submissions(monkeypatch)
    files = _notes(tmp_path, 38)  # 152 chunks: 3 segments of 40, then 32
    session.create_knowledge_base("kb", 48, embedding_model="hashing-32")
    session.select_knowledge_base("kb")
    result = session.import_document(files)
    assert result["data"]["success_count"] == len(files), result
    assert [chunks for chunks, _, _ in submitted] == [40, 40, 40, 20, 12]
    # the piece of 20 (half a segment) went out while files were still parsed; the end waited for the last 12 only
    assert [parsing for _, parsing, _ in submitted] == [True, True, True, True, False]
    store = service.kb_store(session.operations.current_kb().id)
    assert [s.rows for s in store.manifest().segments] == [chunks for chunks, _, _ in submitted]
    named = sorted(f["doc_name"] for f in result["data"]["success_files"])
    assert sorted(d["name"] for d in session.list_documents()["data"]["documents"]) == named
    assert session.verify()["data"]["problems"] == []


def test_a_failed_write_of_an_early_last_piece_keeps_the_committed_prefix(
    session, service, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """#29: the write of a piece cut before the last files were parsed fails (a full disk): the segments before it
    stay committed, nothing after it is committed (though the writers wrote some at once), every later file fails
    with the reason, and the KB verifies."""
    from kb_core.base.errors import StoreError
    from kb_core.store.folder_sink import FolderSink

    monkeypatch.setattr(importer_module, "COMMIT_CHUNKS", 40)
    monkeypatch.setattr(importer_module, "WRITER_PROCESSES", 3)
    submitted = _record_submissions(monkeypatch)
    original_write = FolderSink.write

    later_written = threading.Event()

    def position(documents: list) -> int:
        ids = {d.doc_id for d in documents}
        return next(i for i, (_, _, handed) in enumerate(submitted) if ids & set(handed))

    def failing(self: FolderSink, documents: list, clock: object) -> object:
        early = [i for i, (chunks, parsing, _) in enumerate(submitted) if parsing and chunks < 40]
        if early and position(documents) == early[0]:
            later_written.wait(30)  # a segment after it is written first: it must be removed, never committed
            raise StoreError("No space left on device while writing a segment")
        written = original_write(self, documents, clock)
        if early and position(documents) > early[0]:
            later_written.set()
        return written

    monkeypatch.setattr(FolderSink, "write", failing)
    files = _notes(tmp_path, 38)
    session.create_knowledge_base("kb", 48, embedding_model="hashing-32")
    session.select_knowledge_base("kb")
    result = session.import_document(files)
    data = result["data"]
    # 3 segments of 40 chunks, then pieces of 16 (13 at least: one per writer) while the last files are parsed
    assert [(chunks, parsing) for chunks, parsing, _ in submitted][:4] == [(40, True)] * 3 + [(16, True)]
    ready = [files.index(f["file_path"]) for f in data["success_files"]]
    assert ready == list(range(30)), data  # the prefix before the failed piece
    failed = data["failed_files"]
    assert len(failed) == len(files) - len(ready) and all("No space left" in f["error"] for f in failed)
    listed = session.list_documents()["data"]["documents"]
    assert sorted(d["name"] for d in listed) == sorted(f["doc_name"] for f in data["success_files"])
    assert session.verify()["data"]["problems"] == []
    store = service.kb_store(session.operations.current_kb().id)
    assert later_written.is_set()  # a piece after the failed one was written ...
    assert not list((store.root / "staging").glob("*seg_*"))  # ... and removed


def test_a_failed_commit_keeps_the_committed_prefix_with_segments_written_after_it(
    session, service, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """#29: the commit thread's second commit fails while the writers have written later segments: what stays is
    the first commit's documents, nothing later is committed past the hole, every later file fails with the reason,
    no written segment is left in staging, and the KB verifies."""
    from kb_core.base.errors import StoreError
    from kb_core.store.folder_sink import FolderSink
    from kb_core.store.kb_store import KBStore

    monkeypatch.setattr(importer_module, "COMMIT_CHUNKS", 40)
    monkeypatch.setattr(importer_module, "WRITER_PROCESSES", 3)
    original_commit = KBStore.commit
    calls: list[int] = []

    def failing(self: KBStore, plan: object) -> object:
        calls.append(1)
        if len(calls) == 2:
            time.sleep(0.5)  # the writers go on writing meanwhile
            raise StoreError("the disk went read-only while committing")
        return original_commit(self, plan)

    monkeypatch.setattr(KBStore, "commit", failing)
    submitted = _record_submissions(monkeypatch)
    original_write = FolderSink.write

    def staggered(self: FolderSink, documents: list, clock: object) -> object:
        ids = {d.doc_id for d in documents}
        time.sleep(0.2 * next(i for i, (_, _, handed) in enumerate(submitted) if ids & set(handed)))
        return original_write(self, documents, clock)  # one segment written after another: one commit each

    monkeypatch.setattr(FolderSink, "write", staggered)
    files = _notes(tmp_path, 38)
    session.create_knowledge_base("kb", 48, embedding_model="hashing-32")
    session.select_knowledge_base("kb")
    data = session.import_document(files)["data"]
    ready = sorted(files.index(f["file_path"]) for f in data["success_files"])
    assert ready and ready == list(range(len(ready))) and len(ready) < len(files), data  # a prefix
    assert all("read-only" in f["error"] for f in data["failed_files"])
    assert len(calls) == 2  # nothing was committed after the failed commit
    listed = session.list_documents()["data"]["documents"]
    assert sorted(d["name"] for d in listed) == sorted(f["doc_name"] for f in data["success_files"])
    assert session.verify()["data"]["problems"] == []
    store = service.kb_store(session.operations.current_kb().id)
    assert not list((store.root / "staging").glob("*seg_*"))


def test_once_every_file_is_parsed_the_idle_parser_processes_write_segments_too(
    session, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """#29: with one segment writer, the import's last documents are written by more than one process at once
    after the last file is parsed (the parser processes are idle by then), not one after another."""
    from kb_core.engines.parsing.isolation import PARSER_PROCESSES
    from kb_core.store.folder_sink import FolderSink

    monkeypatch.setattr(importer_module, "COMMIT_CHUNKS", 40)
    monkeypatch.setattr(importer_module, "WRITER_PROCESSES", 1)
    submitted = _record_submissions(monkeypatch)
    original_write = FolderSink.write
    lock = threading.Lock()
    active = [0]
    peak = [0]

    def counting(self: FolderSink, documents: list, clock: object) -> object:
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        try:
            time.sleep(0.3)  # long enough for the other pieces to start
            return original_write(self, documents, clock)
        finally:
            with lock:
                active[0] -= 1

    monkeypatch.setattr(FolderSink, "write", counting)
    folder = tmp_path / "files"
    folder.mkdir()
    files = [str(f) for f in corpus(folder)[:12]]
    session.create_knowledge_base("kb", 48, embedding_model="hashing-32")
    session.select_knowledge_base("kb")
    assert session.import_document(files)["data"]["success_count"] == len(files)
    last = [chunks for chunks, parsing, _ in submitted if not parsing]
    assert len(last) > 1 and PARSER_PROCESSES >= 1, submitted  # pieces to write at once
    assert peak[0] > 1
    assert session.verify()["data"]["problems"] == []


def test_a_kb_deleted_as_its_import_starts_is_reported_as_deleted_meanwhile(
    session, service, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deleted between the import's job file and the committer's first look at the KB: the import says the KB was
    deleted while it ran (a review found "Knowledge base id 'kb_…' no longer exists." after the #29 merge)."""
    from kb_core.store.folder_sink import FolderSink

    folder = tmp_path / "files"
    folder.mkdir()
    files = [str(f) for f in corpus(folder)[:3]]
    session.create_knowledge_base("doomed", 48, embedding_model="hashing")
    session.select_knowledge_base("doomed")
    opened = FolderSink.open_job

    def open_then_delete(sink: FolderSink, progress):  # type: ignore[no-untyped-def]
        job = opened(sink, progress)
        service.delete_kb(service.find_kb("doomed"))
        return job

    monkeypatch.setattr(FolderSink, "open_job", open_then_delete)
    result = session.import_document(files)
    assert not result["success"] and result["error"]["code"] == "KB_NOT_FOUND", result
    assert "was deleted while the import ran" in result["message"], result["message"]


class _DeviceLikeEmbedder(HashingEmbedder):
    """Hashing vectors asked for the way a GPU is (``call_size``: calls of many chunks, two at once), each call slow
    enough to overlap the next, failing from call ``fail_from`` on. A subclass, so the parser processes leave the
    embedding to the import (they embed only for the hashing embedder itself)."""

    call_size = 32

    def __init__(self, fail_from: int | None = None, error: type[Exception] | None = None) -> None:
        import threading

        super().__init__(64)
        self.fail_from = fail_from
        self.error = error
        self.calls = self.running = self.most_at_once = 0
        self.lock = threading.Lock()

    def embed_documents(self, texts, progress=None, *, token_ids=None):  # type: ignore[no-untyped-def]
        from kb_core.base.errors import EmbeddingError

        with self.lock:
            self.calls += 1
            number = self.calls
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
        try:
            time.sleep(0.3)
            if self.fail_from is not None and number >= self.fail_from:
                raise (self.error or EmbeddingError)("the device fell over")
            return super().embed_documents(texts, progress)
        finally:
            with self.lock:
                self.running -= 1


def _device_like_import(tmp_path: Path, monkeypatch, embedder: _DeviceLikeEmbedder):  # type: ignore[no-untyped-def]
    from kb_core import KnowledgeBaseService

    monkeypatch.setattr(importer_module, "EMBED_BATCH", 8)
    monkeypatch.setattr(importer_module, "COMMIT_CHUNKS", 16)
    service = KnowledgeBaseService(tmp_path / "home", embedder_factory=lambda record, key: embedder)
    session = Enveloped(service.session())
    assert session.create_knowledge_base("kb", 32, embedding_model="hashing")["success"]
    paths = []
    for i in range(12):
        path = tmp_path / f"f{i:02d}.txt"
        path.write_text(" ".join(f"File {i} sentence {j} about topic{i}x{j}." for j in range(40)), encoding="utf-8")
        paths.append(str(path))
    seen: list[int] = []
    result = session.import_document(paths, kb_name="kb", progress=lambda p: seen.append(p.chunks_embedded))
    return service, session, result, seen


def test_device_sized_embedding_calls_run_two_at_once_and_store_the_models_vectors(
    tmp_path: Path, monkeypatch
) -> None:
    """#29: on a device the next call's CPU work overlaps the call before it (two at once); vectors and progress
    are applied in order by the importing thread, and are the model's."""
    embedder = _DeviceLikeEmbedder()
    service, _session, result, seen = _device_like_import(tmp_path, monkeypatch, embedder)
    assert result["data"]["success_count"] == 12, result
    assert embedder.calls >= 3 and embedder.most_at_once == 2
    assert all(a <= b for a, b in itertools.pairwise(seen)) and seen[-1] == sum(
        f["chunk_count"] for f in result["data"]["success_files"]
    )
    snapshot = service.reader(service.find_kb("kb").id).snapshot()
    texts = [t for s in snapshot.segments for t in s.chunks.column("content").to_pylist()]
    stored = np.vstack([s.vectors.reconstruct(np.arange(s.chunks.num_rows)) for s in snapshot.segments])
    assert np.allclose(stored, HashingEmbedder(64).embed_documents(texts), atol=1e-6)


def test_a_device_call_that_fails_mid_import_keeps_what_was_committed_and_fails_the_rest(
    tmp_path: Path, monkeypatch
) -> None:
    """With calls in flight, a failing call ends the import promptly: what was committed stays, searchable; every
    other file fails with the model's reason; the KB verifies."""
    embedder = _DeviceLikeEmbedder(fail_from=4)
    _, session, result, _ = _device_like_import(tmp_path, monkeypatch, embedder)
    data = result["data"]
    assert data["success_count"] >= 1 and data["failed_count"] >= 1, result
    assert all("the device fell over" in f["error"] for f in data["failed_files"])
    listed = session.list_documents(kb_name="kb")["data"]["documents"]
    assert sorted(d["name"] for d in listed) == sorted(f["doc_name"] for f in data["success_files"])
    assert session.verify()["data"]["problems"] == []
    first = data["success_files"][0]["doc_name"]
    number = int(first[1:3])
    session.select_knowledge_base("kb")
    hits = session.search(SearchRequest(f"topic{number}x7", mode="keyword"))["data"]["chunks"]
    assert hits and hits[0]["doc_name"] == first


def test_an_embedder_raising_timeout_error_ends_the_import_instead_of_spinning(tmp_path: Path, monkeypatch) -> None:
    """An embedder's own TimeoutError (a socket read's) is the call's failure, not "still running": the import ends
    with an internal error, promptly (it looped forever at full CPU when the wait read it as a poll's timeout)."""
    import threading

    embedder = _DeviceLikeEmbedder(fail_from=1, error=TimeoutError)
    answer: list = []
    runner = threading.Thread(
        target=lambda: answer.append(_device_like_import(tmp_path, monkeypatch, embedder)), daemon=True
    )
    runner.start()
    runner.join(timeout=300)  # a hang detector (the old wait never returned), not a speed limit
    assert not runner.is_alive(), "the import did not end"
    _, session, result, _ = answer[0]
    assert result["error"]["code"] == "INTERNAL_ERROR", result
    assert session.verify()["data"]["problems"] == []
