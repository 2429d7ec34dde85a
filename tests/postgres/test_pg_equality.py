"""The PostgreSQL store computes what the folder store computes, within 1e-6, English and Chinese, after imports
and deletions: the same documents are built into a folder-store KB (through the service, ``hashing`` embedder) and
copied into PostgreSQL (the same chunk rows and vectors, read from the folder store's segments), then BM25
scores, cosines, candidate lists, matched terms, distinct-term counts, the keyword reference (Σ idf) and the fused
ranking are compared query by query."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from kb_core import KnowledgeBaseService
from kb_core.edges.envelopes import Enveloped
from kb_core.engines.fusion import Candidate, fuse
from kb_core.engines.keyword_index import bm25_idf
from kb_core.store.folder import FolderSearcher
from kb_core.store.postgres import (
    ChunkRecord,
    DocumentRecord,
    PostgresSnapshot,
    PostgresStore,
    PreparedDocument,
    StoreChange,
    VectorSearchSettings,
)

DEMO = Path(__file__).resolve().parents[2] / "data" / "demo"
QUERIES = [
    "hybrid search score breakdown",
    "how does BM25 keyword scoring work",
    "import DOCX and legacy DOC files",
    "evaluation nDCG recall",
    "the",  # a stop word only: no terms
    "混合检索的得分解释",
    "什么是混合检索的得分",  # bigrams reaching into stop words (是混, 索的, 的得): support terms
    "知识库工作台 如何导入文档",
    "评估与调参 BM25 权重",
    "向量检索 cosine 相似度",
]
TOLERANCE = 1e-6
CANDIDATES = 25


class Pair:
    """One KB in both stores, kept equal by :meth:`copy_new_segments` and :meth:`delete`."""

    def __init__(self, service: KnowledgeBaseService, store: PostgresStore, kb_name: str) -> None:
        self.service = service
        self.store = store
        self.session = Enveloped(service.session())
        self.session.create_knowledge_base(kb_name, 64, embedding_model="hashing")
        self.session.select_knowledge_base(kb_name)
        self.record = service.find_kb(kb_name)
        self.embedder = service.embedder(self.record)
        self.pg = store.create_knowledge_base(kb_name, 64, "hashing", analyzer=service.analyzer.name)
        self.copied: set[str] = set()

    def import_files(self, paths: list[Path]) -> None:
        result = self.session.import_document([str(p) for p in paths])
        assert result["success"], result["message"]
        self.copy_new_segments()

    def copy_new_segments(self) -> None:
        """Commit each folder segment not yet copied into PostgreSQL, one commit per segment, rows in order."""
        snapshot = self.service.reader(self.record.id).snapshot()
        for index, segment in enumerate(snapshot.segments):
            if segment.id in self.copied:
                continue
            live = snapshot.live_mask(index)
            chunks = segment.chunks.to_pylist()
            rows_of: dict[str, list[int]] = {}
            for row, chunk in enumerate(chunks):
                if live[row]:
                    rows_of.setdefault(chunk["doc_id"], []).append(row)
            documents = segment.documents
            deleted = snapshot.manifest.tombstones.get(segment.id, {})
            order = sorted(
                (r for r in documents.to_dict("records") if r["doc_id"] not in deleted),
                key=lambda r: rows_of.get(r["doc_id"], [len(chunks)])[0],
            )
            prepared = []
            for row in order:
                record = DocumentRecord.from_row(row)
                rows = rows_of.get(record.doc_id, [])
                original = segment.original_path(record.original).read_bytes() if record.original else None
                prepared.append(
                    PreparedDocument.build(
                        record,
                        [ChunkRecord.from_row(chunks[r]) for r in rows],
                        segment.vectors.reconstruct(np.array(rows, dtype=np.int64)) if rows else None,
                        self.service.analyzer,
                        text=segment.text(record.doc_id),
                        original=original,
                    )
                )
            self.store.commit(self.pg.id, StoreChange(add=tuple(prepared)))
            self.copied.add(segment.id)

    def delete(self, doc_name: str) -> None:
        documents = self.service.reader(self.record.id).snapshot().documents()
        doc_id = str(documents[documents["name"] == doc_name]["doc_id"].iloc[0])
        assert self.session.delete_document(doc_name)["success"]
        self.store.commit(self.pg.id, StoreChange(delete=(doc_id,)))

    def folder_searcher(self) -> FolderSearcher:
        snapshot = self.service.reader(self.record.id).snapshot()
        return FolderSearcher.for_snapshot(snapshot, self.service.analyzer, self.record.embedding_model)


def chunk_ids_by_key(searcher: FolderSearcher, keys: list[tuple[int, int]]) -> list[str]:
    rows = searcher.rows(keys)
    return [rows[key]["chunk_id"] for key in keys]


def chunk_ids_by_row(snapshot: PostgresSnapshot, row_ids: list[int]) -> list[str]:
    rows = snapshot.chunks(row_ids)
    return [rows[row_id].chunk_id for row_id in row_ids]


def assert_same_ranking(
    pg_ids: list[str], pg_scores: list[float], folder_ids: list[str], folder_scores: list[float], label: object
) -> None:
    """The same scores position by position and for each chunk; chunks may differ only by ties (within 1e-6):
    two stores computing a float32 cosine in a different order may break a tie the other way."""
    assert len(pg_ids) == len(folder_ids), label
    np.testing.assert_allclose(pg_scores, folder_scores, rtol=0, atol=TOLERANCE, err_msg=str(label))
    folder = dict(zip(folder_ids, folder_scores, strict=True))
    for chunk_id, score in zip(pg_ids, pg_scores, strict=True):
        if chunk_id in folder:
            assert abs(folder[chunk_id] - score) <= TOLERANCE, label
        else:  # left out by the folder store: a tie with its last candidate
            assert abs(score - folder_scores[-1]) <= TOLERANCE, label


def compare(pair: Pair, vector_search: VectorSearchSettings | None = None) -> None:
    """Every primitive of every query, folder store against PostgreSQL."""
    searcher = pair.folder_searcher()
    keyword = searcher.keyword
    fused_queries = 0
    with pair.store.snapshot(pair.pg.id) as snapshot:
        if vector_search is not None:
            snapshot.vector_search = vector_search
        assert snapshot.statistics.live_rows == keyword.n_docs
        assert abs(snapshot.statistics.avgdl - keyword.avgdl) <= 1e-12
        for query in QUERIES:
            analysed = pair.service.analyzer.query_terms(query)
            terms, support = list(analysed.terms), list(analysed.support)
            query_terms = snapshot.query_terms(query, pair.service.analyzer)
            assert list(query_terms.terms) == terms, query
            assert list(query_terms.support) == support, query
            # the keyword reference: Σ idf over the query's terms (not its support terms) some live row holds
            dfs = [len(keyword.search_terms([t], keyword.n_docs + 1)) for t in terms + support]
            assert list(query_terms.df) == dfs, query
            reference = sum(float(bm25_idf(df, keyword.n_docs)) for df in dfs[: len(terms)] if df)
            assert abs(query_terms.reference - reference) <= TOLERANCE, query
            assert abs(keyword.reference_score(terms) - reference) <= TOLERANCE, query
            # keyword candidates: the same rows in the same order, the same BM25 (support terms included)
            folder_hits = keyword.search_terms(terms, CANDIDATES, support)
            pg_hits = snapshot.keyword_candidates(query_terms, CANDIDATES)
            folder_keys = [(h.segment_index, h.row) for h in folder_hits]
            assert_same_ranking(
                chunk_ids_by_row(snapshot, [h.row_id for h in pg_hits]),
                [h.score for h in pg_hits],
                chunk_ids_by_key(searcher, folder_keys),
                [h.score for h in folder_hits],
                query,
            )
            # vector candidates: exact scan equals the folder store's flat index; the default path equals it too
            query_vector = pair.embedder.embed_query(query)
            folder_vector = searcher.vector.search(query_vector, CANDIDATES)
            folder_vector_ids = chunk_ids_by_key(searcher, [(h.segment_index, h.row) for h in folder_vector])
            for exact in (True, False):
                pg_vector = snapshot.vector_candidates(query_vector, CANDIDATES, exact=exact)
                pg_vector_ids = chunk_ids_by_row(snapshot, [h.row_id for h in pg_vector])
                if exact or vector_search is None:
                    assert_same_ranking(
                        pg_vector_ids,
                        [h.score for h in pg_vector],
                        folder_vector_ids,
                        [h.score for h in folder_vector],
                        (query, exact),
                    )
                else:  # HNSW: approximate candidates, exact scores
                    assert len(set(pg_vector_ids) & set(folder_vector_ids)) >= 0.9 * len(folder_vector_ids), query
                    folder_scores = dict(zip(folder_vector_ids, (h.score for h in folder_vector), strict=True))
                    for chunk_id, hit in zip(pg_vector_ids, pg_vector, strict=True):
                        if chunk_id in folder_scores:
                            assert abs(hit.score - folder_scores[chunk_id]) <= TOLERANCE
            # the union's row scores: exact BM25, matched terms, distinct terms, cosine
            candidates = snapshot.candidates(
                query_terms, query_vector, keyword_k=CANDIDATES, vector_k=CANDIDATES, exact=True
            )
            pg_ids = chunk_ids_by_row(snapshot, list(candidates.row_ids))
            folder_keys = list(dict.fromkeys(folder_keys + [(h.segment_index, h.row) for h in folder_vector]))
            # the folder keys of PostgreSQL's candidates (the same chunks, up to ties at the lists' ends)
            position = {chunk_id: i for i, chunk_id in enumerate(chunk_ids_by_key(searcher, folder_keys))}
            all_keys = {
                r["chunk_id"]: (si, row)
                for si, segment in enumerate(searcher.snapshot.segments)
                for row, r in enumerate(segment.chunks.select(["chunk_id"]).to_pylist())
            }
            keys = [folder_keys[position[c]] if c in position else all_keys[c] for c in pg_ids]
            assert sum(c in position for c in pg_ids) >= len(pg_ids) - 2, query
            folder_terms = keyword.row_terms(terms, keys, support)
            folder_keyword_rank = {(h.segment_index, h.row): r for r, h in enumerate(folder_hits, start=1)}
            folder_vector_rank = {(h.segment_index, h.row): r for r, h in enumerate(folder_vector, start=1)}
            np.testing.assert_allclose(candidates.row_terms.bm25, folder_terms.bm25, rtol=0, atol=TOLERANCE)
            np.testing.assert_array_equal(candidates.row_terms.contains, folder_terms.contains)
            np.testing.assert_array_equal(candidates.row_terms.supports, folder_terms.supports)
            np.testing.assert_array_equal(candidates.row_terms.distinct, folder_terms.distinct)
            np.testing.assert_allclose(candidates.row_terms.jaccard(), folder_terms.jaccard(), rtol=0, atol=TOLERANCE)
            np.testing.assert_allclose(
                candidates.cosine, searcher.vector.score_rows(query_vector, keys), rtol=0, atol=TOLERANCE
            )
            same_lists = {(k, candidates.keyword_rank[i], candidates.vector_rank[i]) for i, k in enumerate(keys)} == {
                (k, folder_keyword_rank.get(k), folder_vector_rank.get(k)) for k in folder_keys
            }
            if same_lists:  # else the lists differ by a tie at their ends (checked above), and so may the fusion
                fused_queries += 1
                compare_fusion(
                    candidates, pg_ids, folder_terms, keys, searcher, query_vector, folder_hits, folder_vector
                )
    assert fused_queries >= len(QUERIES) - 2, f"only {fused_queries} queries had the same candidate lists"


def compare_fusion(  # type: ignore[no-untyped-def]
    candidates, pg_ids, folder_terms, keys, searcher, query_vector, folder_hits, folder_vector
) -> None:
    """The fusion over each store's candidates ranks the same chunks with the same final scores."""
    folder_keyword_rank = {(h.segment_index, h.row): r for r, h in enumerate(folder_hits, start=1)}
    folder_vector_rank = {(h.segment_index, h.row): r for r, h in enumerate(folder_vector, start=1)}
    folder_cosine = searcher.vector.score_rows(query_vector, keys)
    folder_jaccard = folder_terms.jaccard()
    folder = [
        Candidate(
            key=pg_ids[i],
            vector_score=float(folder_cosine[i]),
            keyword_score=float(folder_terms.bm25[i]),
            vector_rank=folder_vector_rank.get(key),
            keyword_rank=folder_keyword_rank.get(key),
            jaccard=float(folder_jaccard[i]),
        )
        for i, key in enumerate(keys)
    ]
    jaccard = candidates.row_terms.jaccard()
    postgres = [
        Candidate(
            key=pg_ids[i],
            vector_score=float(candidates.cosine[i]),
            keyword_score=float(candidates.row_terms.bm25[i]),
            vector_rank=candidates.vector_rank[i],
            keyword_rank=candidates.keyword_rank[i],
            jaccard=float(jaccard[i]),
        )
        for i in range(len(pg_ids))
    ]
    for method in ("weighted", "rrf"):
        fused_folder = fuse(folder, method=method, jaccard_weight=0.1)
        fused_pg = fuse(postgres, method=method, jaccard_weight=0.1)
        folder_scores = {c.key: b.final_score for c, b in fused_folder}
        pg_scores = {c.key: b.final_score for c, b in fused_pg}
        assert pg_scores.keys() == folder_scores.keys()
        for key, score in pg_scores.items():
            assert abs(score - folder_scores[key]) <= TOLERANCE, (method, key)
        # the same ranking: chunks may swap places only with one of an equal score (a tie within 1e-6)
        for (pg_candidate, _), (_, folder_breakdown) in zip(fused_pg, fused_folder, strict=True):
            assert abs(folder_scores[pg_candidate.key] - folder_breakdown.final_score) <= TOLERANCE, method


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory, pg_store: PostgresStore) -> Iterator[Pair]:
    home = tmp_path_factory.mktemp("equality") / "home"
    service = KnowledgeBaseService(home)
    pair = Pair(service, pg_store, "equality 等价")
    pair.import_files(sorted(p for p in DEMO.iterdir() if p.suffix in (".txt", ".docx", ".doc")))
    yield pair
    shutil.rmtree(home, ignore_errors=True)


def test_the_same_answers_after_an_import(pair: Pair) -> None:
    compare(pair)
    assert pair.store.verify(pair.pg.id) == []


def test_the_same_answers_after_deletions_and_a_later_import(pair: Pair, tmp_path: Path) -> None:
    pair.delete("hybrid_search.docx")
    pair.delete("知识库工作台概述.txt")
    compare(pair)
    extra = tmp_path / "新文档 notes.txt"
    extra.write_text(
        "混合检索 hybrid search again: BM25 权重 and cosine 相似度 explained once more.\n" * 20, encoding="utf-8"
    )
    pair.import_files([extra])
    compare(pair)
    assert pair.store.verify(pair.pg.id) == []


def test_hnsw_candidates_have_exact_scores(pair: Pair) -> None:
    """With the exact scan switched off the HNSW index proposes the rows; the scores stay exact."""
    compare(pair, VectorSearchSettings(exact_below_rows=0))
