"""Search over a PostgreSQL snapshot with the folder store's ranking code
(:func:`kb_core.features.retrieval.search.rank`).

:class:`PostgresSearcher` is the store's :class:`~kb_core.store.base.Searcher`: candidates scored
on both signals, the keyword reference, chunk and document rows — computed by :class:`PostgresSnapshot` in SQL. Fusion,
the score breakdown, near-duplicate removal and the language guard are the very same Python code as for a folder
KB, so both stores give the same hits and breakdowns. A row is addressed by the key ``(0, row_id)``: the store has
one "segment" per KB.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from kb_core.engines.analysis import Analyzer
from kb_core.engines.fusion import CandidateArrays
from kb_core.engines.keyword_index import RowTerms
from kb_core.engines.near_duplicates import SKETCH_EMPTY, TextSignatures, text_signatures
from kb_core.store.base import CandidateRequest, RowKey
from kb_core.store.postgres.snapshot import PostgresSnapshot, QueryTerms

__all__ = ["PostgresSearcher"]


class _KeywordReference:
    """The keyword score scale of the terms the last search looked up: Σ idf of the present terms."""

    def __init__(self) -> None:
        self.query: QueryTerms | None = None

    def reference_score(self, terms: Sequence[str]) -> float:
        if self.query is None or tuple(terms) != self.query.terms:
            raise RuntimeError("the keyword reference is asked for terms the searcher did not look up")
        return self.query.reference


class PostgresSearcher:
    """One search over one PostgreSQL snapshot (valid inside its ``with store.snapshot(...)`` block): the
    :class:`~kb_core.store.base.Searcher` of this store."""

    def __init__(self, snapshot: PostgresSnapshot, analyzer: Analyzer, embedding_model: str) -> None:
        self.snapshot = snapshot
        self.kb_id = snapshot.kb_id
        self.analyzer = analyzer
        self.embedding_model = embedding_model
        self.keyword = _KeywordReference()
        self._documents: dict[str, dict[str, Any]] = {}  # only those of rows asked for: a KB may hold many
        self._rows: dict[RowKey, dict[str, Any]] = {}
        self._signatures: dict[RowKey, tuple[int, int, np.ndarray] | None] = {}

    def _load_documents(self, doc_ids: Sequence[str]) -> None:
        missing = sorted({d for d in doc_ids if d not in self._documents})
        if missing:
            self._documents.update((d.doc_id, d.to_row()) for d in self.snapshot.documents(missing))

    @property
    def empty(self) -> bool:
        return self.snapshot.statistics.live_rows == 0

    @property
    def warnings(self) -> list[str]:
        return list(self.snapshot.warnings)

    def locate(self, chunk_id: str) -> RowKey | None:
        row_id = self.snapshot.find_chunk(chunk_id)
        return None if row_id is None else (0, row_id)

    def keyword_reference(self, terms: Sequence[str]) -> float:
        return self.keyword.reference_score(terms)

    def document_of(self, key: RowKey, doc_id: str | None = None) -> dict[str, Any]:
        if doc_id is not None:
            self._load_documents([doc_id])
            return self._documents[doc_id]
        row_key = (int(key[0]), int(key[1]))
        return self.rows([row_key])[row_key]["document"]  # candidates() fetched the rows of a filtered search at once

    def candidates(self, request: CandidateRequest) -> tuple[CandidateArrays, RowTerms]:
        """As the folder store's :meth:`kb_core.store.folder.FolderSearcher.candidates`, signal by signal and mode
        by mode (the prefix hints are not used: the database reads ``fetch`` rows of each signal)."""
        fetch, mode, query_vector, extra_keys = request.fetch, request.mode, request.vector, request.extra_keys
        terms = self.snapshot.query_terms(request.query, self.analyzer)
        self.keyword.query = terms
        keyword_hits = self.snapshot.keyword_candidates(terms, fetch) if mode != "semantic" else []
        vector_hits = (
            self.snapshot.vector_candidates(query_vector, fetch)
            if mode != "keyword" and query_vector is not None and self.snapshot.statistics.live_rows
            else []
        )
        found: dict[RowKey, dict[str, Any]] = {}
        for position, hit in enumerate(keyword_hits, start=1):
            found[(0, hit.row_id)] = {"keyword_score": hit.score, "keyword_rank": position}
        for position, hit in enumerate(vector_hits, start=1):
            found.setdefault((0, hit.row_id), {}).update(vector_score=hit.score, vector_rank=position)
        for key in extra_keys:
            found.setdefault(key, {})
        keys = list(found)
        row_terms, cosine = self.snapshot.row_scores(terms, [row for _, row in keys], query_vector)
        extra = set(extra_keys)
        for position, key in enumerate(keys):
            scores = found[key]
            # hybrid scores every candidate on both signals; a single mode only the rows to explain
            if mode == "hybrid" or key in extra:
                scores.setdefault("keyword_score", float(row_terms.bm25[position]))
                if query_vector is not None and not np.isnan(cosine[position]):
                    scores.setdefault("vector_score", float(cosine[position]))
        if request.documents_wanted:  # rank() asks each candidate's document: one query for all of them
            self.rows(keys)
        def column(name: str) -> np.ndarray:
            return np.array([found[key].get(name, np.nan) for key in keys], dtype=np.float64)

        def ranks(name: str) -> np.ndarray:
            return np.array([found[key].get(name, 0) for key in keys], dtype=np.int64)

        arrays = CandidateArrays(
            np.array(keys, dtype=np.int64).reshape(-1, 2),
            column("vector_score"),
            column("keyword_score"),
            ranks("vector_rank"),
            ranks("keyword_rank"),
            row_terms.jaccard(),
        )
        return arrays, row_terms

    def rows_with_signatures(self, keys: Sequence[RowKey]) -> tuple[list[dict[str, Any]], TextSignatures]:
        """The chunk rows of ``keys`` in their order and their near-duplicate signatures: stored at import, or
        computed from the text for rows written before signatures were stored."""
        wanted = [(int(key[0]), int(key[1])) for key in keys]
        found = self.rows(wanted)
        records = [found[key] for key in wanted]
        n = len(wanted)
        signatures = TextSignatures(
            np.zeros(n, dtype=np.uint64), np.zeros(n, dtype=np.int32), np.full((n, 16), SKETCH_EMPTY, dtype=np.uint64)
        )
        unsigned = [i for i, key in enumerate(wanted) if self._signatures.get(key) is None]
        for position, key in enumerate(wanted):
            stored = self._signatures.get(key)
            if stored is not None:
                signatures.text_hash[position], signatures.shingle_count[position] = stored[0], stored[1]
                signatures.sketch[position] = stored[2]
        if unsigned:
            computed = text_signatures([records[i]["content"] for i in unsigned])
            signatures.text_hash[unsigned] = computed.text_hash
            signatures.shingle_count[unsigned] = computed.shingle_count
            signatures.sketch[unsigned] = computed.sketch
        return records, signatures

    def rows(self, keys: Sequence[RowKey]) -> dict[RowKey, dict[str, Any]]:
        missing = [key[1] for key in keys if key not in self._rows]
        if missing:
            fetched = self.snapshot.chunks_with_signatures(missing)
            self._load_documents([chunk.doc_id for chunk, _ in fetched.values()])
            for row_id, (chunk, signature) in fetched.items():
                self._rows[(0, row_id)] = {**chunk.to_row(), "document": self._documents[chunk.doc_id]}
                self._signatures[(0, row_id)] = signature
        return {key: self._rows[key] for key in keys}

