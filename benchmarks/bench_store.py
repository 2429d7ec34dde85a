"""Commit cost of one small document into a large KB, against building that KB's indexes from scratch.

    python benchmarks/bench_store.py --chunks 1000000

Synthetic texts (English words and Chinese characters) and random unit vectors (384-d) stand in for
a real corpus; the small document goes through the real import path (parse, chunk, embed with the
deterministic 384-d hashing embedder, write a segment, commit). Both figures come from the same run.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from kb_core import KnowledgeBaseService
from kb_core.edges.envelopes import Enveloped
from kb_core.engines.keyword_index import KeywordSegment
from kb_core.engines.vector_index import VectorSegment
from kb_core.store import Change
from kb_core.store.folder import FolderSearcher
from kb_core.store.segments import write_indexed_segment, write_segment_files


def synthetic_texts(count: int, rng: np.random.Generator) -> list[str]:
    words = np.array([f"w{i}" for i in range(50_000)] + list("知识库检索向量关键词文档混合排序分数解释"))
    picks = rng.zipf(1.3, size=(count, 40)) % len(words)
    return [" ".join(row) for row in words[picks]]


def commit_synthetic_segment(service: KnowledgeBaseService, record: Any, texts: list[str], vectors: np.ndarray) -> None:
    """Commit one segment holding ``texts`` and ``vectors`` as a single document, through the store."""
    store = service.kb_store(record.id)
    staged = store.stage_segment()
    doc_rows, chunk_rows = synthetic_rows(texts)
    write_segment_files(
        staged,
        doc_rows,
        chunk_rows,
        [{"doc_id": "doc_big", "text": ""}],
        vectors,
        service.embedder(record).model_key,
        service.analyzer,
    )
    store.commit(Change(add=(staged,)))


def synthetic_rows(texts: list[str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    doc_rows = [
        {
            "doc_id": "doc_big",
            "name": "big.txt",
            "status": "ready",
            "chunk_count": len(texts),
            "file_type": "txt",
            "source": "path",
            "size_bytes": 0,
            "chunk_size": 256,
        }
    ]
    chunk_rows = [
        {"chunk_id": f"chk_{i:08d}", "doc_id": "doc_big", "chunk_index": i, "content": t, "tokens": 40}
        for i, t in enumerate(texts)
    ]
    return doc_rows, chunk_rows


def commit_prebuilt_segment(
    service: KnowledgeBaseService, record: Any, texts: list[str], keyword: KeywordSegment, vectors: VectorSegment
) -> None:
    """Like :func:`commit_synthetic_segment`, with indexes already built (so the benchmark builds them once)."""
    store = service.kb_store(record.id)
    staged = store.stage_segment()
    doc_rows, chunk_rows = synthetic_rows(texts)
    model_key = service.embedder(record).model_key
    text_rows = [{"doc_id": "doc_big", "text": ""}]
    write_indexed_segment(
        staged, doc_rows, chunk_rows, text_rows, keyword, vectors, model_key=model_key, dimension=vectors.dimension
    )
    store.commit(Change(add=(staged,)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chunks", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as folder:
        home = Path(folder) / "home"
        service = KnowledgeBaseService(home)
        session = Enveloped(service.session())
        session.create_knowledge_base("big", 256, embedding_model="hashing-384")
        session.select_knowledge_base("big")
        record = session.operations.current_kb()
        texts = synthetic_texts(args.chunks, rng)
        vectors = rng.standard_normal((args.chunks, 384), dtype=np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)

        started = time.perf_counter()
        keyword = KeywordSegment.build(texts, service.analyzer)
        keyword_build = time.perf_counter() - started
        started = time.perf_counter()
        vector_index = VectorSegment.build(vectors)
        vector_build = time.perf_counter() - started
        build = keyword_build + vector_build

        commit_prebuilt_segment(service, record, texts, keyword, vector_index)
        del keyword, vector_index, vectors
        snapshot = service.reader(record.id).snapshot()
        FolderSearcher.for_snapshot(snapshot, service.analyzer, record.embedding_model)

        small = Path(folder) / "small.txt"
        commits, refreshes = [], []
        for i in range(args.repeats + 1):
            small.write_text(f"A small note number {i} about hybrid retrieval. 混合检索的小文档。", encoding="utf-8")
            started = time.perf_counter()
            result = session.import_document([str(small)])
            elapsed = time.perf_counter() - started
            assert result["success"], result
            started = time.perf_counter()
            snapshot = service.reader(record.id).snapshot()
            FolderSearcher.for_snapshot(snapshot, service.analyzer, record.embedding_model)
            refresh = time.perf_counter() - started
            if i:  # the first import starts the parser worker
                commits.append(elapsed)
                refreshes.append(refresh)
        commit = float(np.median(commits))
        report = {
            "chunks": args.chunks,
            "index_build_seconds": round(build, 2),
            "keyword_build_seconds": round(keyword_build, 2),
            "vector_build_seconds": round(vector_build, 2),
            "small_document_import_seconds_median": round(commit, 4),
            "searcher_refresh_seconds_median": round(float(np.median(refreshes)), 4),
            "commit_over_build": round(commit / build, 5),
            "target": "commit_over_build <= 0.02",
        }
        print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
