"""Segments written by worker processes (#29): what the importing process sends a segment writer, and what the
writer does with it.

The importing process hands over the documents' parser payloads (:class:`~kb_core.engines.payloads.FilePayload`,
unopened) with their names and vectors; a worker process (:func:`kb_core.engines.parsing.isolation.
write_segment_in_worker`) runs :func:`write_segment_job`, which writes exactly the segment
:func:`kb_core.store.segments.write_document_segment` writes for the same documents in the importing process; the
importing process only commits it (:mod:`kb_core.store.folder_sink`).
"""

from __future__ import annotations

import pickle
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from kb_core.engines.analysis import Analyzer
    from kb_core.engines.payloads import FilePayload
    from kb_core.store.sink import ImportSource


@dataclass
class SegmentDocument:
    """One document of a segment to write: where it came from, its payload (None for a failed file) and, when the
    importing process embedded it, its vectors."""

    doc_id: str
    source: ImportSource  # without its staging callable
    file_type: str
    size_bytes: int
    sha256: str
    chunk_size: int
    error: str | None = None
    payload: FilePayload | None = None
    vectors: np.ndarray | None = None  # (chunks, dimension) float32; None: the payload's prepared vectors


@dataclass
class SegmentJob:
    """A segment for a worker process to write into ``path`` (a staged segment folder of the KB)."""

    segment_id: str
    path: Path
    private: Path  # the KB's staging folder (originals there are hard-linked, not copied)
    documents: list[SegmentDocument]
    analyzer: Analyzer
    model_key: str
    dimension: int


@dataclass
class WrittenSegment:
    rows: list[dict[str, Any]]  # the documents' catalog rows
    chunk_count: int
    timings: dict[str, tuple[float, float, int]]


def write_segment_job(job: SegmentJob) -> WrittenSegment:
    """Write ``job``'s segment (in a worker process): exactly what ``write_document_segment`` writes for the same
    documents in the importing process."""
    from kb_core.store import StagedSegment
    from kb_core.store.segments import write_document_segment

    wall, cpu = time.perf_counter(), time.thread_time()
    documents = []
    for document in job.documents:
        text, chunks, prepared, vectors = "", [], None, document.vectors
        payload = document.payload
        if payload is not None:
            text, chunks = pickle.loads(payload.body)
            prepared = pickle.loads(payload.prepared) if payload.prepared is not None else None
            if vectors is None and prepared is not None:
                vectors = prepared.vectors
        documents.append(
            SimpleNamespace(
                doc_id=document.doc_id,
                source=document.source,
                file_type=document.file_type,
                text=text,
                chunks=chunks,
                size_bytes=document.size_bytes,
                sha256=document.sha256,
                chunk_size=document.chunk_size,
                vectors=[] if vectors is None else vectors,
                error=document.error,
                prepared=prepared,
            )
        )
    timings = {"open_payloads": (time.perf_counter() - wall, time.thread_time() - cpu, 1)}
    wall, cpu = time.perf_counter(), time.thread_time()
    staged = StagedSegment(id=job.segment_id, path=job.path)
    model = SimpleNamespace(model_key=job.model_key, dimension=job.dimension)
    rows = write_document_segment(staged, documents, model, job.analyzer, job.private)
    timings["write_segment"] = (time.perf_counter() - wall, time.thread_time() - cpu, 1)
    return WrittenSegment(rows=rows, chunk_count=staged.rows, timings=timings)
