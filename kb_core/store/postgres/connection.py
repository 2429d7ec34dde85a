"""Connections to the PostgreSQL store: URL checks, connection pools, and errors a person can read.

A store is named by a URL, ``postgresql://user[:password]@host[:port]/database[?options]`` (``postgres://`` is
accepted too). :class:`Database` holds a ``psycopg_pool.ConnectionPool`` for the primary and, with a read URL
(a streaming standby), a second pool that read-only snapshots prefer; if the standby cannot be reached they fall
back to the primary and say so in a warning.

Every ``psycopg`` failure leaves this package as a :class:`kb_core.base.errors.KBError` whose message names the server
(the URL without its password) and the problem. A password never appears in a message or a log line, whatever the
URL's shape: a URL that fails to parse is shown through :func:`redact_url` (which hides the user information and
any ``password=`` option even when the URL is malformed), libpq's own text is cleared of every form of the password
(:func:`scrub_passwords`), and a URL that libpq would read differently from the URL standard (an unescaped ``@``
``/`` ``?`` ``#`` in the password, which once made libpq print half of it as a host name) is refused before
connecting. The kinds of failure: a malformed URL (``INVALID_ARGUMENT``), a server that does not
answer (``DATABASE_UNAVAILABLE``), refused credentials or a missing database (``DATABASE_AUTH``,
``DATABASE_NOT_FOUND``), a server without pgvector (``PGVECTOR_MISSING``); never a traceback.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

import psycopg
import psycopg.conninfo
import psycopg.errors
from psycopg_pool import ConnectionPool, PoolTimeout

from kb_core.base.errors import InvalidArgument, KBError, StoreError
from kb_core.base.redaction import redact_url, scrub_passwords, url_passwords

logger = logging.getLogger(__name__)

__all__ = ["Database", "DatabaseTarget", "database_errors", "parse_database_url", "redact_url", "scrub_passwords"]

URL_SCHEMES = ("postgresql", "postgres")
DEFAULT_CONNECT_TIMEOUT_SECONDS = 5
DEFAULT_POOL_SIZE = 4

_AUTH_FAILURES = ("authentication failed", "role \"", "no pg_hba.conf entry", "password", "permission denied")


@dataclass(frozen=True)
class DatabaseTarget:
    """A checked database URL: the URL itself (for libpq) and how to name it to a person (no password)."""

    url: str = field(repr=False)
    display: str
    user: str
    database: str
    passwords: tuple[str, ...] = field(default=(), repr=False)  # every form of the password, for scrubbing

    def scrub(self, text: str) -> str:
        return scrub_passwords(text, self.passwords)


def parse_database_url(url: object, *, field_name: str = "store") -> DatabaseTarget:
    """Check a PostgreSQL URL without connecting; :class:`InvalidArgument` names what is wrong and what is accepted."""
    accepted = "accepted: postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE"
    if not isinstance(url, str) or not url.strip():
        raise InvalidArgument(f"{field_name} must be a PostgreSQL URL; {accepted}.", details={"field": field_name})
    url = url.strip()
    shown = redact_url(url)
    passwords = url_passwords(url)
    encode = "percent-encode @ / ? # % and spaces in the user name and password (%40 %2F %3F %23 %25 %20)"
    try:
        parts = urlsplit(url)
        port = parts.port  # raises ValueError for a port that is not a number in 0..65535
    except ValueError:  # its text may quote part of the password, read as the port
        raise InvalidArgument(
            f"{field_name} {shown!r} is not a valid URL (the port must be a number from 1 to 65535; {encode}); "
            f"{accepted}.",
            details={"field": field_name},
        ) from None
    if parts.scheme not in URL_SCHEMES:
        raise InvalidArgument(
            f"{field_name} {shown!r} does not start with postgresql://; {accepted}.", details={"field": field_name}
        )
    try:
        options = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        reason = scrub_passwords(_first_line(exc), passwords)
        raise InvalidArgument(
            f"{field_name} {shown!r} is not a valid PostgreSQL URL: {reason}; {accepted}.",
            details={"field": field_name},
        ) from None
    if parts.password is not None and options.get("password") != unquote(parts.password):
        # e.g. an unescaped "@" in the password: libpq reads the rest of it as the host name
        raise InvalidArgument(
            f"{field_name} {shown!r} reads differently to PostgreSQL than to the URL standard: {encode}; {accepted}.",
            details={"field": field_name},
        )
    host = str(options.get("host") or "")
    if not host:
        raise InvalidArgument(f"{field_name} {shown!r} names no host; {accepted}.", details={"field": field_name})
    if port == 0:
        raise InvalidArgument(f"{field_name} {shown!r} has port 0; {accepted}.", details={"field": field_name})
    user = str(options.get("user") or "")
    database = str(options.get("dbname") or user)
    shown_port = f":{port}" if port else ""
    display = scrub_passwords(f"postgresql://{user + '@' if user else ''}{host}{shown_port}/{database}", passwords)
    found = {*passwords, str(options.get("password") or "")} - {""}
    return DatabaseTarget(
        url=url, display=display, user=user, database=database, passwords=tuple(sorted(found, key=len, reverse=True))
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _libpq_reason(exc: psycopg.Error) -> str:
    """libpq's reason without its repeated preamble (``connection to server at "h", port p failed:``)."""
    text = " ".join(line.strip() for line in str(exc).strip().splitlines() if line.strip())
    marker = "failed: "
    if marker in text:
        text = text.rsplit(marker, 1)[1]
    return text or type(exc).__name__


def translate_error(exc: BaseException, target: DatabaseTarget) -> KBError:
    """A readable :class:`KBError` for a psycopg or pool failure on ``target``, with no form of its password."""
    if isinstance(exc, KBError):
        return exc
    error = _translate(exc, target)
    error.message = target.scrub(error.message)
    error.args = (error.message,)
    return error


def _translate(exc: BaseException, target: DatabaseTarget) -> KBError:
    if isinstance(exc, PoolTimeout):
        return StoreError(
            f"PostgreSQL at {target.display} is not reachable: no connection could be made in time ({exc}).",
            code="DATABASE_UNAVAILABLE",
        )
    if isinstance(exc, psycopg.errors.InvalidPassword | psycopg.errors.InvalidAuthorizationSpecification):
        return StoreError(
            f"PostgreSQL at {target.display} refused the credentials of user {target.user or '(default)'}: "
            f"{_libpq_reason(exc)}",
            code="DATABASE_AUTH",
        )
    if isinstance(exc, psycopg.errors.InvalidCatalogName):
        return StoreError(
            f"PostgreSQL at {target.display}: the database {target.database!r} does not exist; create it first "
            f"(createdb {target.database}).",
            code="DATABASE_NOT_FOUND",
        )
    if isinstance(exc, psycopg.errors.ReadOnlySqlTransaction):
        return StoreError(
            f"PostgreSQL at {target.display} is read-only (a standby?): give the primary's URL for writing.",
            code="DATABASE_READ_ONLY",
        )
    if isinstance(exc, psycopg.OperationalError) and exc.sqlstate is None:
        # Failures while connecting carry no SQLSTATE, only the server's FATAL message.
        reason = _libpq_reason(exc)
        if "does not exist" in reason and "database" in reason:
            return StoreError(
                f"PostgreSQL at {target.display}: {reason.removeprefix('FATAL:').strip()}; create it first "
                f"(createdb {target.database}).",
                code="DATABASE_NOT_FOUND",
            )
        if any(marker in reason for marker in _AUTH_FAILURES):
            return StoreError(
                f"PostgreSQL at {target.display} refused user {target.user or '(default)'}: "
                f"{reason.removeprefix('FATAL:').strip()}",
                code="DATABASE_AUTH",
            )
    if isinstance(exc, psycopg.OperationalError):
        return StoreError(
            f"PostgreSQL at {target.display} is not reachable: {_libpq_reason(exc)}", code="DATABASE_UNAVAILABLE"
        )
    if isinstance(exc, psycopg.Error):
        state = f" (SQLSTATE {exc.sqlstate})" if exc.sqlstate else ""
        return StoreError(f"PostgreSQL at {target.display} failed{state}: {_first_line(exc)}")
    return StoreError(f"PostgreSQL at {target.display} failed: {type(exc).__name__}: {exc}")


@contextmanager
def database_errors(target: DatabaseTarget) -> Iterator[None]:
    """Turn psycopg and pool errors raised inside into :class:`KBError` (KBErrors pass through)."""
    try:
        yield
    except KBError:
        raise
    except (psycopg.Error, PoolTimeout) as exc:
        raise translate_error(exc, target) from exc


class Database:
    """Connection pools for one store: the primary, and optionally a read replica.

    ``configure`` runs on each new connection (e.g. registering the pgvector type); it must leave the connection
    idle. Connections are checked before use, so a server that restarted costs a reconnection, not an error.
    """

    def __init__(
        self,
        url: str,
        *,
        read_url: str | None = None,
        pool_size: int = DEFAULT_POOL_SIZE,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_SECONDS,
        application_name: str = "kb-workbench",
        configure: Callable[[psycopg.Connection], None] | None = None,
    ) -> None:
        self.primary = parse_database_url(url)
        self.replica = parse_database_url(read_url, field_name="read_url") if read_url else None
        self.connect_timeout = connect_timeout
        self.application_name = application_name
        self._configure = configure
        self._pool_size = max(1, int(pool_size))
        self._pools: dict[str, ConnectionPool] = {}
        self._lock = threading.Lock()
        self.warnings: list[str] = []

    def connect(self, target: DatabaseTarget, *, autocommit: bool = False) -> psycopg.Connection:
        """One direct connection (not pooled), with a readable error if it cannot be made."""
        with database_errors(target):
            return psycopg.connect(
                target.url,
                autocommit=autocommit,
                connect_timeout=max(1, round(self.connect_timeout)),
                application_name=self.application_name,
            )

    def _pool(self, target: DatabaseTarget) -> ConnectionPool:
        with self._lock:
            pool = self._pools.get(target.url)
            if pool is None:
                # A direct probe first: libpq's own reason (refused, unknown host, bad password) beats a pool timeout.
                self.connect(target).close()
                pool = ConnectionPool(
                    target.url,
                    min_size=1,
                    max_size=self._pool_size,
                    kwargs={
                        "connect_timeout": max(1, round(self.connect_timeout)),
                        "application_name": self.application_name,
                    },
                    configure=self._configure,
                    check=ConnectionPool.check_connection,
                    timeout=self.connect_timeout,
                    name=f"kb-store {target.display}",
                    open=False,
                )
                with database_errors(target):
                    pool.open(wait=True, timeout=self.connect_timeout + 5)
                self._pools[target.url] = pool
            return pool

    @contextmanager
    def connection(self, *, read_only: bool = False) -> Iterator[tuple[psycopg.Connection, DatabaseTarget]]:
        """A pooled connection and the server it leads to: the replica for ``read_only`` work when one is configured
        and reachable, else the primary (with a warning logged and kept in :attr:`warnings`)."""
        if read_only and self.replica is not None:
            replica = self.replica
            try:
                pool = self._pool(replica)
                conn = pool.getconn()
            except (KBError, PoolTimeout) as exc:
                if isinstance(exc, KBError) and exc.code != "DATABASE_UNAVAILABLE":
                    raise
                message = (
                    f"The read replica is unavailable ({translate_error(exc, replica)}); "
                    f"reading from the primary {self.primary.display}."
                )
                logger.warning("%s", message)
                self.warnings.append(message)
                self._drop_pool(replica)
            else:
                try:
                    with database_errors(replica):
                        yield conn, replica
                finally:
                    pool.putconn(conn)
                return
        pool = self._pool(self.primary)
        try:
            conn = pool.getconn()
        except PoolTimeout:
            # After an outage the pool reconnects with a growing back-off; a fresh pool (probe first) answers now:
            # the server's own reason if it is still down, a connection if it is back.
            self._drop_pool(self.primary)
            pool = self._pool(self.primary)
            with database_errors(self.primary):
                conn = pool.getconn()
        try:
            with database_errors(self.primary):
                yield conn, self.primary
        finally:
            pool.putconn(conn)

    def _drop_pool(self, target: DatabaseTarget) -> None:
        with self._lock:
            pool = self._pools.pop(target.url, None)
        if pool is not None:
            pool.close(timeout=1)

    def close(self) -> None:
        with self._lock:
            pools = list(self._pools.values())
            self._pools.clear()
        for pool in pools:
            pool.close(timeout=5)
