"""Import progress on the pages: bars fed by an import's progress callback, and the import jobs the service runs
(#34) — started by a page, polled, shown in the sidebar on every page, found again after a reload by the URL."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import suppress
from typing import Any

import streamlit as st

from kb_core import KBError, Operations
from kb_core.features.ingest.pipeline import FileProgress, ImportProgress
from kb_core.features.results import ImportReport
from pages._i18n import say, t
from pages._picker import select


def status_label(status: str) -> str:
    """A file's import status as a person reads it, in the session's language."""
    labels = {
        "pending": t("waiting"),
        "parsing": t("parsing"),
        "embedding": t("embedding"),
        "saving": t("saving"),
        "ready": t("done"),
        "failed": t("failed"),
    }
    return labels.get(status, status)


def file_fraction(file: FileProgress) -> float:
    if file.status in ("ready", "failed"):
        return 1.0
    if file.status == "embedding":
        return 0.2 + 0.8 * (file.chunks_embedded / file.chunks_total if file.chunks_total else 0.0)
    return 0.1 if file.status == "parsing" else 0.0


def overall_fraction(progress: ImportProgress) -> float:
    if not progress.files:
        return 1.0
    return sum(file_fraction(f) for f in progress.files) / len(progress.files)


class ImportBars:
    """An overall bar plus one bar per file, fed by the importer's progress callback (call the object).

    Files the service rejects before importing (missing paths) never reach the callback; :meth:`finish`
    marks them from the import's report.
    """

    def __init__(self, paths: Sequence[str], labels: Sequence[str], title: str | None = None) -> None:
        self.title = title or t("Overall")
        self.labels = dict(zip(paths, labels, strict=True))
        self.overall = st.progress(0.0, text=t("{title}: 0 of {total} files", title=self.title, total=len(labels)))
        self.bars = {
            path: st.progress(0.0, text=t("{file}: {state}", file=label, state=status_label("pending")))
            for path, label in self.labels.items()
        }

    def __call__(self, progress: ImportProgress) -> None:
        self.overall.progress(min(1.0, overall_fraction(progress)),
                              text=t("{title}: {summary}", title=self.title, summary=say(progress.summary())))
        for file in progress.files:
            bar = self.bars.get(file.file_path)
            if bar is None:
                continue
            bar.progress(min(1.0, file_fraction(file)), text=file_line(
                self.labels[file.file_path], file.status, file.chunks_embedded, file.chunks_total, file.error
            ))

    def finish(self, report: ImportReport) -> None:
        done = len(report.success_files) + len(report.failed_files)
        self.overall.progress(1.0, text=t("{title}: {done} of {total} files · finished", title=self.title, done=done,
                                          total=len(self.labels)))
        for failure in report.failed_files:
            bar = self.bars.get(failure["file_path"])
            if bar is not None:
                bar.progress(1.0, text=t("{file}: failed: {error}", file=self.labels[failure["file_path"]],
                                         error=say(failure["error"])))


def file_line(name: str, status: str, embedded: int, total: int, error: Any) -> str:
    """One file's progress line: its state, with its chunks while it embeds, or why it failed."""
    if status == "failed" and error:
        return t("{file}: failed: {error}", file=name, error=say(error))
    if total:
        return t("{file}: {state} ({embedded}/{total} chunks)", file=name, state=status_label(status),
                 embedded=embedded, total=total)
    return t("{file}: {state}", file=name, state=status_label(status))


# -- import jobs (#34): imports run by the service; pages start them, poll them and show them -----------------------
# The URL of a page lists the ids of this browser session's import jobs (?job=…&job=…): a reload makes a new session,
# which finds its jobs again by them.
JOB_QUERY_PARAM = "job"
JOB_POLL_SECONDS = 1.0
JOB_FILES_SHOWN = 25  # progress bars of one job; the rest are counted
JOB_STATE_ICONS = {
    "running": ":material/progress_activity:",
    "cancelling": ":material/hourglass_top:",
    "finished": ":material/check_circle:",
    "cancelled": ":material/cancel:",
    "failed": ":material/error:",
}


def job_file_fraction(row: dict[str, Any]) -> float:
    if row["status"] in ("ready", "failed"):
        return 1.0
    if row["status"] == "embedding":
        total = row["chunks_total"]
        return 0.2 + 0.8 * (row["chunks_embedded"] / total if total else 0.0)
    return 0.1 if row["status"] == "parsing" else 0.0


def job_fraction(status: dict[str, Any]) -> float:
    files = status["files"]
    if status["state"] not in ("running", "cancelling"):
        return 1.0
    return min(1.0, sum(job_file_fraction(f) for f in files) / len(files)) if files else 0.0


def import_jobs(sess: Operations) -> list[dict[str, Any]]:
    """This session's import jobs (none when they cannot be listed: the sidebar and URL then show none)."""
    try:
        return sess.import_jobs().jobs
    except KBError:
        return []


def attach_jobs_from_url(sess: Operations) -> None:
    """Once per browser session: list the import jobs named in the URL (a reload's new session finds its jobs)."""
    if st.session_state.get("jobs_attached"):
        return
    st.session_state["jobs_attached"] = True
    attached = []
    for job_id in st.query_params.get_all(JOB_QUERY_PARAM):
        try:
            attached.append(sess.import_job(job_id, watch=True).data)
        except KBError:  # an id the service no longer knows is left out
            continue
    # The reloaded page goes on with the KB its import goes into, not the default one (the next import would go there).
    running = [job for job in attached if job["state"] in ("running", "cancelling")]
    if running and sess.current_kb_id is None:
        select(sess, running[-1]["kb_name"])


def sync_job_url(sess: Operations) -> None:
    """Write this session's import jobs into the URL (or remove them), for a reload to find."""
    ids = [job["job_id"] for job in import_jobs(sess)]
    if ids != st.query_params.get_all(JOB_QUERY_PARAM):
        if ids:
            st.query_params[JOB_QUERY_PARAM] = ids
        else:
            del st.query_params[JOB_QUERY_PARAM]


def job_progress(status: dict[str, Any], title: str | None = None) -> None:
    """A running job: what it is doing now, an overall bar and a bar per file (the first ``JOB_FILES_SHOWN``)."""
    state = status["state"]
    st.caption(f"{JOB_STATE_ICONS.get(state, '')} " + t("Now: {phase}.", phase=say(status["phase_text"])))
    line = (say(status["summary"]) if status["chunks_total"]
            else t("{done}/{total} files", done=status["files_done"], total=status["files_total"]))
    st.progress(job_fraction(status), text=t("{title}: {summary}", title=title or t("Overall"), summary=line))
    for row in status["files"][:JOB_FILES_SHOWN]:
        shown = row["status"]
        if row["status"] == "embedding" and row["chunks_total"] and row["chunks_embedded"] >= row["chunks_total"]:
            shown = "saving"  # embedded, waiting for its segment's write and commit
        st.progress(job_file_fraction(row), text=file_line(row["name"], shown, row["chunks_embedded"],
                                                           row["chunks_total"], row["error"]))
    if len(status["files"]) > JOB_FILES_SHOWN:
        st.caption(t("… and {n} more files.", n=len(status["files"]) - JOB_FILES_SHOWN))


def job_results_table(status: dict[str, Any]) -> Any:
    """A row per file of an ended job, its columns and values in the session's language."""
    import pandas as pd

    def outcome(row: dict[str, Any]) -> str:
        if (row["error"] or "").startswith("cancelled"):
            return t("cancelled")
        if row.get("already_imported"):
            return t("already imported (skipped)")
        return t("imported") if row["status"] == "ready" else status_label(row["status"])

    columns = [t("File"), t("Document name"), t("Status"), t("Chunks"), t("Reason")]
    rows = [
        (
            row["name"],
            row["doc_name"] if row["status"] == "ready" else "",
            outcome(row),
            row["chunks_total"] if row["status"] == "ready" else 0,
            say(row["error"] or ""),
        )
        for row in status["files"]
    ]
    return pd.DataFrame(rows, columns=columns)


def job_outcome(sess: Operations, status: dict[str, Any]) -> None:
    """A finished job: its message, warnings and a row per file (failures with their reasons), and a button that
    stops listing it."""
    # The note on the documents' language is shown apart, as a warning (the report's warnings).
    state, message = status["state"], say(status["message"] or "").split(" Note: ", 1)[0]
    if state == "finished" and not (status["report"] or {}).get("failed_count"):
        st.success(message, icon=JOB_STATE_ICONS["finished"])
    elif state == "cancelled":
        st.warning(message or t("The import was cancelled."), icon=JOB_STATE_ICONS["cancelled"])
    elif status["report"] is not None and status["report"].get("success_count"):
        st.warning(message, icon=":material/warning:")
    else:
        code = (status["error"] or {}).get("code")
        st.error(f"{message}  \n`{code}`" if code else message, icon=JOB_STATE_ICONS["failed"])
    for warning in (status["report"] or {}).get("warnings") or []:
        st.warning(say(warning), icon=":material/translate:")
    if status["report"] is not None or status["files"]:
        st.dataframe(job_results_table(status), hide_index=True, width="stretch",
                     column_config={t("Reason"): st.column_config.TextColumn(width="large")})
    if st.button(t("Dismiss"), key=f"dismiss_{status['job_id']}", icon=":material/close:",
                 help=t("Stop listing this import here (its documents stay).")):
        with suppress(KBError):  # already gone: nothing left to list
            sess.dismiss_import_job(status["job_id"])
        st.rerun()


def job_state_label(state: str) -> str:
    """An import job's state as a person reads it, in the session's language."""
    labels = {
        "running": t("running"),
        "cancelling": t("cancelling"),
        "finished": t("finished"),
        "cancelled": t("cancelled"),
        "failed": t("failed"),
    }
    return labels.get(state, state)


def _job_heading(status: dict[str, Any]) -> str:
    return t("Import of {n} file(s) into **{kb}** · started {time} UTC · {state}", n=status["files_total"],
             kb=status["kb_name"], time=status["created_at"][11:19], state=job_state_label(status["state"]))


def _running_jobs_body(sess: Operations, watched: tuple[str, ...]) -> None:
    jobs = {job["job_id"]: job for job in import_jobs(sess)}
    if any(jobs.get(job_id, {}).get("state") not in ("running", "cancelling") for job_id in watched):
        st.rerun()  # one ended: the whole page again (its results, the sidebar's counts)
    for job_id in watched:
        status = jobs[job_id]
        with st.container(border=True):
            st.markdown(_job_heading(status))
            job_progress(status)
            if status["state"] == "running" and st.button(
                t("Cancel import"), key=f"cancel_{job_id}", icon=":material/cancel:",
                help=t("Stops the parsing and the embedding within seconds; documents committed before stay."),
            ):
                with suppress(KBError):  # it ended meanwhile: the next poll shows how
                    sess.cancel_import(job_id)
                st.rerun(scope="fragment")


def import_jobs_panel(sess: Operations) -> None:
    """The Import page's list of this session's import jobs: the running ones live (polled every
    ``JOB_POLL_SECONDS``), the finished ones with their results until dismissed; newest first."""
    jobs = import_jobs(sess)
    running = tuple(job["job_id"] for job in reversed(jobs) if job["state"] in ("running", "cancelling"))
    if running:
        st.subheader(t("Running"))
        st.fragment(_running_jobs_body, run_every=JOB_POLL_SECONDS)(sess, running)
    finished = [job for job in reversed(jobs) if job["state"] not in ("running", "cancelling")]
    if finished:
        st.subheader(t("Results"))
        for status in finished:
            with st.container(border=True):
                st.markdown(_job_heading(status))
                job_outcome(sess, status)


def _sidebar_jobs_body(sess: Operations, watched: tuple[str, ...]) -> None:
    jobs = {job["job_id"]: job for job in import_jobs(sess)}
    if any(jobs.get(job_id, {}).get("state") not in ("running", "cancelling") for job_id in watched):
        st.rerun()
    for job_id in watched:
        status = jobs[job_id]
        st.progress(job_fraction(status), text=t(
            "Importing into {kb}: {done}/{total} files · {embedded}/{chunks} chunks", kb=status["kb_name"],
            done=status["files_done"], total=status["files_total"], embedded=status["chunks_embedded"],
            chunks=status["chunks_total"],
        ))
        st.caption(say(status["phase_text"]))


def sidebar_jobs(sess: Operations) -> None:
    """Every page's sidebar: this session's running imports with their progress (polled), and a line per import
    that ended and was not dismissed, with a link to the Import page."""
    jobs = import_jobs(sess)
    if not jobs:
        return
    running = tuple(job["job_id"] for job in jobs if job["state"] in ("running", "cancelling"))
    ended = [job for job in jobs if job["state"] not in ("running", "cancelling")]
    with st.sidebar:
        if running:
            st.fragment(_sidebar_jobs_body, run_every=JOB_POLL_SECONDS)(sess, running)
        for job in ended[-3:]:
            imported = (job["report"] or {}).get("success_count", 0)
            # a finished import where some files failed is no success: it gets the warning's icon, as on its page
            partial = job["state"] == "finished" and imported < job["files_total"]
            icon = ":material/warning:" if partial else JOB_STATE_ICONS.get(job["state"], "")
            st.caption(f"{icon} " + t(
                "Import into {kb} {state}: {imported} of {total} files imported.", kb=job["kb_name"],
                state=job_state_label(job["state"]), imported=imported, total=job["files_total"],
            ))
        st.page_link("pages/import_files.py", label=t("Imports and results"), icon=":material/upload_file:")

