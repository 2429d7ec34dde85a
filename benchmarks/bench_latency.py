"""Search latency on real knowledge bases, query embedding included, against a floor of raw libraries and txtai.

    python benchmarks/bench_latency.py                              # SciFact and XQuAD-zh from ../shared/eval
    python benchmarks/bench_latency.py --home /tmp/latency --queries 60 --txtai-python /work/txtai-venv/bin/python

Each dataset's corpus is imported once into an evaluation KB (chunk 512, all-MiniLM-L6-v2; reused from
``HOME/cache/eval`` afterwards). The judged queries go through the service API (``session.search``: what the CLI,
the app and MCP call). For each query, every timed search runs back to back, in an order that is reversed from one
query to the next, so drift of the machine's speed hits all of them alike:

* ours, for every mode (hybrid, semantic, keyword) and top_k (10, 100), each query embedded by the model (the
  query-vector memo is off);
* ours again with the query vector memoised ("search only": hybrid and semantic without the model call);
* the **floor** on the same KB: semantic = ``SentenceTransformer.encode`` of the query + a FAISS ``IndexFlatIP``
  search of all chunk vectors; keyword = the same analyzer's tokens + BM25 (k1 1.2, b 0.75) over a scipy CSC
  term-frequency matrix (the library the project's index is built on) + ``argpartition``; hybrid = both,
  over-fetching as the project does (max(100, 10 × top_k) per list), each candidate scored on both signals, a
  numpy weighted fusion of the two lists (0.7 / 0.3 on the [0, 1] scales), ``argsort``;
* with ``--txtai-python``, txtai's hybrid search on the same chunks with the same model, in that interpreter: a
  long-lived process answering one query a line over stdin/stdout (``benchmarks/txtai_hybrid.py``; its index built
  from the KB's chunk vectors, each query embedded by ``SentenceTransformer.encode``; the time is txtai's own
  ``Embeddings.search``, the pipe not counted).

The floor returns row numbers only; the service also reads each hit's chunk, builds its score breakdown, removes
near duplicates and answers in its envelope. Reported per dataset: p50 / p95 of each, ours ÷ floor, top_k 100 ÷
top_k 10, ours ÷ txtai (p50 and p95), a repeated query (memo on: no model call), and the load average before and
after. Output: one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import scipy.sparse as sp

from kb_core import KnowledgeBaseService
from kb_core.edges.envelopes import Enveloped
from kb_core.engines.embedding import CachedEmbedder, EmbeddingCache, get_embedder
from kb_core.engines.embedding.wordpiece import bundled_model_path
from kb_core.engines.keyword_index import bm25_idf, bm25_length_norm
from kb_core.features.beir import load_beir
from kb_core.features.results import SearchRequest
from kb_core.features.retrieval.search import MIN_CANDIDATES
from kb_core.session.evaluation import build_eval_kb
from kb_core.session.service import EVAL_HOME, open_eval_service

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "eval"
MODES = ("hybrid", "semantic", "keyword")
TOP_KS = (10, 100)
K1, B = 1.2, 0.75


def percentiles(samples: list[float]) -> dict[str, float]:
    return {"p50_ms": float(np.percentile(samples, 50) * 1000), "p95_ms": float(np.percentile(samples, 95) * 1000)}


class Floor:
    """The same KB's chunks in raw libraries: one FAISS flat index, one CSC BM25 matrix, the raw model."""

    def __init__(self, service: KnowledgeBaseService, kb_id: str, model: Any) -> None:
        snapshot = service.reader(kb_id).snapshot()
        texts: list[str] = []
        vectors: list[np.ndarray] = []
        for index, segment in enumerate(snapshot.segments):
            live = np.flatnonzero(snapshot.live_mask(index))
            contents = segment.chunks.column("content").to_pylist()
            texts += [contents[i] for i in live.tolist()]
            vectors.append(segment.vectors.reconstruct(live))
        self.texts = texts
        self.model = model
        self.analyzer = service.analyzer
        matrix = np.vstack(vectors).astype(np.float32)
        self.vectors = matrix
        self.index = faiss.IndexFlatIP(matrix.shape[1])
        self.index.add(matrix)
        vocabulary: dict[str, int] = {}
        rows: list[int] = []
        cols: list[int] = []
        lengths = np.zeros(len(texts), dtype=np.float64)
        for row, text in enumerate(texts):
            tokens = self.analyzer.tokens(text)
            lengths[row] = len(tokens)
            cols.extend(vocabulary.setdefault(t, len(vocabulary)) for t in tokens)
            rows.extend([row] * len(tokens))
        tf = sp.csc_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(texts), len(vocabulary)))
        tf.sum_duplicates()
        self.tf, self.vocabulary = tf, vocabulary
        self.norm = bm25_length_norm(lengths, float(lengths.mean()), K1, B)
        self.df = np.diff(tf.indptr)

    def encode(self, query: str) -> np.ndarray:
        encoded = self.model.encode([query], normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)
        return encoded.astype(np.float32)

    def bm25(self, query: str) -> tuple[np.ndarray, float]:
        """Dense BM25 of every chunk, and the query's reference (Σ idf) for the [0, 1] scale."""
        scores = np.zeros(len(self.texts))
        reference = 0.0
        for term in dict.fromkeys(self.analyzer.tokens(query)):
            col = self.vocabulary.get(term)
            if col is None:
                continue
            start, end = self.tf.indptr[col], self.tf.indptr[col + 1]
            rows, tf = self.tf.indices[start:end], self.tf.data[start:end]
            idf = float(bm25_idf(float(self.df[col]), len(self.texts)))
            scores[rows] += idf * tf * (K1 + 1) / (tf + self.norm[rows])
            reference += idf
        return scores, reference

    def search(self, query: str, mode: str, top_k: int) -> np.ndarray:
        top_k = min(top_k, len(self.texts) - 1)
        if mode == "semantic":
            return self.index.search(self.encode(query), top_k)[1][0]
        if mode == "keyword":
            scores, _ = self.bm25(query)
            best = np.argpartition(-scores, top_k)[:top_k]
            return best[np.argsort(-scores[best])]
        fetch = min(max(MIN_CANDIDATES, 10 * top_k), len(self.texts) - 1)
        vector = self.encode(query)
        _cosines, vector_rows = self.index.search(vector, fetch)
        scores, reference = self.bm25(query)
        keyword_rows = np.argpartition(-scores, fetch)[:fetch]
        keyword_rows = keyword_rows[scores[keyword_rows] > 0]
        rows = np.union1d(vector_rows[0], keyword_rows)
        cosine = self.vectors[rows] @ vector[0]
        keyword = -np.expm1(-scores[rows] / reference) if reference > 0 else np.zeros(len(rows))
        fused = 0.7 * np.clip(cosine, 0.0, 1.0) + 0.3 * keyword
        return rows[np.argsort(-fused, kind="stable")[:top_k]]


def fresh_query_service(home: Path) -> KnowledgeBaseService:
    """The evaluation home with the service's own embedder recipe but no query memo: every query is embedded."""

    def factory(record: Any, api_key: str | None) -> Any:
        inner = get_embedder(record.embedding_model, record.embedding_endpoint, api_key)
        return CachedEmbedder(inner, EmbeddingCache(home / "cache" / "embeddings.sqlite"), query_memo=0)

    return KnowledgeBaseService(home, embedder_factory=factory)


class Txtai:
    """txtai's hybrid search on the same chunk texts and vectors, in its own interpreter, answering one query a
    line over stdin/stdout (``benchmarks/txtai_hybrid.py``); the time is txtai's own ``Embeddings.search``."""

    def __init__(self, python: str, home: Path, name: str, floor: Floor) -> None:
        vectors_path = home / f"txtai-{name}-vectors.npy"
        np.save(vectors_path, floor.vectors)  # the KB's own chunk vectors: txtai need not re-embed every chunk
        job = {"vectors": str(vectors_path), "texts": floor.texts, "model_path": str(bundled_model_path())}
        job_path = home / f"txtai-{name}-job.json"
        job_path.write_text(json.dumps(job), encoding="utf-8")
        script = Path(__file__).resolve().parent / "txtai_hybrid.py"
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        self.process = subprocess.Popen(
            [python, str(script), str(job_path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            env=env,
            cwd=str(home),
        )
        ready = json.loads(self._line())
        if ready.get("count") != len(floor.texts):
            raise RuntimeError(f"txtai indexed {ready.get('count')} of {len(floor.texts)} chunks")

    def _line(self) -> str:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"txtai exited with {self.process.wait()}")
        return line

    def search(self, query: str, top_k: int) -> float:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"query": query, "top_k": top_k}) + "\n")
        self.process.stdin.flush()
        return float(json.loads(self._line())["seconds"])

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(timeout=60)


def measure(home: Path, dataset_dir: Path, queries: int, repeats: int, txtai_python: str | None) -> dict[str, Any]:
    """Every timed search of one dataset, interleaved query by query: for each query, mode and top_k, ours (query
    embedded), the floor, txtai (hybrid) and ours again with the query vector memoised (search alone), in an order
    that alternates from one query to the next, so drift of the machine's speed hits all of them alike."""
    dataset = load_beir(dataset_dir)
    record = build_eval_kb(open_eval_service(home), dataset)
    eval_home = home / EVAL_HOME
    service = fresh_query_service(eval_home)
    session = Enveloped(service.session())
    session.select_knowledge_base(record.name)
    memo_service = KnowledgeBaseService(eval_home)  # the default recipe: query-vector memo on
    memo = Enveloped(memo_service.session())
    memo.select_knowledge_base(record.name)
    texts = [dataset.queries[q] for q in sorted(dataset.qrels)][:queries]
    embedder = service.embedder(record)
    model = embedder.inner._load() if hasattr(embedder.inner, "_load") else None
    if model is None:
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(str(bundled_model_path()), device="cpu", local_files_only=True)
    floor = Floor(service, record.id, model)
    txtai = Txtai(txtai_python, home, dataset.name, floor) if txtai_python else None
    try:
        for text in texts[:5]:  # warm-up: page in the indexes and the model
            for mode in MODES:
                session.search(SearchRequest(text, top_k=10, mode=mode))
                floor.search(text, mode, 10)
            if txtai is not None:
                txtai.search(text, 10)
        for text in texts:  # the memo holds every query's vector from here on
            memo.search(SearchRequest(text, top_k=10, mode="hybrid"))
        samples: dict[str, list[float]] = {}

        def timed(label: str, call: Any) -> None:
            started = time.perf_counter()
            result = call()
            elapsed = time.perf_counter() - started
            if isinstance(result, float):  # txtai's own time of its search
                elapsed = result
            elif isinstance(result, dict):
                assert result["success"], result["message"]
            samples.setdefault(label, []).append(elapsed)

        turn = 0
        for _ in range(repeats):
            for text in texts:
                runs: list[tuple[str, Any]] = []
                for mode in MODES:
                    for top_k in TOP_KS:
                        runs.append((f"{mode}@{top_k}/ours", partial(session.search, text, top_k=top_k, mode=mode)))
                        runs.append((f"{mode}@{top_k}/floor", partial(floor.search, text, mode, top_k)))
                        if mode != "keyword":
                            runs.append(
                                (f"{mode}@{top_k}/search only", partial(memo.search, text, top_k=top_k, mode=mode))
                            )
                        if txtai is not None and mode == "hybrid":
                            runs.append((f"{mode}@{top_k}/txtai", partial(txtai.search, text, top_k)))
                for label, call in runs if turn % 2 == 0 else reversed(runs):
                    timed(label, call)
                turn += 1
    finally:
        if txtai is not None:
            txtai.close()
    out: dict[str, Any] = {"dataset": dataset.name, "chunks": len(floor.texts), "queries": len(texts)}
    for label, values in samples.items():
        out[label] = percentiles(values)
    for mode in MODES:
        for top_k in TOP_KS:
            out[f"{mode}@{top_k} ours / floor (p50)"] = (
                out[f"{mode}@{top_k}/ours"]["p50_ms"] / out[f"{mode}@{top_k}/floor"]["p50_ms"]
            )
        for variant in ("ours", "search only", "floor"):
            if f"{mode}@10/{variant}" in out:
                out[f"{mode} {variant} top_k 100 / top_k 10 (p50)"] = (
                    out[f"{mode}@100/{variant}"]["p50_ms"] / out[f"{mode}@10/{variant}"]["p50_ms"]
                )
    if txtai is not None:
        for top_k in TOP_KS:
            for stat in ("p50_ms", "p95_ms"):
                out[f"hybrid@{top_k} ours / txtai ({stat[:3]})"] = (
                    out[f"hybrid@{top_k}/ours"][stat] / out[f"hybrid@{top_k}/txtai"][stat]
                )
    out["hybrid@10 repeated query"] = repeated_query(memo_service, memo, record, texts)
    return out


def repeated_query(service: KnowledgeBaseService, memo: Any, record: Any, texts: list[str]) -> dict[str, Any]:
    """Hybrid top_k 10 of queries already asked (the app re-runs its script on every widget change): the
    query-vector memo answers, so the model is not called."""
    calls = 0
    inner = service.embedder(record).inner
    original = inner.embed_query

    def counted(text: str) -> np.ndarray:
        nonlocal calls
        calls += 1
        return original(text)

    inner.embed_query = counted
    try:
        repeated: list[float] = []
        for text in texts:
            started = time.perf_counter()
            memo.search(SearchRequest(text, top_k=10, mode="hybrid"))
            repeated.append(time.perf_counter() - started)
    finally:
        del inner.embed_query  # the model instance is shared by every embedder of the process
    return {**percentiles(repeated), "model_calls": calls}


def load_average() -> list[float]:
    return [round(value, 2) for value in os.getloadavg()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--home", type=Path, default=Path("/tmp/kb-bench-latency"))
    parser.add_argument("--datasets", nargs="+", type=Path, default=[SHARED / "scifact", SHARED / "xquad-retrieval-zh"])
    parser.add_argument("--queries", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--txtai-python", help="interpreter of a separate venv with txtai (never a project dependency)")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    report: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "results": []}
    for folder in args.datasets:
        before = load_average()
        result = measure(args.home, folder, args.queries, args.repeats, args.txtai_python)
        result["load average before / after (1, 5, 15 min)"] = [before, load_average()]
        report["results"].append(result)
        print(json.dumps(result, indent=1), file=sys.stderr)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
