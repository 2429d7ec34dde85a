"""The one segment writer: catalog rows, keyword and vector indexes, originals, ``segment.json`` last.

Used by the import pipeline (:mod:`kb_core.features.ingest.pipeline`), knowledge bundles and the restore of export
files. File names: :mod:`kb_core.base.files`.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from kb_core.engines.text_language import document_language
from kb_core.store import StagedSegment, catalog, utc_now

if TYPE_CHECKING:
    from kb_core.engines.analysis import Analyzer
    from kb_core.engines.embedding.base import Embedder
    from kb_core.engines.near_duplicates import TextSignatures
    from kb_core.engines.prepared import PreparedChunks


def write_document_segment(
    staged: StagedSegment, documents: Sequence[Any], embedder: Embedder, analyzer: Analyzer, private: Path
) -> list[dict[str, Any]]:
    """Write the segment of these imported documents (failed ones recorded, not kept); their catalog rows.
    ``private``: the KB's staging folder, whose copies are hard-linked into the segment (see :func:`keep_original`).

    A document's ``prepared`` chunks (:class:`~kb_core.engines.prepared.PreparedChunks`: its chunks' terms and
    signatures, made by a parser process) are merged as they are; a document without them is prepared here."""
    from kb_core.engines.keyword_index import KeywordSegment
    from kb_core.engines.near_duplicates import TextSignatures
    from kb_core.engines.prepared import merge_terms, prepare_chunks
    from kb_core.engines.vector_index import VectorSegment

    now = utc_now()
    prepared: list[PreparedChunks] = []
    doc_rows: list[dict[str, Any]] = []
    chunk_rows: list[dict[str, Any]] = []
    text_rows: list[dict[str, Any]] = []
    vectors: list[np.ndarray] = []
    for document in documents:
        row = {
            "doc_id": document.doc_id,
            "name": document.source.display_name,
            "file_name": document.source.path.name,
            "file_path": document.source.reported_path or str(document.source.path),
            "file_type": document.file_type,
            "source": document.source.source,
            "size_bytes": document.size_bytes,
            "chunk_size": document.chunk_size,
            "created_at": document.source.created_at or now,
            "updated_at": now,
        }
        if document.error is not None:
            # a file that failed is recorded with its reason, but not kept
            doc_rows.append(
                {
                    **row,
                    "sha256": None,
                    "status": "failed",
                    "error": document.error,
                    "chunk_count": 0,
                    "original": None,
                    "language": None,
                }
            )
            continue
        suffix = document.source.path.suffix.lower() or f".{document.file_type}"
        original = Path("files") / f"{document.doc_id}{suffix}"
        keep_original(document.source.path, staged.path / original, private)
        doc_rows.append(
            {
                **row,
                "sha256": document.sha256,
                "status": "ready",
                "error": None,
                "chunk_count": len(document.chunks),
                "original": str(original),
                "language": document_language(document.text),
            }
        )
        text_rows.append({"doc_id": document.doc_id, "text": document.text})
        chunk_rows.extend(chunk_row(document.doc_id, chunk) for chunk in document.chunks)
        vectors.extend(document.vectors)
        made = getattr(document, "prepared", None)
        prepared.append(made if made is not None else prepare_chunks([c.content for c in document.chunks], analyzer))
    matrix = (
        np.vstack(vectors).astype(np.float32)
        if vectors
        else np.empty((0, int(embedder.dimension)), dtype=np.float32)
    )
    vocabulary, term_ids, lengths = merge_terms(prepared)
    write_indexed_segment(
        staged,
        doc_rows,
        chunk_rows,
        text_rows,
        KeywordSegment.from_terms(vocabulary, term_ids, lengths, analyzer.name),
        VectorSegment.build(matrix),
        model_key=str(getattr(embedder, "model_key", "")),
        dimension=int(matrix.shape[1]) if len(matrix) else int(getattr(embedder, "dimension", 0)),
        signatures=TextSignatures.concatenate([p.signatures for p in prepared]),
    )
    return doc_rows


def keep_original(source: Path, target: Path, private: Path) -> None:
    """Put the file a document was imported from into its segment: a hard link when ``source`` is a private copy
    in ``private`` (the KB's staging folder, on the same file system; nobody writes to it), else a copy."""
    if source.is_relative_to(private):
        try:
            os.link(source, target)
            return
        except OSError:  # a file system without hard links
            pass
    shutil.copyfile(source, target)


def chunk_row(doc_id: str, chunk: Any) -> dict[str, Any]:
    """The catalog row of one chunk (see ``catalog.CHUNKS_SCHEMA``), with a fresh chunk id."""
    return {
        "chunk_id": f"chk_{uuid.uuid4().hex[:16]}",
        "doc_id": doc_id,
        "chunk_index": chunk.chunk_index,
        "content": chunk.content,
        "tokens": chunk.tokens,
        "chapter": chunk.chapter,
        "page": chunk.page,
        "start_char": chunk.start,
        "end_char": chunk.end,
    }


def write_segment_files(
    staged: StagedSegment,
    doc_rows: list[dict[str, Any]],
    chunk_rows: list[dict[str, Any]],
    text_rows: list[dict[str, Any]],
    vectors: np.ndarray,
    model_key: str,
    analyzer: Analyzer,
) -> None:
    """Build a staged segment's indexes and write every file; ``segment.json`` last, marking it complete.
    ``model_key``: the identity of the model that made ``vectors`` (stored with the vector index)."""
    from kb_core.engines.keyword_index import KeywordSegment
    from kb_core.engines.vector_index import VectorSegment

    write_indexed_segment(
        staged,
        doc_rows,
        chunk_rows,
        text_rows,
        KeywordSegment.build([row["content"] for row in chunk_rows], analyzer),
        VectorSegment.build(vectors),
        model_key=model_key,
        dimension=int(vectors.shape[1]),
    )


def write_indexed_segment(
    staged: StagedSegment,
    doc_rows: list[dict[str, Any]],
    chunk_rows: list[dict[str, Any]],
    text_rows: list[dict[str, Any]],
    keyword: Any,
    vectors: Any,
    *,
    model_key: str,
    dimension: int,
    signatures: TextSignatures | None = None,
) -> None:
    """Write every file of a staged segment whose keyword and vector indexes are already built (and, when given,
    the chunks' near-duplicate signatures; else they are computed)."""
    catalog.write_documents(staged.path, doc_rows)
    catalog.write_chunks(staged.path, chunk_rows, signatures)
    catalog.write_texts(staged.path, text_rows)
    keyword.save(staged.path)
    vectors.save(staged.path)
    staged.rows, staged.documents = len(chunk_rows), len(doc_rows)
    catalog.write_segment_info(
        staged.path,
        catalog.SegmentInfo(
            id=staged.id,
            rows=len(chunk_rows),
            documents=len(doc_rows),
            model_key=model_key,
            dimension=dimension,
            analyzer=keyword.analyzer_name,
            created_at=utc_now(),
        ),
    )
