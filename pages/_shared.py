"""Helpers every page uses: the cached service, the per-browser session, error display, progress bars.

Pages are thin: they lay out widgets and call :class:`kb_core.Session` methods. Nothing here knows
about retrieval; it only turns envelopes into Streamlit elements.
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import streamlit as st

from kb_core import KBError, KnowledgeBaseService, Session
from kb_core.config import resolve_home
from kb_core.ingest.pipeline import FileProgress, ImportProgress
from kb_core.safe_files import path_name_problem, shown_path
from pages._i18n import say, t

if TYPE_CHECKING:
    from kb_core.public_demo import PublicDemo

SESSION_KEY = "kb_session"
# KB_DEMO: unset, a private workbench that opens on the demo KB; 0, no demo KB (tests); 1, a public demo
# (kb_core.public_demo: visitors in sandboxes, shared KBs read-only, quotas, an operator).
DEMO_ENVIRONMENT_VARIABLE = "KB_DEMO"
VISITOR_COOKIE = "kb_visitor"
_VISITOR_TOKEN = re.compile(r"^[A-Za-z0-9_-]{24,64}$")
# Folders whose files the "path on the server" fields may name (separated like PATH); unset: those fields are off.
ALLOW_DIRS_ENVIRONMENT_VARIABLE = "KB_ALLOW_DIRS"


# The services this process opened (one per home), for close_services when the server stops.
_OPENED: list[KnowledgeBaseService] = []
_OPENED_HOMES: set[str] = set()
_OPENED_LOCK = threading.Lock()


@st.cache_resource(show_spinner=False)  # service() says so, in the session's language
def _service_for(home: str) -> KnowledgeBaseService:
    # One service per process and home: it holds the loaded models, readers and index caches.
    opened = KnowledgeBaseService(home)
    with _OPENED_LOCK:
        _OPENED.append(opened)
        _OPENED_HOMES.add(home)
    # The Chinese word dictionary loads on the first Chinese text a process analyses (~0.5 s of CPU), and a KB's query
    # embedder on its first search (multilingual-e5-small's 250,000-word tokenizer and query weights: 3-5 s on busy
    # cores, a third of a profiled session's server time, #34); loaded now, in the background, a user's first search
    # waits for neither.
    threading.Thread(target=_warm_up, args=(opened,), name="kb-search-warm", daemon=True).start()
    return opened


def _warm_up(opened: KnowledgeBaseService) -> None:
    opened.analyzer.query_terms("中文")
    try:
        records = opened.store.knowledge_bases()
    except Exception:  # a store that cannot be read says so on the pages
        return
    for record in records:
        if record.embedding_endpoint:  # an endpoint is asked at the first search, not at start
            continue
        try:
            opened.embedder(record).embed_query("warm up 预热")
        except Exception:  # the first search reports what is wrong
            logging.getLogger(__name__).info("could not warm the query embedder of %s", record.name, exc_info=True)


def close_services(timeout: float = 8.0) -> None:
    """Cancel the running imports of every service this process opened and wait for them (``timeout`` seconds in
    all): the server is stopping (serve.py's lifespan)."""
    with _OPENED_LOCK:
        opened = list(_OPENED)
    deadline = time.monotonic() + timeout
    for each in opened:
        each.close(max(0.5, deadline - time.monotonic()))


@st.cache_resource
def demo_lock(home: str) -> threading.Lock:
    """One lock per home for this app process: the demo KB is built once, however many sessions ask at once."""
    return threading.Lock()


@st.cache_resource
def demo_build(home: str) -> dict[str, str | None]:
    """The demo build's job id while it runs (``job_id``), shared by every session of this app process."""
    return {"job_id": None}


def service() -> KnowledgeBaseService:
    home = str(resolve_home())
    with _OPENED_LOCK:
        opened = home in _OPENED_HOMES
    if opened:
        return _service_for(home)
    with st.spinner(t("Opening the knowledge-base service…")):
        return _service_for(home)


@dataclass(frozen=True)
class Remembered:
    """An envelope from :func:`remembered`: how long computing it took, and whether this call computed it."""

    value: dict[str, Any]
    seconds: float
    fresh: bool


class EnvelopeMemo:
    """Successful envelopes under a key, the newest ``size`` of them; failures are never remembered."""

    def __init__(self, size: int = 256) -> None:
        self.size = size
        self._items: OrderedDict[str, tuple[dict[str, Any], float]] = OrderedDict()
        self._lock = threading.Lock()

    def get_or_run(self, key: str, run: Callable[[], dict[str, Any]]) -> Remembered:
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
                return Remembered(found[0], found[1], False)
        start = time.perf_counter()
        value = run()
        seconds = time.perf_counter() - start
        if value.get("success"):
            with self._lock:
                self._items[key] = (value, seconds)
                while len(self._items) > self.size:
                    self._items.popitem(last=False)
        return Remembered(value, seconds, True)


@st.cache_resource
def _memo_for(home: str) -> EnvelopeMemo:
    return EnvelopeMemo()


def remembered(key: str, run: Callable[[], dict[str, Any]]) -> Remembered:
    """``run()``'s envelope, remembered under ``key`` for every browser session of this process. The key must hold
    all the call depends on (for a search: the KB id and version, the query, every setting); pages treat the
    envelope as read-only."""
    return _memo_for(str(resolve_home())).get_or_run(key, run)


def public_demo_enabled() -> bool:
    """Whether the app runs as a public demo (``KB_DEMO=1``); a KB_DEMO the app does not understand stops it."""
    from kb_core.public_demo import demo_setting

    try:
        return demo_setting() == "public"
    except KBError as error:
        st.error(say(error.message), icon=":material/error:")
        st.stop()
        raise


@st.cache_resource
def _demo_for(home: str) -> PublicDemo:
    from kb_core.public_demo import PublicDemo

    demo = PublicDemo.from_environment(_service_for(home))
    demo.start_sweeper()  # visitor KBs are deleted at their expiry, whoever is visiting
    return demo


def public_demo() -> PublicDemo | None:
    """The public demo of this process (None outside one): its ledger, quotas and operator."""
    return _demo_for(str(resolve_home())) if public_demo_enabled() else None


def _visitor_token() -> str:
    """This browser's visitor token: kept in a cookie, so a reload or a second tab is the same visitor and finds its
    knowledge bases; a new browser is a new visitor."""
    token = st.session_state.get("kb_visitor_token")
    if token is None:
        cookie = st.context.cookies.get(VISITOR_COOKIE) or ""
        token = cookie if _VISITOR_TOKEN.match(cookie) else None
        if token is None:
            from kb_core.public_demo import PublicDemo

            token = PublicDemo.new_visitor_token()
        st.session_state["kb_visitor_token"] = token
        st.session_state["kb_visitor_cookie_due"] = True
    return str(token)


def set_visitor_cookie() -> None:
    """Write the visitor's cookie once per browser session (after the page's first elements: it is a script
    element): valid as long as a KB made now lives, renewed on every visit."""
    demo = public_demo()
    if demo is None or not st.session_state.pop("kb_visitor_cookie_due", False):
        return
    token = st.session_state.get("kb_visitor_token")
    if token and _VISITOR_TOKEN.match(token):
        age = int(demo.limits.expiry_seconds)
        st.html(
            f"<script>document.cookie = '{VISITOR_COOKIE}={token}; path=/; max-age={age}; SameSite=Lax';</script>",
            unsafe_allow_javascript=True,
        )


def session() -> Session:
    """This browser session's own session (its own current KB). In a public demo, the visitor's (or, once signed
    in, the operator's): what it may see and change is decided by the session itself."""
    current = st.session_state.get(SESSION_KEY)
    if current is None or current.service is not service():
        demo = public_demo()
        current = service().session() if demo is None else demo.visitor_session(_visitor_token())
        st.session_state[SESSION_KEY] = current
    return current


def sign_in_operator(secret: str) -> KBError | None:
    """Replace this browser session's visitor session by the operator's; None, or the refusal."""
    demo = public_demo()
    if demo is None:
        return None
    try:
        st.session_state[SESSION_KEY] = demo.operator_session(secret)
    except KBError as error:
        return error
    return None


def sign_out_operator() -> None:
    demo = public_demo()
    if demo is not None:
        st.session_state[SESSION_KEY] = demo.visitor_session(_visitor_token())


def operator_sign_in(sess: Session) -> None:
    """The sidebar's operator sign-in (a public demo with KB_DEMO_OPERATOR_TOKEN set), or sign-out once signed in."""
    demo = public_demo()
    if demo is None or not demo.operator_enabled:
        return
    with st.sidebar:
        if sess.principal.kind == "operator":
            if st.button(t("Sign out (operator)"), key="operator_sign_out"):
                sign_out_operator()
                st.rerun()
            return
        with (
            st.expander(t("Operator"), icon=":material/admin_panel_settings:"),
            st.form("operator_sign_in", border=False),
        ):
            secret = st.text_input(t("Operator token"), type="password", key="operator_token")
            if st.form_submit_button(t("Sign in")):
                refused = sign_in_operator(secret)
                if refused is None:
                    st.rerun()
                else:
                    st.error(f"{say(refused.message)}  \n`{refused.code}`", icon=":material/error:")


def scratch_dir(prefix: str, sess: Session | None = None) -> Path:
    """A new private folder for files the app hands the session (uploads, exports to download): where the session
    may open them (a public demo's sessions open no other path)."""
    root = (sess or session()).scratch_root
    return Path(tempfile.mkdtemp(prefix=prefix, dir=str(root) if root is not None else None))


def server_folders() -> tuple[list[Path], list[str]]:
    """The folders of ``$KB_ALLOW_DIRS`` that exist, and the entries that name no folder; none in a public demo, which
    has no server folders at all."""
    found: list[Path] = []
    if public_demo_enabled():
        return found, []
    missing: list[str] = []
    for entry in os.environ.get(ALLOW_DIRS_ENVIRONMENT_VARIABLE, "").split(os.pathsep):
        if entry.strip():
            if path_name_problem(entry.strip()) is not None:  # not UTF-8, too long: never a folder to use
                missing.append(shown_path(entry.strip()))
                continue
            folder = Path(entry.strip()).expanduser()
            if folder.is_dir():
                found.append(folder)
            else:
                missing.append(entry.strip())
    return found, missing


def server_path_session(sess: Session) -> Session | None:
    """``sess`` confined to ``$KB_ALLOW_DIRS`` (never the home), for paths typed into the app; None, after saying
    so, when no folder is configured: whoever reaches the app must not read or write any file the server can."""
    if public_demo_enabled():
        st.info(t("Files on the server are off in this public demo; upload files instead."), icon=":material/lock:")
        return None
    folders, missing = server_folders()
    if missing:
        st.warning(t("{variable} names folders that do not exist: {folders}.", variable=ALLOW_DIRS_ENVIRONMENT_VARIABLE,
                     folders=", ".join(missing)))
    if not folders:
        st.info(
            t(
                "Files on the server can be used only inside folders the server allows. Start the app with "
                "{variable}=/data/docs (several folders separated by '{separator}') to allow them; the knowledge-base "
                "home is never one of them.",
                variable=ALLOW_DIRS_ENVIRONMENT_VARIABLE, separator=os.pathsep,
            ),
            icon=":material/lock:",
        )
        return None
    st.caption(t("Allowed folders on the server: {folders}", folders=", ".join(f"`{f}`" for f in folders)))
    return sess.confined(folders)


def demo_enabled() -> bool:
    """Whether the app builds and opens on the demo KB: always but with ``KB_DEMO=0``."""
    from kb_core.public_demo import demo_setting

    try:
        return demo_setting() != "off"
    except KBError:
        return False


def demo_banner(sess: Session) -> None:
    """A public demo's banner: what this is, what a visitor may do, and when the visitor's KBs are deleted."""
    if not public_demo_enabled():
        return
    status = sess.demo_status()
    if not status["success"]:
        return
    data = status["data"]
    limits = data.get("limits") or {}
    from kb_core.public_demo import format_duration

    if data.get("kind") == "operator":
        st.warning(
            t(
                "**Public demo, signed in as the operator.** You see and change every knowledge base, publish one to "
                "all visitors, and see each visitor's usage (Knowledge bases page)."
            ),
            icon=":material/admin_panel_settings:",
        )
        return
    expiry = say(format_duration(float(limits.get("expiry_seconds", 0))))
    text = t(
        "**Public demo.** The shared knowledge bases are read-only. Knowledge bases you create are yours alone "
        "(their names end in your tag [{tag}]) and are deleted {expiry} after you create them.",
        tag=data.get("tag"), expiry=expiry,
    )
    mine = data.get("knowledge_bases") or []
    if mine:
        first = min(mine, key=lambda kb: kb["expires_at"])
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(first["expires_at"]))
        text += " " + t("Next: **{name}** on {when}.", name=first["name"], when=when)
    st.info(text, icon=":material/science:")


def demo_limits_caption(sess: Session) -> None:
    """A visitor's quotas, where they are met (the Import page)."""
    if not public_demo_enabled():
        return
    status = sess.demo_status()
    data = status["data"] if status["success"] else {}
    if data.get("kind") != "visitor":
        return
    limits = data["limits"]
    st.caption(
        t(
            "Demo limits per visitor: files up to {file_mb} MB, {files} files per import, {chunks} chunks in all your "
            "knowledge bases (used: {used}), {kbs} knowledge bases, {imports} imports and {searches} searches per "
            "minute.",
            file_mb=f"{limits['max_file_mb']:g}", files=limits["files_per_import"],
            chunks=f"{limits['chunks_per_visitor']:,}", used=f"{data['chunks_used']:,}",
            kbs=limits["kbs_per_visitor"], imports=limits["imports_per_minute"],
            searches=limits["searches_per_minute"],
        )
    )


def show_error(envelope: dict[str, Any], prefix: str = "") -> None:
    """An envelope's readable message (never a stack trace), in the session's language, with its error code."""
    code = (envelope.get("error") or {}).get("code")
    text = f"{prefix}{say(envelope.get('message')) or t('The operation failed.')}"
    st.error(f"{text}  \n`{code}`" if code else text, icon=":material/error:")


def data_or_error(envelope: dict[str, Any], prefix: str = "") -> Any:
    """The envelope's data, or None after showing its error."""
    if envelope.get("success"):
        return envelope.get("data")
    show_error(envelope, prefix)
    return None


# The name of the KB this browser session last used, so that a KB deleted meanwhile (by another session) is named
# when the page says it is gone.
LAST_KB_KEY = "kb_last_used"


def current_kb_name(sess: Session) -> str | None:
    listing = sess.list_knowledge_bases()
    if not listing["success"]:
        return None
    current = listing["data"]["current_kb_id"]
    for kb in listing["data"]["knowledge_bases"]:
        if kb["id"] == current:
            st.session_state[LAST_KB_KEY] = str(kb["name"])
            return str(kb["name"])
    return None


def kb_disappeared(sess: Session) -> str | None:
    """The name of the KB this session was using if it no longer exists (deleted meanwhile, by another browser
    session or process), else None: the pages then say so and ask for a choice, and never go on with another KB."""
    if sess.current_kb_id is None or current_kb_name(sess) is not None:
        return None
    return str(st.session_state.get(LAST_KB_KEY) or t("the selected knowledge base"))


def require_current_kb(sess: Session) -> str:
    """The current KB's name; otherwise a hint (or, for a KB deleted meanwhile, that it is gone) and the page stops."""
    name = current_kb_name(sess)
    if name is None:
        gone = kb_disappeared(sess)
        if gone is not None:
            st.warning(
                t(
                    "The knowledge base **{name}** this page was using no longer exists: it was deleted, perhaps in "
                    "another browser session. Choose a knowledge base in the sidebar (or create one on the "
                    "**Knowledge bases** page) to go on.",
                    name=gone,
                ),
                icon=":material/warning:",
            )
        else:
            st.info(t("No knowledge base is selected. Pick one in the sidebar or create one on the **Knowledge "
                      "bases** page."))
        st.stop()
    return name  # type: ignore[return-value]


def ensure_selection(sess: Session, preferred: str | None = None) -> None:
    """A new browser session starts on the demo KB (or the first one) so every page has something to show. A session
    whose KB was deleted meanwhile keeps no selection: it is asked to choose (:func:`kb_disappeared`)."""
    if sess.current_kb_id is not None or current_kb_name(sess) is not None:
        return
    listing = sess.list_knowledge_bases()
    kbs = listing["data"]["knowledge_bases"] if listing["success"] else []
    if not kbs:
        return
    names = [kb["name"] for kb in kbs]
    choice = preferred if preferred in names else names[0]
    sess.select_knowledge_base(choice)


def sidebar_kb_picker(sess: Session) -> Any:
    """The current-KB picker, and under it the KB's counts; returns the counts' placeholder (None without a KB)
    for :func:`refresh_sidebar_counts`."""
    listing = sess.list_knowledge_bases()
    if not listing["success"]:
        show_error(listing)
        return None
    kbs = listing["data"]["knowledge_bases"]
    names = [kb["name"] for kb in kbs]
    current = current_kb_name(sess)
    gone = kb_disappeared(sess) if current is None else None
    with st.sidebar:
        if not names:
            st.caption(t("No knowledge bases yet."))
            return None
        index = names.index(current) if current in names else None
        choice = st.selectbox(
            t("Current knowledge base"),
            names,
            index=index,
            key=f"sidebar_kb_{current}_{gone}",  # re-created when another page changes the selection
            placeholder=t("Choose a knowledge base"),
            help=t("Each browser session has its own current knowledge base."),
        )
        if gone is not None:
            st.caption(":orange[" + t("**{name}** no longer exists (deleted elsewhere): choose another.", name=gone)
                       + "]")
        if choice is not None and choice != current:
            data_or_error(sess.select_knowledge_base(choice))
            st.rerun()
        counts = st.empty()
        if current is not None:
            counts.caption(kb_counts_line(next(k for k in kbs if k["name"] == current)))
        return counts


def kb_counts_line(kb: dict[str, Any]) -> str:
    failed = int(kb.get("failed_document_count") or 0)
    documents, chunks = kb["document_count"], kb["chunk_count"]
    parts = [
        t("{n} document", n=documents) if documents == 1 else t("{n} documents", n=documents),
        t("{n} chunk", n=chunks) if chunks == 1 else t("{n} chunks", n=chunks),
    ]
    if failed:
        parts.append(t("{n} failed import", n=failed) if failed == 1 else t("{n} failed imports", n=failed))
    parts += [str(kb["embedding_model"]), t("chunk size {size}", size=kb["chunk_size"])]
    return " · ".join(parts)


def refresh_sidebar_counts(sess: Session, counts: Any) -> None:
    """Redraw the sidebar's counts after the page ran: it may have imported or deleted documents."""
    if counts is None:
        return
    listing = sess.list_knowledge_bases()
    if not listing["success"]:
        return
    current = listing["data"]["current_kb_id"]
    kb = next((k for k in listing["data"]["knowledge_bases"] if k["id"] == current), None)
    if kb is not None:
        counts.caption(kb_counts_line(kb))


# -- progress ------------------------------------------------------------------------------------
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
    marks them from the result envelope.
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

    def finish(self, envelope: dict[str, Any]) -> None:
        data = envelope.get("data") or {}
        done = len(data.get("success_files", [])) + len(data.get("failed_files", []))
        self.overall.progress(1.0, text=t("{title}: {done} of {total} files · finished", title=self.title, done=done,
                                          total=len(self.labels)))
        for failure in data.get("failed_files", []):
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


def attach_jobs_from_url(sess: Session) -> None:
    """Once per browser session: list the import jobs named in the URL (a reload's new session finds its jobs)."""
    if st.session_state.get("jobs_attached"):
        return
    st.session_state["jobs_attached"] = True
    attached = []
    for job_id in st.query_params.get_all(JOB_QUERY_PARAM):
        found = sess.import_job(job_id, watch=True)  # an id the service no longer knows is left out
        if found["success"]:
            attached.append(found["data"])
    # The reloaded page goes on with the KB its import goes into, not the default one (the next import would go there).
    running = [job for job in attached if job["state"] in ("running", "cancelling")]
    if running and sess.current_kb_id is None:
        sess.select_knowledge_base(running[-1]["kb_name"])


def sync_job_url(sess: Session) -> None:
    """Write this session's import jobs into the URL (or remove them), for a reload to find."""
    listing = sess.import_jobs()
    ids = [job["job_id"] for job in listing["data"]["jobs"]] if listing["success"] else []
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


def job_outcome(sess: Session, status: dict[str, Any]) -> None:
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


def _running_jobs_body(sess: Session, watched: tuple[str, ...]) -> None:
    listing = sess.import_jobs()
    jobs = {job["job_id"]: job for job in (listing["data"]["jobs"] if listing["success"] else [])}
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
                sess.cancel_import(job_id)
                st.rerun(scope="fragment")


def import_jobs_panel(sess: Session) -> None:
    """The Import page's list of this session's import jobs: the running ones live (polled every
    ``JOB_POLL_SECONDS``), the finished ones with their results until dismissed; newest first."""
    listing = sess.import_jobs()
    jobs = listing["data"]["jobs"] if listing["success"] else []
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


def _sidebar_jobs_body(sess: Session, watched: tuple[str, ...]) -> None:
    listing = sess.import_jobs()
    jobs = {job["job_id"]: job for job in (listing["data"]["jobs"] if listing["success"] else [])}
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


def sidebar_jobs(sess: Session) -> None:
    """Every page's sidebar: this session's running imports with their progress (polled), and a line per import
    that ended and was not dismissed, with a link to the Import page."""
    listing = sess.import_jobs()
    jobs = listing["data"]["jobs"] if listing["success"] else []
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


# -- search results ------------------------------------------------------------------------------
def highlight(text: str, words: Sequence[str]) -> str:
    """HTML of ``text`` with the query's ``words`` marked as whole words where the analyzer finds them: Latin words by
    stem (``configuring`` marks configure and configuration, never the inside of another word), Chinese words where
    jieba cuts them from the text; never stop words or one-letter words (:mod:`kb_core.retrieval.highlight`). Safe in
    ``st.markdown(..., unsafe_allow_html=True)``: the text can neither inject HTML nor be read as Markdown."""
    from kb_core.retrieval.highlight import highlight_spans

    return _marked(text, highlight_spans(text, words, service().analyzer))


def _marked(text: str, marks: Sequence[Sequence[int]], start: int = 0, end: int | None = None) -> str:
    """HTML of ``text[start:end]`` with the character spans ``marks`` (of the whole text) marked."""
    end = len(text) if end is None else end
    out: list[str] = []
    position = start
    for a, b in marks:
        a, b = max(int(a), start), min(int(b), end)
        if b <= a:
            continue
        out.append(_inert(text[position:a]))
        out.append(f"<mark>{_inert(text[a:b])}</mark>")
        position = b
    out.append(_inert(text[position:end]))
    return "".join(out)


def query_terms(text: str) -> list[str]:
    """The words a query is searched with (stop words left out), e.g. to highlight rag_search's keywords."""
    return list(service().analyzer.query_terms(text).shown_words)


# Characters HTML or Markdown (with GitHub's autolinks) give meaning to: written as character references they are
# shown as themselves and start nothing, so document text never becomes markup, an image (a tracking pixel), a link
# or a heading.
_SIGNIFICANT = re.compile(r"[&<>\"'\\`*_{}\[\]()#+\-.!|~:@=]")


# Where GitHub's autolink literals start (``https://…``, ``www.…``, ``name@host``): the Markdown renderer finds them in
# text *after* character references are decoded (#37: ``https&#58;//evil.example`` still became a link), so an
# empty element goes there, splitting the text the renderer searches.
_AUTOLINK = re.compile(r"(?i)(?<=www)(?=\.)|(?=://)|(?=@)")


def inert(text: str) -> str:
    """``text`` as HTML that Markdown renders as exactly that text, line breaks kept: no markup, image, heading or
    link (an autolinked bare URL or e-mail address included). For document text, names and chapters."""
    return "<wbr>".join(
        _SIGNIFICANT.sub(lambda m: f"&#{ord(m.group())};", part) for part in _AUTOLINK.split(text)
    ).replace("\n", "<br>")


_inert = inert


def passage_card(text: str, passage: dict[str, Any] | None) -> str:
    """A result card's text: the hit's passage (the window around its best-matching words that the search chose,
    ``{start, end, marks}``) with its words marked, and "show all" / "show less" to unfold the whole text in the
    browser (an HTML ``details`` element: no rerun; search_lab.py styles it). A text that fits is shown whole."""
    if passage is None:
        return f"<div class='kb-chunk-text'>{_inert(text)}</div>"
    marks = passage.get("marks") or []
    start, end = int(passage["start"]), int(passage["end"])
    if start <= 0 and end >= len(text):
        return f"<div class='kb-chunk-text'>{_marked(text, marks)}</div>"
    window = ("… " if start > 0 else "") + _marked(text, marks, start, end) + (" …" if end < len(text) else "")
    return (
        "<details class='kb-chunk'><summary><div class='kb-chunk-text'>"
        f"<span class='kb-passage'>{window}</span><span class='kb-full'>{_marked(text, marks)}</span></div>"
        f"<span class='kb-more'><span class='kb-show-all'>{t('show all ▾')}</span>"
        f"<span class='kb-show-less'>{t('show less ▴')}</span></span></summary></details>"
    )


def contribution_parts(breakdown: dict[str, Any]) -> dict[str, float]:
    """The three stacked parts of the final score: they add up to ``final_score`` (see kb_core.retrieval.fusion)."""
    keep = 1.0 - float(breakdown.get("jaccard_weight") or 0.0)
    return {
        "semantic": keep * float(breakdown.get("vector_contribution") or 0.0),
        "keyword": keep * float(breakdown.get("keyword_contribution") or 0.0),
        "Jaccard": float(breakdown.get("jaccard_contribution") or 0.0),
    }


PART_COLOURS = {"semantic": "#4C78A8", "keyword": "#F58518", "Jaccard": "#54A24B"}


def part_names() -> dict[str, str]:
    """The stacked parts' names as a person reads them, by part (the keys of :func:`contribution_parts`)."""
    return {"semantic": t("semantic"), "keyword": t("keyword"), "Jaccard": t("Jaccard")}


def score_bars(chunks: Sequence[dict[str, Any]]) -> str:
    """HTML of one stacked bar per hit on the whole 0–1 score scale (semantic + keyword + Jaccard = final), with a
    legend and an axis; each part's value shows on hover. Drawn as plain HTML, not a chart: the search lab redraws it
    on every slider notch, and a plotly chart cost the browser ~0.1 s of CPU each time (app.py styles it)."""
    names = part_names()
    legend = "".join(
        f"<span><i style='background:{colour}'></i>{names[part]}</span>" for part, colour in PART_COLOURS.items()
    ) + f"<span><i class='kb-bars-final'></i>{t('final score')}</span>"
    rows = []
    for i, chunk in enumerate(chunks):
        breakdown = chunk.get("breakdown") or {}
        parts = contribution_parts(breakdown)
        final = float(breakdown.get("final_score", chunk.get("score", 0.0)))
        label = _inert(f"#{i + 1} {chunk['doc_name']}"[:48])
        segments = "".join(
            f"<i style='width:{100 * max(0.0, min(1.0, value)):.2f}%;background:{PART_COLOURS[part]}' "
            f"title='{names[part]}: {value:.4f}'></i>"
            for part, value in parts.items() if value > 0
        )
        summary = parts_sum(parts, final)
        final_title = t("final score {value}", value=f"{final:.4f}")
        rows.append(
            f"<div class='kb-bars-row' role='img' aria-label='{label}: {summary}'>"
            f"<span class='kb-bars-label' title='{label}'>{label}</span><span class='kb-bars-track'>{segments}"
            f"<b style='left:{100 * max(0.0, min(1.0, final)):.2f}%' title='{final_title}'>"
            f"{final:.3f}</b></span></div>"
        )
    ticks = "".join(f"<span style='left:{100 * step / 5:.0f}%'>{step / 5:.1f}</span>" for step in range(6))
    axis = (f"<div class='kb-bars-row'><span class='kb-bars-label'></span><span class='kb-bars-axis'>{ticks}</span>"
            f"</div><div class='kb-bars-title'>{t('score (0–1 scale)')}</div>")
    return f"<div class='kb-bars'><div class='kb-bars-legend'>{legend}</div>{''.join(rows)}{axis}</div>"


def parts_sum(parts: dict[str, float], final: float) -> str:
    """``semantic 0.4123 + keyword 0.2000 + Jaccard 0.0000 = final 0.6123``, in the session's language."""
    names = part_names()
    return t("{parts} = final {final}", parts=" + ".join(f"{names[part]} {value:.4f}" for part, value in parts.items()),
             final=f"{final:.4f}")


def score_scale(settings: dict[str, Any]) -> str:
    """One sentence on what a result's score means for these settings (see kb_core.retrieval.fusion)."""
    mode = settings.get("mode")
    semantic = t("the cosine similarity of the query and the chunk on this model's measured scale: what unrelated "
                 "text scores is 0, a near-identical text 1, so a score means the same on every model")
    if mode == "semantic":
        return t("Scores lie on a 0–1 scale: {semantic}.", semantic=semantic)
    if mode == "keyword":
        return t("Scores lie on a 0–1 scale: 1 − exp(−BM25 / reference), where the reference is the BM25 of a chunk "
                 "of average length holding each query term once; 0.63 is as much keyword evidence as that "
                 "reference match, 0.86 twice as much.")
    if settings.get("fusion") == "rrf":
        return t("Scores lie on a 0–1 scale but come from ranks (reciprocal rank fusion): each signal gives "
                 "61 / (60 + rank), 1 for its first place. They order this query's hits; they do not say how well "
                 "a chunk matches.")
    return t("Scores lie on a 0–1 scale: vector weight × semantic + keyword weight × (1 − exp(−BM25 / reference)); "
             "semantic is {semantic}; the reference is the BM25 of a chunk of average length holding each query "
             "term once. The same score means the same evidence in every query.", semantic=semantic)


def weight_pair(weights: dict[str, Any] | None) -> str:
    """``"0.70 / 0.30"`` for ``{"vector": 0.7, "keyword": 0.3}`` (vector first), or a dash."""
    if not weights:
        return "–"
    return f"{float(weights['vector']):.2f} / {float(weights['keyword']):.2f}"


def table_height(rows: int) -> int:
    """Pixels for a st.dataframe that shows ``rows`` rows and its header without scrolling."""
    return 35 * (rows + 1) + 3
