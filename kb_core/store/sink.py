"""What the import pipeline hands a store, and the interface through which it commits (#28).

The pipeline (:mod:`kb_core.features.ingest.pipeline`) parses, chunks and embeds; each store commits the documents its
own way through a :class:`DocumentSink`: the folder store writes segments and commits them under the KB's lock
(:mod:`kb_core.store.folder_sink`), PostgreSQL writes rows in one transaction (:mod:`kb_core.store.postgres.importing`).
Names and replacements are decided inside the sink's commit, against the live documents of that moment, by the same rule
in both (:func:`timestamped_name`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    from kb_core.engines.payloads import FilePayload
    from kb_core.engines.prepared import PreparedChunks
    from kb_core.engines.timing import StageClock

PUBLISH_INTERVAL = 1.0  # seconds between updates of an import's in-flight document list
IN_FLIGHT = ("pending", "parsing", "embedding")  # the statuses of a file an import is still working on


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
    # Makes ``path`` (the import's private copy of the named file) just before the file is parsed, so copying
    # overlaps the rest of the import; raises a KBError that fails the file. None: ``path`` exists already.
    stage: Callable[[], object] | None = None

    @classmethod
    def updating(cls, document: dict[str, Any], original: Path, segment_id: str) -> ImportSource:
        """The re-import of a live ``document`` (a documents row) from its kept ``original``: same id, name,
        source and creation time, superseding the copy in ``segment_id`` ("" where the store has no segments)."""
        return cls(
            path=original,
            display_name=document["name"],
            source=document["source"],
            reported_path=document["file_path"],
            doc_id=str(document["doc_id"]),
            created_at=document["created_at"],
            replaces=(segment_id, str(document["doc_id"])),
        )


@dataclass
class IncomingDocument:
    """One document of an import, parsed, chunked and embedded (or failed: ``error``), ready to commit."""

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
    prepared: PreparedChunks | None = None  # the chunks' terms and signatures (and vectors), made when parsed
    payload: FilePayload | None = None  # a parser process's answer, passed on to a segment writer (then no chunks)
    token_ids: list[Any] | None = None  # the payload's token ids, unpacked once for the embedder

    @property
    def chunk_count(self) -> int:
        return self.payload.chunk_count if self.payload is not None else len(self.chunks)

    @property
    def embedded(self) -> bool:
        if self.payload is not None and self.payload.embedded:
            return True
        return all(v is not None for v in self.vectors)

    def content(self, i: int) -> str:
        return self.payload.contents[i] if self.payload is not None else self.chunks[i].content

    def ids(self, i: int) -> Any:
        """The token ids the chunker made for chunk ``i`` (or None)."""
        if self.payload is None:
            return getattr(self.chunks[i], "token_ids", None)
        if self.payload.token_ids is None:
            return None
        if self.token_ids is None:
            self.token_ids = self.payload.token_ids.unpack()
        return self.token_ids[i]


@dataclass
class WrittenBatch:
    """Documents a sink has written but not committed; ``staged`` and ``rows`` are the sink's own (the folder
    store's staged segment and its catalog rows; PostgreSQL's prepared rows)."""

    documents: list[IncomingDocument]
    staged: Any
    rows: list[dict[str, Any]] = field(default_factory=list)


class InFlightFile(Protocol):
    """A file of a running import, as its in-flight list shows it (``ingest.pipeline.FileProgress``)."""

    @property
    def file_path(self) -> str: ...

    @property
    def doc_name(self) -> str | None: ...

    @property
    def status(self) -> str: ...


class ImportState(Protocol):
    """What an import job reads to publish its in-flight documents (``ingest.pipeline.ImportProgress``)."""

    @property
    def files(self) -> Sequence[InFlightFile]: ...


def in_flight_rows(files: Sequence[InFlightFile]) -> list[dict[str, Any]]:
    """The in-flight list an import publishes: the files not ready or failed yet."""
    return [{"file_path": f.file_path, "name": f.doc_name, "status": f.status} for f in files if f.status in IN_FLIGHT]


class ImportJob(Protocol):
    """Where an import shows its in-flight documents to other processes."""

    def publish(self, force: bool = False) -> None: ...

    def close(self) -> None: ...


class DocumentSink(Protocol):
    """Where the import pipeline commits documents into one KB; each store implements it.

    ``write`` does what may run before the commit and in parallel (the folder store writes a staged segment);
    ``commit`` makes written batches visible at once, in order, deciding names and replacements against the live
    documents of that moment (under the KB's lock, or in the transaction), and returns the documents' catalog rows
    in order; on failure nothing of them is left. ``discard`` removes a batch written but never committed.
    ``reimport_source`` gives the source that re-imports a live document from its kept original (a file while the
    block runs), superseding it; None when the document changed meanwhile (or DocumentNotFound, on PostgreSQL).
    ``segment_room`` is how many more segments an import may add before the store's automatic compaction would
    merge them (the pipeline splits its last documents over that many writers; 0 where segments are not written)."""

    kb_id: str
    # Batches are written by worker processes, several at once, and committed in order; parser processes then make
    # the staging copies and answer with payloads, which the sink writes unopened.
    writes_in_workers: bool

    def open_job(self, progress: ImportState) -> ImportJob: ...

    def write(self, documents: list[IncomingDocument], clock: StageClock) -> WrittenBatch: ...

    def commit(self, batches: Sequence[WrittenBatch], clock: StageClock) -> list[dict[str, Any]]: ...

    def discard(self, batch: WrittenBatch) -> None: ...

    def reimport_source(self, document: dict[str, Any]) -> AbstractContextManager[ImportSource | None]: ...

    def segment_room(self) -> int: ...


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
