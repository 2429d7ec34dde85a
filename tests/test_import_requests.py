"""The import's parser requests: several files per request, chunks prepared in the parser process, staging copies
made by the pipeline — each file still checked, limited, timed and reported on its own."""

from __future__ import annotations

import functools
import time
from pathlib import Path

import numpy as np
import pytest

from kb_core import KnowledgeBaseService
from kb_core.base.errors import ParseError
from kb_core.edges.envelopes import Enveloped
from kb_core.engines.analysis import default_analyzer
from kb_core.engines.chunking import chunk_document
from kb_core.engines.embedding import HashingEmbedder
from kb_core.engines.parsing import ParseLimits, parse_and_chunk_files, parse_file_inprocess
from kb_core.engines.prepared import prepare_chunks
from kb_core.features.ingest.files import wait_for_staging_removals
from tests.parser_hooks import copy_then_change_the_source

EN = "Retrieval-augmented generation answers from retrieved passages; keyword postings and vectors. "
ZH = "知识库把文档切成片段，每个片段都有关键词索引和向量。"


def assert_same_preparation(got, expected) -> None:
    assert got.terms == expected.terms
    assert np.array_equal(got.term_ids, expected.term_ids) and np.array_equal(got.lengths, expected.lengths)
    for name in ("text_hash", "shingle_count", "sketch"):
        assert np.array_equal(getattr(got.signatures, name), getattr(expected.signatures, name)), name
    assert np.array_equal(got.vectors, expected.vectors)


def test_a_file_that_times_out_inside_a_request_fails_alone_and_the_others_are_prepared(tmp_path: Path) -> None:
    first, last = tmp_path / "first.txt", tmp_path / "last.txt"
    first.write_text(EN * 20, encoding="utf-8")
    last.write_text(ZH * 20, encoding="utf-8")
    slow = tmp_path / "slow.txt"
    slow.write_bytes(("检索增强生成 retrieval augmented generation 知识库。\n" * 400_000).encode("gb18030"))
    embedder, analyzer = HashingEmbedder(32), default_analyzer()
    limits = ParseLimits(timeout_seconds=0.5)
    parse_and_chunk_files([first], limits, embedder.tokenizer, 48)  # workers started: their start is not timed

    started = time.monotonic()
    outcomes = parse_and_chunk_files(
        [first, slow, last], limits, embedder.tokenizer, 48, analyzer=analyzer, embedder=embedder
    )
    assert time.monotonic() - started < 10  # the slow file was stopped at its limit, not parsed to the end
    assert isinstance(outcomes[1], ParseError)
    assert outcomes[1].code == "PARSE_TIMEOUT" and "slow.txt" in outcomes[1].message
    for path, outcome in ((first, outcomes[0]), (last, outcomes[2])):
        assert not isinstance(outcome, ParseError), outcome
        _, chunks, prepared = outcome
        expected = chunk_document(parse_file_inprocess(path), embedder.tokenizer, 48)
        assert chunks == expected
        if path == last:  # answered by the fresh worker the rest of the request went to, which prepared it
            texts = [c.content for c in expected]
            assert_same_preparation(prepared, prepare_chunks(texts, analyzer, HashingEmbedder(32)))
        else:  # its worker was killed before it prepared the request's chunks: the importing process does it
            assert prepared is None


def test_files_of_one_request_are_prepared_as_each_would_be_alone(tmp_path: Path) -> None:
    paths = []
    for i in range(5):
        path = tmp_path / f"f{i}.txt"
        path.write_text((EN if i % 2 else ZH) * (3 + 7 * i) + f" 第{i}篇 file {i}", encoding="utf-8")
        paths.append(path)
    (tmp_path / "empty.txt").write_text("", encoding="utf-8")
    embedder, analyzer = HashingEmbedder(32), default_analyzer()
    outcomes = parse_and_chunk_files(
        [*paths[:2], tmp_path / "empty.txt", *paths[2:]],
        ParseLimits(),
        embedder.tokenizer,
        48,
        analyzer=analyzer,
        embedder=embedder,
    )
    assert isinstance(outcomes[2], ParseError) and outcomes[2].code == "EMPTY_DOCUMENT"
    for path, outcome in zip(paths, outcomes[:2] + outcomes[3:], strict=True):
        _, chunks, prepared = outcome
        texts = [c.content for c in chunk_document(parse_file_inprocess(path), embedder.tokenizer, 48)]
        assert [c.content for c in chunks] == texts
        assert_same_preparation(prepared, prepare_chunks(texts, analyzer, HashingEmbedder(32)))


def test_staging_copies_keep_their_checks_and_are_what_is_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import kb_core.engines.parsing

    allowed, outside = tmp_path / "allowed", tmp_path / "outside"
    allowed.mkdir()
    outside.mkdir()
    good = [allowed / "a.txt", allowed / "sub" / "b.txt"]
    good[1].parent.mkdir()
    good[0].write_text("apples and pears 苹果", encoding="utf-8")
    good[1].write_text("bananas 香蕉 and cherries", encoding="utf-8")
    secret = outside / "secret.txt"
    secret.write_text("TOPSECRET 机密", encoding="utf-8")
    big = allowed / "big.txt"
    big.write_text("x" * 5000, encoding="utf-8")
    service = KnowledgeBaseService(tmp_path / "home", parse_limits=ParseLimits(max_file_bytes=4000))
    session = Enveloped(service.session(allowed_dirs=[allowed]))
    session.create_knowledge_base("kb", 48, embedding_model="hashing-32")
    session.select_knowledge_base("kb")

    # Every source changes once the pipeline has copied it: what is imported is the copy, taken at the check.
    # (The parser process makes the copy, just before it parses the file.)
    real = kb_core.engines.parsing.parse_and_chunk_files

    def change_sources_then_parse(*args, stages=None, **kwargs):
        assert stages is not None and all(stages)
        stages = [functools.partial(copy_then_change_the_source, stage) for stage in stages]
        return real(*args, stages=stages, **kwargs)

    monkeypatch.setattr(kb_core.engines.parsing, "parse_and_chunk_files", change_sources_then_parse)
    names = [str(good[0]), str(secret), str(big), str(good[1])]
    result = session.import_document(names)
    data = result["data"]
    assert [f["file_path"] for f in data["success_files"]] == [str(good[0]), str(good[1])]
    failed = {f["file_path"]: f["error"] for f in data["failed_files"]}
    assert list(failed) == [str(secret), str(big)]
    assert "outside" in failed[str(secret)] and str(allowed) in failed[str(secret)]
    assert failed[str(big)].startswith(f"{big} is ") and "over the import limit" in failed[str(big)]
    snapshot = service.reader(session.operations.current_kb().id).snapshot()
    contents = sorted(c for segment in snapshot.segments for c in segment.chunks.column("content").to_pylist())
    assert contents == ["apples and pears 苹果", "bananas 香蕉 and cherries"]


def test_parser_requests_copy_into_folders_of_their_own(
    session, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """#29: the parser processes make the staging copies; requests in flight at once copy into different folders (on
    many cores, 15 processes creating files in one folder queued on its lock), and a name repeated in one folder still
    gets a folder of its own, so every file imports as itself."""
    import kb_core.engines.parsing
    from kb_core.features.ingest import pipeline

    monkeypatch.setattr(pipeline, "FILES_PER_REQUEST", 4)
    monkeypatch.setattr(pipeline, "PARSE_WORKERS", 3)
    real = kb_core.engines.parsing.parse_and_chunk_files
    requests: list[list[tuple[Path, Path]]] = []

    def recording(*args, stages=None, **kwargs):
        requests.append([(Path(stage.args[0]), Path(stage.args[1])) for stage in stages])  # file, where it is copied
        return real(*args, stages=stages, **kwargs)

    monkeypatch.setattr(kb_core.engines.parsing, "parse_and_chunk_files", recording)
    files = []
    for i in range(30):
        folder = tmp_path / f"from_{i}"
        folder.mkdir()
        path = folder / ("same.txt" if i in (0, 1, 9) else f"note_{i}.txt")
        path.write_text(f"note {i} says {EN}{ZH} 第{i}号", encoding="utf-8")
        files.append(path)
    session.create_knowledge_base("kb", 48, embedding_model="hashing-32")
    session.select_knowledge_base("kb")
    result = session.import_document([str(f) for f in files])
    assert result["data"]["success_count"] == len(files), result

    requests.sort(key=lambda request: files.index(request[0][0]))
    expected = [list(range(i, min(i + 4, len(files)))) for i in range(0, len(files), 4)]
    assert [[files.index(path) for path, _ in r] for r in requests] == expected
    assert [folder.name for _, folder in requests[0]] == ["0", "0-1", "0", "0"]  # same.txt twice in one request
    shared = [folder.name for r in requests for _, folder in r if "-" not in folder.name]
    per_request = [{folder.name for _, folder in r if "-" not in folder.name} for r in requests]
    assert all(len(names) == 1 for names in per_request)  # a request's copies share one folder
    window = 2 * 3  # requests that may be in flight together use different folders
    for start in range(len(per_request) - window + 1):
        assert len(set().union(*per_request[start : start + window])) == window
    assert len(shared) == len(files) - 1
    snapshot = session.operations.service.reader(session.operations.current_kb().id).snapshot()
    contents = " ".join(c for segment in snapshot.segments for c in segment.chunks.column("content").to_pylist())
    assert all(f"note {i} says" in contents for i in range(len(files)))  # each file imported as itself
    kb_root = session.operations.service.kb_store(session.operations.current_kb().id).root
    wait_for_staging_removals()  # removed after the import returns, on a thread of their own
    assert not list((kb_root / "staging").iterdir())  # the copies and their folders are gone
