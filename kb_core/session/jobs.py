"""Imports as jobs the service owns (#34): they run on the service's threads, not on the front end's, so an import
started in the app keeps running when its page is left, reloaded or closed, and a server that stops cancels it.

:class:`JobRegistry` (one per service, ``service.jobs``) holds every import of the process: those started with
``Operations.start_import`` (a thread of the registry runs them; the caller polls) and those a caller runs itself
(``Operations.import_document``, the synchronous tool: registered so that a stopping server cancels them too). A job
keeps its live progress (what the import pipeline reports: per-file status and chunks, at the pipeline's granularity)
and, once it ends, its report or error, until it is dismissed or evicted (oldest first, beyond
:data:`KEEP_FINISHED`).

Who sees a job: its id is the key. The session that started it lists it (``Operations.import_jobs``), and any
session whose scope holds the job's knowledge base may look it up or cancel it by id (a browser that reloads finds
its jobs again through the ids in its address); ids are 128-bit random, so a job no one was told of stays unseen.

:meth:`JobRegistry.shutdown` cancels every running job and waits for them, for a server that stops (SIGTERM,
Ctrl-C): what was committed stays, the rest is removed (the commit protocol), upload folders included.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any

from kb_core.base.errors import Cancelled, KBError
from kb_core.base.i18n import Text, msg

if TYPE_CHECKING:
    from kb_core.features.ingest.pipeline import ImportProgress
    from kb_core.features.results import ImportReport

logger = logging.getLogger(__name__)

# Finished jobs kept for a later look (their reports), the oldest evicted first; running jobs are always kept.
KEEP_FINISHED = 64

# What a job is doing, for a person (front ends show the text; the key is stable for programs). The texts are the
# job's user-facing words, kept here together.
PHASES: dict[str, Text] = {
    "queued": msg("starting"),
    "loading_model": msg("loading the embedding model {model} (first time in this process: about {seconds:.0f} s)"),
    "importing": msg("parsing, chunking and embedding the files"),
    "compacting": msg("merging the knowledge base's segments"),
    "calibrating": msg(
        "measuring what unrelated text scores for {model}, once per model in this home (its semantic floor)"
    ),
    "cancelling": msg("cancelling: stopping the parser processes and the embedding"),
    "done": msg("finished"),
}
STATE_TEXT: dict[str, Text] = {
    "running": msg("running"),
    "cancelling": msg("cancelling"),
    "finished": msg("finished"),
    "cancelled": msg("cancelled"),
    "failed": msg("failed"),
}
RUNNING_STATES = frozenset({"running", "cancelling"})


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class ImportJob:
    """One import: its files, its live progress while it runs, and its report (or error) once it ends."""

    def __init__(
        self,
        kb_id: str,
        kb_name: str,
        names: Sequence[str],
        owner: str | None,
        *,
        cancel: threading.Event | None = None,
        background: bool = True,
    ) -> None:
        self.id = f"job_{uuid.uuid4().hex}"
        self.kb_id, self.kb_name = kb_id, kb_name
        self.names = list(names)
        self.background = background  # run by the registry's thread (start_import), not by its caller
        self.cancel_event = cancel if cancel is not None else threading.Event()
        self.created_at = utc_now()
        self.finished_at: str | None = None
        self._started = time.monotonic()
        self._ended: float | None = None
        self._lock = threading.Lock()
        self.watchers: set[str] = {owner} if owner is not None else set()
        self.state = "running"
        self.phase, self.phase_detail = "queued", {}  # type: tuple[str, dict[str, Any]]
        self.progress: ImportProgress | None = None
        self.report: ImportReport | None = None
        self.error: KBError | None = None
        self.done = threading.Event()
        self.cleanup: list[Path] = []  # folders removed when the job ends (its uploads)
        self.thread: threading.Thread | None = None

    # -- fed by the import ---------------------------------------------------------------------------------------
    def on_progress(self, progress: ImportProgress) -> None:
        """The pipeline's progress callback: the job reads the live progress when asked (a copy per report would
        cost the importing thread O(files) each time)."""
        self.progress = progress
        if self.phase == "queued" or self.phase == "loading_model":
            self.set_phase("importing")

    def set_phase(self, phase: str, **detail: Any) -> None:
        with self._lock:
            if self.state == "cancelling" and phase != "done":
                return  # the cancel says what happens now
            self.phase, self.phase_detail = phase, detail

    def request_cancel(self) -> bool:
        """Cancel the job (no-op once it ended); whether it was running."""
        with self._lock:
            if self.state not in RUNNING_STATES:
                return False
            self.state = "cancelling"
            self.phase, self.phase_detail = "cancelling", {}
        self.cancel_event.set()
        return True

    def finish(self, report: ImportReport | None, error: KBError | None) -> None:
        with self._lock:
            self.report, self.error = report, error
            cancelled = self.cancel_event.is_set()
            if cancelled:
                self.state = "cancelled"
            elif error is not None or (report is not None and report.failure() is not None):
                self.state = "failed"
            else:
                self.state = "finished"
            self.phase, self.phase_detail = "done", {}
            self.finished_at = utc_now()
            self._ended = time.monotonic()
        for folder in self.cleanup:
            shutil.rmtree(folder, ignore_errors=True)
        self.done.set()

    # -- read by front ends --------------------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self.state in RUNNING_STATES

    def phase_text(self) -> str:
        template = PHASES.get(self.phase)
        if template is None:
            return self.phase
        try:
            return Text(template.template, self.phase_detail)
        except (KeyError, ValueError, IndexError):
            return template

    def status(self, files_limit: int | None = None) -> dict[str, Any]:
        """A snapshot: state, phase, counts, per-file rows (``name``: the file's name, ``file``: the path as given or
        the upload's name; the first ``files_limit`` rows), and once it ended its
        message, report (the import's data) and error. Read while the import runs, from another thread: each value
        is read once (the counts of a file may be a report apart from the totals; counts only grow)."""
        with self._lock:
            state, phase, text = self.state, self.phase, self.phase_text()
            report, error, finished_at, ended = self.report, self.error, self.finished_at, self._ended
        progress = self.progress
        # The pipeline's rows by the name each file was given as (a path, an upload's name); a file refused before
        # the pipeline saw it has none and stays pending until the report says why.
        given: dict[str, list[Any]] = {}
        for state_of in list(progress.files) if progress is not None else []:
            given.setdefault(state_of.file_path, []).append(state_of)
        files: list[dict[str, Any]] = []
        for name in self.names:
            found = given.get(name)
            state_of = found.pop(0) if found else None
            files.append(
                {
                    "name": PurePath(name).name or name,
                    "file": name,
                    "status": state_of.status if state_of is not None else "pending",
                    "chunks_total": state_of.chunks_total if state_of is not None else 0,
                    "chunks_embedded": min(state_of.chunks_embedded, state_of.chunks_total) if state_of else 0,
                    "error": state_of.error if state_of is not None else None,
                    "doc_name": state_of.doc_name if state_of is not None else None,
                    # the KB held a document of this name and content: skipped, not imported twice (#37)
                    "already_imported": bool(state_of.already_imported) if state_of is not None else False,
                }
            )
        if report is not None and state not in RUNNING_STATES:
            # Files refused before the pipeline saw them (a name that is not UTF-8) are in the report only, in order,
            # under their name as it can be shown.
            seen = {row["file"] for row in files if row["status"] in ("ready", "failed")}
            left = [(str(f.get("file_path")), str(f.get("error"))) for f in report.failed_files]
            left = [entry for entry in left if entry[0] not in seen]
            for row in files:
                if row["status"] in ("ready", "failed") or not left:
                    continue
                match = next((entry for entry in left if entry[0] == row["file"]), left[0])
                left.remove(match)
                row["status"], row["error"] = "failed", match[1]
        elapsed = (ended if ended is not None else time.monotonic()) - self._started
        rate = progress.chunks_per_second if progress is not None else None
        left = progress.seconds_left if progress is not None and state in RUNNING_STATES else None
        failure = error if error is not None else report.failure() if report is not None else None
        return {
            "job_id": self.id,
            "kind": "import",
            "kb_name": self.kb_name,
            "state": state,
            "phase": phase,
            "phase_text": text,
            "created_at": self.created_at,
            "finished_at": finished_at,
            "elapsed_seconds": round(elapsed, 1),
            "files_total": len(self.names),
            "files_done": sum(1 for f in files if f["status"] in ("ready", "failed")),
            "chunks_total": progress.chunks_total if progress is not None else 0,
            "chunks_embedded": progress.chunks_embedded if progress is not None else 0,
            "chunks_expected": progress.chunks_expected if progress is not None else 0,
            "chunks_per_second": round(rate, 1) if rate is not None else None,
            "seconds_left": round(left, 1) if left is not None else None,
            "summary": progress.summary() if progress is not None else msg("0/{total} files", total=len(self.names)),
            "files": files if files_limit is None else files[:files_limit],
            "message": (report.message if report is not None else error.message if error is not None else None),
            "report": report.to_json() if report is not None else None,
            "error": None if failure is None else {"code": failure.code, "message": failure.message},
        }


class JobRegistry:
    """The imports of one service (thread-safe); see the module docstring."""

    def __init__(self) -> None:
        self._jobs: OrderedDict[str, ImportJob] = OrderedDict()
        self._lock = threading.Lock()
        self._closing = False

    def add(self, job: ImportJob) -> ImportJob:
        with self._lock:
            if self._closing:
                raise Cancelled("cancelled: the server is stopping and starts no new import")
            self._jobs[job.id] = job
            finished = [j for j in self._jobs.values() if not j.running]
            for old in finished[: max(0, len(finished) - KEEP_FINISHED)]:
                del self._jobs[old.id]
        return job

    def start(self, job: ImportJob, work: Callable[[ImportJob], None]) -> ImportJob:
        """Run ``work(job)`` on a thread of its own (it must call ``job.finish``). A daemon thread: a process that
        must stop is never held by one (:meth:`shutdown` cancels and waits for them first)."""
        self.add(job)
        job.thread = threading.Thread(target=self._run, args=(job, work), name=f"kb-{job.id[:12]}", daemon=True)
        job.thread.start()
        return job

    @staticmethod
    def _run(job: ImportJob, work: Callable[[ImportJob], None]) -> None:
        try:
            work(job)
        except KBError as exc:  # work reports its own outcome; this is a safety net
            if not job.done.is_set():
                job.finish(None, exc)
        except Exception:
            logger.exception("import job %s failed unexpectedly", job.id)
            if not job.done.is_set():
                job.finish(None, KBError("The import failed because of an internal error; see the log.",
                                         code="INTERNAL_ERROR"))

    def get(self, job_id: str) -> ImportJob | None:
        with self._lock:
            return self._jobs.get(job_id)

    def all(self) -> list[ImportJob]:
        with self._lock:
            return list(self._jobs.values())

    def forget(self, job: ImportJob) -> None:
        """Drop ``job`` (a caller's own import, once it returned)."""
        with self._lock:
            self._jobs.pop(job.id, None)

    def dismiss(self, job: ImportJob, owner: str) -> None:
        """``owner`` no longer lists ``job``; a finished job no one lists is dropped."""
        with self._lock:
            job.watchers.discard(owner)
            if not job.watchers and not job.running and job.background:
                self._jobs.pop(job.id, None)

    def cancel_all(self) -> list[ImportJob]:
        """Start no more jobs and cancel every running one, without waiting; those cancelled."""
        with self._lock:
            self._closing = True
            running = [job for job in self._jobs.values() if job.running]
        for job in running:
            job.request_cancel()
        if running:  # said here: a shutdown that comes after this finds them already ended
            logger.warning("cancelled %d running import(s) on shutdown", len(running))
        return running

    def shutdown(self, timeout: float = 8.0) -> bool:
        """Start no more jobs, cancel every running one and wait up to ``timeout`` seconds for them to end; whether
        they all did."""
        with self._lock:
            running = [job for job in self._jobs.values() if job.running]
        self.cancel_all()
        deadline = time.monotonic() + timeout
        for job in running:
            if not job.done.wait(max(0.0, deadline - time.monotonic())):
                logger.warning("import job %s did not stop within %.0f s", job.id, timeout)
                return False
        return True
