"""Typed rows and changes of the PostgreSQL store: what a commit takes and what a snapshot returns.

The columns of :class:`DocumentRecord` and :class:`ChunkRecord` are exactly those of the folder store's parquet
catalog (:data:`kb_core.store.catalog.DOCUMENTS_SCHEMA`, :data:`kb_core.store.catalog.CHUNKS_SCHEMA`), so the
two stores describe documents and chunks the same way. :class:`PreparedDocument` is a document ready to commit:
its chunks already embedded and analysed (analysis stays in Python, :mod:`kb_core.engines.analysis`, so both
stores index the same terms); building one does all the slow work, so a commit's transaction only writes rows.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

import numpy as np

from kb_core.base.errors import InvalidArgument
from kb_core.engines.analysis import Analyzer
from kb_core.engines.near_duplicates import TextSignatures, text_signatures
from kb_core.store import catalog

__all__ = [
    "ChunkRecord",
    "CommitResult",
    "DocumentRecord",
    "KeywordStatistics",
    "PreparedDocument",
    "StoreChange",
]

_NORM_TOLERANCE = 1e-3  # the folder store's vector index accepts the same deviation from unit length

DocumentStatus = Literal["ready", "failed"]


@dataclass(frozen=True)
class DocumentRecord:
    """One row of the documents catalog (the columns of ``documents.parquet``)."""

    doc_id: str
    name: str
    file_name: str | None
    file_path: str | None
    file_type: str | None
    source: str | None  # upload | path | bundle
    size_bytes: int | None
    sha256: str | None
    chunk_size: int | None
    status: DocumentStatus
    error: str | None
    chunk_count: int
    created_at: str | None
    updated_at: str | None
    original: str | None  # the kept original's name (``files/DOC_ID.EXT``, as in a segment folder)
    language: str | None = None  # detected from the text (kb_core.engines.text_language); null for failed documents

    def to_row(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> DocumentRecord:
        return cls(**{f.name: _plain(row.get(f.name)) for f in fields(cls)})


@dataclass(frozen=True)
class ChunkRecord:
    """One row of the chunks catalog (the columns of ``chunks.parquet``)."""

    chunk_id: str
    doc_id: str
    chunk_index: int
    content: str
    tokens: int
    chapter: str | None
    page: int | None
    start_char: int
    end_char: int

    def to_row(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> ChunkRecord:
        return cls(**{f.name: _plain(row.get(f.name)) for f in fields(cls)})


assert [f.name for f in fields(DocumentRecord)] == catalog.DOCUMENTS_SCHEMA.names
assert [f.name for f in fields(ChunkRecord)] == catalog.CHUNKS_SCHEMA.names


def _plain(value: Any) -> Any:
    """numpy/pandas scalars and missing values (None, NaN, NA) as plain Python values."""
    if value is None:
        return None
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    try:
        import pandas as pd

        if value is pd.NA or value is pd.NaT:
            return None
    except ImportError:  # pragma: no cover - pandas is a dependency
        pass
    return value


@dataclass(frozen=True)
class ChunkTerms:
    """The analysed terms of one chunk: term frequencies and the token count (BM25's document length)."""

    frequencies: Mapping[str, int]
    length: int


@dataclass(frozen=True)
class PreparedDocument:
    """A document ready to commit: its catalog row, chunks, vectors (float32, unit length), analysed terms,
    full text and original bytes. ``replaces`` names the live document an update supersedes."""

    record: DocumentRecord
    chunks: tuple[ChunkRecord, ...] = ()
    vectors: np.ndarray = field(default_factory=lambda: np.empty((0, 0), dtype=np.float32))
    terms: tuple[ChunkTerms, ...] = ()
    text: str | None = None
    original: bytes | None = None
    replaces: str | None = None
    analyzer: str = ""  # the name of the analyzer that made ``terms``
    signatures: TextSignatures | None = None  # near-duplicate signatures of the chunks, computed at build

    @classmethod
    def build(
        cls,
        record: DocumentRecord,
        chunks: Sequence[ChunkRecord],
        vectors: np.ndarray | None,
        analyzer: Analyzer,
        *,
        text: str | None = None,
        original: bytes | None = None,
        replaces: str | None = None,
    ) -> PreparedDocument:
        """Check the document and analyse its chunks (outside any transaction: this is the slow part)."""
        chunks = tuple(chunks)
        if record.status == "failed" and chunks:
            raise InvalidArgument(
                f"document {record.doc_id} failed but has {len(chunks)} chunks; a failed one has none"
            )
        if record.chunk_count != len(chunks):
            raise InvalidArgument(
                f"document {record.doc_id} says chunk_count={record.chunk_count} but has {len(chunks)} chunks"
            )
        for chunk in chunks:
            if chunk.doc_id != record.doc_id:
                raise InvalidArgument(f"chunk {chunk.chunk_id} belongs to {chunk.doc_id}, not {record.doc_id}")
        matrix = _checked_vectors(vectors, len(chunks), record.doc_id)
        terms = tuple(_chunk_terms(analyzer.tokens(chunk.content)) for chunk in chunks)
        signatures = text_signatures([chunk.content for chunk in chunks])
        return cls(record, chunks, matrix, terms, text, original, replaces, analyzer.name, signatures)

    @property
    def dimension(self) -> int | None:
        return int(self.vectors.shape[1]) if len(self.chunks) else None


def _chunk_terms(tokens: Sequence[str]) -> ChunkTerms:
    return ChunkTerms(dict(Counter(tokens)), len(tokens))


def _checked_vectors(vectors: np.ndarray | None, rows: int, doc_id: str) -> np.ndarray:
    if rows == 0:
        return np.empty((0, 0), dtype=np.float32)
    if vectors is None:
        raise InvalidArgument(f"document {doc_id} has {rows} chunks but no vectors")
    matrix = np.ascontiguousarray(vectors, dtype=np.float32)
    if matrix.ndim != 2 or matrix.shape[0] != rows or matrix.shape[1] < 1:
        raise InvalidArgument(f"document {doc_id}: vectors of shape {matrix.shape} for {rows} chunks")
    if not np.isfinite(matrix).all():
        raise InvalidArgument(f"document {doc_id}: vectors hold NaN or infinite values")
    norms = np.linalg.norm(matrix.astype(np.float64), axis=1)
    if np.abs(norms - 1.0).max() > _NORM_TOLERANCE:
        raise InvalidArgument(
            f"document {doc_id}: vectors must be L2-normalised (norms {norms.min():.4f}..{norms.max():.4f})"
        )
    return matrix


@dataclass(frozen=True)
class StoreChange:
    """One commit: documents to add (each possibly replacing a live one), documents to delete, and optionally
    the KB's new bundle graph (its ``GraphState.to_json()`` form), all in one transaction.

    ``expected_graph_version`` guards a graph change against a concurrent one: the commit fails unless the stored
    graph still has that version (0: no graph yet). ``keep_names``: see the field."""

    add: tuple[PreparedDocument, ...] = ()
    delete: tuple[str, ...] = ()
    graph: Mapping[str, Any] | None = None
    expected_graph_version: int | None = None
    # the added documents' names were decided already (a bundle's graph names them): a clash with a live name
    # fails the commit instead of renaming, and no failed entry of that name is replaced
    keep_names: bool = False


@dataclass(frozen=True)
class CommitResult:
    """What a commit did: the documents as committed (names possibly suffixed), what it removed, the new KB
    version and graph version."""

    version: int
    added: tuple[DocumentRecord, ...]
    removed: tuple[str, ...]
    graph_version: int | None = None


@dataclass(frozen=True)
class KeywordStatistics:
    """BM25's global statistics over the live rows of one snapshot."""

    live_rows: int  # N
    total_length: int  # Σ dl

    @property
    def avgdl(self) -> float:
        """Mean token count of the live rows; 1.0 when nothing can match (as the folder store's searcher)."""
        return self.total_length / self.live_rows if self.live_rows and self.total_length else 1.0
