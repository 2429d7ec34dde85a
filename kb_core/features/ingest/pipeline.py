"""The import pipeline: parse → chunk → embed → write a segment → commit, its stages overlapping.

* Parsing (and, for a pure-Python tokenizer, chunking) runs in parser processes with a time limit (see
  :mod:`kb_core.engines.parsing`), fed by ``PARSE_WORKERS`` threads, so it overlaps everything below and uses
  other cores.
* Chunks from several files are embedded per call (``EMBED_BATCH``; more on a GPU) on threads of their own
  (:class:`_EmbeddingCalls`) while this thread gathers the next files' chunks, commits and reports.
* A writer thread (:class:`_Committer`) hands documents to the store's sink (:class:`~kb_core.store.sink.
  DocumentSink`: the folder store builds each segment's keyword and vector indexes, writes its files and commits
  it; PostgreSQL writes rows in one transaction) while the next chunks embed; batches hold roughly
  ``COMMIT_CHUNKS`` chunks, so a long import shows its documents as it goes and a killed import loses only the
  uncommitted tail: a document is either fully indexed (ready) or absent. An executor (e.g. Ray) replaces the
  first two stages; the commits are the same.
* With a sink that ``writes_in_workers`` (the folder store's, #29) the parser processes answer with
  :class:`~kb_core.engines.payloads.FilePayload` s, which this process passes on unopened, and segments are
  written by worker processes, several at once (``WRITER_PROCESSES``), then committed here in order: this process
  keeps only what cannot be parallel (the embedding model's feeding, the commits), so an import scales with
  cores.

Each stage's wall and CPU time is recorded in ``ImportProgress.stages`` (:mod:`kb_core.engines.timing`), the
workers' too.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Generator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kb_core.base.atomic import file_sha256
from kb_core.base.cancellation import cancel_scope, in_scope
from kb_core.base.errors import KBError, KBNotFound, ParseError
from kb_core.base.i18n import msg
from kb_core.engines.embedding.base import embed_with_token_ids
from kb_core.engines.parsing.isolation import PARSER_PROCESSES, WRITER_PROCESSES
from kb_core.engines.payloads import FilePayload
from kb_core.engines.prepared import PreparedChunks
from kb_core.engines.timing import StageClock
from kb_core.features.ingest.executors import DocumentExecutor, ImportCancelled
from kb_core.store.sink import DocumentSink, ImportJob, ImportSource, IncomingDocument, WrittenBatch

logger = logging.getLogger(__name__)

# Chunks per embedding call, across files: the model sorts each call by length, so large calls pad as
# little as one encode() over everything; progress still comes per model batch.
EMBED_BATCH = 512
COMMIT_CHUNKS = 2048
PARSE_WORKERS = PARSER_PROCESSES  # threads feeding the parser processes, one each
FILES_PER_REQUEST = 16  # files sent to a parser process at once (each keeps its own time limit)
REQUEST_BYTES = 4 << 20


ParsedFile = tuple[Any, list[Any], PreparedChunks | None]  # a parsed document, its chunks, their preparation


@dataclass
class ChunkBudget:
    """How many chunks an import may still add (a public demo's quota per visitor), and how to name that limit in a
    refusal (``this demo's limit of 1,000 chunks per visitor``). Files are admitted in the order they are parsed;
    one that would pass the budget fails alone."""

    left: int
    limit: str

    def admit(self, count: int) -> str | None:
        """Take ``count`` chunks, or say why a file of that many may not be imported."""
        if count > self.left:
            return f"its {count:,} chunks would pass {self.limit} ({self.left:,} left); nothing of it was imported"
        self.left -= count
        return None


@dataclass
class FileProgress:
    file_path: str
    status: str = "pending"  # pending → parsing → embedding → ready | failed
    chunks_total: int = 0
    chunks_embedded: int = 0
    error: str | None = None
    doc_name: str | None = None
    already_imported: bool = False  # a document of this name and content was in the KB: skipped (status ready)


# (name casefolded, SHA-256 of the file) of a KB's ready documents -> (their name, chunk count)
ImportedDocuments = Mapping[tuple[str, str], tuple[str, int]]


@dataclass
class ImportProgress:
    """Handed to the progress callback after every step. Counts only grow."""

    files: list[FileProgress]
    files_parsed: int = 0
    chunks_total: int = 0
    chunks_embedded: int = 0
    started_at: float = field(default_factory=time.monotonic)
    stages: StageClock = field(default_factory=StageClock)  # where the time went (kb_core.engines.timing)

    @property
    def files_total(self) -> int:
        return len(self.files)

    @property
    def files_done(self) -> int:
        return sum(1 for f in self.files if f.status in ("ready", "failed"))

    @property
    def elapsed_seconds(self) -> float:
        return time.monotonic() - self.started_at

    @property
    def chunks_per_second(self) -> float | None:
        """Chunks embedded (or answered by the embedding cache) per second since the import began; ``None``
        before the first one. Parsing and commits are inside that time, so it is the import's rate, not the
        model's."""
        elapsed = self.elapsed_seconds
        return self.chunks_embedded / elapsed if self.chunks_embedded and elapsed > 0 else None

    @property
    def chunks_expected(self) -> int:
        """Chunks of the parsed files, plus the files not parsed yet at the parsed files' mean."""
        unparsed = self.files_total - self.files_parsed
        if not self.files_parsed or unparsed <= 0:
            return self.chunks_total
        return self.chunks_total + round(unparsed * self.chunks_total / self.files_parsed)

    @property
    def seconds_left(self) -> float | None:
        """Time left at the rate so far (``None`` until there is a rate); an estimate while files are unparsed."""
        rate = self.chunks_per_second
        if rate is None:
            return None
        return max(0.0, self.chunks_expected - self.chunks_embedded) / rate

    def summary(self) -> str:
        """One line for a person: files, chunks, rate and time left."""
        facts = {
            "done": self.files_done, "total": self.files_total, "embedded": self.chunks_embedded,
            "chunks": self.chunks_total,
        }
        rate, left = self.chunks_per_second, self.seconds_left
        if left is not None and self.files_done < self.files_total:
            left_text = format_duration(left)
            if rate is not None:
                return msg(
                    "{done}/{total} files · {embedded}/{chunks} chunks embedded · {rate:,.0f} chunks/s · about {left} "
                    "left",
                    rate=rate, left=left_text, **facts,
                )
            return msg(
                "{done}/{total} files · {embedded}/{chunks} chunks embedded · about {left} left",
                left=left_text, **facts,
            )
        if rate is not None:
            return msg("{done}/{total} files · {embedded}/{chunks} chunks embedded · {rate:,.0f} chunks/s", rate=rate,
                       **facts)
        return msg("{done}/{total} files · {embedded}/{chunks} chunks embedded", **facts)


def format_duration(seconds: float) -> str:
    """``42 s``, ``3 min 05 s``, ``2 h 07 min``."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


ProgressCallback = Callable[[ImportProgress], None]


def _requests(sources: Sequence[ImportSource]) -> list[list[int]]:
    """The sources' positions in parser requests: consecutive files, at most ``FILES_PER_REQUEST`` of them and
    (where their size is known already) ``REQUEST_BYTES``; a few files per request save round trips."""
    requests: list[list[int]] = []
    size = 0
    for index, source in enumerate(sources):
        try:
            known = source.path.stat().st_size if source.stage is None else 0
        except OSError:
            known = 0
        if not requests or len(requests[-1]) >= FILES_PER_REQUEST or size + known > REQUEST_BYTES:
            requests.append([])
            size = 0
        requests[-1].append(index)
        size += known
    return requests


class Importer:
    """Imports files into one KB, committing through the store's ``sink`` (:class:`DocumentSink`)."""

    def __init__(
        self,
        sink: DocumentSink,
        embedder: Any,
        *,
        parse: Callable[[Path], Any],
        chunker: Callable[[Any, int], list[Any]],
        kb_name: str = "",
        executor: DocumentExecutor | None = None,
        parse_and_chunk: Callable[..., list[ParsedFile | FilePayload | Exception]] | None = None,
    ) -> None:
        """``executor`` runs parsing, chunking and embedding elsewhere (e.g. on Ray); ``None`` runs them here.
        ``parse_and_chunk``, when given, does ``parse`` and ``chunker`` for several files in one call (in a parser
        process), and may prepare the chunks there too (their analysis and signatures, and vectors for the hashing
        embedder); per file ``(parsed, chunks, prepared or None)``, a :class:`FilePayload`, or the exception that
        failed it; it is called with ``clock=`` (the import's :class:`StageClock`). A sink that
        ``writes_in_workers`` writes ``WRITER_PROCESSES`` batches at once, and the parser processes make the files'
        staging copies and answer with payloads (``stages=``)."""
        self.executor = executor
        self.parse_and_chunk = parse_and_chunk
        self.sink = sink
        self.kb_name = kb_name or sink.kb_id
        self.embedder = embedder
        self.parse = parse
        self.chunker = chunker

    def run(
        self,
        sources: Sequence[ImportSource],
        chunk_size: int,
        progress_callback: ProgressCallback | None = None,
        cancel: threading.Event | None = None,
        imported: ImportedDocuments | None = None,
        *,
        chunk_budget: ChunkBudget | None = None,
    ) -> tuple[list[FileProgress], list[dict[str, Any]]]:
        """Import ``sources``; return per-file progress and the committed document rows.

        ``cancel``, once set, stops the import: the parser processes working for it are killed and its embedding
        stops before the model's next layer (:mod:`kb_core.base.cancellation`); what was committed (or handed to a
        segment writer) stays, every other file fails with "cancelled", and nothing half-done is left behind (the commit
        protocol). ``imported``: the KB's documents as the import began; a new file of the same name and content as one
        of them is not embedded nor committed again, and its progress says ``already_imported`` (re-running an import
        that was killed). ``chunk_budget``: a file that would pass it fails, before it is embedded."""
        with cancel_scope(cancel):
            return self._run(sources, chunk_size, progress_callback, cancel, imported, chunk_budget)

    def _run(
        self,
        sources: Sequence[ImportSource],
        chunk_size: int,
        progress_callback: ProgressCallback | None,
        cancel: threading.Event | None,
        imported: ImportedDocuments | None,
        chunk_budget: ChunkBudget | None,
    ) -> tuple[list[FileProgress], list[dict[str, Any]]]:
        self.sources = list(sources)
        self.imported: ImportedDocuments = imported or {}
        self.cancel = cancel
        self.chunk_budget = chunk_budget
        progress = ImportProgress(files=[FileProgress(file_path=s.reported_path or str(s.path)) for s in sources])
        try:
            job = self.sink.open_job(progress)
        except KBNotFound as exc:
            raise self._deleted_meanwhile() from exc

        def notify() -> None:
            if progress_callback is not None:
                try:
                    progress_callback(progress)
                except Exception:  # a broken progress display must not break the import
                    logger.exception("progress callback failed")

        finished = (
            self._executed_documents(self.executor, chunk_size, progress, notify)
            if self.executor is not None
            else self._local_documents(chunk_size, progress, notify, cancel)
        )
        try:
            committer = _Committer(self, progress, job)
        except KBNotFound as exc:  # deleted between the job's start and the committer's first look
            finished.close()
            job.close()
            raise self._deleted_meanwhile() from exc
        try:
            job.publish(force=True)
            notify()
            for documents in finished:
                if cancel is not None and cancel.is_set():
                    raise ImportCancelled("cancelled: the import was stopped before this file was committed")
                committer.add(documents)
                job.publish()
                notify()
            committer.finish()
            job.publish()
            notify()
        except KBError as exc:
            # Parsing, embedding or the store failed, or the user cancelled: what is not committed fails with
            # the reason.
            finished.close()  # stops the parse pool (or the executor) before the files it reads are removed
            committer.close()
            reason = exc.message
            if cancel is not None and cancel.is_set():  # however far each file got: one reason a person reads
                reason = msg("cancelled: the import was stopped before this file was committed")
            for state in progress.files:
                stopped = state.status == "failed" and (state.error or "").startswith("cancelled")
                if state.status not in ("ready", "failed") or stopped:
                    state.status, state.error = "failed", reason
            notify()
            if isinstance(exc, KBNotFound):  # deleted meanwhile: what was committed went with it
                raise self._deleted_meanwhile() from exc
        finally:
            finished.close()
            committer.close()
            job.close()
        return progress.files, committer.committed

    def _local_documents(
        self,
        chunk_size: int,
        progress: ImportProgress,
        notify: Callable[[], None],
        cancel: threading.Event | None = None,
    ) -> Generator[list[IncomingDocument], None, None]:
        """Documents as they become ready to commit (embedded, or failed), in this process.

        Files are parsed and chunked by ``PARSE_WORKERS`` threads (each parse runs in a parser process, so the
        threads overlap); chunks from several files are embedded per call while the next files are parsed,
        and the committer writes segments on its own thread meanwhile."""
        sources = self.sources
        lock = threading.Lock()
        clock = progress.stages

        def from_payload(index: int, payload: FilePayload) -> IncomingDocument:
            source = sources[index]
            if not payload.chunk_count:
                raise ParseError(
                    msg("{file}: the document has no text to index.", file=source.display_name),
                    code="EMPTY_DOCUMENT",
                )
            return IncomingDocument(
                index=index,
                source=source,
                doc_id=source.doc_id or f"doc_{uuid.uuid4().hex[:16]}",
                file_type=payload.file_type,
                text="",
                chunks=[],
                size_bytes=payload.size_bytes,
                sha256=payload.sha256,
                chunk_size=chunk_size,
                vectors=[None] * payload.chunk_count,
                replaces=source.replaces,
                payload=payload,
            )

        def pending(index: int, parsed: Any, chunks: list[Any], prepared: PreparedChunks | None) -> IncomingDocument:
            source = sources[index]
            if not chunks:
                raise ParseError(
                    msg("{file}: the document has no text to index.", file=source.display_name),
                    code="EMPTY_DOCUMENT",
                )
            if prepared is not None and len(prepared) != len(chunks):
                prepared = None
            vectors = None if prepared is None else prepared.vectors  # embedded where it was parsed
            return IncomingDocument(
                index=index,
                source=source,
                doc_id=source.doc_id or f"doc_{uuid.uuid4().hex[:16]}",
                file_type=parsed.file_type,
                text=parsed.text,
                chunks=chunks,
                size_bytes=source.path.stat().st_size,
                sha256=file_sha256(source.path),
                chunk_size=chunk_size,
                vectors=list(vectors) if vectors is not None else [None] * len(chunks),
                replaces=source.replaces,
                prepared=prepared,
            )

        def prepare(indexes: list[int]) -> list[IncomingDocument | BaseException]:
            """The files at ``indexes``, staged, parsed and chunked (in one parser request where possible): each
            a document or the error that failed it."""
            outcomes: dict[int, IncomingDocument | BaseException] = {}
            staged: list[int] = []
            combined = self.parse_and_chunk
            # With a sink that writes in worker processes the parser process makes each file's staging copy itself,
            # just before it parses it (the same checks, off this process's interpreter lock).
            remote_staging = combined is not None and self.sink.writes_in_workers
            for index in indexes:
                with lock:
                    progress.files[index].status = "parsing"
                stage = sources[index].stage
                try:
                    if stage is not None and not remote_staging:
                        with clock.stage("stage_copy"):
                            stage()
                    staged.append(index)
                except KBNotFound:
                    raise
                except Exception as exc:
                    outcomes[index] = exc
            parsed_files: list[ParsedFile | FilePayload | Exception]
            with clock.stage("parse_requests"):
                if combined is not None and staged:
                    paths = [sources[i].path for i in staged]
                    try:
                        if remote_staging:
                            stages = [sources[i].stage for i in staged]
                            parsed_files = combined(paths, chunk_size, clock=clock, stages=stages)
                        else:
                            parsed_files = combined(paths, chunk_size, clock=clock)
                    except Exception as exc:  # e.g. no parser process would start: these files fail, not the import
                        parsed_files = [exc] * len(staged)
                else:
                    parsed_files = [self._parse_one(sources[i].path, chunk_size) for i in staged]
            for index, outcome in zip(staged, parsed_files, strict=True):
                if isinstance(outcome, KBError) and outcome.code == KBNotFound.code:
                    raise KBNotFound(outcome.message)  # the KB was deleted while a parser process staged a file
                try:
                    if isinstance(outcome, BaseException):
                        raise outcome
                    if isinstance(outcome, FilePayload):
                        outcomes[index] = from_payload(index, outcome)
                    else:
                        outcomes[index] = pending(index, *outcome)
                except KBError as exc:
                    outcomes[index] = exc
                except Exception as exc:
                    logger.exception("unexpected failure importing %s", sources[index].path)
                    outcomes[index] = exc
            return [outcomes[i] for i in indexes]

        embedding: list[IncomingDocument] = []  # parsed, not yet wholly embedded, in order
        queue: list[tuple[IncomingDocument, int]] = []
        call_size = embed_call_size(self.embedder)
        # A call as small as EMBED_BATCH is made while the parsers have nothing more ready: on a GPU (4,096-chunk calls)
        # the first chunks reach the card without waiting for a whole call's worth to be parsed (#29).
        smallest_call = min(call_size, EMBED_BATCH)
        # On a device two calls run at once: one's CPU work (cache look-ups, windows, input) beside the other's
        # forward pass; on a CPU the model's own threads use every core, so one.
        calls = _EmbeddingCalls(
            self.embedder, progress, notify, depth=2 if call_size > EMBED_BATCH else 1, cancel=cancel
        )

        def take(size: int) -> list[tuple[IncomingDocument, int]]:
            chunks, queue[:size] = queue[:size], []
            return chunks

        def finished(wait_for_all: bool = False) -> list[IncomingDocument]:
            """The documents whose chunks are all embedded, in order, once the calls out are few enough."""
            nonlocal embedding
            calls.collect(0 if wait_for_all else calls.depth - 1)
            done = [d for d in embedding if d.embedded]  # only an embedding call completes documents
            embedding = [d for d in embedding if not d.embedded]
            return done

        def embed(batch: list[tuple[IncomingDocument, int]]) -> list[IncomingDocument]:
            calls.submit(batch)
            return finished()

        pool = ThreadPoolExecutor(max_workers=PARSE_WORKERS, thread_name_prefix="kb-parse")
        futures: list[Future[list[IncomingDocument | BaseException]]] = []
        try:
            requests = _requests(sources)
            # The parser threads see the import's cancel: a cancelled import's parser processes are killed.
            futures = [pool.submit(in_scope(cancel, prepare), request) for request in requests]
            for request, future in zip(requests, futures, strict=True):
                while len(queue) >= smallest_call and not future.done():  # the model waits for no parsed chunk
                    yield embed(take(call_size))
                for index, document in zip(request, future.result(), strict=True):
                    if isinstance(document, KBError):
                        progress.files_parsed += 1
                        yield self._fail(progress, index, document.message, chunk_size)
                        continue
                    if isinstance(document, BaseException):  # a parser bug must fail one file, not the import
                        progress.files_parsed += 1
                        yield self._fail(progress, index, f"unexpected error: {type(document).__name__}", chunk_size)
                        continue
                    if self._skip_if_imported(progress, document):
                        progress.files_parsed += 1
                        yield []
                        continue
                    count = document.chunk_count
                    refusal = self.chunk_budget.admit(count) if self.chunk_budget is not None else None
                    if refusal is not None:
                        progress.files_parsed += 1
                        yield self._fail(progress, index, refusal, chunk_size)
                        continue
                    state = progress.files[index]
                    state.status = "embedding"
                    state.chunks_total = count
                    progress.chunks_total += count
                    embedding.append(document)
                    progress.files_parsed += 1
                    if document.embedded:  # embedded where it was parsed (the hashing embedder)
                        state.chunks_embedded = count
                        progress.chunks_embedded += count
                        if not queue and not calls.out:  # nothing before it waits for an embedding call
                            done = embedding
                            embedding = []
                            yield done
                            continue
                    else:
                        queue.extend((document, i) for i in range(count))
                    yield []  # a file parsed: the caller shows it
                    while len(queue) >= call_size:
                        yield embed(take(call_size))
            while queue:
                yield embed(take(call_size))
            yield finished(wait_for_all=True)
        finally:
            calls.close()
            for future in futures:
                future.cancel()
            pool.shutdown(wait=True)

    def _parse_one(self, path: Path, chunk_size: int) -> ParsedFile | Exception:
        try:
            parsed = self.parse(path)
            return parsed, self.chunker(parsed, chunk_size), None
        except Exception as exc:
            return exc

    def _executed_documents(
        self, executor: DocumentExecutor, chunk_size: int, progress: ImportProgress, notify: Callable[[], None]
    ) -> Generator[list[IncomingDocument], None, None]:
        """Documents as the executor hands them back (parsed, chunked and embedded elsewhere), or failed."""
        seen: set[int] = set()
        handed: list[int] = []  # positions in self.sources of what the executor gets
        for index, source in enumerate(self.sources):
            try:
                if source.stage is not None:
                    source.stage()  # the executor reads the private copy
            except KBNotFound:
                raise
            except KBError as exc:
                progress.files_parsed += 1
                yield self._fail(progress, index, exc.message, chunk_size)
                continue
            handed.append(index)
            progress.files[index].status = "parsing"  # handed to the executor: parsing, chunking and embedding there
        for result in executor.execute([self.sources[i] for i in handed], chunk_size, self.cancel):
            if result.index in seen or not 0 <= result.index < len(handed):
                logger.warning("executor %s returned file %d twice; ignored", executor.name, result.index)
                continue
            seen.add(result.index)
            result.index = handed[result.index]
            progress.files_parsed += 1
            if result.error is not None or result.vectors is None:
                yield self._fail(progress, result.index, result.error or "no result", chunk_size)
                continue
            source = self.sources[result.index]
            document = IncomingDocument(
                index=result.index,
                source=source,
                doc_id=source.doc_id or f"doc_{uuid.uuid4().hex[:16]}",
                file_type=result.file_type,
                text=result.text,
                chunks=result.chunks,
                size_bytes=source.path.stat().st_size,
                sha256=file_sha256(source.path),
                chunk_size=chunk_size,
                vectors=list(result.vectors),
                replaces=source.replaces,
            )
            if self._skip_if_imported(progress, document):
                yield []
                continue
            refusal = self.chunk_budget.admit(len(result.chunks)) if self.chunk_budget is not None else None
            if refusal is not None:
                yield self._fail(progress, result.index, refusal, chunk_size)
                continue
            state = progress.files[result.index]
            state.status, state.chunks_total = "embedding", len(result.chunks)
            state.chunks_embedded = len(result.chunks)
            progress.chunks_total += len(result.chunks)
            progress.chunks_embedded += len(result.chunks)
            yield [document]
        for position, index in enumerate(handed):
            if position not in seen:  # an executor must answer for every file; one that did not fails it
                yield self._fail(progress, index, f"the {executor.name} executor returned no result", chunk_size)

    def _skip_if_imported(self, progress: ImportProgress, document: IncomingDocument) -> bool:
        """Whether ``document`` (a new file, parsed) has the name and content of a document already in the KB; if
        so its file is marked ready and ``already_imported``, under that document's name and chunk count."""
        if document.source.replaces is not None or not document.sha256:
            return False
        found = self.imported.get((document.source.display_name.casefold(), document.sha256))
        if found is None:
            return False
        state = progress.files[document.index]
        state.status, state.already_imported = "ready", True
        state.doc_name, state.chunks_total = found
        return True

    def _deleted_meanwhile(self) -> KBNotFound:
        return KBNotFound(
            msg(
                "Knowledge base '{name}' was deleted while the import ran; nothing of the import remains.",
                name=self.kb_name,
            ),
            details={"kb_name": self.kb_name},
        )

    def _fail(self, progress: ImportProgress, index: int, message: str, chunk_size: int) -> list[IncomingDocument]:
        """Mark a file failed; a new file that exists is also recorded as a failed document."""
        state = progress.files[index]
        state.status, state.error = "failed", message
        source = self.sources[index]
        if source.replaces is not None or not source.path.is_file():
            return []
        return [
            IncomingDocument(
                index=index,
                source=source,
                doc_id=f"doc_{uuid.uuid4().hex[:16]}",
                file_type=source.path.suffix.lower().lstrip(".") or "unknown",
                text="",
                chunks=[],
                size_bytes=source.path.stat().st_size,
                sha256="",
                chunk_size=chunk_size,
                error=message,
            )
        ]

    def commit_written(self, batches: list[WrittenBatch], progress: ImportProgress) -> list[dict[str, Any]]:
        """Commit written batches, in order, in one commit of the sink; their documents' rows."""
        rows = self.sink.commit(batches, progress.stages)
        documents = [d for batch in batches for d in batch.documents]
        for document, row in zip(documents, rows, strict=True):
            state = progress.files[document.index]
            state.doc_name = row["name"]
            if document.error is None:
                state.status = "ready"
        return rows


class _EmbeddingCalls:
    """An import's embedding calls, run in order on threads of their own, at most ``depth`` at once (#29).

    The importing thread hands over a batch and goes on parsing, committing and reporting while the model works; with
    ``depth`` 2 (a device) the next call's CPU work (the embedding cache's look-ups and writes, windows, the input)
    runs beside the forward pass of the call before it, so the card does not wait for it. Vectors and progress are
    applied by the importing thread alone (a front end's display may only be touched from there): while it waits
    for a call it reports the call's progress as the model gives it, every ``POLL_SECONDS``."""

    POLL_SECONDS = 0.2

    def __init__(
        self,
        embedder: Any,
        progress: ImportProgress,
        notify: Callable[[], None],
        *,
        depth: int,
        cancel: threading.Event | None = None,
    ) -> None:
        """``cancel``: the import's; a call stops before the model's next layer once it is set."""
        self.embedder, self.progress, self.notify, self.depth = embedder, progress, notify, depth
        self.cancel = cancel
        self.threads = ThreadPoolExecutor(max_workers=depth, thread_name_prefix="kb-embed")
        self.calls: deque[tuple[list[tuple[IncomingDocument, int]], Future[Any], list[int]]] = deque()

    @property
    def out(self) -> int:
        """Calls handed over and not yet collected."""
        return len(self.calls)

    def submit(self, batch: list[tuple[IncomingDocument, int]]) -> None:
        texts = [doc.content(i) for doc, i in batch]
        # Ids the chunker got from its tokenizer (the embedder checks they are its own).
        token_ids = [doc.ids(i) for doc, i in batch]
        embedded = [0]  # chunks the model has given back so far (written by the call's thread only)

        def step(done: int) -> None:
            embedded[0] += done

        def run() -> Any:
            with cancel_scope(self.cancel), self.progress.stages.stage("embed"):
                return embed_with_token_ids(self.embedder, texts, token_ids, step)

        self.calls.append((batch, self.threads.submit(run), embedded))

    def collect(self, leave: int) -> None:
        """Apply the calls that are back, and wait for the oldest until at most ``leave`` are out."""
        while self.calls and (len(self.calls) > leave or self.calls[0][1].done()):
            batch, future, embedded = self.calls.popleft()
            reported = 0
            # wait() rather than result(timeout=): an embedder's own TimeoutError (a socket's read) must end the
            # import, not read as "still running".
            while not wait([future], timeout=self.POLL_SECONDS).done:
                if embedded[0] > reported:
                    reported = self._advance(batch, reported, min(embedded[0], len(batch)))
                    self.notify()
            vectors = future.result()
            for (doc, i), vector in zip(batch, vectors, strict=True):
                doc.vectors[i] = vector
            self._advance(batch, reported, len(batch))
            self.notify()

    def _advance(self, batch: list[tuple[IncomingDocument, int]], reported: int, upto: int) -> int:
        """Count the call's chunks ``reported:upto`` as embedded; returns ``upto``. The model says how many of a call's
        chunks are back, not which (it embeds the longest first): the files' counts take them in the call's order, so
        each file's bar moves as the call goes instead of jumping at its end (#34)."""
        for doc, _ in batch[reported:upto]:
            self.progress.files[doc.index].chunks_embedded += 1
        self.progress.chunks_embedded += upto - reported
        return upto

    def close(self) -> None:
        """Drop the calls not started; wait for the ones running (their vectors are not used)."""
        for _batch, future, _embedded in self.calls:
            future.cancel()
        self.calls.clear()
        self.threads.shutdown(wait=True, cancel_futures=True)


def embed_call_size(embedder: Any) -> int:
    """Chunks per embedding call: ``EMBED_BATCH``, or more where the model asks for it (``call_size``: on a GPU,
    several of its large batches, so the card is fed without a gap between calls)."""
    inner = getattr(embedder, "inner", embedder)
    wanted = getattr(inner, "call_size", None)
    return max(EMBED_BATCH, wanted) if isinstance(wanted, int) else EMBED_BATCH


def _split_documents(documents: list[IncomingDocument], pieces: int) -> list[list[IncomingDocument]]:
    """``documents`` in order, cut into at most ``pieces`` runs of about as many chunks each (documents stay whole)."""
    total = sum(d.chunk_count for d in documents)
    runs: list[list[IncomingDocument]] = [[]]
    done = 0
    for document in documents:
        if runs[-1] and len(runs) < pieces and done >= total * len(runs) / pieces:
            runs.append([])
        runs[-1].append(document)
        done += document.chunk_count
    return runs


class _Committer:
    """Commits finished documents in segments of about ``COMMIT_CHUNKS`` chunks, on threads of its own, so building a
    segment's indexes, writing its files and committing overlap the next embedding calls.

    Commits stay in order; at most twice as many segments as there are writers wait, so a slow disk holds the import
    back instead of filling memory. A commit's failure is raised by the next ``add``.

    With a segment writer (#29), ``WRITER_PROCESSES`` segments are written at once, and one commit thread commits them
    in order, each commit taking every segment written next in order: a writer thread never waits for the commits
    before its segment (on many cores the commits, one after another, held the writers back). The import's last
    chunks (estimated from the files not parsed yet: ``COMMIT_CHUNKS`` of them) go out in smaller segments as they
    come, so they are written while the last files are parsed, and the documents added once every file is parsed and
    every chunk embedded are split over every worker process (the parser processes are idle by then, and write the
    segments still waiting for a writer too): the import's end waits for a fraction of a segment's write. Neither
    makes more segments than the store's automatic compaction allows."""

    def __init__(self, importer: Importer, progress: ImportProgress, job: ImportJob) -> None:
        self.importer, self.progress, self.job = importer, progress, job
        self.committed: list[dict[str, Any]] = []
        self.pending: list[IncomingDocument] = []
        self.pending_chunks = 0
        # Segments written by worker processes are written several at once (and committed in order).
        self.parallel = importer.sink.writes_in_workers
        self.writers = WRITER_PROCESSES if self.parallel else 1
        # Once every file is parsed the parser processes are idle: the last segments are written by them too. Not
        # with an executor (Ray): its documents come back without payloads and are written in this process.
        self._all_workers = (
            WRITER_PROCESSES + PARSER_PROCESSES if self.parallel and importer.executor is None else self.writers
        )
        self._limit = self.writers  # segments written at once: the writers', then every worker process's
        self._active = 0
        self._turns = threading.Condition()
        self.writer = ThreadPoolExecutor(
            max_workers=self._all_workers, thread_name_prefix="kb-write" if self.parallel else "kb-commit"
        )
        self.commits = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kb-commit") if self.parallel else None
        self.writing: list[Future[None]] = []  # per segment handed over, in order: done once committed (or failed)
        self._lock = threading.Lock()
        self._written: dict[int, tuple[WrittenBatch, Future[None]]] = {}
        self._failure: BaseException | None = None  # the first write or commit that failed: nothing after it is written
        self._closing = False  # close() began: a write still waiting for its turn is not started
        self._commits_stopped = False  # a commit failed: nothing after it commits
        self._submitted = 0  # segments handed to the writers
        self._next = 0  # the next segment to commit
        # Smaller and split segments at the end only as far as the KB stays under the store's automatic compaction.
        self._room = importer.sink.segment_room() if self.parallel else 0

    def add(self, documents: list[IncomingDocument]) -> None:
        self.pending += documents
        self.pending_chunks += sum(d.chunk_count for d in documents)
        if self.pending and self._all_in():
            self._submit_last()
        elif self.pending_chunks >= COMMIT_CHUNKS or self._ending():
            self._submit()

    def finish(self) -> None:
        self._open_to_all()
        if self.pending:
            self._submit_last()
        while self.writing:
            self.writing.pop(0).result()

    def _all_in(self) -> bool:
        """Every file is parsed and every chunk embedded: no document is added after these."""
        progress = self.progress
        return progress.files_parsed >= progress.files_total and progress.chunks_embedded >= progress.chunks_total

    def _ending(self) -> bool:
        """Whether the pending documents go out now as a smaller segment: they and the chunks still to come (the
        files not parsed yet at the parsed files' mean, and the chunks not embedded yet) make the import's last
        segment, the pending ones a piece of it (a half, or one per writer, ``COMMIT_CHUNKS // 4`` chunks at least),
        and the room left keeps a segment for the documents after them."""
        piece = max(COMMIT_CHUNKS // 4, COMMIT_CHUNKS // max(2, self.writers))
        if not self.parallel or self.pending_chunks < piece or self._room - self._submitted < 2:
            return False
        progress = self.progress
        coming = progress.chunks_expected - progress.chunks_embedded
        return self.pending_chunks + coming <= COMMIT_CHUNKS

    def _open_to_all(self) -> None:
        """Every file is parsed: segments are written by as many worker processes as there are (the parser processes
        are idle), those waiting for a writer too."""
        with self._turns:
            self._limit = self._all_workers
            self._turns.notify_all()

    def _submit_last(self) -> None:
        """Submit the import's last documents as up to one segment per worker process, each of a quarter of
        ``COMMIT_CHUNKS`` chunks at least."""
        self._open_to_all()
        pieces = 1
        if self.parallel:
            room = self._room - self._submitted
            pieces = min(self._all_workers, self.pending_chunks // max(1, COMMIT_CHUNKS // 4), room)
        for piece in _split_documents(self.pending, max(1, pieces)):
            self.pending, self.pending_chunks = piece, 0
            self._submit()

    def close(self) -> None:
        """Wait for the segments being written and the commits of those written (never leave one half-committed),
        then stop the threads; segments written but not committed (after a failure before them) are removed."""
        with self._turns:  # writes waiting for a turn are not started any more
            self._closing = True
            self._turns.notify_all()
        self.writer.shutdown(wait=True, cancel_futures=True)
        if self.commits is not None:
            self.commits.shutdown(wait=True)
        for done in self.writing:
            done.cancel()  # a segment whose write never started (a no-op on those done)
        with self._lock:
            left, self._written = [batch for batch, _ in self._written.values()], {}
        for batch in left:
            self.importer.sink.discard(batch)

    def _submit(self) -> None:
        documents, self.pending, self.pending_chunks = self.pending, [], 0
        # Up to twice as many segments as writers wait (a few MB each): fewer stalled the importing thread, and with
        # it the GPU, whenever three embedding calls finished faster than the writers (#29, an H100: 1 s of 5).
        while len(self.writing) > 2 * self._limit or (self.writing and self.writing[0].done()):
            self.writing.pop(0).result()  # raises a failed commit's error here
        sequence, self._submitted = self._submitted, self._submitted + 1
        if not self.parallel:
            before = self.writing[-1] if self.writing else None
            self.writing.append(self.writer.submit(self._write_and_commit, documents, before))
            return
        done: Future[None] = Future()
        self.writing.append(done)
        self.writer.submit(self._write, sequence, documents, done)

    def _write_and_commit(self, documents: list[IncomingDocument], before: Future[None] | None) -> None:
        """Write and commit ``documents`` (one thread: the sink writes here)."""
        # No progress callback from here: a front end's display may only be touched from the thread that runs the
        # import (Streamlit's are); the next report from that thread shows these documents ready.
        if before is not None and (before.cancelled() or before.exception() is not None):
            return  # what stays committed is the prefix before the failure (the earlier error is raised)
        written = self.importer.sink.write(documents, self.progress.stages)
        self.committed += self.importer.commit_written([written], self.progress)
        with self.progress.stages.stage("publish"):
            self.job.publish()

    def _write(self, sequence: int, documents: list[IncomingDocument], done: Future[None]) -> None:
        """Write segment ``sequence`` (a writer thread; the writing is in a worker process), then hand it to the
        commit thread; ``done`` gets the outcome once it is committed, or the write's error."""
        with self._turns:
            while self._active >= self._limit and not self._closing and self._failure is None:
                self._turns.wait()
            if self._closing or self._failure is not None:  # stopped, or an earlier segment failed: never written
                stopped = ImportCancelled("cancelled: the import stopped before this segment was written")
                done.set_exception(self._failure or stopped)
                return
            self._active += 1
        try:
            written = self.importer.sink.write(documents, self.progress.stages)
        except BaseException as exc:
            self._fail(exc)
            done.set_exception(exc)
            return
        finally:
            with self._turns:
                self._active -= 1
                self._turns.notify()
        with self._lock:
            self._written[sequence] = (written, done)
        assert self.commits is not None
        self.commits.submit(self._commit_written)

    def _fail(self, exc: BaseException) -> None:
        """Record the first failure and wake the writes waiting for a turn: none of them starts any more."""
        with self._turns:
            self._failure = self._failure or exc
            self._turns.notify_all()

    def _commit_written(self) -> None:
        """Commit every segment written next in order, in one commit (the commit thread: commits stay in order, so
        names clash as they would one segment after another)."""
        with self._lock:
            if self._commits_stopped:
                return  # what stays committed is the prefix before the failure (its error is raised)
            group = []
            while self._next in self._written:
                group.append(self._written.pop(self._next))
                self._next += 1
        if not group:
            return
        try:
            self.committed += self.importer.commit_written([batch for batch, _ in group], self.progress)
            with self.progress.stages.stage("publish"):
                self.job.publish()
        except BaseException as exc:
            self._commits_stopped = True
            self._fail(exc)
            for _, done in group:
                done.set_exception(exc)
            return
        for _, done in group:
            done.set_result(None)
