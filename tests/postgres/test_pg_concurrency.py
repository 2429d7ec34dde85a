"""Concurrent writers, a writer killed mid-transaction and readers during commits, on a real PostgreSQL server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
import psycopg
import pytest

from kb_core.engines.analysis import Analyzer
from kb_core.store.postgres import PostgresStore, StoreChange
from tests.postgres.helpers import make_document

WORKER = Path(__file__).with_name("pg_worker.py")
REPO = Path(__file__).resolve().parents[2]


def worker(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.Popen(
        [sys.executable, str(WORKER), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


def live_state(
    store: PostgresStore, kb_id: str, analyzer: Analyzer
) -> tuple[set[str], tuple[int, int, dict[str, int]]]:
    """The live document ids, and (N, Σ dl, df) recomputed from the live chunk texts."""
    with store.snapshot(kb_id) as snapshot:
        documents = snapshot.documents()
        texts = [chunk.content for d in documents for _, chunk in snapshot.document_chunks(d.doc_id)]
    df: Counter[str] = Counter()
    total = 0
    for text in texts:
        tokens = analyzer.tokens(text)
        total += len(tokens)
        df.update(set(tokens))
    return {d.doc_id for d in documents}, (len(texts), total, dict(df))


def stored_statistics(store: PostgresStore, kb_id: str) -> tuple[int, int, dict[str, int]]:
    with store.snapshot(kb_id) as snapshot, psycopg.connect(store.db.primary.url) as conn:
        rows = conn.execute(
            f"SELECT term, df FROM kb_workbench.terms_{snapshot.tables.table_no} WHERE df > 0"
        ).fetchall()
        return snapshot.statistics.live_rows, snapshot.statistics.total_length, {str(t): int(n) for t, n in rows}


def test_two_writer_processes_lose_and_duplicate_nothing(pg_store: PostgresStore, analyzer: Analyzer) -> None:
    record = pg_store.create_knowledge_base("two writers", 64, "hashing", analyzer=analyzer.name)
    url = pg_store.db.primary.url
    writers = [worker("write", url, record.id, name, "18", str(seed)) for name, seed in (("a", 1), ("b", 2))]
    added: set[str] = set()
    deleted: set[str] = set()
    for process in writers:
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err[-3000:]
        for line in out.splitlines():
            event = json.loads(line)
            added.update([event["added"]] if "added" in event else [])
            deleted.update([event["deleted"]] if "deleted" in event else [])
    assert len(added) == 36 and len(deleted) == 12
    documents, expected = live_state(pg_store, record.id, analyzer)
    assert documents == added - deleted  # nothing lost, nothing left that was deleted
    assert stored_statistics(pg_store, record.id) == expected  # N, Σ dl and every df exact
    assert pg_store.verify(record.id) == []
    with pg_store.snapshot(record.id) as snapshot:
        assert snapshot.version == 48  # every commit counted once
        chunk_ids = [c.chunk_id for d in snapshot.documents() for _, c in snapshot.document_chunks(d.doc_id)]
    assert len(chunk_ids) == len(set(chunk_ids))
    pg_store.delete_knowledge_base(record.id)


def test_a_writer_killed_mid_transaction_leaves_nothing(pg_store: PostgresStore, analyzer: Analyzer) -> None:
    rng = np.random.default_rng(21)
    record = pg_store.create_knowledge_base("killed writer", 64, "hashing", analyzer=analyzer.name)
    pg_store.commit(record.id, StoreChange(add=(make_document("doc_before", ["common words before"], analyzer, rng),)))
    before = stored_statistics(pg_store, record.id)
    process = worker("hold", pg_store.db.primary.url, record.id, "6000")
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "committing"
    in_copy = False
    deadline = time.monotonic() + 60
    with psycopg.connect(pg_store.db.primary.url, autocommit=True) as monitor:
        while time.monotonic() < deadline and process.poll() is None:
            row = monitor.execute(
                "SELECT query FROM pg_stat_activity WHERE application_name = 'kb-test-hold' AND state = 'active' "
                "AND xact_start IS NOT NULL"
            ).fetchone()
            if row and str(row[0]).lstrip().startswith("COPY"):  # documents and terms written, rows streaming
                in_copy = True
                break
            time.sleep(0.005)
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
        assert in_copy, "the writer was not caught inside its transaction"
        while monitor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'kb-test-hold'"
        ).fetchone()[0]:  # type: ignore[index]
            time.sleep(0.01)  # the server rolls back the dead connection's transaction
    assert stored_statistics(pg_store, record.id) == before
    with pg_store.snapshot(record.id) as snapshot:
        assert [d.doc_id for d in snapshot.documents()] == ["doc_before"] and snapshot.version == 1
        assert snapshot.text("doc_killed") is None and snapshot.original("doc_killed") is None
    assert pg_store.verify(record.id) == []
    # no lock outlives the writer: the next commit goes through at once
    pg_store.commit(record.id, StoreChange(add=(make_document("doc_after", ["common words after"], analyzer, rng),)))
    assert pg_store.verify(record.id) == []
    pg_store.delete_knowledge_base(record.id)


def test_a_snapshot_sees_the_state_before_a_commit_until_it_ends(pg_store: PostgresStore, analyzer: Analyzer) -> None:
    rng = np.random.default_rng(22)
    record = pg_store.create_knowledge_base("old or new", 64, "hashing", analyzer=analyzer.name)
    pg_store.commit(
        record.id, StoreChange(add=(make_document("doc_old", ["the old text about graphs"], analyzer, rng),))
    )
    with pg_store.snapshot(record.id) as old:
        committed = threading.Event()

        def commit_in_another_connection() -> None:
            pg_store.commit(
                record.id,
                StoreChange(delete=("doc_old",), add=(make_document("doc_new", ["zebra appears now"], analyzer, rng),)),
            )
            committed.set()

        thread = threading.Thread(target=commit_in_another_connection)
        thread.start()
        thread.join(timeout=30)
        assert committed.is_set()  # the writer did not wait for the reader
        assert [d.doc_id for d in old.documents()] == ["doc_old"]
        assert old.keyword_candidates(old.query_terms("zebra", analyzer), 5) == []
        assert len(old.keyword_candidates(old.query_terms("graphs", analyzer), 5)) == 1
        assert old.statistics.live_rows == 1 and old.version == 1
    with pg_store.snapshot(record.id) as new:
        assert [d.doc_id for d in new.documents()] == ["doc_new"]
        assert len(new.keyword_candidates(new.query_terms("zebra", analyzer), 5)) == 1
        assert new.keyword_candidates(new.query_terms("graphs", analyzer), 5) == []
    pg_store.delete_knowledge_base(record.id)


@pytest.mark.slow
def test_readers_during_commits_never_see_half_of_one(pg_store: PostgresStore, analyzer: Analyzer) -> None:
    """While another process commits and deletes, every snapshot is whole: the documents' chunk counts, the rows,
    N and df of the word every chunk holds all agree."""
    record = pg_store.create_knowledge_base("readers", 64, "hashing", analyzer=analyzer.name)
    writer = worker("write", pg_store.db.primary.url, record.id, "r", "30", "5")
    checked = 0
    versions: set[int] = set()
    try:
        while writer.poll() is None:
            with pg_store.snapshot(record.id) as snapshot:
                documents = snapshot.documents()
                rows = sum(len(snapshot.document_chunks(d.doc_id)) for d in documents)
                common = snapshot.query_terms("common", analyzer)
                assert sum(d.chunk_count for d in documents) == rows == snapshot.statistics.live_rows
                assert (common.df[0] if rows else 0) == rows
                versions.add(snapshot.version)
            checked += 1
    finally:
        _, err = writer.communicate(timeout=300)
    assert writer.returncode == 0, err[-3000:]
    assert checked > 10 and len(versions) > 3, (checked, versions)
    pg_store.delete_knowledge_base(record.id)
