"""The folder store's :class:`~kb_core.store.sink.DocumentSink`: an import's documents as segments, committed under
the KB's lock.

Each batch of documents is written into a staged segment (here, or by a worker process when its documents came as
parser payloads: :mod:`kb_core.store.segment_jobs`); a commit makes one or more written segments visible at once,
deciding names and replacements against the newest manifest under the lock. A segment never committed is
removed, so a killed import leaves only whole documents. Running imports publish their in-flight documents in
``jobs/PID-….json`` (:class:`JobFile`), which :func:`in_flight_documents` reads.
"""

from __future__ import annotations

import dataclasses
import math
import os
import pickle
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from kb_core.base.atomic import owner_pid, pid_is_alive, read_json, remove_stale_temporaries, write_bytes_atomically
from kb_core.base.errors import DocumentNotFound, KBError, KBNotFound, StoreError
from kb_core.base.json_text import json_text
from kb_core.engines.timing import StageClock
from kb_core.store import Change, KBStore, Manifest, StagedSegment, catalog
from kb_core.store.reader import KBReader
from kb_core.store.segment_jobs import SegmentDocument, SegmentJob, WrittenSegment
from kb_core.store.segments import write_document_segment
from kb_core.store.sink import (
    PUBLISH_INTERVAL,
    ImportSource,
    ImportState,
    IncomingDocument,
    WrittenBatch,
    in_flight_rows,
    timestamped_name,
)

__all__ = ["COMMIT_COLUMNS", "FolderSink", "JobFile", "SegmentWriter", "in_flight_documents"]

# The columns of the KB's live documents a commit decides names and replacements by (FolderSink's live_documents).
COMMIT_COLUMNS = ("doc_id", "segment_id", "name", "status", "chunk_count")

SegmentWriter = Callable[[SegmentJob], WrittenSegment]


class JobFile:
    """Publishes in-flight documents (pending/parsing/embedding) so other processes can list them."""

    def __init__(self, store: KBStore, progress: ImportState) -> None:
        self.store = store
        self.folder = store.root / "jobs"
        with store.deleted_guard():  # the KB may be deleted at any moment: KB_NOT_FOUND, not a file error
            self.folder.mkdir(exist_ok=True)
            remove_stale_temporaries(self.folder)
        self.path = self.folder / f"{os.getpid()}-{uuid.uuid4().hex[:8]}.json"
        self.progress = progress
        self._published_at = -math.inf
        self._lock = threading.Lock()  # the committer's thread publishes too

    def publish(self, force: bool = False) -> None:
        """Write the in-flight list, at most once per ``PUBLISH_INTERVAL`` unless forced (it is O(files))."""
        with self._lock:
            now = time.monotonic()
            if not force and now - self._published_at < PUBLISH_INTERVAL:
                return
            self._published_at = now
            rows = in_flight_rows(self.progress.files)
            data = json_text({"pid": os.getpid(), "documents": rows}).encode("utf-8")
            with self.store.deleted_guard():
                write_bytes_atomically(self.path, data, mode=0o644)

    def close(self) -> None:
        self.path.unlink(missing_ok=True)


def in_flight_documents(store: KBStore) -> list[dict[str, Any]]:
    """Documents other imports are working on now; files of dead processes are removed."""
    folder = store.root / "jobs"
    rows: list[dict[str, Any]] = []
    if not folder.is_dir():
        return rows
    for path in folder.glob("*.json"):
        pid = owner_pid(path.name)
        if pid is None or not pid_is_alive(pid):
            path.unlink(missing_ok=True)  # an import killed mid-way: its uncommitted documents are absent
            continue
        try:
            rows.extend(read_json(path).get("documents", []))
        except (FileNotFoundError, ValueError):
            continue
    return rows


class FolderSink:
    """Commits an import's documents into one KB of the folder store, whose ``reader`` gives the live documents a
    commit decides names by; ``segment_writer`` writes a segment of payload documents in a worker process (with
    it, several segments are written at once)."""

    def __init__(
        self,
        store: KBStore,
        reader: KBReader,
        *,
        embedder: Any,
        analyzer: Any,
        segment_writer: SegmentWriter | None = None,
    ) -> None:
        self.store = store
        self.reader = reader
        self.kb_id = store.kb_id
        self.embedder = embedder
        self.analyzer = analyzer
        self.segment_writer = segment_writer
        self.writes_in_workers = segment_writer is not None

    def open_job(self, progress: ImportState) -> JobFile:
        return JobFile(self.store, progress)

    def segment_room(self) -> int:
        from kb_core.store.compaction import AUTO_COMPACT_SEGMENTS

        return max(0, AUTO_COMPACT_SEGMENTS - len(self.store.manifest().segments))

    def live_documents(self, manifest: Manifest) -> list[dict[str, Any]]:
        """The KB's live documents as of ``manifest`` (the newest, under the lock)."""
        snapshot = self.reader.snapshot()
        if snapshot.version != manifest.version:
            raise StoreError("The knowledge base changed while committing; try again.")
        # Only what a commit decides names and replacements by, kept per segment: a table of the KB's documents built
        # at each commit cost more than the rest of the commit, and grew with the KB (#29).
        return snapshot.live_document_keys(COMMIT_COLUMNS)

    @contextmanager
    def reimport_source(self, document: dict[str, Any]) -> Iterator[ImportSource | None]:
        """The kept original in the document's segment; None when that segment is gone (changed meanwhile)."""
        segment = self.reader.snapshot().segment_by_id(document["segment_id"])
        if segment is None:
            yield None
            return
        original = segment.original_path(document["original"])
        yield ImportSource.updating(document, original, document["segment_id"])

    def write(self, documents: list[IncomingDocument], clock: StageClock) -> WrittenBatch:
        """Write the segment of ``documents`` into a new staged folder."""
        staged = self.store.stage_segment()
        try:
            with clock.stage("write_segment"), self.store.deleted_guard():
                rows = self.write_segment(staged, documents, clock)
        except BaseException:
            self.store.discard(staged)
            raise
        return WrittenBatch(documents, staged, rows)

    def discard(self, batch: WrittenBatch) -> None:
        self.store.discard(batch.staged)

    def commit(self, batches: Sequence[WrittenBatch], clock: StageClock) -> list[dict[str, Any]]:
        """Commit written segments, in order, in one commit (names and replacements decided under the lock); their
        documents' rows. On failure every one of them is discarded."""
        documents = [d for batch in batches for d in batch.documents]
        rows = [r for batch in batches for r in batch.rows]
        written_names = [[row["name"] for row in batch.rows] for batch in batches]  # as each segment's catalog has them
        try:

            def plan(manifest: Manifest) -> Change:
                # Names and replacements are decided under the lock, against the newest manifest.
                live = self.live_documents(manifest)
                taken: set[str] = set()
                failed: dict[str, list[dict[str, Any]]] = {}
                for d in live:
                    if d["status"] == "ready":
                        taken.add(str(d["name"]).casefold())
                    elif d["status"] == "failed":
                        failed.setdefault(str(d["name"]).casefold(), []).append(d)
                # Looked up per document below (a scan of the KB per document made commits quadratic, #29).
                replacing = any(document.replaces is not None for document in documents)
                by_id = {(d["segment_id"], d["doc_id"]): d for d in live} if replacing else {}
                tombstones: dict[str, dict[str, int]] = {}
                for document, row in zip(documents, rows, strict=True):
                    if document.replaces is not None:
                        segment_id, doc_id = document.replaces
                        replaced = by_id.get((segment_id, doc_id))
                        if replaced is None:
                            raise DocumentNotFound(
                                f"Document '{row['name']}' was deleted or changed meanwhile; nothing was updated."
                            )
                        tombstones.setdefault(segment_id, {})[doc_id] = int(replaced["chunk_count"])
                        continue
                    # re-importing a name that failed before replaces the failed entry
                    for old in failed.get(row["name"].casefold(), ()):
                        tombstones.setdefault(old["segment_id"], {})[old["doc_id"]] = 0
                    if row["name"].casefold() in taken:
                        row["name"] = timestamped_name(row["name"], taken)
                    taken.add(row["name"].casefold())
                for batch, names in zip(batches, written_names, strict=True):
                    # Written with the segment; again only where a clash renamed a document (a parquet file and two
                    # fsyncs under the KB's lock were most of a commit, #29).
                    if [row["name"] for row in batch.rows] != names:
                        catalog.write_documents(batch.staged.path, batch.rows)
                return Change(add=tuple(batch.staged for batch in batches), tombstones=tombstones)

            with clock.stage("commit"):
                self.store.commit(plan)
        except BaseException:
            for batch in batches:
                self.store.discard(batch.staged)
            raise
        return rows

    def write_segment(
        self, staged: StagedSegment, documents: list[IncomingDocument], clock: StageClock | None = None
    ) -> list[dict[str, Any]]:
        """Write the segment of ``documents``: by the segment writer when they came as payloads, else here."""
        writer = self.segment_writer
        if writer is not None and all(d.payload is not None or not d.chunks for d in documents):
            job = SegmentJob(
                segment_id=staged.id,
                path=staged.path,
                private=self.store.root / "staging",
                documents=[segment_document(d) for d in documents],
                analyzer=self.analyzer,
                model_key=str(getattr(self.embedder, "model_key", "")),
                dimension=_dimension(documents, self.embedder),
            )
            try:
                written = writer(job)
            except KBError:
                raise
            except Exception as exc:
                if not self.store.exists():
                    raise KBNotFound(
                        f"Knowledge base id '{self.store.kb_id}' was deleted while it was being written."
                    ) from exc
                raise StoreError(f"Could not write a segment of the import: {exc}") from exc
            staged.rows, staged.documents = written.chunk_count, len(written.rows)
            if clock is not None:
                clock.merge(written.timings)
            return written.rows
        for document in documents:
            if document.payload is not None:
                _open_payload(document)
        return write_document_segment(staged, documents, self.embedder, self.analyzer, self.store.root / "staging")


def segment_document(document: IncomingDocument) -> SegmentDocument:
    """``document`` as a segment writer gets it (its payload, and the vectors this process made)."""
    made = document.payload is not None and not document.payload.embedded and document.vectors
    return SegmentDocument(
        doc_id=document.doc_id,
        source=dataclasses.replace(document.source, stage=None),
        file_type=document.file_type,
        size_bytes=document.size_bytes,
        sha256=document.sha256,
        chunk_size=document.chunk_size,
        error=document.error,
        payload=document.payload,
        vectors=np.vstack(document.vectors).astype(np.float32, copy=False) if made else None,
    )


def _dimension(documents: Sequence[IncomingDocument], embedder: Any) -> int:
    """The vectors' dimension: from a vector made here, else the embedder's (the hashing embedder's is known)."""
    for document in documents:
        if document.vectors and document.vectors[0] is not None:
            return len(document.vectors[0])
    return int(getattr(embedder, "dimension", 0))


def _open_payload(document: IncomingDocument) -> None:
    """Turn a payload document into one with its text, chunks and preparation (to write its segment here)."""
    payload = document.payload
    assert payload is not None
    document.text, document.chunks = pickle.loads(payload.body)
    document.prepared = pickle.loads(payload.prepared) if payload.prepared is not None else None
    if payload.embedded and document.prepared is not None and document.prepared.vectors is not None:
        document.vectors = list(document.prepared.vectors)
    document.payload = None
