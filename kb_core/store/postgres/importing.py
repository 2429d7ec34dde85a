"""Imports into a PostgreSQL KB: the folder store's pipeline (parse → chunk → embed), committed as SQL rows.

:class:`PostgresImporter` reuses :class:`kb_core.ingest.pipeline.Importer` for everything before the commit (parsing in
isolated workers, chunking, shared embedding batches, progress, failed files), so a document gets the same text,
chunks and vectors in both stores. Its commit builds one :class:`PreparedDocument` per document (the analysis,
outside any transaction) and writes them with :meth:`PostgresStore.commit`: one transaction, in which names are
resolved against the live documents exactly as the folder store's importer does.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from kb_core.ingest.pipeline import Importer, ImportProgress
from kb_core.store import utc_now
from kb_core.store.postgres.records import ChunkRecord, DocumentRecord, PreparedDocument, StoreChange
from kb_core.store.postgres.store import PostgresStore
from kb_core.store.segments import chunk_row
from kb_core.store.sink import ImportJob, IncomingDocument
from kb_core.text_language import document_language

__all__ = ["PostgresImporter"]


class PostgresImporter(Importer):
    """Imports files into one KB of a :class:`PostgresStore`."""

    def __init__(
        self,
        store: PostgresStore,
        kb_id: str,
        embedder: Any,
        *,
        analyzer: Any,
        parse: Callable[[Path], Any],
        chunker: Callable[[Any, int], list[Any]],
        kb_name: str = "",
    ) -> None:
        self.database = store
        self.kb_id = kb_id
        self.kb_name = kb_name or kb_id
        self.embedder = embedder
        self.analyzer = analyzer
        self.parse = parse
        self.chunker = chunker
        self.executor = None  # parsing and embedding run here; the Ray executor commits into folder stores only

    def _open_job(self, progress: ImportProgress) -> ImportJob:
        from kb_core.store.postgres.inflight import ImportAnnouncement

        return ImportAnnouncement(self.database, self.kb_id, progress)  # seen by every host's list_documents

    def _commit(self, documents: list[IncomingDocument], progress: ImportProgress) -> list[dict[str, Any]]:
        prepared = [self._prepare(document) for document in documents]
        result = self.database.commit(self.kb_id, StoreChange(add=tuple(prepared)))
        committed = {record.doc_id: record for record in result.added}
        rows: list[dict[str, Any]] = []
        for document in documents:
            record = committed[document.doc_id]
            state = progress.files[document.index]
            state.doc_name = record.name
            if document.error is None:
                state.status = "ready"
            rows.append(record.to_row())
        return rows

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
