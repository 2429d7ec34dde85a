"""Run parsers in reusable worker processes so a hostile file can be killed on timeout.

Workers are separate interpreters started with ``subprocess`` (never fork: the parent may run
torch threads; and not multiprocessing's spawn/forkserver, which re-import the caller's ``__main__``
and so break unguarded scripts). Each worker serves many files; one that times out or dies is killed and replaced on the
next call. The parse timeout starts once a worker is ready, so process start-up is not charged to
the file. Each request also caps the worker's address space (``ParseLimits.max_memory_bytes``, RLIMIT_AS),
so a file that needs more memory fails as FILE_TOO_LARGE instead of exhausting the machine; a worker
that ran out of memory is retired after its answer.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import pickle
import resource
import select
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from kb_core.errors import ParseError
from kb_core.ingest.parsing.base import (
    CORRUPT_DOCUMENT,
    FILE_TOO_LARGE,
    PARSE_TIMEOUT,
    ParsedDocument,
    ParseLimits,
    parse_error,
)
from kb_core.ingest.parsing.inprocess import check_file, parse_file_inprocess

logger = logging.getLogger(__name__)

_START_TIMEOUT = 60.0


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity where the platform has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


# As many parser processes as cores (2 at least, 8 at most: each holds some 50 MB), kept between imports.
PARSER_PROCESSES = max(2, min(8, usable_cores()))
_MAX_IDLE_WORKERS = PARSER_PROCESSES


class _PipeConnection:
    """Length-prefixed pickles over a pair of file descriptors (request/response, so no read-ahead)."""

    def __init__(self, read_fd: int, write_fd: int) -> None:
        self.read_fd, self.write_fd = read_fd, write_fd

    def send(self, value: Any) -> None:
        data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        view = memoryview(struct.pack("!Q", len(data)) + data)
        while view:
            view = view[os.write(self.write_fd, view) :]

    def _read_exactly(self, size: int) -> bytes:
        parts, remaining = [], size
        while remaining:
            block = os.read(self.read_fd, min(remaining, 1 << 20))
            if not block:
                raise EOFError("parser worker closed its pipe")
            parts.append(block)
            remaining -= len(block)
        return b"".join(parts)

    def recv(self) -> Any:
        (size,) = struct.unpack("!Q", self._read_exactly(8))
        return pickle.loads(self._read_exactly(size))

    def poll(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.read_fd], [], [], timeout)
        return bool(ready)

    def close(self) -> None:
        for fd in (self.read_fd, self.write_fd):
            with contextlib.suppress(OSError):
                os.close(fd)


def serve_stdio() -> None:
    """Worker entry point: requests on stdin, replies on the original stdout; stray prints go to stderr."""
    protocol_out = os.dup(1)
    os.dup2(2, 1)
    conn = _PipeConnection(0, protocol_out)
    conn.send(("ready",))
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return
        if request is None:
            return
        path, limits, chunking = request
        _cap_memory(limits.max_memory_bytes)
        try:
            parsed = parse_file_inprocess(path, limits)
            reply: tuple[Any, ...] = ("ok", (parsed, _chunk_quietly(parsed, chunking)), False)
        except ParseError as exc:
            # After a MemoryError the heap may be fragmented or half-freed: answer, then let the pool retire us.
            reply = ("error", exc.code, exc.message, exc.details, exc.code == FILE_TOO_LARGE)
        except BaseException as exc:  # the worker must answer, whatever happened
            message = f"Cannot import '{Path(path).name}': {type(exc).__name__}: {exc}"
            reply = ("error", CORRUPT_DOCUMENT, message, {}, True)
        try:
            conn.send(reply)
        except (EOFError, OSError, MemoryError):
            return


def _chunk_quietly(parsed: ParsedDocument, chunking: tuple[Any, int] | None) -> list[Any] | None:
    """The document's chunks, or ``None`` (not asked for, or chunking failed: the caller chunks and reports)."""
    if chunking is None:
        return None
    from kb_core.ingest.chunking import chunk_document

    tokenizer, chunk_size = chunking
    try:
        return chunk_document(parsed, tokenizer, chunk_size)
    except Exception:
        return None


def _cap_memory(limit: int) -> None:
    """Lower (or raise, up to the hard limit) this worker's address-space limit for the next file."""
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    soft = limit if hard == resource.RLIM_INFINITY else min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


class _Worker:
    """A fresh interpreter (not fork/forkserver: those re-run the caller's unguarded __main__ script)."""

    def __init__(self) -> None:
        package_root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
        self.process = subprocess.Popen(
            [sys.executable, "-c", "from kb_core.ingest.parsing.isolation import serve_stdio; serve_stdio()"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            close_fds=True,
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        self.conn = _PipeConnection(self.process.stdout.fileno(), self.process.stdin.fileno())
        if not self.conn.poll(_START_TIMEOUT):
            self.kill()
            raise ParseError("The document parser process did not start", code=PARSE_TIMEOUT)
        self.conn.recv()

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        try:
            self.process.kill()
            self.process.wait(5)
        finally:
            self._close_pipes()

    def _close_pipes(self) -> None:
        for stream in (self.process.stdin, self.process.stdout):
            with contextlib.suppress(OSError):
                if stream is not None:
                    stream.close()

    def stop(self) -> None:
        try:
            self.conn.send(None)
            self.process.wait(2)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            pass
        if self.alive():
            self.process.kill()
            self.process.wait(2)
        self._close_pipes()


class ParserPool:
    """A few reusable parse workers; thread-safe (each call borrows a worker)."""

    def __init__(self) -> None:
        self._idle: list[_Worker] = []
        self._lock = threading.Lock()

    def _borrow(self) -> _Worker:
        with self._lock:
            while self._idle:
                worker = self._idle.pop()
                if worker.alive():
                    return worker
                worker.kill()
        return _Worker()

    def _give_back(self, worker: _Worker) -> None:
        with self._lock:
            if len(self._idle) < _MAX_IDLE_WORKERS:
                self._idle.append(worker)
                return
        worker.stop()

    def parse(self, path: Path, limits: ParseLimits) -> ParsedDocument:
        return self.parse_and_chunk(path, limits, None)[0]

    def parse_and_chunk(
        self, path: Path, limits: ParseLimits, chunking: tuple[Any, int] | None
    ) -> tuple[ParsedDocument, list[Any] | None]:
        """Parse, and with ``chunking`` (a picklable tokenizer, the chunk size) also chunk, in a worker."""
        worker = self._borrow()
        started = time.monotonic()
        try:
            worker.conn.send((path, limits, chunking))
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
        if reply[-1]:  # the worker asks to be retired (it ran out of memory)
            worker.kill()
        else:
            self._give_back(worker)
        if reply[0] == "ok":
            return reply[1]
        _, code, message, details, _ = reply
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


def parse_and_chunk_file(
    path: Path,
    limits: ParseLimits,
    tokenizer: Any,
    chunk_size: int,
) -> tuple[ParsedDocument, list[Any]]:
    """:func:`parse_file`, then the document's chunks (:func:`kb_core.ingest.chunking.chunk_document`).

    A tokenizer marked ``chunks_in_workers`` (small to pickle, and holding the GIL while it works, like the hashing
    tokenizer) is sent along and the worker process chunks too, off this process's GIL; others (a Rust tokenizer,
    which releases the GIL) chunk here."""
    from kb_core.ingest.chunking import chunk_document

    path = Path(path).absolute()
    check_file(path, limits)
    chunking = (tokenizer, chunk_size) if getattr(tokenizer, "chunks_in_workers", False) else None
    parsed, chunks = _shared_pool().parse_and_chunk(path, limits, chunking)
    return parsed, chunks if chunks is not None else chunk_document(parsed, tokenizer, chunk_size)
