"""Synthetic documents for the PostgreSQL store's tests."""

from __future__ import annotations

import numpy as np

from kb_core.engines.analysis import Analyzer
from kb_core.store.postgres import ChunkRecord, DocumentRecord, PreparedDocument


def unit_vectors(rng: np.random.Generator, rows: int, dimension: int = 16) -> np.ndarray:
    vectors = rng.standard_normal((rows, dimension)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def make_document(
    doc_id: str,
    texts: list[str],
    analyzer: Analyzer,
    rng: np.random.Generator,
    *,
    name: str | None = None,
    dimension: int = 16,
    status: str = "ready",
    replaces: str | None = None,
    original: bytes | None = b"original bytes",
) -> PreparedDocument:
    """A synthetic document: one chunk per text, random unit vectors."""
    record = DocumentRecord(
        doc_id=doc_id,
        name=name or f"{doc_id}.txt",
        file_name=f"{doc_id}.txt",
        file_path=f"/data/{doc_id}.txt",
        file_type="txt",
        source="path",
        size_bytes=sum(len(t.encode("utf-8")) for t in texts),
        sha256=None if status == "failed" else "0" * 64,
        chunk_size=64,
        status=status,  # type: ignore[arg-type]
        error="it broke" if status == "failed" else None,
        chunk_count=0 if status == "failed" else len(texts),
        created_at="2026-11-23T00:00:00.000Z",
        updated_at="2026-11-23T00:00:00.000Z",
        original=None if status == "failed" else f"files/{doc_id}.txt",
    )
    chunks = (
        []
        if status == "failed"
        else [
            ChunkRecord(f"chk_{doc_id}_{i}", doc_id, i, text, len(text.split()), "Chapter 1", 1, 0, len(text))
            for i, text in enumerate(texts)
        ]
    )
    vectors = unit_vectors(rng, len(chunks), dimension) if chunks else None
    return PreparedDocument.build(
        record,
        chunks,
        vectors,
        analyzer,
        text=None if status == "failed" else "\n".join(texts),
        original=None if status == "failed" else original,
        replaces=replaces,
    )
