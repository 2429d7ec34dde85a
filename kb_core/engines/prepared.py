"""Per-chunk work that is a pure function of the chunk text, done where the document is chunked.

A parser process (:mod:`kb_core.engines.parsing.isolation`) that chunks a document with a pure-Python tokenizer also
does, off the importing process's GIL: the BM25 analysis of each chunk (its terms, as compact arrays), the
near-duplicate signatures of each chunk, and, for the hashing embedder (numpy, deterministic, tiny to send), the
vectors. The importing process then only merges arrays, writes the segment and commits. Everything here gives
exactly what the importing process would compute itself (:func:`prepare_chunks` is also its fallback).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from kb_core.engines.analysis import Analyzer
    from kb_core.engines.embedding.hashing import HashingEmbedder
    from kb_core.engines.near_duplicates import TextSignatures
    from kb_core.engines.parsing.base import ParsedDocument


@dataclass(frozen=True)
class PreparedChunks:
    """The analysis of a document's chunks, one row per chunk.

    ``terms``: the document's distinct index terms, in order of first appearance; ``term_ids``: every chunk's
    terms in order, as positions in ``terms`` (chunk after chunk); ``lengths``: terms per chunk;
    ``signatures``: near-duplicate signatures; ``vectors``: the chunks' vectors when they were embedded too."""

    terms: list[str]
    term_ids: np.ndarray  # int32
    lengths: np.ndarray  # int32 (n_chunks,)
    signatures: TextSignatures
    vectors: np.ndarray | None = None  # float32 (n_chunks, dimension), L2-normalised

    def __len__(self) -> int:
        return int(self.lengths.shape[0])


def prepare_chunks(texts: Sequence[str], analyzer: Analyzer, embedder: Any = None) -> PreparedChunks:
    """Analyse ``texts`` (one chunk each) with ``analyzer``, sign them, and embed them with ``embedder`` if given."""
    return prepare_documents([texts], analyzer, embedder)[0]


def prepare_documents(
    documents: Sequence[Sequence[str]], analyzer: Analyzer, embedder: Any = None
) -> list[PreparedChunks]:
    """:func:`prepare_chunks` of each document's chunk texts, signing (and embedding) all of them in one call."""
    from kb_core.engines.near_duplicates import text_signatures

    texts = [text for chunks in documents for text in chunks]
    signatures = text_signatures(texts)
    vectors = None if embedder is None else np.asarray(embedder.embed_documents(texts), dtype=np.float32)
    prepared: list[PreparedChunks] = []
    start = 0
    for chunks in documents:
        vocabulary, term_ids, lengths = analyzer.term_ids(chunks)
        rows = np.arange(start, start + len(chunks))
        prepared.append(
            PreparedChunks(
                terms=list(vocabulary),
                term_ids=term_ids,
                lengths=lengths,
                signatures=signatures.take(rows),
                vectors=None if vectors is None else vectors[start : start + len(chunks)],
            )
        )
        start += len(chunks)
    return prepared


def merge_terms(parts: Sequence[PreparedChunks]) -> tuple[dict[str, int], np.ndarray, np.ndarray]:
    """One vocabulary (ids in order of first appearance over ``parts`` in order, as one pass over their chunks
    would give), every term occurrence as an id of it, and the terms per chunk."""
    vocabulary: dict[str, int] = {}
    ids: list[np.ndarray] = []
    for part in parts:
        local = np.fromiter(
            (vocabulary.setdefault(t, len(vocabulary)) for t in part.terms), dtype=np.int32, count=len(part.terms)
        )
        ids.append(local[part.term_ids])
    term_ids = np.concatenate(ids) if ids else np.empty(0, dtype=np.int32)
    lengths = np.concatenate([p.lengths for p in parts]) if parts else np.empty(0, dtype=np.int32)
    return vocabulary, term_ids, lengths


@dataclass(frozen=True)
class ChunkWork:
    """What a parser process does after parsing files (picklable): chunk each with ``tokenizer`` into chunks of
    ``chunk_size`` tokens, then, with an ``analyzer``, prepare the chunks of all of them, embedding them with the
    hashing embedder of ``hashing_dimension`` when that is set. ``payloads``: answer each chunked file as a
    :class:`~kb_core.engines.payloads.FilePayload`."""

    tokenizer: Any
    chunk_size: int
    analyzer: Analyzer | None = None
    hashing_dimension: int | None = None
    payloads: bool = False

    @property
    def prepares(self) -> bool:
        return self.analyzer is not None

    def chunk(self, parsed: ParsedDocument) -> list[Any]:
        from kb_core.engines.chunking import chunk_document

        return chunk_document(parsed, self.tokenizer, self.chunk_size)

    def prepare(self, chunked: Sequence[Sequence[Any] | None]) -> list[PreparedChunks | None]:
        """The preparation of each file's chunks (``None`` for a file not chunked), all files in one call."""
        if self.analyzer is None:
            return [None] * len(chunked)
        embedder = _hashing_embedder(self.hashing_dimension) if self.hashing_dimension else None
        present = [chunks for chunks in chunked if chunks]
        made = iter(prepare_documents([[c.content for c in chunks] for chunks in present], self.analyzer, embedder))
        return [next(made) if chunks else None for chunks in chunked]


_embedders: dict[int, HashingEmbedder] = {}


def _hashing_embedder(dimension: int) -> HashingEmbedder:
    """One per dimension in this process, so its feature memo serves every file the process prepares."""
    embedder = _embedders.get(dimension)
    if embedder is None:
        from kb_core.engines.embedding.hashing import HashingEmbedder

        embedder = _embedders[dimension] = HashingEmbedder(dimension)
    return embedder


def hashing_dimension(embedder: Any) -> int | None:
    """The dimension of ``embedder`` when it is the hashing embedder (behind the embedding cache or not): a parser
    process may then embed, as its vectors depend on the text alone; else ``None``."""
    from kb_core.engines.embedding.cache import CachedEmbedder
    from kb_core.engines.embedding.hashing import HashingEmbedder

    inner = embedder.inner if isinstance(embedder, CachedEmbedder) else embedder
    return inner.dimension if type(inner) is HashingEmbedder else None
