"""Run parsers in reusable worker processes so a hostile file can be killed on timeout.

Workers are started with the "forkserver" context (never plain fork: the parent may run torch
threads). Each worker serves many files; one that times out or dies is killed and replaced on the
next call. The parse timeout starts once a worker is ready, so process start-up is not charged to
the file.
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from kb_core.errors import ParseError
from kb_core.parsing.base import CORRUPT_DOCUMENT, PARSE_TIMEOUT, ParsedDocument, ParseLimits, parse_error
from kb_core.parsing.inprocess import check_file, parse_file_inprocess

logger = logging.getLogger(__name__)

_START_TIMEOUT = 60.0
_MAX_IDLE_WORKERS = 2


def _worker_main(conn: Connection) -> None:
    """Worker loop: receive (path, limits), answer ("ok", doc) or ("error", code, message, details)."""
    conn.send(("ready",))
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return
        if request is None:
            return
        path, limits = request
        try:
            reply: tuple[Any, ...] = ("ok", parse_file_inprocess(path, limits))
        except ParseError as exc:
            reply = ("error", exc.code, exc.message, exc.details)
        except BaseException as exc:  # the worker must answer, whatever happened
            reply = ("error", CORRUPT_DOCUMENT, f"Cannot import '{Path(path).name}': {type(exc).__name__}: {exc}", {})
        try:
            conn.send(reply)
        except (EOFError, OSError):
            return


class _Worker:
    def __init__(self, ctx: multiprocessing.context.BaseContext) -> None:
        parent, child = ctx.Pipe(duplex=True)
        self.conn = parent
        self.process = ctx.Process(target=_worker_main, args=(child,), daemon=True, name="kb-parse-worker")
        self.process.start()
        child.close()
        if not parent.poll(_START_TIMEOUT):
            self.kill()
            raise ParseError("The document parser process did not start", code=PARSE_TIMEOUT)
        parent.recv()

    def alive(self) -> bool:
        return self.process.is_alive()

    def kill(self) -> None:
        try:
            self.process.kill()
            self.process.join(5)
        finally:
            self.conn.close()

    def stop(self) -> None:
        try:
            self.conn.send(None)
            self.process.join(2)
        except (OSError, ValueError):
            pass
        if self.process.is_alive():
            self.process.kill()
            self.process.join(2)
        self.conn.close()


class ParserPool:
    """A few reusable parse workers; thread-safe (each call borrows a worker)."""

    def __init__(self, start_method: str = "forkserver") -> None:
        self._ctx = multiprocessing.get_context(start_method)
        self._idle: list[_Worker] = []
        self._lock = threading.Lock()

    def _borrow(self) -> _Worker:
        with self._lock:
            while self._idle:
                worker = self._idle.pop()
                if worker.alive():
                    return worker
                worker.kill()
        return _Worker(self._ctx)

    def _give_back(self, worker: _Worker) -> None:
        with self._lock:
            if len(self._idle) < _MAX_IDLE_WORKERS:
                self._idle.append(worker)
                return
        worker.stop()

    def parse(self, path: Path, limits: ParseLimits) -> ParsedDocument:
        worker = self._borrow()
        started = time.monotonic()
        try:
            worker.conn.send((path, limits))
            ready = worker.conn.poll(limits.timeout_seconds)
            reply = worker.conn.recv() if ready else None
        except (EOFError, OSError, BrokenPipeError):
            worker.kill()
            raise parse_error(CORRUPT_DOCUMENT, path, "the parser process crashed on this file") from None
        if reply is None:
            worker.kill()
            raise parse_error(
                PARSE_TIMEOUT, path, f"parsing took longer than {limits.timeout_seconds:g} s and was stopped"
            )
        logger.debug("parsed %s in %.3f s", path, time.monotonic() - started)
        self._give_back(worker)
        if reply[0] == "ok":
            return reply[1]
        _, code, message, details = reply
        raise ParseError(message, code=code, details=details)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.stop()


_pool: ParserPool | None = None
_pool_lock = threading.Lock()


def _shared_pool() -> ParserPool:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ParserPool()
            atexit.register(_pool.close)
        return _pool


def parse_file(path: Path, limits: ParseLimits = ParseLimits()) -> ParsedDocument:  # noqa: B008
    """Parse a .txt/.docx/.doc file into text blocks, in a worker process killed after ``limits.timeout_seconds``.

    Raises ParseError with code FILE_NOT_FOUND, UNSUPPORTED_FORMAT, ENCRYPTED_DOCUMENT, CORRUPT_DOCUMENT,
    EMPTY_DOCUMENT, FILE_TOO_LARGE, PARSE_TIMEOUT or BINARY_FILE, and a message naming the file.
    """
    path = Path(path).absolute()
    check_file(path, limits)  # cheap refusals without a round trip to the worker
    return _shared_pool().parse(path, limits)
