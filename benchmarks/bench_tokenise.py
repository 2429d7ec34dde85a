"""Issue #15: the local embedder fed token ids (one tokenisation) against model.encode (tokenising again).

    python benchmarks/bench_tokenise.py --chunks 600 --chunk-size 160 --rounds 2

Chunks SciFact abstracts (../shared/eval/scifact/corpus.jsonl) with the model's tokenizer, then in one process
times ``embed_documents`` on the chunk texts with the token-id path (A) and with ``from_token_ids=False`` (B,
the ``model.encode`` path), alternating A, B for ``--rounds`` rounds after a warm-up; then the tokenisation
alone, up to the batch tensors the forward takes: one ``encode_batch`` with offsets and the padded id batches
(A) against ``count_batch`` plus sentence-transformers' ``preprocess`` in the batches ``encode`` would make
(B). Prints one JSON report with the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from kb_core.embedding.local import SentenceTransformerEmbedder
from kb_core.embedding.model_input import InputTemplate
from kb_core.ingest.chunking import chunk_document
from kb_core.ingest.parsing.base import ParsedDocument, TextBlock

SHARED = Path(__file__).resolve().parents[1].parent / "shared"


def _load() -> str:
    with open("/proc/loadavg", encoding="utf-8") as handle:
        return " ".join(handle.read().split()[:3])


def chunk_texts(corpus: Path, embedder: SentenceTransformerEmbedder, chunks: int, chunk_size: int) -> list[str]:
    texts: list[str] = []
    with open(corpus, encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            blocks = tuple(TextBlock(t) for t in (row.get("title", ""), row.get("text", "")) if t.strip())
            doc = ParsedDocument(file_type="txt", blocks=blocks)
            texts.extend(c.content for c in chunk_document(doc, embedder.tokenizer, chunk_size))
            if len(texts) >= chunks:
                return texts[:chunks]
    return texts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chunks", type=int, default=600)
    parser.add_argument("--chunk-size", type=int, default=160)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tokenise-repeats", type=int, default=5, help="the tokenisation's fastest run is kept")
    parser.add_argument("--corpus", type=Path, default=SHARED / "eval" / "scifact" / "corpus.jsonl")
    args = parser.parse_args()
    corpus = args.corpus
    if not corpus.exists():
        raise SystemExit(f"{corpus} is absent; this benchmark reads the shared SciFact corpus")
    ids_path = SentenceTransformerEmbedder()
    encode_path = SentenceTransformerEmbedder(from_token_ids=False)
    texts = chunk_texts(corpus, ids_path, args.chunks, args.chunk_size)
    counts = ids_path.tokenizer.count_batch(texts)
    report: dict[str, Any] = {
        "chunks": len(texts),
        "mean_tokens": round(sum(counts) / len(counts), 1),
        "device": ids_path.device.describe(),
        "load_before": _load(),
    }
    for embedder in (ids_path, encode_path):
        embedder.embed_documents(texts[:64])  # warm-up: loads the model, first-call allocations
    timings: dict[str, list[float]] = {"token_ids": [], "model_encode": []}
    cpu: dict[str, list[float]] = {"token_ids": [], "model_encode": []}
    for _ in range(args.rounds):
        for name, embedder in (("token_ids", ids_path), ("model_encode", encode_path)):
            t0, c0 = time.perf_counter(), time.process_time()
            embedder.embed_documents(texts)
            timings[name].append(round(time.perf_counter() - t0, 3))
            cpu[name].append(round(time.process_time() - c0, 3))
    report["embed_documents_s"] = timings
    # CPU seconds of this process: less swayed than wall time by other processes on a shared machine.
    report["embed_documents_cpu_s"] = cpu

    tok, model = ids_path.tokenizer, ids_path.model
    template = InputTemplate.from_tokenizer(tok.backend, pad_id=int(model.tokenizer.pad_token_id))
    assert template is not None
    batch = ids_path.batch_size

    def once() -> tuple[float, float]:
        t0 = time.perf_counter()
        encodings = tok.encode_batch(texts)
        encoded = time.perf_counter()
        rows = sorted((e.ids for e in encodings), key=len, reverse=True)
        for s in range(0, len(rows), batch):
            _ = {k: torch.from_numpy(v) for k, v in template.batch(rows[s : s + batch]).items()}
        return encoded - t0, time.perf_counter() - t0

    def before() -> tuple[float, float]:
        t0 = time.perf_counter()
        tok.count_batch(texts)
        counted = time.perf_counter()
        ordered = sorted(texts, key=len, reverse=True)  # as model.encode orders them
        for s in range(0, len(ordered), batch):
            model.preprocess(ordered[s : s + batch])
        return counted - t0, time.perf_counter() - t0

    # The fastest of several runs: these take milliseconds, and other processes share the machine.
    runs = [(once(), before()) for _ in range(args.tokenise_repeats)]  # interleaved: both see the same load
    a = min((r[0] for r in runs), key=lambda t: t[1])
    b = min((r[1] for r in runs), key=lambda t: t[1])
    report["tokenise_once_s"] = {"encode_batch": round(a[0], 4), "with_model_input": round(a[1], 4)}
    report["tokenise_before_s"] = {"count_batch": round(b[0], 4), "with_model_preprocess": round(b[1], 4)}
    report["load_after"] = _load()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
