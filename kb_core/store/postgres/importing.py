"""Imports into a PostgreSQL KB: the pipeline's documents (parse → chunk → embed), committed as SQL rows.

:class:`PostgresSink` is the PostgreSQL store's :class:`~kb_core.store.sink.DocumentSink`: the import pipeline
(:class:`kb_core.features.ingest.pipeline.Importer`) does everything before the commit (parsing in isolated workers,
chunking, shared embedding batches, progress, failed files), so a document gets the same text, chunks and vectors
in both stores. ``write`` builds one :class:`PreparedDocument` per document (the analysis, outside any
transaction); ``commit`` writes them with :meth:`PostgresStore.commit`: one transaction, in which names are
resolved against the live documents exactly as the folder store's sink does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path, PurePath
from typing import Any

import numpy as np

from kb_core.base.errors import DocumentNotFound
from kb_core.base.removal import remove_tree
from kb_core.engines.text_language import document_language
from kb_core.engines.timing import StageClock
from kb_core.store import utc_now
from kb_core.store.postgres.inflight import ImportAnnouncement
from kb_core.store.postgres.records import ChunkRecord, DocumentRecord, PreparedDocument, StoreChange
from kb_core.store.postgres.store import PostgresStore
from kb_core.store.segments import chunk_row
from kb_core.store.sink import ImportSource, ImportState, IncomingDocument, WrittenBatch

__all__ = ["PostgresSink"]


class PostgresSink:
    """Commits an import's documents into one KB of a :class:`PostgresStore`."""

    writes_in_workers = False  # prepared here, committed in one transaction per batch

    def __init__(self, store: PostgresStore, kb_id: str, analyzer: Any, staging: Callable[[], Path]) -> None:
        """``staging``: a new private folder (not made yet) for the copy a re-import reads."""
        self.database = store
        self.kb_id = kb_id
        self.analyzer = analyzer
        self.staging = staging

    def segment_room(self) -> int:
        return 0  # rows, not segments: nothing is split over writers

    def open_job(self, progress: ImportState) -> ImportAnnouncement:
        return ImportAnnouncement(self.database, self.kb_id, progress)  # seen by every host's list_documents

    def write(self, documents: list[IncomingDocument], clock: StageClock) -> WrittenBatch:
        return WrittenBatch(documents, [self._prepare(document) for document in documents])

    def discard(self, batch: WrittenBatch) -> None:
        """Nothing was written outside the transaction."""

    def commit(self, batches: Sequence[WrittenBatch], clock: StageClock) -> list[dict[str, Any]]:
        prepared = [document for batch in batches for document in batch.staged]
        result = self.database.commit(self.kb_id, StoreChange(add=tuple(prepared)))
        committed = {record.doc_id: record for record in result.added}
        return [committed[document.doc_id].to_row() for batch in batches for document in batch.documents]

    @contextmanager
    def reimport_source(self, document: dict[str, Any]) -> Iterator[ImportSource | None]:
        """The kept original (in the ``originals`` table), as a file under its kept name ``DOC_ID.EXT`` in a private
        staging folder while the block runs; no segment on PostgreSQL: the id names what it supersedes."""
        with self.database.snapshot(self.kb_id) as snapshot:
            content = snapshot.original(str(document["doc_id"]))
        if content is None or not document.get("original"):
            raise DocumentNotFound(f"Document {document['name']!r} was changed meanwhile; try again.")
        staging = self.staging()
        try:
            staging.mkdir()
            path = staging / PurePath(str(document["original"])).name
            path.write_bytes(content)
            yield ImportSource.updating(document, path, "")
        finally:
            remove_tree(staging, within=staging.parent)  # the home's staging/, checked by own_folder

    def _prepare(self, document: IncomingDocument) -> PreparedDocument:
        """The catalog row, chunks and vectors the folder store's ``write_segment`` would write for it."""
        now = utc_now()
        source = document.source
        failed = document.error is not None
        suffix = source.path.suffix.lower() or f".{document.file_type}"
        record = DocumentRecord(
            doc_id=document.doc_id,
            name=source.display_name,
            file_name=source.path.name,
            file_path=source.reported_path or str(source.path),
            file_type=document.file_type,
            source=source.source,
            size_bytes=document.size_bytes,
            sha256=None if failed else document.sha256,
            chunk_size=document.chunk_size,
            status="failed" if failed else "ready",
            error=document.error,
            chunk_count=0 if failed else len(document.chunks),
            created_at=source.created_at or now,
            updated_at=now,
            original=None if failed else f"files/{document.doc_id}{suffix}",
            language=None if failed else document_language(document.text),
        )
        if failed:
            return PreparedDocument.build(record, [], None, self.analyzer)
        chunks = [ChunkRecord.from_row(chunk_row(document.doc_id, chunk)) for chunk in document.chunks]
        vectors = np.vstack([np.asarray(v, dtype=np.float32) for v in document.vectors])
        return PreparedDocument.build(
            record,
            chunks,
            vectors,
            self.analyzer,
            text=document.text,
            original=source.path.read_bytes(),
            replaces=None if document.replaces is None else document.replaces[1],
        )
