"""Helpers every page uses: the cached service, the per-browser session, error display, progress bars.

Pages are thin: they lay out widgets and call :class:`kb_core.Session` methods. Nothing here knows
about retrieval; it only turns envelopes into Streamlit elements.
"""

from __future__ import annotations

import os
import re
import tempfile
import threading
import time
import unicodedata
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


@st.cache_resource(show_spinner="Opening the knowledge-base service…")
def _service_for(home: str) -> KnowledgeBaseService:
    # One service per process and home: it holds the loaded models, readers and index caches.
    opened = KnowledgeBaseService(home)
    # The Chinese word dictionary loads on the first Chinese text a process analyses (~0.5 s of CPU); loaded now, in
    # the background, a user's first Chinese query does not wait for it.
    threading.Thread(target=opened.analyzer.query_terms, args=("中文",), name="kb-jieba-warm", daemon=True).start()
    return opened


@st.cache_resource
def demo_lock(home: str) -> threading.Lock:
    """One lock per home for this app process: the demo KB is built once, however many sessions ask at once."""
    return threading.Lock()


def service() -> KnowledgeBaseService:
    return _service_for(str(resolve_home()))


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
        st.error(error.message, icon=":material/error:")
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
            if st.button("Sign out (operator)", key="operator_sign_out"):
                sign_out_operator()
                st.rerun()
            return
        with (
            st.expander("Operator", icon=":material/admin_panel_settings:"),
            st.form("operator_sign_in", border=False),
        ):
            secret = st.text_input("Operator token", type="password", key="operator_token")
            if st.form_submit_button("Sign in"):
                refused = sign_in_operator(secret)
                if refused is None:
                    st.rerun()
                else:
                    st.error(f"{refused.message}  \n`{refused.code}`", icon=":material/error:")


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
        st.info("Files on the server are off in this public demo; upload files instead.", icon=":material/lock:")
        return None
    folders, missing = server_folders()
    if missing:
        st.warning(f"{ALLOW_DIRS_ENVIRONMENT_VARIABLE} names folders that do not exist: {', '.join(missing)}.")
    if not folders:
        st.info(
            "Files on the server can be used only inside folders the server allows. Start the app with "
            f"{ALLOW_DIRS_ENVIRONMENT_VARIABLE}=/data/docs (several folders separated by '{os.pathsep}') to allow "
            "them; the knowledge-base home is never one of them.",
            icon=":material/lock:",
        )
        return None
    st.caption("Allowed folders on the server: " + ", ".join(f"`{f}`" for f in folders))
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
            "**Public demo, signed in as the operator.** You see and change every knowledge base, publish one to "
            "all visitors, and see each visitor's usage (Knowledge bases page).",
            icon=":material/admin_panel_settings:",
        )
        return
    expiry = format_duration(float(limits.get("expiry_seconds", 0)))
    text = (
        "**Public demo.** The shared knowledge bases are read-only. Knowledge bases you create are yours alone "
        f"(their names end in your tag [{data.get('tag')}]) and are deleted {expiry} after you create them."
    )
    mine = data.get("knowledge_bases") or []
    if mine:
        first = min(mine, key=lambda kb: kb["expires_at"])
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(first["expires_at"]))
        text += f" Next: **{first['name']}** on {when}."
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
        f"Demo limits per visitor: files up to {limits['max_file_mb']:g} MB, {limits['files_per_import']} files per "
        f"import, {limits['chunks_per_visitor']:,} chunks in all your knowledge bases (used: "
        f"{data['chunks_used']:,}), {limits['kbs_per_visitor']} knowledge bases, {limits['imports_per_minute']} "
        f"imports and {limits['searches_per_minute']} searches per minute."
    )


def show_error(envelope: dict[str, Any], prefix: str = "") -> None:
    """An envelope's readable message (never a stack trace) with its error code."""
    code = (envelope.get("error") or {}).get("code")
    text = f"{prefix}{envelope.get('message') or 'The operation failed.'}"
    st.error(f"{text}  \n`{code}`" if code else text, icon=":material/error:")


def data_or_error(envelope: dict[str, Any], prefix: str = "") -> Any:
    """The envelope's data, or None after showing its error."""
    if envelope.get("success"):
        return envelope.get("data")
    show_error(envelope, prefix)
    return None


def current_kb_name(sess: Session) -> str | None:
    listing = sess.list_knowledge_bases()
    if not listing["success"]:
        return None
    current = listing["data"]["current_kb_id"]
    for kb in listing["data"]["knowledge_bases"]:
        if kb["id"] == current:
            return str(kb["name"])
    return None


def require_current_kb(sess: Session) -> str:
    """The current KB's name; otherwise a hint and the page stops."""
    name = current_kb_name(sess)
    if name is None:
        st.info("No knowledge base is selected. Pick one in the sidebar or create one on the **Knowledge bases** page.")
        st.stop()
    return name  # type: ignore[return-value]


def ensure_selection(sess: Session, preferred: str | None = None) -> None:
    """A new browser session starts on the demo KB (or the first one) so every page has something to show."""
    if current_kb_name(sess) is not None:
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
    with st.sidebar:
        if not names:
            st.caption("No knowledge bases yet.")
            return None
        index = names.index(current) if current in names else None
        choice = st.selectbox(
            "Current knowledge base",
            names,
            index=index,
            key=f"sidebar_kb_{current}",  # re-created when another page changes the selection
            placeholder="Choose a knowledge base",
            help="Each browser session has its own current knowledge base.",
        )
        if choice is not None and choice != current:
            data_or_error(sess.select_knowledge_base(choice))
            st.rerun()
        counts = st.empty()
        if current is not None:
            counts.caption(kb_counts_line(next(k for k in kbs if k["name"] == current)))
        return counts


def kb_counts_line(kb: dict[str, Any]) -> str:
    return (
        f"{kb['document_count']} documents · {kb['chunk_count']} chunks · {kb['embedding_model']} · "
        f"chunk size {kb['chunk_size']}"
    )


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
STATUS_LABELS = {
    "pending": "waiting",
    "parsing": "parsing",
    "embedding": "embedding",
    "ready": "done",
    "failed": "failed",
}


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


def load_model_with_notice(sess: Session, kb_name: str | None = None, model: str | None = None) -> None:
    """Say that the embedding model is loading (and about how long that takes), load it, then say how long it took.
    Without this an import sits at "0 chunks embedded" while the model loads (seconds, the first time)."""
    status = sess.embedding_model_status(kb_name, model)
    if not status["success"] or status["data"]["loaded"]:
        return
    name, seconds = status["data"]["model"], status["data"]["expected_seconds"]
    note = st.empty()
    note.info(f"Loading the embedding model {name} (first time: ~{seconds:.0f} s); then the chunks are embedded…",
              icon=":material/hourglass_top:")
    loaded = sess.load_embedding_model(kb_name, model)
    if loaded["success"]:
        note.caption(f"Loaded the embedding model {name} in {loaded['data']['seconds']:.1f} s.")
    else:
        note.empty()
        show_error(loaded)


class ImportBars:
    """An overall bar plus one bar per file, fed by the importer's progress callback (call the object).

    Files the service rejects before importing (missing paths) never reach the callback; :meth:`finish`
    marks them from the result envelope.
    """

    def __init__(self, paths: Sequence[str], labels: Sequence[str], title: str = "Overall") -> None:
        self.title = title
        self.labels = dict(zip(paths, labels, strict=True))
        self.overall = st.progress(0.0, text=f"{title}: 0 of {len(labels)} files")
        self.bars = {path: st.progress(0.0, text=f"{label}: waiting") for path, label in self.labels.items()}

    def __call__(self, progress: ImportProgress) -> None:
        self.overall.progress(min(1.0, overall_fraction(progress)), text=f"{self.title}: {progress.summary()}")
        for file in progress.files:
            bar = self.bars.get(file.file_path)
            if bar is None:
                continue
            state = STATUS_LABELS.get(file.status, file.status)
            detail = f" ({file.chunks_embedded}/{file.chunks_total} chunks)" if file.chunks_total else ""
            if file.status == "failed" and file.error:
                detail = f": {file.error}"
            bar.progress(min(1.0, file_fraction(file)), text=f"{self.labels[file.file_path]}: {state}{detail}")

    def finish(self, envelope: dict[str, Any]) -> None:
        data = envelope.get("data") or {}
        done = len(data.get("success_files", [])) + len(data.get("failed_files", []))
        self.overall.progress(1.0, text=f"{self.title}: {done} of {len(self.labels)} files · finished")
        for failure in data.get("failed_files", []):
            bar = self.bars.get(failure["file_path"])
            if bar is not None:
                bar.progress(1.0, text=f"{self.labels[failure['file_path']]}: failed: {failure['error']}")


# -- search results ------------------------------------------------------------------------------
def highlight(text: str, terms: Sequence[str]) -> str:
    """HTML of ``text`` with the matched terms marked where the analyzer finds them: whole Latin words whose stem is a
    term (``configur`` marks configure and configuring, never the inside of another word), Chinese words and bigrams
    as the analyzer cut them; never stop words or one-letter terms (:mod:`kb_core.retrieval.highlight`). Safe in
    ``st.markdown(..., unsafe_allow_html=True)``: the text can neither inject HTML nor be read as Markdown."""
    from kb_core.retrieval.highlight import highlight_spans

    out: list[str] = []
    position = 0
    for start, end in highlight_spans(text, terms, service().analyzer):
        out.append(_inert(text[position:start]))
        out.append(f"<mark>{_inert(text[start:end])}</mark>")
        position = end
    out.append(_inert(text[position:]))
    return "".join(out)


def query_terms(text: str) -> list[str]:
    """The analysed terms a query is searched with (stop words left out), e.g. to highlight rag_search's keywords."""
    return list(service().analyzer.query_terms(text).terms)


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


CLAMP_LINES = 6
_CLAMP_UNITS = 640  # about six lines of a result card at 1280 px, a CJK character counting as two Latin ones


def clamped(marked_html: str, text: str) -> str:
    """A result card's text (``marked_html``: ``text`` with its highlights) clamped to its first lines, with "show
    all" / "show less" to unfold it in the browser (an HTML ``details`` element: no rerun). Short texts are not
    clamped."""
    units = sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)
    if units <= _CLAMP_UNITS and text.count("\n") < CLAMP_LINES:
        return f"<div class='kb-chunk-text'>{marked_html}</div>"
    return (
        "<details class='kb-chunk'><summary><div class='kb-chunk-text kb-clamp'>"
        f"{marked_html}</div><span class='kb-more'></span></summary></details>"
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


def score_bars(chunks: Sequence[dict[str, Any]]) -> str:
    """HTML of one stacked bar per hit on the whole 0–1 score scale (semantic + keyword + Jaccard = final), with a
    legend and an axis; each part's value shows on hover. Drawn as plain HTML, not a chart: the search lab redraws it
    on every slider notch, and a plotly chart cost the browser ~0.1 s of CPU each time (app.py styles it)."""
    legend = "".join(
        f"<span><i style='background:{colour}'></i>{part}</span>" for part, colour in PART_COLOURS.items()
    ) + "<span><i class='kb-bars-final'></i>final score</span>"
    rows = []
    for i, chunk in enumerate(chunks):
        breakdown = chunk.get("breakdown") or {}
        parts = contribution_parts(breakdown)
        final = float(breakdown.get("final_score", chunk.get("score", 0.0)))
        label = _inert(f"#{i + 1} {chunk['doc_name']}"[:48])
        segments = "".join(
            f"<i style='width:{100 * max(0.0, min(1.0, value)):.2f}%;background:{PART_COLOURS[part]}' "
            f"title='{part}: {value:.4f}'></i>"
            for part, value in parts.items() if value > 0
        )
        summary = " + ".join(f"{part} {value:.4f}" for part, value in parts.items()) + f" = final {final:.4f}"
        rows.append(
            f"<div class='kb-bars-row' role='img' aria-label='{label}: {summary}'>"
            f"<span class='kb-bars-label' title='{label}'>{label}</span><span class='kb-bars-track'>{segments}"
            f"<b style='left:{100 * max(0.0, min(1.0, final)):.2f}%' title='final score {final:.4f}'>"
            f"{final:.3f}</b></span></div>"
        )
    ticks = "".join(f"<span style='left:{100 * t / 5:.0f}%'>{t / 5:.1f}</span>" for t in range(6))
    axis = (f"<div class='kb-bars-row'><span class='kb-bars-label'></span><span class='kb-bars-axis'>{ticks}</span>"
            "</div><div class='kb-bars-title'>score (0–1 scale)</div>")
    return f"<div class='kb-bars'><div class='kb-bars-legend'>{legend}</div>{''.join(rows)}{axis}</div>"


def score_scale(settings: dict[str, Any]) -> str:
    """One sentence on what a result's score means for these settings (see kb_core.retrieval.fusion)."""
    mode = settings.get("mode")
    if mode == "semantic":
        return ("Scores lie on a 0–1 scale: the cosine similarity of the query and the chunk embeddings "
                "(a negative cosine counts as 0).")
    if mode == "keyword":
        return ("Scores lie on a 0–1 scale: 1 − exp(−BM25 / reference), where the reference is the BM25 of a chunk "
                "of average length holding each query term once; 0.63 is as much keyword evidence as that "
                "reference match, 0.86 twice as much.")
    if settings.get("fusion") == "rrf":
        return ("Scores lie on a 0–1 scale but come from ranks (reciprocal rank fusion): each signal gives "
                "61 / (60 + rank), 1 for its first place. They order this query's hits; they do not say how well "
                "a chunk matches.")
    return ("Scores lie on a 0–1 scale: vector weight × max(0, cosine) + keyword weight × (1 − exp(−BM25 / "
            "reference)), where the reference is the BM25 of a chunk of average length holding each query term "
            "once. The same score means the same evidence in every query.")


def weight_pair(weights: dict[str, Any] | None) -> str:
    """``"0.70 / 0.30"`` for ``{"vector": 0.7, "keyword": 0.3}`` (vector first), or a dash."""
    if not weights:
        return "–"
    return f"{float(weights['vector']):.2f} / {float(weights['keyword']):.2f}"


def table_height(rows: int) -> int:
    """Pixels for a st.dataframe that shows ``rows`` rows and its header without scrolling."""
    return 35 * (rows + 1) + 3
