"""In-flight imports on a PostgreSQL store: what an import is working on, visible to every host.

The folder store publishes a running import's pending/parsing/embedding documents in ``jobs/PID-….json`` and
drops files whose process is dead. Hosts cannot see each other's processes, so here an import announces itself
in the ``imports`` table over a connection of its own, recording that connection's server process (``pid`` and
``backend_start``, which together name one connection for the server's life). A listing shows the rows whose
connection is still open: an importer that dies (killed, crashed, host lost) loses its connection, the server ends
that backend, and its row is ignored at once and removed by the next listing. No clock and no lease is involved.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import psycopg
import psycopg.errors
from psycopg import sql

from kb_core.base.errors import KBNotFound
from kb_core.base.json_text import json_text
from kb_core.store.postgres import schema
from kb_core.store.postgres.connection import database_errors
from kb_core.store.postgres.store import PostgresStore
from kb_core.store.registry import new_id, utc_now
from kb_core.store.sink import PUBLISH_INTERVAL, ImportState, in_flight_rows

logger = logging.getLogger(__name__)

__all__ = ["ImportAnnouncement", "in_flight_documents"]

_S = sql.Identifier(schema.SCHEMA)
_LIVE = sql.SQL(
    "EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = i.backend_pid AND a.backend_start = i.backend_start)"
)


class ImportAnnouncement:
    """The ``ImportJob`` of a PostgreSQL import: its in-flight documents, in the database while it runs."""

    def __init__(self, store: PostgresStore, kb_id: str, progress: ImportState) -> None:
        self.progress = progress
        self.id = new_id("imp")
        self._published_at = -math.inf
        target = store.db.primary
        self._target = target
        self._conn: psycopg.Connection | None = store.db.connect(target, autocommit=True)
        try:
            with database_errors(target):
                self._conn.execute(
                    sql.SQL(
                        "INSERT INTO {s}.imports (id, kb_id, backend_pid, backend_start, started_at) "
                        "SELECT %s, %s, pid, backend_start, %s FROM pg_stat_activity WHERE pid = pg_backend_pid()"
                    ).format(s=_S),
                    (self.id, kb_id, utc_now()),
                )
        except Exception as exc:
            self._conn.close()
            self._conn = None
            if isinstance(exc.__cause__, psycopg.errors.ForeignKeyViolation):
                raise KBNotFound(f"Knowledge base id '{kb_id}' was deleted.", details={"kb_id": kb_id}) from exc
            raise

    def publish(self, force: bool = False) -> None:
        """Write the in-flight list, at most once per ``PUBLISH_INTERVAL`` unless forced. Best effort: a failure
        is logged and the import goes on (its commit, not this list, is what counts)."""
        now = time.monotonic()
        if self._conn is None or (not force and now - self._published_at < PUBLISH_INTERVAL):
            return
        self._published_at = now
        rows = in_flight_rows(self.progress.files)
        try:
            self._conn.execute(
                sql.SQL("UPDATE {s}.imports SET documents = %s::jsonb WHERE id = %s").format(s=_S),
                (json_text(rows), self.id),
            )
        except psycopg.Error as exc:
            logger.warning("could not announce the in-flight documents of import %s: %s", self.id, exc)

    def close(self) -> None:
        if self._conn is None:
            return
        try:
            self._conn.execute(sql.SQL("DELETE FROM {s}.imports WHERE id = %s").format(s=_S), (self.id,))
        except psycopg.Error as exc:  # the row goes with the connection anyway: it is ignored once that closes
            logger.warning("could not remove the announcement of import %s: %s", self.id, exc)
        finally:
            self._conn.close()
            self._conn = None


def in_flight_documents(store: PostgresStore, kb_id: str) -> list[dict[str, Any]]:
    """The documents running imports (on any host) are working on in the KB, oldest import first; rows of imports
    whose connection is gone are removed. Read on the primary: only its server knows the importers' connections."""
    with store.db.connection() as (conn, target), conn.transaction(), database_errors(target):
        conn.execute(
            sql.SQL("DELETE FROM {s}.imports i WHERE kb_id = %s AND NOT {live}").format(s=_S, live=_LIVE), (kb_id,)
        )
        rows = conn.execute(
            sql.SQL("SELECT documents FROM {s}.imports i WHERE kb_id = %s AND {live} ORDER BY started_at, id").format(
                s=_S, live=_LIVE
            ),
            (kb_id,),
        ).fetchall()
    return [dict(document) for row in rows for document in row[0]]
