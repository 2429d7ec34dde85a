"""Keyword search benchmarks: retrieval quality of analyzer choices, and query latency against bm25s.

    python benchmarks/bench_keyword.py quality   # BM25 nDCG@10 per analyzer option and k1 (SciFact, XQuAD-zh)
    python benchmarks/bench_keyword.py latency   # p50/p95 per query vs bm25s (SciFact, synthetic ~100k chunks)

Data is read from ../shared/eval (BEIR format); nothing is fitted to its queries: the analyzer options are
fixed, standard choices and the table only picks among them.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import logging
import time
from pathlib import Path

import numpy as np

from kb_core.engines.analysis import Analyzer, default_analyzer
from kb_core.engines.keyword_index import BM25Parameters, KeywordSearcher, KeywordSegment

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
EVAL = SHARED / "eval"


def load_beir(name: str, queries_file: str = "queries.jsonl") -> tuple[list[str], list[str], dict[str, str], dict]:
    root = EVAL / name
    ids, texts = [], []
    with open(root / "corpus.jsonl", encoding="utf-8") as fh:
        for line in fh:
            doc = json.loads(line)
            ids.append(doc["_id"])
            texts.append(f"{doc.get('title', '')} {doc['text']}")
    qrels: dict[str, dict[str, int]] = {}
    with open(root / "qrels.tsv", encoding="utf-8") as fh:
        reader = csv.reader(fh, delimiter="\t")
        next(reader)
        for qid, did, score in reader:
            qrels.setdefault(qid, {})[did] = int(score)
    queries = {}
    with open(root / queries_file, encoding="utf-8") as fh:
        for line in fh:
            q = json.loads(line)
            if q["_id"] in qrels:
                queries[q["_id"]] = q["text"]
    return ids, texts, queries, qrels


def ndcg10(searcher: KeywordSearcher, ids: list[str], queries: dict[str, str], qrels: dict) -> float:
    from ranx import Qrels, Run, evaluate

    run: dict[str, dict[str, float]] = {}
    for qid, text in queries.items():
        hits = searcher.search(text, 100)
        run[qid] = {ids[h.row]: h.score for h in hits} or {"__none__": 0.0}
    return float(evaluate(Qrels(qrels), Run(run), "ndcg@10"))


def quality() -> None:
    datasets = {
        "scifact": load_beir("scifact", "queries.test.jsonl"),
        "xquad-zh": load_beir("xquad-retrieval-zh"),
    }
    print("| analyzer | " + " | ".join(datasets) + " |")
    print("|---|" + "---|" * len(datasets))
    for stem, stop, cjk in itertools.product(("en", None), ("en", None), ("jieba+bigram", "jieba", "bigram")):
        analyzer = Analyzer(stem=stem, stop=stop, cjk=cjk)
        cells = []
        for ids, texts, queries, qrels in datasets.values():
            segment = KeywordSegment.build(texts, analyzer)
            searcher = KeywordSearcher([(segment, np.ones(len(texts), dtype=bool))], analyzer)
            cells.append(f"{ndcg10(searcher, ids, queries, qrels):.4f}")
        print(f"| {analyzer.name} | " + " | ".join(cells) + " |", flush=True)
    print()
    analyzer = default_analyzer()
    print(f"k1 sweep with {analyzer.name}, b=0.75")
    print("| k1 | " + " | ".join(datasets) + " |")
    print("|---|" + "---|" * len(datasets))
    segments = {}
    for name, (_ids, texts, _q, _r) in datasets.items():
        segments[name] = KeywordSegment.build(texts, analyzer)
    for k1 in (0.9, 1.2, 1.5):
        cells = []
        for name, (ids, texts, queries, qrels) in datasets.items():
            searcher = KeywordSearcher(
                [(segments[name], np.ones(len(texts), dtype=bool))], analyzer, BM25Parameters(k1=k1, b=0.75)
            )
            cells.append(f"{ndcg10(searcher, ids, queries, qrels):.4f}")
        print(f"| {k1} | " + " | ".join(cells) + " |", flush=True)


def _percentiles(samples: list[float]) -> tuple[float, float]:
    arr = np.asarray(samples) * 1000.0
    return float(np.percentile(arr, 50)), float(np.percentile(arr, 95))


def _synthetic(n_chunks: int, seed: int = 0) -> list[str]:
    """Chunks of 40-160 words drawn Zipf-like from SciFact's vocabulary, a tenth with Chinese sentences mixed in."""
    _ids, texts, _q, _r = load_beir("scifact", "queries.test.jsonl")
    _zh_ids, zh_texts, _zq, _zr = load_beir("xquad-retrieval-zh")
    counts: dict[str, int] = {}
    for text in texts:
        for word in text.split():
            counts[word] = counts.get(word, 0) + 1
    words = np.array(sorted(counts, key=counts.__getitem__, reverse=True))
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, len(words) + 1)
    weights /= weights.sum()
    lengths = rng.integers(40, 160, size=n_chunks)
    drawn = rng.choice(len(words), size=int(lengths.sum()), p=weights)
    out, pos = [], 0
    for i, n in enumerate(lengths):
        text = " ".join(words[drawn[pos : pos + n]])
        pos += n
        if i % 10 == 0:
            zh = zh_texts[int(rng.integers(len(zh_texts)))]
            start = int(rng.integers(max(1, len(zh) - 80)))
            text = f"{text} {zh[start : start + 80]}"
        out.append(text)
    return out


def _bench_corpus(label: str, texts: list[str], queries: list[str], n_segments: int, delete_fraction: float) -> None:
    import bm25s

    analyzer = default_analyzer()
    params = BM25Parameters()
    rng = np.random.default_rng(1)
    t0 = time.perf_counter()
    bounds = np.linspace(0, len(texts), n_segments + 1).astype(int)
    segments, live_texts_tokens = [], []
    for lo, hi in itertools.pairwise(bounds):
        segment = KeywordSegment.build(texts[lo:hi], analyzer)
        live = rng.random(hi - lo) >= delete_fraction
        segments.append((segment, live))
    build_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    searcher = KeywordSearcher(segments, analyzer, params)
    searcher_s = time.perf_counter() - t0

    # bm25s gets exactly the live rows' tokens (re-analysed, excluded from the timings).
    for (lo, _hi), (_segment, live) in zip(itertools.pairwise(bounds), segments, strict=True):
        for i in np.flatnonzero(live):
            live_texts_tokens.append(analyzer.tokens(texts[lo + i]))
    reference = bm25s.BM25(method="lucene", k1=params.k1, b=params.b)
    reference.index(live_texts_tokens, show_progress=False)

    query_tokens = [searcher.query_terms(q) for q in queries]
    known = set(reference.vocab_dict)
    pairs = [(q, t) for q, t in zip(queries, query_tokens, strict=True) if any(x in known for x in t)]

    rows: dict[str, list[float]] = {
        "ours search(query), cold searcher": [],
        "ours search(query), warm": [],
        "ours search_terms(tokens), warm": [],
        "bm25s retrieve([tokens], k=10)": [],
        "bm25s get_scores(tokens) + top-10": [],
    }
    max_diff = 0.0
    for attempt in range(2):  # the first pass warms the searcher's term cache and bm25s; keep the second
        for values in rows.values():
            values.clear()
        for query, tokens in pairs:  # interleaved, so load changes on a shared machine hit all methods alike
            fresh = KeywordSearcher(segments, analyzer, params)  # as after a commit: no term cached yet
            t = time.perf_counter()
            fresh.search(query, 10)
            rows["ours search(query), cold searcher"].append(time.perf_counter() - t)
            t = time.perf_counter()
            searcher.search(query, 10)
            rows["ours search(query), warm"].append(time.perf_counter() - t)
            t = time.perf_counter()
            hits = searcher.search_terms(tokens, 10)
            rows["ours search_terms(tokens), warm"].append(time.perf_counter() - t)
            kept = [x for x in tokens if x in known]
            t = time.perf_counter()
            _docs, ref = reference.retrieve([kept], k=10, show_progress=False, n_threads=1)
            rows["bm25s retrieve([tokens], k=10)"].append(time.perf_counter() - t)
            t = time.perf_counter()
            scores = reference.get_scores(kept)
            top = np.argpartition(-scores, 10)[:10]
            top[np.argsort(-scores[top])]
            rows["bm25s get_scores(tokens) + top-10"].append(time.perf_counter() - t)
            if attempt:
                ours = np.array([h.score for h in hits]) / (params.k1 + 1.0)  # bm25s omits the (k1+1) factor
                n = min(len(ours), ref.shape[1])
                max_diff = max(max_diff, float(np.max(np.abs(ours[:n] - ref[0, :n]), initial=0.0)))

    print(
        f"\n## {label}: {len(texts)} chunks in {n_segments} segment(s), {delete_fraction:.0%} deleted, "
        f"{searcher.n_docs} live, {len(pairs)} queries, k=10"
    )
    print(
        f"build {build_s:.1f}s, searcher construction {searcher_s * 1000:.1f} ms; "
        f"max |top-10 score diff| vs bm25s (float32) {max_diff:.1e}"
    )
    print("| method | p50 ms | p95 ms |")
    print("|---|---|---|")
    stats = {name: _percentiles(v) for name, v in rows.items()}
    for name, (p50, p95) in stats.items():
        print(f"| {name} | {p50:.3f} | {p95:.3f} |")
    comparisons = [
        ("ours search_terms(tokens), warm", "bm25s get_scores(tokens) + top-10"),
        ("ours search(query), cold searcher", "bm25s get_scores(tokens) + top-10"),
        ("ours search(query), warm", "bm25s retrieve([tokens], k=10)"),
    ]
    for ours_name, ref_name in comparisons:
        r50 = stats[ours_name][0] / stats[ref_name][0]
        r95 = stats[ours_name][1] / stats[ref_name][1]
        print(f"ratio {ours_name} / {ref_name}: p50 {r50:.2f}x, p95 {r95:.2f}x")


def latency(n_synthetic: int) -> None:
    _ids, texts, queries, _qrels = load_beir("scifact", "queries.test.jsonl")
    _zids, _ztexts, zh_queries, _zq = load_beir("xquad-retrieval-zh")
    qs = list(queries.values())
    _bench_corpus("SciFact", texts, qs, n_segments=1, delete_fraction=0.0)
    _bench_corpus("SciFact", texts, qs, n_segments=5, delete_fraction=0.05)
    synthetic = _synthetic(n_synthetic)
    mixed = qs + list(zh_queries.values())[:100]
    _bench_corpus("synthetic", synthetic, mixed, n_segments=1, delete_fraction=0.0)
    _bench_corpus("synthetic", synthetic, mixed, n_segments=10, delete_fraction=0.05)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["quality", "latency"])
    parser.add_argument("--synthetic-chunks", type=int, default=100_000)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    for handler in logging.getLogger().handlers:
        handler.setLevel(logging.WARNING)  # bm25s sets its own logger to DEBUG
    if not EVAL.is_dir():
        raise SystemExit(f"evaluation data not found at {EVAL}")
    if args.mode == "quality":
        quality()
    else:
        latency(args.synthetic_chunks)


if __name__ == "__main__":
    main()
