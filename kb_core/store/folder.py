"""The folder store behind the store protocol (:mod:`kb_core.store.base`): a thin facade over the home's registry
(:class:`~kb_core.store.registry.Home`), each KB's manifests and segments (:class:`~kb_core.store.kb_store.KBStore`)
and their readers (:class:`~kb_core.store.reader.KBReader`), which keep their own modules and roles."""

from __future__ import annotations

import logging
import os
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from kb_core.base.errors import DocumentNotFound, KBError, KBExists, KBNotFound
from kb_core.base.i18n import msg
from kb_core.base.removal import own_folder
from kb_core.base.validation import name_key
from kb_core.engines.fusion import CandidateArrays
from kb_core.engines.near_duplicates import TextSignatures
from kb_core.store.kb_store import Change, KBStore
from kb_core.store.reader import KBReader, Snapshot
from kb_core.store.registry import Home, KnowledgeBaseRecord, new_id, utc_now

if TYPE_CHECKING:
    from kb_core.engines.analysis import Analyzer
    from kb_core.engines.keyword_index import RowTerms
    from kb_core.store.base import CandidateRequest, Database, KBCheck, RowKey, Searcher, T
    from kb_core.store.folder_sink import FolderSink, SegmentWriter
    from kb_core.store.tokens import TokenStore

__all__ = ["FolderKB", "FolderSearcher", "FolderStore"]

logger = logging.getLogger(__name__)


class FolderStore:
    """The KBs of a home folder (:class:`kb_core.store.base.Store`). Thread-safe; one reader per KB is kept for
    the process, so searches reuse loaded segments and indexes."""

    def __init__(self, home: Home) -> None:
        self.home = home
        self.display = str(home.root)
        self._lock = threading.RLock()
        self._readers: dict[str, KBReader] = {}

    @property
    def postgres(self) -> None:
        return None

    @property
    def subject(self) -> str:
        return "home"

    @property
    def label(self) -> str:
        return "folder (the home)"

    @cached_property
    def tokens(self) -> TokenStore:
        from kb_core.store.tokens import TokenStore

        return TokenStore(self.home.root)

    def close(self) -> None:
        """Nothing to close: a folder store holds no connections."""

    # -- the registry ------------------------------------------------------------------------
    def knowledge_bases(self) -> list[KnowledgeBaseRecord]:
        return self.home.knowledge_bases()

    def get(self, kb_id: str) -> KnowledgeBaseRecord:
        return self.home.get(kb_id)

    def api_key(self, kb_id: str) -> str | None:
        return self.home.api_key(kb_id)

    def update_search_settings(self, kb_id: str, settings: Mapping[str, Any]) -> KnowledgeBaseRecord:
        return self.home.update_search_settings(kb_id, dict(settings))

    def create_knowledge_base(
        self,
        name: str,
        chunk_size: int,
        model: str,
        *,
        analyzer: str,
        embedding_endpoint: str | None,
        api_key: str | None,
    ) -> KnowledgeBaseRecord:
        with self.home.registry_lock():
            key = name_key(name)
            for record in self.home.knowledge_bases():
                if name_key(record.name) == key:
                    raise KBExists(
                        msg(
                            "A knowledge base named {name!r} already exists (names ignore case); choose another.",
                            name=record.name,
                        ),
                        details={"kb_name": name},
                    )
            record = KnowledgeBaseRecord(
                id=new_id("kb"),
                name=name,
                chunk_size=chunk_size,
                embedding_model=model,
                embedding_endpoint=embedding_endpoint,
                has_api_key=api_key is not None,
                created_at=utc_now(),
            )
            KBStore.create(self.home.kb_dir(record.id), record.id)
            if api_key is not None:
                self.home.store_api_key(record.id, api_key)
            self.home.add(record)  # the commit point
        return record

    def delete_knowledge_base(self, record: KnowledgeBaseRecord) -> None:
        with self.home.registry_lock(), self.kb_store(record.id).lock():
            self.home.remove(record.id)
        with self._lock:
            self._readers.pop(record.id, None)

    # -- KBs ---------------------------------------------------------------------------------
    def folder(self) -> FolderStore:
        return self

    def kb(self, record: KnowledgeBaseRecord) -> FolderKB:
        return FolderKB(self, record)

    def kb_store(self, kb_id: str) -> KBStore:
        """The KB's manifests and segments (its writer side)."""
        return KBStore(self.home.kb_dir(kb_id), kb_id)

    def reader(self, kb_id: str) -> KBReader:
        """The KB's reader, made once per process (the first one cleans up what crashed writers left)."""
        with self._lock:
            reader = self._readers.get(kb_id)
            if reader is None:
                store = self.kb_store(kb_id)
                store.clean_up()
                reader = KBReader(store)
                self._readers[kb_id] = reader
            return reader

    # -- consistency -------------------------------------------------------------------------
    def verify(self, kb_checks: Sequence[KBCheck] = ()) -> list[str]:
        from kb_core.store.verify import verify_home

        return verify_home(self.home, kb_checks)

    def interrupted_bundle_indexes(self, check: KBCheck) -> Iterator[KnowledgeBaseRecord]:
        for record in self.home.knowledge_bases():
            if check(self.kb_store(record.id)) is not None:
                yield record

    def remove_abandoned_staging(self) -> list[Path]:
        return self.home.abandoned_transfer_staging(remove=True)

    def document_ids(self) -> set[str]:
        import pyarrow as pa
        import pyarrow.parquet as pq

        from kb_core.base.files import DOCUMENTS_FILE

        ids: set[str] = set()
        for record in self.home.knowledge_bases():
            store = self.kb_store(record.id)
            try:
                manifest = store.manifest()
            except KBError:
                continue
            for ref in manifest.segments:
                try:
                    table = pq.read_table(store.segment_dir(ref.id) / DOCUMENTS_FILE, columns=["doc_id"])
                except (OSError, pa.ArrowException):
                    continue
                ids.update(table.column("doc_id").to_pylist())
        return ids

    def choose(self, *, folder: Callable[[], T], postgres: Callable[[Database], T]) -> T:
        return folder()


class FolderKB:
    """One KB of a folder store (:class:`kb_core.store.base.KBStorage`)."""

    embed_before_search = False  # a snapshot holds no lock: the query is embedded only for a KB with chunks

    def __init__(self, store: FolderStore, record: KnowledgeBaseRecord) -> None:
        self.folder_store = store
        self.record = record

    @property
    def store(self) -> KBStore:
        return self.folder_store.kb_store(self.record.id)

    @property
    def reader(self) -> KBReader:
        return self.folder_store.reader(self.record.id)

    def counts(self) -> tuple[int, int, int]:
        try:
            manifest = self.store.manifest()
            # The manifest counts documents, not their status: the failed ones are read from the snapshot (loaded
            # once per version, as a search loads it).
            failed = self.reader.snapshot().failed_count() if manifest.document_count else 0
        except KBNotFound:
            return 0, 0, 0
        return manifest.document_count - failed, manifest.chunk_count, failed

    def version(self) -> int:
        return self.store.latest_version()

    def documents(self) -> list[dict[str, Any]]:
        return self.reader.snapshot().documents().to_dict("records")

    def document(self, doc_id: str) -> dict[str, Any] | None:
        documents = self.reader.snapshot().documents()
        match = documents[documents["doc_id"] == doc_id].to_dict("records")
        return match[0] if match else None

    def document_chunks(self, document: dict[str, Any]) -> list[dict[str, Any]]:
        segment = self.reader.snapshot().segment_by_id(document["segment_id"])
        if segment is None:
            return []
        import pyarrow.compute as pc

        table = segment.chunks.filter(pc.equal(segment.chunks.column("doc_id"), document["doc_id"]))
        return sorted(table.to_pylist(), key=lambda r: r["chunk_index"])

    def find_item(self, item_id: str, neighbours: int) -> dict[str, Any] | None:
        snapshot = self.reader.snapshot()
        documents = snapshot.documents()
        if item_id.startswith("doc_"):
            match = documents[documents["doc_id"] == item_id]
            if match.empty:
                return None
            row = match.iloc[0].to_dict()
            segment = snapshot.segment_by_id(row["segment_id"])
            text = segment.text(item_id) if segment is not None else None
            return {"type": "document", "row": row, "text": text}
        for index, segment in enumerate(snapshot.segments):
            position = segment.find_chunk(item_id)
            if position is None or not snapshot.live_mask(index)[position]:
                continue
            chunk = segment.chunk_rows([position])[0]
            import pyarrow.compute as pc

            doc_rows = segment.chunks.filter(pc.equal(segment.chunks.column("doc_id"), chunk["doc_id"]))
            siblings = sorted(doc_rows.to_pylist(), key=lambda r: r["chunk_index"])
            at = next(i for i, r in enumerate(siblings) if r["chunk_id"] == item_id)
            name = documents[documents["doc_id"] == chunk["doc_id"]]["name"]
            return {
                "type": "chunk",
                "doc_name": name.iloc[0] if not name.empty else None,
                "chunk": chunk,
                "previous": siblings[max(0, at - neighbours) : at],
                "next": siblings[at + 1 : at + 1 + neighbours],
            }
        return None

    def has_chunk(self, chunk_id: str) -> bool:
        return self.reader.snapshot().locate_chunk(chunk_id) is not None

    def in_flight(self) -> list[dict[str, Any]]:
        from kb_core.store.folder_sink import in_flight_documents

        return in_flight_documents(self.reader.store)

    def delete_document(self, document: dict[str, Any]) -> None:
        def plan(manifest: Any) -> Change:
            if manifest.is_deleted(document["segment_id"], document["doc_id"]) or not any(
                s.id == document["segment_id"] for s in manifest.segments
            ):
                raise DocumentNotFound(
                    f"Document {document['name']!r} was already deleted.", details={"doc_name": document["name"]}
                )
            return Change(tombstones={document["segment_id"]: {document["doc_id"]: int(document["chunk_count"])}})

        self.reader.store.commit(plan)

    def import_staging(self) -> Path:
        # inside the KB's folder: never recreated for a KB deleted meanwhile
        staging = own_folder(self.store.root / "staging", within=self.store.root)
        return staging / f"{os.getpid()}-import-{uuid.uuid4().hex[:8]}"

    def sink(
        self, *, embedder: Any, analyzer: Analyzer, segment_writer: SegmentWriter, executor: str | None = None
    ) -> FolderSink:
        from kb_core.store.folder_sink import FolderSink

        return FolderSink(self.store, self.reader, embedder=embedder, analyzer=analyzer, segment_writer=segment_writer)

    def preload(self) -> None:
        self.reader.snapshot()

    @contextmanager
    def searcher(self, analyzer: Analyzer) -> Iterator[Searcher]:
        snapshot = self.reader.snapshot()
        if snapshot.manifest.chunk_count == 0:  # an empty KB loads no index
            yield _EmptySearcher(snapshot.kb_id, analyzer, self.record.embedding_model)
            return
        yield FolderSearcher.for_snapshot(snapshot, analyzer, self.record.embedding_model)

    def compact(self, analyzer: Analyzer, everything: bool) -> dict[str, int]:
        from kb_core.store.compaction import compact

        return compact(self.store, analyzer, everything=everything)

    def compact_quietly(self, analyzer: Analyzer) -> None:
        try:
            self.compact(analyzer, everything=False)
        except Exception:
            logger.warning(
                "automatic compaction of %s failed; it will be retried later", self.record.name, exc_info=True
            )


class _EmptySearcher:
    """The searcher of a KB without chunks: ``empty``, so nothing ranks in it."""

    def __init__(self, kb_id: str, analyzer: Analyzer, embedding_model: str) -> None:
        self.kb_id = kb_id
        self.analyzer = analyzer
        self.embedding_model = embedding_model
        self.empty = True
        self.warnings: list[str] = []

    def candidates(self, request: CandidateRequest) -> tuple[CandidateArrays, RowTerms]:
        raise KBNotFound("The knowledge base holds no chunks to search.")

    def keyword_reference(self, terms: Sequence[str]) -> float:
        return 0.0

    def document_of(self, key: RowKey, doc_id: str | None = None) -> dict[str, Any]:
        raise KBNotFound(f"No chunk row {key} in an empty knowledge base.")

    def rows_with_signatures(self, keys: Sequence[RowKey]) -> tuple[list[dict[str, Any]], TextSignatures]:
        raise KBNotFound("The knowledge base holds no chunks.")

    def locate(self, chunk_id: str) -> RowKey | None:
        return None


_ROW_BITS = 40  # a candidate's code: segment index << 40 | row (segments hold far fewer than 2**40 rows)
_ROW_MASK = (1 << _ROW_BITS) - 1


def _codes(segments: np.ndarray, rows: np.ndarray) -> np.ndarray:
    return (np.asarray(segments, dtype=np.int64) << _ROW_BITS) | np.asarray(rows, dtype=np.int64)


class FolderSearcher:
    """Searches one snapshot (the folder store's :class:`~kb_core.store.base.Searcher`); a row key is
    ``(segment index, row)``. Built once per snapshot version and cached on it."""

    def __init__(self, snapshot: Snapshot, analyzer: Analyzer, embedding_model: str) -> None:
        from kb_core.engines.keyword_index import KeywordSearcher
        from kb_core.engines.vector_index import VectorSearcher

        self.snapshot = snapshot
        self.kb_id = snapshot.kb_id
        self.analyzer = analyzer
        self.embedding_model = embedding_model
        live = [snapshot.live_mask(i) for i in range(len(snapshot.segments))]
        self.keyword = KeywordSearcher([(s.keyword, m) for s, m in zip(snapshot.segments, live, strict=True)], analyzer)
        self.vector = VectorSearcher([(s.vectors, m) for s, m in zip(snapshot.segments, live, strict=True)])
        documents = snapshot.documents()
        self.documents = {(row["segment_id"], row["doc_id"]): row for row in documents.to_dict("records")}

    @classmethod
    def for_snapshot(cls, snapshot: Snapshot, analyzer: Analyzer, embedding_model: str) -> FolderSearcher:
        searcher = snapshot.cache.get("searcher")
        if searcher is None:
            searcher = cls(snapshot, analyzer, embedding_model)
            snapshot.cache["searcher"] = searcher
        return searcher

    @property
    def empty(self) -> bool:
        return self.snapshot.manifest.chunk_count == 0

    @property
    def warnings(self) -> list[str]:
        return []

    def locate(self, chunk_id: str) -> tuple[int, int] | None:
        return self.snapshot.locate_chunk(chunk_id)

    def keyword_reference(self, terms: Sequence[str]) -> float:
        return self.keyword.reference_score(terms)

    def document_of(self, key: tuple[int, int], doc_id: str | None = None) -> dict[str, Any]:
        """The document row of a chunk, without reading the chunk's text."""
        if doc_id is None:
            values, codes = self.snapshot.segments[key[0]].chunk_doc_codes
            doc_id = str(values[codes[key[1]]])
        return self.documents[(self.snapshot.segments[key[0]].id, doc_id)]

    def candidates(self, request: CandidateRequest) -> tuple[CandidateArrays, RowTerms]:
        """Over-fetched candidates of both signals, each scored on both, with their Jaccard term, as columns.

        Order: the keyword list, then vector hits the keyword list lacks, then ``extra_keys`` (rows to explain,
        with their exact scores on both signals, ranked by neither list unless one retrieved them). Also returns
        what the keyword index knows of each candidate row (in candidate order): the query's terms, which of them
        each row contains, and its distinct term count — so neither the Jaccard term nor the matched terms need
        the chunk text.
        """
        mode, query_vector, extra_keys = request.mode, request.vector, request.extra_keys
        fetch = request.fetch
        if request.keyword_prefix is not None:
            # Keyword-only ranking is the BM25 order (ties by row, so a shorter list is a prefix of a longer one)
            # and only the first top_k + margin candidates are ever read: fetching more changes nothing.
            fetch = request.keyword_prefix
        analysed = self.analyzer.query_terms(request.query)
        terms, support = analysed.terms, analysed.support
        empty = (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64), np.empty(0))
        keyword = self.keyword.search_terms_arrays(terms, fetch, support) if mode != "semantic" else empty
        use_vector = mode != "keyword" and query_vector is not None and self.snapshot.manifest.chunk_count
        vector = empty
        if use_vector and request.semantic_prefix is not None:
            vector = self._semantic_prefix(query_vector, request.semantic_prefix, extra_keys)  # type: ignore[arg-type]
        if use_vector and not len(vector[0]):
            vector = self.vector.search_arrays(query_vector, fetch)  # type: ignore[arg-type]
        keyword_codes = _codes(keyword[0], keyword[1])
        vector_codes = _codes(vector[0], vector[1])
        codes = np.concatenate([keyword_codes, vector_codes[~np.isin(vector_codes, keyword_codes)]])
        if extra_keys:
            known = set(codes.tolist())
            extra_codes = [c for c in dict.fromkeys(_codes(*np.array(extra_keys, dtype=np.int64).T).tolist())]
            codes = np.concatenate([codes, np.array([c for c in extra_codes if c not in known], dtype=np.int64)])
        n = len(codes)
        keys = np.stack([codes >> _ROW_BITS, codes & _ROW_MASK], axis=1)
        keyword_score = np.full(n, np.nan)
        keyword_rank = np.zeros(n, dtype=np.int64)
        keyword_score[: len(keyword_codes)] = keyword[2]
        keyword_rank[: len(keyword_codes)] = np.arange(1, len(keyword_codes) + 1)
        vector_score = np.full(n, np.nan)
        vector_rank = np.zeros(n, dtype=np.int64)
        if len(vector_codes):
            sorter = np.argsort(codes)
            where = sorter[np.searchsorted(codes, vector_codes, sorter=sorter)]
            vector_score[where] = vector[2].astype(np.float64)
            vector_rank[where] = np.arange(1, len(vector_codes) + 1)
        row_terms = self.keyword.row_terms(terms, keys, support)
        if mode == "hybrid" or extra_keys:
            # Hybrid scores every candidate on both signals; other modes only the rows to explain.
            if mode == "hybrid":
                scored = np.ones(n, dtype=bool)
            else:
                scored = np.isin(codes, _codes(*np.array(extra_keys, dtype=np.int64).T))
            missing = scored & np.isnan(keyword_score)
            keyword_score[missing] = row_terms.bm25[missing]
            missing = np.flatnonzero(scored & np.isnan(vector_score))
            if len(missing) and query_vector is not None:
                vector_score[missing] = self.vector.score_rows(query_vector, keys[missing])
        arrays = CandidateArrays(keys, vector_score, keyword_score, vector_rank, keyword_rank, row_terms.jaccard())
        return arrays, row_terms

    def _semantic_prefix(
        self, query_vector: np.ndarray, wanted: int, extra_keys: Sequence[tuple[int, int]]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The first ``wanted`` rows of the cosine ranking, when they are exactly the first ``wanted`` rows of the
        over-fetched list (the semantic ranking is the cosine order and only that many rows are ever read), else
        empty arrays: the caller then over-fetches. That holds when every segment is an exact flat index and the
        ``wanted``-th score is strictly above the next one (a tie there could be broken differently by a longer
        search). Rows to explain need the full list (their rank among all candidates)."""
        empty = (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64), np.empty(0))
        if extra_keys or not self.vector.exact:
            return empty
        segments, rows, scores = self.vector.search_arrays(query_vector, wanted + 1)
        if len(scores) > wanted and not scores[wanted - 1] > scores[wanted]:
            return empty
        return segments[:wanted], rows[:wanted], scores[:wanted]

    def rows_with_signatures(
        self, keys: Sequence[tuple[int, int]]
    ) -> tuple[list[dict[str, Any]], TextSignatures]:
        """The chunk rows of ``keys`` and their near-duplicate signatures, in the order of ``keys``."""
        records: list[dict[str, Any]] = [{} for _ in keys]
        parts: list[tuple[np.ndarray, TextSignatures]] = []
        by_segment: dict[int, list[int]] = {}
        for position, (segment_index, _) in enumerate(keys):
            by_segment.setdefault(segment_index, []).append(position)
        for segment_index, positions in by_segment.items():
            segment = self.snapshot.segments[segment_index]
            found, signatures = segment.chunk_rows_with_signatures([keys[p][1] for p in positions])
            for position, record in zip(positions, found, strict=True):
                records[position] = record
            parts.append((np.asarray(positions, dtype=np.int64), signatures))
        if len(parts) == 1:
            return records, parts[0][1]
        where = np.concatenate([positions for positions, _ in parts])
        merged = TextSignatures.concatenate([signatures for _, signatures in parts])
        return records, merged.take(np.argsort(where))

    def rows(self, keys: Sequence[tuple[int, int]]) -> dict[tuple[int, int], dict[str, Any]]:
        out: dict[tuple[int, int], dict[str, Any]] = {}
        by_segment: dict[int, list[int]] = {}
        for segment_index, row in keys:
            by_segment.setdefault(segment_index, []).append(row)
        for segment_index, rows in by_segment.items():
            for row, record in zip(rows, self.snapshot.segments[segment_index].chunk_rows(rows), strict=True):
                out[(segment_index, row)] = record
        return out
