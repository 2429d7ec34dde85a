"""Issue #29: the model is fed the way a GPU wants it (token-budget batches, longest first, queued without waiting,
one copy back per call), and the vectors stay those of the library's own encode. A CPU runs the same code path
when ``device_batch_tokens`` is given; tests/test_device.py runs it on CUDA where there is one."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kb_core import KnowledgeBaseService
from kb_core.edges.envelopes import Enveloped
from kb_core.engines.embedding import CachedEmbedder
from kb_core.engines.embedding.device import DeviceRequest
from kb_core.engines.embedding.local import SentenceTransformerEmbedder

pytestmark = pytest.mark.model

TEXTS = [
    "Hybrid retrieval combines BM25 keyword scores with dense vector similarity.",
    "混合检索把关键词得分和向量相似度结合起来。",
    "a",
    " ".join(f"Sentence {i} about photosynthesis and light." for i in range(30)),  # longer than one window
    "Quarterly revenue grew by ten percent while costs stayed flat, the report said on Monday.",
    *(f"Claim {i}: " + "cells divide and proteins fold " * (1 + i % 9) for i in range(40)),
]


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(axis=1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def test_device_feeding_gives_the_librarys_vectors_in_token_budget_batches_longest_first() -> None:
    budget = 1024
    fed = SentenceTransformerEmbedder(device=DeviceRequest("cpu"), device_batch_tokens=budget)
    done: list[int] = []
    ours = fed.embed_documents(TEXTS, progress=done.append)
    windows = [w for t in TEXTS for w in fed._windows_many([t])[0]]
    lengths = sorted((len(w.ids) + 2 for w in windows), reverse=True)
    # Batches cut by the budget: each holds as many of the longest-first windows as fit.
    assert len(fed.last_batches) > 1 and sum(fed.last_batches) == len(windows)
    start = 0
    for rows in fed.last_batches:
        assert rows == min(len(lengths) - start, max(1, budget // lengths[start]))
        start += rows
    assert sum(done) == len(TEXTS)  # progress once the block is back
    # The same vectors as model.encode of the texts that fit, and as the CPU's fixed batches for all of them.
    fits = [i for i, t in enumerate(TEXTS) if len(fed._windows_many([t])[0]) == 1]
    reference = fed.model.encode([TEXTS[i] for i in fits], normalize_embeddings=True, show_progress_bar=False)
    assert _cosines(ours[fits], np.asarray(reference)).min() >= 0.9999
    fixed = SentenceTransformerEmbedder(device=DeviceRequest("cpu"), batch_size=7)
    assert _cosines(ours, fixed.embed_documents(TEXTS)).min() >= 0.9999
    assert fixed.last_batches == tuple([7] * (len(windows) // 7) + ([len(windows) % 7] if len(windows) % 7 else []))


def test_an_import_fed_like_a_device_stores_the_librarys_vectors(tmp_path: Path) -> None:
    service = KnowledgeBaseService(tmp_path / "home")
    session = Enveloped(service.session())
    assert session.create_knowledge_base("docs", 64, "all-MiniLM-L6-v2")["success"]  # 64-token chunks
    record = service.find_kb("docs")
    cached = service.embedder(record)
    assert isinstance(cached, CachedEmbedder) and isinstance(cached.inner, SentenceTransformerEmbedder)
    model = cached.inner
    for script in ("floor", "下限"):  # measured after an import's first in a home (#25), which embeds again: now
        service.semantic_scale(record, script)
    model.device_batch_tokens = 512  # the GPU's feeding, on this CPU
    files = []
    for i in range(4):
        path = tmp_path / f"doc_{i}.txt"
        path.write_text("\n\n".join(TEXTS[i::4]), encoding="utf-8")
        files.append(str(path))
    try:
        result = session.import_document(files, kb_name="docs")
    finally:
        model.device_batch_tokens = None
    assert result["data"]["success_count"] == len(files), result
    assert len(model.last_batches) > 1
    snapshot = service.reader(record.id).snapshot()
    texts = [t for s in snapshot.segments for t in s.chunks.column("content").to_pylist()]
    stored = np.vstack([s.vectors.reconstruct(np.arange(s.chunks.num_rows)) for s in snapshot.segments])
    reference = model.model.encode(texts, normalize_embeddings=True, show_progress_bar=False)
    assert _cosines(stored, np.asarray(reference)).min() >= 0.9999


def test_a_device_import_embeds_parsed_chunks_while_later_files_are_still_parsed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """#29: fed like a device (calls of thousands of chunks), the model does not wait for a whole call's worth of
    parsed chunks: once ``EMBED_BATCH`` chunks wait and the parsers have nothing more ready, those are embedded. The
    stored vectors stay the library's."""
    import time

    import kb_core.engines.parsing
    from kb_core.features.ingest import pipeline

    monkeypatch.setattr(pipeline, "EMBED_BATCH", 16)
    monkeypatch.setattr(pipeline, "FILES_PER_REQUEST", 2)
    real = kb_core.engines.parsing.parse_and_chunk_files

    def the_last_files_parse_slowly(paths, *args, **kwargs):
        if any(Path(p).name.startswith("late") for p in paths):
            time.sleep(3)
        return real(paths, *args, **kwargs)

    monkeypatch.setattr(kb_core.engines.parsing, "parse_and_chunk_files", the_last_files_parse_slowly)
    service = KnowledgeBaseService(tmp_path / "home")
    session = Enveloped(service.session())
    assert session.create_knowledge_base("docs", 32, "all-MiniLM-L6-v2")["success"]
    record = service.find_kb("docs")
    model = service.embedder(record).inner
    model.device_batch_tokens = 4096
    files = []
    for i, name in enumerate(["early_0", "early_1", "early_2", "early_3", "late_4", "late_5"]):
        path = tmp_path / f"{name}.txt"
        path.write_text("\n\n".join(TEXTS[i::6]), encoding="utf-8")
        files.append(str(path))
    kb_core.engines.parsing.parse_file(Path(files[0]))  # the parser processes started before the import
    seen: list[object] = []
    try:
        result = session.import_document(files, kb_name="docs", progress=seen.append)
    finally:
        model.device_batch_tokens = None
    assert result["data"]["success_count"] == len(files), result
    clock = seen[-1].stages
    embedded, parsed = clock.span("embed"), clock.span("parse_requests")
    assert embedded is not None and parsed is not None
    assert embedded[0] < parsed[1] - 2  # the first call ran while the late files were parsed
    assert clock.report()["embed"]["calls"] >= 2
    snapshot = service.reader(record.id).snapshot()
    texts = [t for s in snapshot.segments for t in s.chunks.column("content").to_pylist()]
    stored = np.vstack([s.vectors.reconstruct(np.arange(s.chunks.num_rows)) for s in snapshot.segments])
    reference = model.model.encode(texts, normalize_embeddings=True, show_progress_bar=False)
    assert _cosines(stored, np.asarray(reference)).min() >= 0.9999
