"""The import pipeline: parse → chunk → embed → write a segment → commit.

Files are parsed concurrently in worker threads (each parse runs in an isolated process with a
time limit, see :mod:`kb_core.ingest.parsing`), so parsing overlaps embedding; chunks from several files
share embedding batches. Finished documents are committed in segments of roughly
``COMMIT_CHUNKS`` chunks, so a long import shows its documents as it goes and a killed import
loses only the uncommitted tail: a document is either fully indexed (ready) or absent.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from kb_core.errors import DocumentNotFound, KBError, KBNotFound, ParseError
from kb_core.ingest.executors import DocumentExecutor
from kb_core.store import Change, KBStore, Manifest, StagedSegment, catalog
from kb_core.store.atomic import file_sha256, remove_stale_temporaries, write_bytes_atomically
from kb_core.store.segments import write_document_segment

logger = logging.getLogger(__name__)

# Chunks per embedding call, across files: the model sorts each call by length, so large calls pad as
# little as one encode() over everything; progress still comes per model batch.
EMBED_BATCH = 512
PUBLISH_INTERVAL = 1.0  # seconds between updates of the in-flight document list
COMMIT_CHUNKS = 2048
PARSE_WORKERS = 2


@dataclass
class FileProgress:
    file_path: str
    status: str = "pending"  # pending → parsing → embedding → ready | failed
    chunks_total: int = 0
    chunks_embedded: int = 0
    error: str | None = None
    doc_name: str | None = None


@dataclass
class ImportProgress:
    """Handed to the progress callback after every step. Counts only grow."""

    files: list[FileProgress]
    files_parsed: int = 0
    chunks_total: int = 0
    chunks_embedded: int = 0

    @property
    def files_total(self) -> int:
        return len(self.files)

    @property
    def files_done(self) -> int:
        return sum(1 for f in self.files if f.status in ("ready", "failed"))


ProgressCallback = Callable[[ImportProgress], None]


@dataclass
class ImportSource:
    path: Path
    display_name: str  # the name the document gets (before clash renaming)
    source: str = "path"  # path | upload | bundle
    reported_path: str = ""  # what the result shows as file_path
    # update_document re-imports a kept original under the same id, superseding its old copy
    doc_id: str | None = None
    created_at: str | None = None
    replaces: tuple[str, str] | None = None  # (segment id, doc id)


@dataclass
class _PendingDocument:
    index: int
    source: ImportSource
    doc_id: str
    file_type: str
    text: str
    chunks: list[Any]
    size_bytes: int
    sha256: str
    chunk_size: int
    vectors: list[np.ndarray | None] = field(default_factory=list)
    replaces: tuple[str, str] | None = None  # (segment id, doc id) this document supersedes
    error: str | None = None  # set for a file that failed: it is recorded with status "failed"

    @property
    def embedded(self) -> bool:
        return all(v is not None for v in self.vectors)


def timestamped_name(name: str, taken: set[str], now: datetime | None = None) -> str:
    """``report.docx`` → ``report_20261121-153000.docx``; a counter follows if that is taken too."""
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%d-%H%M%S")
    stem, dot, suffix = name.rpartition(".")
    if not dot or not stem:
        stem, suffix = name, ""
    candidate = f"{stem}_{stamp}{'.' + suffix if suffix else ''}"
    counter = 2
    while candidate.casefold() in taken:
        candidate = f"{stem}_{stamp}-{counter}{'.' + suffix if suffix else ''}"
        counter += 1
    return candidate


class ImportJob(Protocol):
    """Where an import shows its in-flight documents to other processes."""

    def publish(self, force: bool = False) -> None: ...

    def close(self) -> None: ...


class JobFile:
    """Publishes in-flight documents (pending/parsing/embedding) so other processes can list them."""

    def __init__(self, store: KBStore, progress: ImportProgress) -> None:
        self.store = store
        self.folder = store.root / "jobs"
        with store.deleted_guard():  # the KB may be deleted at any moment: KB_NOT_FOUND, not a file error
            self.folder.mkdir(exist_ok=True)
            remove_stale_temporaries(self.folder)
        self.path = self.folder / f"{os.getpid()}-{uuid.uuid4().hex[:8]}.json"
        self.progress = progress
        self._published_at = -math.inf

    def publish(self, force: bool = False) -> None:
        """Write the in-flight list, at most once per ``PUBLISH_INTERVAL`` unless forced (it is O(files))."""
        now = time.monotonic()
        if not force and now - self._published_at < PUBLISH_INTERVAL:
            return
        self._published_at = now
        rows = [
            {"file_path": f.file_path, "name": f.doc_name, "status": f.status}
            for f in self.progress.files
            if f.status in ("pending", "parsing", "embedding")
        ]
        data = json.dumps({"pid": os.getpid(), "documents": rows}, ensure_ascii=False).encode("utf-8")
        with self.store.deleted_guard():
            write_bytes_atomically(self.path, data, mode=0o644)

    def close(self) -> None:
        self.path.unlink(missing_ok=True)


def in_flight_documents(store: KBStore) -> list[dict[str, Any]]:
    """Documents other imports are working on now; files of dead processes are removed."""
    from kb_core.store.atomic import owner_pid, pid_is_alive, read_json

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


class Importer:
    """Imports files into one KB. ``live_documents`` gives the KB's live documents under the lock."""

    def __init__(
        self,
        store: KBStore,
        embedder: Any,
        live_documents: Callable[[Manifest], list[dict[str, Any]]],
        *,
        analyzer: Any,
        parse: Callable[[Path], Any],
        chunker: Callable[[Any, int], list[Any]],
        kb_name: str = "",
        executor: DocumentExecutor | None = None,
    ) -> None:
        """``executor`` runs parsing, chunking and embedding elsewhere (e.g. on Ray); ``None`` runs them here."""
        self.executor = executor
        self.store = store
        self.kb_name = kb_name or store.kb_id
        self.embedder = embedder
        self.live_documents = live_documents
        self.analyzer = analyzer
        self.parse = parse
        self.chunker = chunker

    def run(
        self,
        sources: Sequence[ImportSource],
        chunk_size: int,
        progress_callback: ProgressCallback | None = None,
    ) -> tuple[list[FileProgress], list[dict[str, Any]]]:
        """Import ``sources``; return per-file progress and the committed document rows."""
        self.sources = list(sources)
        progress = ImportProgress(files=[FileProgress(file_path=s.reported_path or str(s.path)) for s in sources])
        try:
            job = self._open_job(progress)
        except KBNotFound as exc:
            raise self._deleted_meanwhile() from exc
        lock = threading.Lock()

        def notify() -> None:
            if progress_callback is not None:
                try:
                    progress_callback(progress)
                except Exception:  # a broken progress display must not break the import
                    logger.exception("progress callback failed")

        if self.executor is not None:
            return progress.files, self._run_executor(self.executor, chunk_size, progress, job, notify)

        def prepare(index: int) -> _PendingDocument:
            source = sources[index]
            with lock:
                progress.files[index].status = "parsing"
            parsed = self.parse(source.path)
            chunks = self.chunker(parsed, chunk_size)
            if not chunks:
                raise ParseError(f"{source.display_name}: the document has no text to index.", code="EMPTY_DOCUMENT")
            size = source.path.stat().st_size
            return _PendingDocument(
                index=index,
                source=source,
                doc_id=source.doc_id or f"doc_{uuid.uuid4().hex[:16]}",
                file_type=parsed.file_type,
                text=parsed.text,
                chunks=chunks,
                size_bytes=size,
                sha256=file_sha256(source.path),
                chunk_size=chunk_size,
                vectors=[None] * len(chunks),
                replaces=source.replaces,
            )

        committed: list[dict[str, Any]] = []
        ready: list[_PendingDocument] = []
        failed: list[_PendingDocument] = []
        queue: list[tuple[_PendingDocument, int]] = []
        try:
            job.publish(force=True)
            notify()
            with ThreadPoolExecutor(max_workers=PARSE_WORKERS, thread_name_prefix="kb-parse") as pool:
                futures: list[Future[_PendingDocument]] = [pool.submit(prepare, i) for i in range(len(sources))]
                for index, future in enumerate(futures):
                    try:
                        document = future.result()
                    except KBError as exc:
                        failed += self._fail(progress, index, exc.message, chunk_size)
                    except Exception as exc:  # a parser bug must fail one file, not the import
                        logger.exception("unexpected failure importing %s", sources[index].path)
                        failed += self._fail(progress, index, f"unexpected error: {type(exc).__name__}", chunk_size)
                    else:
                        state = progress.files[index]
                        state.status = "embedding"
                        state.chunks_total = len(document.chunks)
                        progress.chunks_total += len(document.chunks)
                        queue.extend((document, i) for i in range(len(document.chunks)))
                        ready.append(document)
                    progress.files_parsed += 1
                    job.publish()
                    notify()
                    embedded_now = False
                    while len(queue) >= EMBED_BATCH:
                        self._embed(queue[:EMBED_BATCH], progress, notify)
                        del queue[:EMBED_BATCH]
                        embedded_now = True
                    # Only an embedding call can complete documents (checked then: the sum is O(ready documents)).
                    if embedded_now and sum(len(d.chunks) for d in ready if d.embedded) >= COMMIT_CHUNKS:
                        committed += self._commit([d for d in ready if d.embedded], progress)
                        ready = [d for d in ready if not d.embedded]
                        job.publish()
                        notify()
            while queue:
                self._embed(queue[:EMBED_BATCH], progress, notify)
                del queue[:EMBED_BATCH]
            if ready or failed:
                committed += self._commit(ready + failed, progress)
            job.publish()
            notify()
        except KBError as exc:
            # Embedding or the store failed: what is not committed fails with the reason.
            for state in progress.files:
                if state.status not in ("ready", "failed"):
                    state.status, state.error = "failed", exc.message
            notify()
            if isinstance(exc, KBNotFound):  # deleted meanwhile: what was committed went with it
                raise self._deleted_meanwhile() from exc
        finally:
            job.close()
        return progress.files, committed

    def _open_job(self, progress: ImportProgress) -> ImportJob:
        return JobFile(self.store, progress)

    def _run_executor(
        self,
        executor: DocumentExecutor,
        chunk_size: int,
        progress: ImportProgress,
        job: ImportJob,
        notify: Callable[[], None],
    ) -> list[dict[str, Any]]:
        """Commit the executor's documents as they arrive, in segments of about ``COMMIT_CHUNKS`` chunks."""
        committed: list[dict[str, Any]] = []
        pending: list[_PendingDocument] = []
        seen: set[int] = set()
        try:
            for state in progress.files:
                state.status = "parsing"  # handed to the executor: parsing, chunking and embedding there
            job.publish(force=True)
            notify()
            for result in executor.execute(self.sources, chunk_size):
                if result.index in seen or not 0 <= result.index < len(self.sources):
                    logger.warning("executor %s returned file %d twice; ignored", executor.name, result.index)
                    continue
                seen.add(result.index)
                progress.files_parsed += 1
                if result.error is not None or result.vectors is None:
                    pending += self._fail(progress, result.index, result.error or "no result", chunk_size)
                else:
                    source = self.sources[result.index]
                    state = progress.files[result.index]
                    state.status, state.chunks_total = "embedding", len(result.chunks)
                    state.chunks_embedded = len(result.chunks)
                    progress.chunks_total += len(result.chunks)
                    progress.chunks_embedded += len(result.chunks)
                    pending.append(
                        _PendingDocument(
                            index=result.index,
                            source=source,
                            doc_id=source.doc_id or f"doc_{uuid.uuid4().hex[:16]}",
                            file_type=result.file_type,
                            text=result.text,
                            chunks=result.chunks,
                            size_bytes=source.path.stat().st_size,
                            sha256=file_sha256(source.path),
                            chunk_size=chunk_size,
                            vectors=list(result.vectors),
                            replaces=source.replaces,
                        )
                    )
                if sum(len(d.chunks) for d in pending) >= COMMIT_CHUNKS:
                    committed += self._commit(pending, progress)
                    pending = []
                job.publish()
                notify()
            for index in range(len(self.sources)):
                if index not in seen:  # an executor must answer for every file; one that did not fails it
                    message = f"the {executor.name} executor returned no result"
                    pending += self._fail(progress, index, message, chunk_size)
            if pending:
                committed += self._commit(pending, progress)
            job.publish()
            notify()
        except KBError as exc:
            for state in progress.files:
                if state.status not in ("ready", "failed"):
                    state.status, state.error = "failed", exc.message
            notify()
            if isinstance(exc, KBNotFound):
                raise self._deleted_meanwhile() from exc
        finally:
            job.close()
        return committed

    def _deleted_meanwhile(self) -> KBNotFound:
        return KBNotFound(
            f"Knowledge base '{self.kb_name}' was deleted while the import ran; nothing of the import remains.",
            details={"kb_name": self.kb_name},
        )

    def _fail(self, progress: ImportProgress, index: int, message: str, chunk_size: int) -> list[_PendingDocument]:
        """Mark a file failed; a new file that exists is also recorded as a failed document."""
        state = progress.files[index]
        state.status, state.error = "failed", message
        source = self.sources[index]
        if source.replaces is not None or not source.path.is_file():
            return []
        return [
            _PendingDocument(
                index=index,
                source=source,
                doc_id=f"doc_{uuid.uuid4().hex[:16]}",
                file_type=source.path.suffix.lower().lstrip(".") or "unknown",
                text="",
                chunks=[],
                size_bytes=source.path.stat().st_size,
                sha256="",
                chunk_size=chunk_size,
                error=message,
            )
        ]

    def _embed(
        self, batch: list[tuple[_PendingDocument, int]], progress: ImportProgress, notify: Callable[[], None]
    ) -> None:
        reported = 0

        def step(done: int) -> None:
            nonlocal reported
            reported += done
            progress.chunks_embedded += done
            notify()

        vectors = self.embedder.embed_documents([doc.chunks[i].content for doc, i in batch], progress=step)
        for (doc, i), vector in zip(batch, vectors, strict=True):
            doc.vectors[i] = vector
            progress.files[doc.index].chunks_embedded += 1
        progress.chunks_embedded += len(batch) - reported
        notify()

    def _commit(self, documents: list[_PendingDocument], progress: ImportProgress) -> list[dict[str, Any]]:
        staged = self.store.stage_segment()
        try:
            with self.store.deleted_guard():
                rows = self.write_segment(staged, documents)

            def plan(manifest: Manifest) -> Change:
                # Names and replacements are decided under the lock, against the newest manifest.
                live = self.live_documents(manifest)
                taken = {str(d["name"]).casefold() for d in live if d["status"] == "ready"}
                tombstones: dict[str, dict[str, int]] = {}
                for document, row in zip(documents, rows, strict=True):
                    if document.replaces is not None:
                        segment_id, doc_id = document.replaces
                        old = [d for d in live if d["segment_id"] == segment_id and d["doc_id"] == doc_id]
                        if not old:
                            raise DocumentNotFound(
                                f"Document '{row['name']}' was deleted or changed meanwhile; nothing was updated."
                            )
                        tombstones.setdefault(segment_id, {})[doc_id] = int(old[0]["chunk_count"])
                        continue
                    for old in live:  # re-importing a name that failed before replaces the failed entry
                        if old["status"] == "failed" and str(old["name"]).casefold() == row["name"].casefold():
                            tombstones.setdefault(old["segment_id"], {})[old["doc_id"]] = 0
                    if row["name"].casefold() in taken:
                        row["name"] = timestamped_name(row["name"], taken)
                    taken.add(row["name"].casefold())
                catalog.write_documents(staged.path, rows)
                return Change(add=(staged,), tombstones=tombstones)

            self.store.commit(plan)
        except BaseException:
            self.store.discard(staged)
            raise
        for document, row in zip(documents, rows, strict=True):
            state = progress.files[document.index]
            state.doc_name = row["name"]
            if document.error is None:
                state.status = "ready"
        return rows

    def write_segment(self, staged: StagedSegment, documents: list[_PendingDocument]) -> list[dict[str, Any]]:
        return write_document_segment(staged, documents, self.embedder, self.analyzer)
