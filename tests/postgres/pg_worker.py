"""A writer process for the PostgreSQL store's concurrency and crash tests.

Usage::

    python pg_worker.py write URL KB_ID NAME COUNT SEED  commit COUNT documents, deleting every third one later;
                                                         prints {"added": id} / {"deleted": id} after each commit
    python pg_worker.py hold URL KB_ID ROWS              commit one document of ROWS chunks (the test kills it)

Every chunk holds the word "common", so in any consistent snapshot df(common) equals the number of live rows.
"""

from __future__ import annotations

import json
import random
import sys

import numpy as np

from kb_core.engines.analysis import default_analyzer
from kb_core.store.postgres import PostgresStore, StoreChange
from tests.postgres.helpers import make_document

WORDS = [
    "hybrid",
    "search",
    "keyword",
    "vector",
    "cosine",
    "bm25",
    "chunk",
    "import",
    "export",
    "bundle",
    "graph",
    "token",
    "scope",
    "replica",
    "standby",
    "知识库",
    "混合检索",
    "向量",
    "关键词",
    "得分",
    "文档",
    "导入",
    "评估",
    "权重",
    "相似度",
]


def chunk_texts(rng: random.Random, count: int) -> list[str]:
    return ["common " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 30))) for _ in range(count)]


def write(url: str, kb_id: str, name: str, count: int, seed: int) -> None:
    rng = random.Random(seed)
    vectors = np.random.default_rng(seed)
    analyzer = default_analyzer()
    with PostgresStore.open(url, application_name=f"kb-test-writer-{name}") as store:
        mine: list[str] = []
        for i in range(count):
            doc_id = f"doc_{name}_{i}"
            document = make_document(doc_id, chunk_texts(rng, rng.randint(1, 8)), analyzer, vectors)
            store.commit(kb_id, StoreChange(add=(document,)))
            print(json.dumps({"added": doc_id}), flush=True)
            mine.append(doc_id)
            if i % 3 == 2:
                victim = mine.pop(rng.randrange(len(mine)))
                store.commit(kb_id, StoreChange(delete=(victim,)))
                print(json.dumps({"deleted": victim}), flush=True)


def hold(url: str, kb_id: str, rows: int) -> None:
    rng = random.Random(7)
    analyzer = default_analyzer()
    document = make_document("doc_killed", chunk_texts(rng, rows), analyzer, np.random.default_rng(7))
    with PostgresStore.open(url, application_name="kb-test-hold") as store:
        print("committing", flush=True)
        store.commit(kb_id, StoreChange(add=(document,)))
        print("committed", flush=True)


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "write":
        write(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6]))
    elif mode == "hold":
        hold(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        raise SystemExit(f"unknown mode {mode!r}; accepted: write, hold")
