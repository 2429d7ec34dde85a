"""A writer process for the crash and concurrency tests: random store operations in a loop.

Usage: python store_worker.py HOME SEED ITERATIONS
Writes synthetic segments (catalog files only) straight through the store API, so the test
exercises the commit protocol without parsers or models.
"""

from __future__ import annotations

import random
import sys
import uuid
from pathlib import Path

from kb_core import KnowledgeBaseService
from kb_core.base.errors import KBNotFound
from kb_core.edges.envelopes import Enveloped
from kb_core.store import Change, catalog


def add_segment(service: KnowledgeBaseService, kb_id: str, rng: random.Random) -> None:
    store = service.kb_store(kb_id)
    staged = store.stage_segment()
    with store.deleted_guard():
        write_segment(store, staged, rng)
    store.commit(Change(add=(staged,)))


def write_segment(store, staged, rng: random.Random) -> None:
    docs = [f"doc_{uuid.uuid4().hex[:12]}" for _ in range(rng.randint(1, 3))]
    chunk_rows = []
    doc_rows = []
    for doc in docs:
        n = rng.randint(1, 20)
        doc_rows.append({"doc_id": doc, "name": f"{doc}.txt", "status": "ready", "chunk_count": n})
        chunk_rows += [
            {"chunk_id": uuid.uuid4().hex, "doc_id": doc, "chunk_index": i, "content": "文本 text " * 50}
            for i in range(n)
        ]
    catalog.write_documents(staged.path, doc_rows)
    catalog.write_chunks(staged.path, chunk_rows)
    catalog.write_texts(staged.path, [{"doc_id": d, "text": "x"} for d in docs])
    staged.rows, staged.documents = len(chunk_rows), len(doc_rows)
    catalog.write_segment_info(
        staged.path, catalog.SegmentInfo(staged.id, staged.rows, staged.documents, "t", 4, "a", "")
    )


def tombstone_one(service: KnowledgeBaseService, kb_id: str, rng: random.Random) -> None:
    store = service.kb_store(kb_id)

    def plan(manifest):
        for ref in manifest.segments:
            frame = catalog.read_documents(store.segment_dir(ref.id))
            for row in frame.to_dict("records"):
                if not manifest.is_deleted(ref.id, row["doc_id"]):
                    return Change(tombstones={ref.id: {row["doc_id"]: int(row["chunk_count"])}})
        return Change()

    store.commit(plan)


def main() -> None:
    home, seed, iterations = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    rng = random.Random(seed)
    service = KnowledgeBaseService(home)
    session = Enveloped(service.session())
    for step in range(iterations):
        records = service.home.knowledge_bases()
        action = rng.random()
        if action < 0.25 or not records:
            session.create_knowledge_base(f"kb-{seed}-{step}-知识", 256, "hashing")
        elif action < 0.35:
            session.delete_knowledge_base(rng.choice(records).name)
        else:
            try:
                if action < 0.8:
                    add_segment(service, rng.choice(records).id, rng)
                else:
                    tombstone_one(service, rng.choice(records).id, rng)
            except KBNotFound:
                pass  # another worker deleted that KB meanwhile: the expected, reported outcome
        print(step, flush=True)


if __name__ == "__main__":
    main()
