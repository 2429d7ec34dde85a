"""``update_document`` on a PostgreSQL store, with the folder store's answer: re-chunking the kept original, which
lives in the database's ``originals`` table. (Items and document info are read by
:class:`kb_core.store.postgres.backend.PostgresKB`.)"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

from kb_core.errors import DocumentNotFound
from kb_core.ingest.pipeline import ImportProgress, ImportSource

if TYPE_CHECKING:
    from kb_core.ingest.pipeline import FileProgress
    from kb_core.service import KnowledgeBaseService
    from kb_core.store.registry import KnowledgeBaseRecord

__all__ = ["reimport_document"]


def reimport_document(
    service: KnowledgeBaseService,
    record: KnowledgeBaseRecord,
    document: dict[str, Any],
    chunk_size: int,
    progress: Callable[[ImportProgress], None] | None,
) -> FileProgress:
    """Re-chunk a live document from its kept original, under the same id, replacing it in one commit (as the
    folder store's update: the original is re-imported under its kept name, ``DOC_ID.EXT``)."""
    assert service.postgres is not None
    doc_id = str(document["doc_id"])
    with service.postgres.snapshot(record.id) as snapshot:
        content = snapshot.original(doc_id)
    if content is None or not document.get("original"):
        raise DocumentNotFound(f"Document {document['name']!r} was changed meanwhile; try again.")
    staging = service.import_staging(record)
    try:
        staging.mkdir()
        path = staging / PurePath(str(document["original"])).name
        path.write_bytes(content)
        source = ImportSource.updating(document, path, "")  # no segment on PostgreSQL: the id names it
        states, _ = service.importer(record).run([source], chunk_size, progress)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return states[0]
