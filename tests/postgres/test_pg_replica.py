"""A streaming standby (``read_url``) serves snapshots; losing it falls back to the primary with a warning."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import psycopg
import pytest

from kb_core import KnowledgeBaseService
from kb_core.base.errors import KBError
from kb_core.edges.envelopes import Enveloped
from kb_core.engines.analysis import Analyzer
from kb_core.features.results import SearchRequest
from kb_core.store.postgres import PostgresStore, StoreChange
from kb_core.store.postgres.embedded import LocalPostgres
from tests.postgres.helpers import make_document


@pytest.fixture(scope="module")
def standby(postgres_server: LocalPostgres, pg_store: PostgresStore) -> Iterator[LocalPostgres]:
    started = time.perf_counter()
    server = postgres_server.standby()  # after pg_store: the schema is there to copy
    assert time.perf_counter() - started < 60
    try:
        yield server
    finally:
        server.close()


def database_url(server: LocalPostgres, pg_store: PostgresStore) -> str:
    return server.url(pg_store.db.primary.database)


def wait_for_replay(primary_url: str, standby_url: str) -> None:
    with psycopg.connect(primary_url, autocommit=True) as primary:
        target = primary.execute("SELECT pg_current_wal_lsn()").fetchone()[0]  # type: ignore[index]
    with psycopg.connect(standby_url, autocommit=True) as replica:
        deadline = time.monotonic() + 30
        while not replica.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (target,)).fetchone()[0]:  # type: ignore[index]
            assert time.monotonic() < deadline, "the standby did not catch up in 30 s"
            time.sleep(0.02)


def test_snapshots_read_from_the_standby_and_fall_back_when_it_is_gone(
    pg_store: PostgresStore, standby: LocalPostgres, analyzer: Analyzer
) -> None:
    rng = np.random.default_rng(31)
    primary_url = pg_store.db.primary.url
    replica_url = database_url(standby, pg_store)
    store = PostgresStore.open(primary_url, read_url=replica_url, connect_timeout=2)
    try:
        record = store.create_knowledge_base("replicated 复制", 64, "hashing", analyzer=analyzer.name)
        store.commit(record.id, StoreChange(add=(make_document("doc_r", ["standby reads 备用服务器"], analyzer, rng),)))
        wait_for_replay(primary_url, replica_url)
        with store.snapshot(record.id) as snapshot:
            assert snapshot.server == store.db.replica.display  # type: ignore[union-attr]
            assert snapshot.warnings == ()
            assert [d.doc_id for d in snapshot.documents()] == ["doc_r"]
            hits = snapshot.keyword_candidates(snapshot.query_terms("备用服务器 standby", analyzer), 5)
            assert len(hits) == 1
        standby.stop()
        with store.snapshot(record.id) as snapshot:
            assert snapshot.server == store.db.primary.display
            assert len(snapshot.warnings) == 1 and "read replica is unavailable" in snapshot.warnings[0]
            assert f"127.0.0.1:{standby.port}" in snapshot.warnings[0]
            assert [d.doc_id for d in snapshot.documents()] == ["doc_r"]
    finally:
        store.close()
    with pytest.raises(KBError) as caught:
        PostgresStore.open(replica_url)
    assert caught.value.code in ("DATABASE_UNAVAILABLE", "DATABASE_READ_ONLY")


def test_a_standby_given_as_the_primary_is_refused_by_name(
    postgres_server: LocalPostgres, pg_store: PostgresStore, analyzer: Analyzer
) -> None:
    with postgres_server.standby() as replica:
        with pytest.raises(KBError) as caught:
            PostgresStore.open(database_url(replica, pg_store))
        assert caught.value.code == "DATABASE_READ_ONLY" and "primary" in caught.value.message


def test_the_service_searches_the_standby_and_says_when_it_falls_back(
    postgres_server: LocalPostgres, pg_store: PostgresStore, tmp_path: Path
) -> None:
    """``KnowledgeBaseService(store=PRIMARY, read_url=STANDBY)``: searches read the standby; once it is gone they
    read the primary and the search's warnings name the standby."""
    primary_url = pg_store.db.primary.url
    with postgres_server.standby() as replica:
        replica_url = database_url(replica, pg_store)
        service = KnowledgeBaseService(tmp_path / "home", store=primary_url, read_url=replica_url)
        try:
            session = Enveloped(service.session())
            assert session.create_knowledge_base("standby 备用", 64, embedding_model="hashing")["success"]
            assert session.select_knowledge_base("standby 备用")["success"]
            note = tmp_path / "备用.txt"
            note.write_text("The standby serves searches; 备用服务器 提供 检索。\n" * 5, encoding="utf-8")
            assert session.import_document([str(note)])["success"]
            wait_for_replay(primary_url, replica_url)
            served = session.search(SearchRequest("备用服务器 standby searches"))
            assert served["success"] and served["data"]["count"] >= 1
            assert served["data"]["warnings"] == []
            replica.stop()
            fallen_back = session.search(SearchRequest("备用服务器 standby searches"))
            assert fallen_back["success"]
            assert [h["id"] for h in fallen_back["data"]["chunks"]] == [h["id"] for h in served["data"]["chunks"]]
            assert any(f"127.0.0.1:{replica.port}" in w for w in fallen_back["data"]["warnings"])
        finally:
            service.close()
