"""Run parsers in reusable worker processes so a hostile file can be killed on timeout.

Workers are separate interpreters started with ``subprocess`` (never fork: the parent may run
torch threads; and not multiprocessing's spawn/forkserver, which re-import the caller's ``__main__``
and so break unguarded scripts). Each worker serves many files; one that times out or dies is killed and replaced on the
next call. The parse timeout starts once a worker is ready, so process start-up is not charged to
the file. Each request also caps the worker's address space (``ParseLimits.max_memory_bytes``, RLIMIT_AS),
so a file that needs more memory fails as FILE_TOO_LARGE instead of exhausting the machine; a worker
that ran out of memory is retired after its answer.

A request may carry several files (an import sends a few small files at once, to save round trips); each still
has its own time limit and its own answer, and a file that times out or kills its worker fails alone: the files
after it go to a fresh worker.

The same workers also write an import's segments (:func:`write_segment_in_worker`, #29): segment writing is our
own code on data already parsed, so its time limit is generous, but it runs off the importing process's
interpreter lock, several segments at once. The store's writer function travels with each job (pickled by
reference, imported by the worker), so parsing never imports the store.
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
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from kb_core.base.cancellation import cancel_requested
from kb_core.base.errors import Cancelled, KBError, ParseError
from kb_core.base.i18n import msg
from kb_core.engines.parsing.base import (
    CORRUPT_DOCUMENT,
    FILE_TOO_LARGE,
    PARSE_TIMEOUT,
    ParsedDocument,
    ParseLimits,
    parse_error,
)
from kb_core.engines.parsing.inprocess import check_file, parse_file_inprocess

if TYPE_CHECKING:
    from kb_core.engines.analysis import Analyzer
    from kb_core.engines.payloads import FilePayload
    from kb_core.engines.prepared import ChunkWork, PreparedChunks

logger = logging.getLogger(__name__)

Job = TypeVar("Job")
Written = TypeVar("Written")

_START_TIMEOUT = 60.0
# How often a wait for a parser process's answer looks whether its import was cancelled (kb_core.base.cancellation): a
# cancelled import's parser process is killed within this.
_CANCEL_POLL = 0.25
_PREPARE_TIMEOUT = 60.0
_WRITE_TIMEOUT = 600.0


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity where the platform has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


# A parser process per core but one (the importing process's), 2 at least and 32 at most (each holds some 50 MB),
# and a segment writer per four cores (1 to 4); all kept between imports. The cap was 8 until #29: on 16 cores the
# parsers were then the bound once the importing process no longer was.
PARSER_PROCESSES = max(2, min(32, usable_cores() - 1))
WRITER_PROCESSES = max(1, min(4, usable_cores() // 4))
_MAX_IDLE_WORKERS = PARSER_PROCESSES + WRITER_PROCESSES


class PipeConnection:
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
    """Worker entry point: requests on stdin, replies on the original stdout; stray prints go to stderr.

    A request is ``(paths, limits, work)``: one reply per file, in order, as each is parsed (and chunked, with
    ``work``; as a :class:`~kb_core.engines.payloads.FilePayload` when ``work.payloads``); then, when ``work``
    prepares chunks, one ``("prepared", [...], False, timings)`` for the files chunked here. A reply asking for
    retirement (the worker ran out of memory, or something unexpected happened) ends the worker there: the pool
    sends the rest of the files to a fresh one. ``("write", limits, writer, job)`` writes a segment: ``writer(job)``
    (:func:`kb_core.store.segment_jobs.write_segment_job`)."""
    protocol_out = os.dup(1)
    os.dup2(2, 1)
    conn = PipeConnection(0, protocol_out)
    _preload()  # part of start-up, which no file's time limit is charged with
    _START_SIZE[0] = _address_space()
    conn.send(("ready",))
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return
        if request is None:
            return
        if request[0] == "write":
            if not _write_segment(conn, *request[1:]):
                return
            continue
        paths, limits, work = request[:3]
        stages = request[3] if len(request) > 3 else None
        _cap_memory(limits.max_memory_bytes)
        chunked: list[list[Any] | None] = []
        clock = _clock()
        for position, path in enumerate(paths):
            chunks = None
            try:
                if stages is not None and stages[position] is not None:
                    with clock.stage("stage_copy"):
                        stages[position]()  # the importing process's staging copy, made here (raises a KBError)
                with clock.stage("parse"):
                    parsed = parse_file_inprocess(path, limits)
                with clock.stage("chunk"):
                    chunks = _chunk_quietly(parsed, work)
                if chunks is not None and work is not None and work.payloads:
                    from kb_core.engines.payloads import file_payload

                    with clock.stage("pack"):
                        reply: tuple[Any, ...] = ("payload", file_payload(path, parsed, chunks), False)
                else:
                    reply = ("ok", (parsed, chunks), False)
            except ParseError as exc:
                # After a MemoryError the heap may be fragmented or half-freed: answer, then retire.
                reply = ("error", exc.code, exc.message, exc.details, exc.code == FILE_TOO_LARGE)
            except KBError as exc:  # the staging copy refused the file (or the KB is gone)
                reply = ("error", exc.code, exc.message, exc.details, False)
            except BaseException as exc:  # the worker must answer, whatever happened
                message = msg(
                    "Cannot import '{file}': {reason}", file=Path(path).name, reason=f"{type(exc).__name__}: {exc}"
                )
                reply = ("error", CORRUPT_DOCUMENT, message, {}, True)
            chunked.append(chunks)
            try:
                conn.send(reply)
            except (EOFError, OSError, MemoryError):
                return
            if reply[-1]:
                return
        if work is not None and work.prepares:
            try:
                with clock.stage("prepare"):
                    prepared: list[Any] | None = work.prepare(chunked)
                if prepared is not None and work.payloads:
                    from kb_core.engines.payloads import pack_prepared

                    with clock.stage("pack"):
                        prepared = [pack_prepared(made) for made in prepared]
            except Exception:  # the importing process prepares them itself
                prepared = None
            try:
                conn.send(("prepared", prepared, False, clock.figures()))
            except (EOFError, OSError, MemoryError):
                return


def _clock() -> Any:
    from kb_core.engines.timing import StageClock

    return StageClock()


def _write_segment(conn: PipeConnection, limits: ParseLimits, writer: Callable[[Any], Any], job: Any) -> bool:
    """Write one segment and answer ``("written", writer(job))`` or the error; False when the worker must go."""
    _cap_memory(limits.max_memory_bytes)
    try:
        reply: tuple[Any, ...] = ("written", writer(job), False)
    except BaseException as exc:  # the worker must answer, whatever happened; then it retires
        reply = ("error", "WRITE_FAILED", f"{type(exc).__name__}: {exc}", {"os_error": isinstance(exc, OSError)}, True)
    try:
        conn.send(reply)
    except (EOFError, OSError, MemoryError):
        return False
    return not reply[-1]


def _preload() -> None:
    """Import the modules that chunk, prepare chunks and write segments (a worker is started once and serves many
    imports: none of this is charged to a file's time limit, or to an import's time). Each step on its own: a
    missing optional package (charset_normalizer) must not leave the rest to load inside a timed request."""
    import importlib

    # The parsers and their native libraries first: a shared object mapped after the memory cap of a request can
    # fail to map (lxml's etree did, in CI) and would read as a malformed file.
    modules = [f"kb_core.engines.parsing.{m}" for m in ("txt_parser", "docx_parser", "doc_parser")]
    modules += [f"kb_core.engines.{m}" for m in ("chunking", "prepared", "payloads", "timing")]
    modules += ["kb_core.features.ingest.pipeline"]
    modules += [f"kb_core.store.{m}" for m in ("segment_jobs", "segments", "catalog")]
    modules += [f"kb_core.engines.embedding.{m}" for m in ("hashing", "wordpiece")]
    modules += [f"kb_core.engines.{m}" for m in ("near_duplicates", "keyword_index", "vector_index")]
    modules += ["tokenizers", "charset_normalizer"]  # a model's tokenizer chunks here too
    for module in modules:
        with contextlib.suppress(Exception):
            importlib.import_module(module)
    with contextlib.suppress(Exception):
        from kb_core.engines.analysis import default_analyzer

        default_analyzer().tokens("warm")  # loads the stemmer
    with contextlib.suppress(Exception):
        _load_codecs()


def _load_codecs() -> None:
    """Codecs load lazily too (CJK codecs are shared objects): every one the text detector may try, now."""
    import codecs

    from kb_core.engines.parsing.txt_parser import decode_text

    decode_text("编码".encode("gb18030"))  # the CJK scoring
    from charset_normalizer.constant import IANA_SUPPORTED  # optional: txt_parser works without it

    for name in IANA_SUPPORTED:
        with contextlib.suppress(LookupError):
            codecs.lookup(name)
    decode_text("détecté à Zürich".encode("cp1252"))  # charset_normalizer's own modules


def _chunk_quietly(parsed: ParsedDocument, work: ChunkWork | None) -> list[Any] | None:
    """The document's chunks, or ``None`` (not asked for, or chunking failed: the caller chunks and reports)."""
    if work is None:
        return None
    try:
        return work.chunk(parsed)
    except Exception:
        return None


_START_SIZE: list[int] = [0]


def _address_space() -> int:
    """This process's mapped address space in bytes (0 where /proc does not say)."""
    try:
        with open("/proc/self/status", encoding="utf-8") as status:
            for line in status:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _cap_memory(limit: int) -> None:
    """Lower (or raise, up to the hard limit) this worker's address-space limit for the next file: ``limit`` bytes
    beyond what the worker mapped at start-up, which depends on the machine (thread stacks and BLAS buffers per
    core: 0.7 GB on 2 cores) and is no file's doing."""
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit += _START_SIZE[0]
    soft = limit if hard == resource.RLIM_INFINITY else min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


class _Worker:
    """A fresh interpreter (not fork/forkserver: those re-run the caller's unguarded __main__ script)."""

    def __init__(self, wait: bool = True) -> None:
        package_root = str(Path(__file__).resolve().parents[3])  # the folder holding kb_core
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
        # Parallelism comes from the processes: a tokenizer's own thread pool in each would oversubscribe the cores.
        env["TOKENIZERS_PARALLELISM"] = "false"
        self.process = subprocess.Popen(
            [sys.executable, "-c", "from kb_core.engines.parsing.isolation import serve_stdio; serve_stdio()"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            close_fds=True,
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        self.conn = PipeConnection(self.process.stdout.fileno(), self.process.stdin.fileno())
        if wait:
            self.wait_ready()

    def wait_ready(self) -> None:
        if not self.conn.poll(_START_TIMEOUT):
            self.kill()
            raise ParseError(msg("The document parser process did not start"), code=PARSE_TIMEOUT)
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


def _answered(conn: PipeConnection, timeout: float) -> bool:
    """Whether ``conn`` has an answer within ``timeout`` seconds; raises :class:`Cancelled` as soon as the work of this
    thread is cancelled (the caller kills the worker)."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        if conn.poll(min(left, _CANCEL_POLL)):
            return True
        if cancel_requested():
            raise Cancelled("cancelled: the import was stopped")


class ParserPool:
    """A few reusable parse workers; thread-safe (each call borrows a worker)."""

    def __init__(self) -> None:
        self._idle: list[_Worker] = []
        self._lock = threading.Lock()
        self._started = False

    def _borrow(self) -> _Worker:
        with self._lock:
            if not self._started:
                # The first use starts every worker at once: they start in parallel (on other cores) instead of
                # one by one as the threads of an import ask for them.
                self._started = True
                self._idle = self._start(_MAX_IDLE_WORKERS)
            while self._idle:
                worker = self._idle.pop()
                if worker.alive():
                    return worker
                worker.kill()
        return _Worker()

    @staticmethod
    def _start(count: int) -> list[_Worker]:
        workers = [_Worker(wait=False) for _ in range(count)]
        ready: list[_Worker] = []
        try:
            for worker in workers:
                worker.wait_ready()
                ready.append(worker)
        except BaseException:
            for worker in workers[len(ready) :]:
                worker.kill()
            if not ready:
                raise
        return ready

    def _give_back(self, worker: _Worker) -> None:
        with self._lock:
            if len(self._idle) < _MAX_IDLE_WORKERS:
                self._idle.append(worker)
                return
        worker.stop()

    def parse(self, path: Path, limits: ParseLimits) -> ParsedDocument:
        outcome = self.parse_many([path], limits, None)[0]
        if isinstance(outcome, KBError):
            raise outcome
        return outcome[0]

    def parse_many(
        self,
        paths: Sequence[Path],
        limits: ParseLimits,
        work: ChunkWork | None,
        clock: Any = None,
        stages: Sequence[Callable[[], object] | None] | None = None,
    ) -> list[tuple[ParsedDocument, list[Any] | None, PreparedChunks | None] | FilePayload | ParseError]:
        """Parse ``paths`` in a worker (a few files per request saves round trips), and with ``work`` also chunk
        them and prepare their chunks; per file, ``(parsed, chunks, prepared)`` (``None`` for what was not done
        there), a :class:`~kb_core.engines.payloads.FilePayload` (``work.payloads``), or its :class:`ParseError`;
        ``clock`` (a :class:`~kb_core.engines.timing.StageClock`) gets the workers' stage timings. ``stages``: per
        path, a picklable callable the worker runs first (it makes the file, e.g. an import's staging copy; a
        :class:`KBError` it raises fails that file).

        Each file keeps its own time limit: a file that runs past ``limits.timeout_seconds`` (or crashes the
        worker) is the one that fails, its worker is killed, and the files after it go to a fresh worker. When the
        work of this thread is cancelled (:mod:`kb_core.base.cancellation`) the worker is killed at once and every file
        not answered yet fails with :class:`~kb_core.base.errors.Cancelled`."""
        outcomes: list[Any] = []
        while len(outcomes) < len(paths):
            if cancel_requested():
                outcomes += [Cancelled("cancelled: the import was stopped before this file was parsed")] * (
                    len(paths) - len(outcomes)
                )
                break
            first = len(outcomes)
            worker = self._borrow()
            rest = None if stages is None else list(stages[first:])
            healthy = self._serve(worker, paths[first:], limits, work, outcomes, clock, rest)
            if healthy:
                self._give_back(worker)
            else:
                worker.kill()
        return outcomes

    def _serve(
        self,
        worker: _Worker,
        paths: Sequence[Path],
        limits: ParseLimits,
        work: ChunkWork | None,
        outcomes: list[Any],
        clock: Any = None,
        stages: Sequence[Callable[[], object] | None] | None = None,
    ) -> bool:
        """Send ``paths`` to ``worker`` and append an outcome per file answered; False when the worker must go
        (it stopped answering, crashed or asked to retire: the files after the last outcome are not done)."""
        first = len(outcomes)
        try:
            request = (list(paths), limits, work) if stages is None else (list(paths), limits, work, list(stages))
            worker.conn.send(request)
        except (EOFError, OSError):
            outcomes.append(parse_error(CORRUPT_DOCUMENT, paths[0], msg("the parser process crashed on this file")))
            return False
        for path in paths:
            started = time.monotonic()
            try:
                reply = worker.conn.recv() if _answered(worker.conn, limits.timeout_seconds) else None
            except Cancelled:
                outcomes.append(Cancelled(msg("cancelled: the import was stopped while this file was parsed")))
                return False
            except (EOFError, OSError):
                outcomes.append(parse_error(CORRUPT_DOCUMENT, path, msg("the parser process crashed on this file")))
                return False
            if reply is None:
                outcomes.append(
                    parse_error(
                        PARSE_TIMEOUT,
                        path,
                        msg("parsing took longer than {seconds:g} s and was stopped", seconds=limits.timeout_seconds),
                    )
                )
                return False
            logger.debug("parsed %s in %.3f s", path, time.monotonic() - started)
            if reply[0] == "ok":
                outcomes.append((*reply[1], None))
            elif reply[0] == "payload":
                outcomes.append(reply[1])
            else:
                _, code, message, details, _ = reply
                outcomes.append(ParseError(message, code=code, details=details))
            if reply[-1]:  # the worker asks to be retired (it ran out of memory): it stops here
                return False
        if work is None or not work.prepares:
            return True
        # The chunks' preparation is an optimisation: without it (too slow, failed) the importing process does it.
        # It runs our own code on chunks already made, not a parser on hostile bytes: its limit is generous (it
        # may load a dictionary, such as jieba's, the first time).
        try:
            waited = max(limits.timeout_seconds, _PREPARE_TIMEOUT)
            reply = worker.conn.recv() if _answered(worker.conn, waited) else None
        except (EOFError, OSError, Cancelled):
            return False
        if reply is None:
            return False
        prepared = reply[1]
        if clock is not None and len(reply) > 3:
            clock.merge(reply[3])
        if prepared is not None:
            for position, made in enumerate(prepared, start=first):
                outcome = outcomes[position]
                if made is None or isinstance(outcome, ParseError):
                    continue
                if isinstance(outcome, tuple):
                    outcomes[position] = (outcome[0], outcome[1], made)
                else:  # a FilePayload: made is (pickle, holds vectors)
                    outcome.prepared, outcome.embedded = made
        return True

    def write_segment(self, job: Job, limits: ParseLimits, writer: Callable[[Job], Written]) -> Written:
        """Write ``job``'s segment in a worker, by ``writer`` (a module-level function); raises :class:`WriteFailed`
        (its ``os_error`` says whether the file system refused) when it could not."""
        worker = self._borrow()
        try:
            worker.conn.send(("write", limits, writer, job))
            reply = worker.conn.recv() if worker.conn.poll(_WRITE_TIMEOUT) else None
        except (EOFError, OSError) as exc:
            worker.kill()
            raise WriteFailed(f"the segment writer process failed: {exc}") from exc
        if reply is None:
            worker.kill()
            raise WriteFailed(f"writing a segment took longer than {_WRITE_TIMEOUT:g} s and was stopped")
        if reply[0] != "written":
            worker.kill()
            raise WriteFailed(f"writing a segment failed: {reply[2]}", os_error=bool(reply[3].get("os_error")))
        self._give_back(worker)
        written: Written = reply[1]
        return written

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


class WriteFailed(Exception):
    """A segment writer process could not write its segment."""

    def __init__(self, message: str, *, os_error: bool = False) -> None:
        super().__init__(message)
        self.os_error = os_error


def write_segment_in_worker(job: Job, limits: ParseLimits, writer: Callable[[Job], Written]) -> Written:
    """Write ``job``'s segment by ``writer(job)`` in one of the shared worker processes (see the module docstring)."""
    return _shared_pool().write_segment(job, limits, writer)


def parse_file(path: Path, limits: ParseLimits = ParseLimits()) -> ParsedDocument:  # noqa: B008
    """Parse a .txt/.docx/.doc file into text blocks, in a worker process killed after ``limits.timeout_seconds``.

    Raises ParseError with code FILE_NOT_FOUND, UNSUPPORTED_FORMAT, ENCRYPTED_DOCUMENT, CORRUPT_DOCUMENT,
    EMPTY_DOCUMENT, FILE_TOO_LARGE, PARSE_TIMEOUT or BINARY_FILE, and a message naming the file.
    """
    path = Path(path).absolute()
    check_file(path, limits)  # cheap refusals without a round trip to the worker
    return _shared_pool().parse(path, limits)


def parse_and_chunk_files(
    paths: Sequence[Path],
    limits: ParseLimits,
    tokenizer: Any,
    chunk_size: int,
    *,
    analyzer: Analyzer | None = None,
    embedder: Any = None,
    payloads: bool = False,
    clock: Any = None,
    stages: Sequence[Callable[[], object] | None] | None = None,
) -> list[tuple[ParsedDocument, list[Any], PreparedChunks | None] | FilePayload | ParseError]:
    """:func:`parse_file` of each path, then the document's chunks (:func:`kb_core.engines.chunking.chunk_document`),
    and with an ``analyzer`` their :class:`~kb_core.engines.prepared.PreparedChunks` where the parser process made
    them; per file that triple or the file's :class:`ParseError`. With ``payloads``, a file the worker chunked comes
    as a :class:`~kb_core.engines.payloads.FilePayload` instead (its preparation inside), for an importing process
    that only passes it on to a segment writer (:func:`write_segment_in_worker`).

    A tokenizer marked ``chunks_in_workers`` (small to pickle: the hashing tokenizer, or a model's fast tokenizer
    read from its ``tokenizer.json``, which a worker loads once) is sent along and the worker process chunks too,
    off this process's GIL, and prepares the chunks (analysis, signatures, and the vectors where ``embedder`` is the
    hashing embedder); others chunk here, and the preparation is ``None`` (the committer does it).
    ``clock``: a :class:`~kb_core.engines.timing.StageClock` for the workers' stage timings. ``stages``: per path, a
    picklable callable that makes the file (the import's staging copy), run by the parser process just before it
    parses it; such a file is checked there, after its copy is made."""
    from kb_core.engines.chunking import chunk_document
    from kb_core.engines.prepared import ChunkWork, hashing_dimension

    work = None
    if getattr(tokenizer, "chunks_in_workers", False):
        dimension = hashing_dimension(embedder) if embedder is not None and analyzer is not None else None
        work = ChunkWork(tokenizer, chunk_size, analyzer, dimension, payloads=payloads)
    outcomes: list[Any] = [None] * len(paths)
    checked: list[int] = []
    for position, path in enumerate(paths):
        path = Path(path).absolute()
        try:
            if stages is None or stages[position] is None:
                check_file(path, limits)  # cheap refusals without a round trip to the worker
        except ParseError as exc:
            outcomes[position] = exc
        else:
            checked.append(position)
    pool = _shared_pool()
    kept = None if stages is None else [stages[i] for i in checked]
    parsed_files = pool.parse_many([Path(paths[i]).absolute() for i in checked], limits, work, clock, kept)
    for position, outcome in zip(checked, parsed_files, strict=True):
        if isinstance(outcome, tuple) and outcome[1] is None:
            outcome = (outcome[0], chunk_document(outcome[0], tokenizer, chunk_size), None)
        outcomes[position] = outcome
    return outcomes


def parse_and_chunk_file(
    path: Path,
    limits: ParseLimits,
    tokenizer: Any,
    chunk_size: int,
    *,
    analyzer: Analyzer | None = None,
    embedder: Any = None,
) -> tuple[ParsedDocument, list[Any], PreparedChunks | None]:
    """:func:`parse_and_chunk_files` of one file; raises its :class:`ParseError`."""
    outcome = parse_and_chunk_files([path], limits, tokenizer, chunk_size, analyzer=analyzer, embedder=embedder)[0]
    if isinstance(outcome, ParseError):
        raise outcome
    return outcome
