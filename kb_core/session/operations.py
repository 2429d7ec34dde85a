"""The session's operations, typed: the per-user view of the service (which KB is current, which KBs it may see)
and every operation a front end offers, each returning a result of :mod:`kb_core.features.results` and raising
:class:`kb_core.base.errors.KBError`.

The CLI keeps one session per home (persisted), each MCP session and each browser session has its own (in memory).
The features below it (``kb_core/features``: retrieval, ingest, bundles, transfer, …, over the store) take the
process's resources and a KB record, raise KBError and return typed data; the operations validate arguments, call
them and say what happened.
The edges answer each operation as an envelope (:mod:`kb_core.edges.envelopes`).

Why over 600 lines: this is the API surface, some 40 public operations that each validate their arguments, call
a feature and compose the message; splitting it (mixins by concern) would scatter the messages a person reads. The
file handling of import_document/update_document lives in :mod:`kb_core.features.ingest.files`.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import TimeoutError as FuturesTimeout
from contextlib import contextmanager
from dataclasses import MISSING, asdict, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kb_core.base.errors import (
    Cancelled,
    DocumentNotFound,
    EmbeddingError,
    InvalidArgument,
    ItemNotFound,
    JobNotFound,
    KBError,
    KBIsCurrent,
    KBNotFound,
    NoCurrentKB,
    PermissionDenied,
)
from kb_core.base.i18n import Text, msg
from kb_core.base.redaction import shown_endpoint
from kb_core.base.safe_files import AllowedFolders, reject_nul, require_inside
from kb_core.base.validation import (
    validate_chunk_size,
    validate_float_range,
    validate_int_range,
    validate_kb_name,
    validate_keywords,
    validate_query,
)
from kb_core.features.bundles import api as bundles
from kb_core.features.documents import (
    chunk_json,
    document_info,
    document_info_text,
    document_row,
    find_item,
    source_label,
)
from kb_core.features.principals import ImportAllowance, Principal, TokenScope
from kb_core.features.results import (
    ChunkList,
    Compacted,
    DemoStatus,
    DeviceInfo,
    DocDeleted,
    DocumentInfos,
    DocumentList,
    DocUpdated,
    EmbeddingSource,
    EvaluationRuns,
    ExecutorChoices,
    Explanation,
    ExportSummary,
    HitList,
    ImportJobList,
    ImportJobStatus,
    ImportReport,
    ImportSummary,
    Item,
    JobDismissed,
    KBCreated,
    KBDeleted,
    KBList,
    KBPublished,
    KBReembedded,
    KBSelected,
    ModelList,
    ModelLoaded,
    ModelState,
    RagResult,
    RunComparison,
    RunDeleted,
    SavedSettings,
    SearchReport,
    SearchRequest,
    SearchResult,
    TokenCreated,
    TokenList,
    TokenRevoked,
    Verification,
)
from kb_core.features.retrieval.narrative import Note, hit_list_notes, result_notes
from kb_core.features.retrieval.query import explain_chunk, rag_rank, search_settings
from kb_core.features.retrieval.search import (
    RankedHits,
    SearchHit,
    SearchSettings,
)
from kb_core.session.jobs import KEEP_FINISHED, STATE_TEXT, ImportJob
from kb_core.store import KnowledgeBaseRecord

if TYPE_CHECKING:
    from kb_core.engines.analysis import Analyzer
    from kb_core.features.evaluation.runs import EvaluationRunStore
    from kb_core.features.ingest.files import FileOutcome
    from kb_core.features.ingest.pipeline import ChunkBudget, ImportProgress
    from kb_core.features.transfer.format import TransferLimits
    from kb_core.session.resources import SessionResources
    from kb_core.store.tokens import TokenRecord

logger = logging.getLogger(__name__)

# What explain_search takes of a SearchRequest beside the query: the settings that score a chunk.
EXPLAIN_SETTINGS = (
    "mode", "vector_weight", "keyword_weight", "jaccard_weight", "fusion", "weighting", "language_guard",
)


def search_facts(outcome: SearchResult) -> dict[str, Any]:
    """What a search result says beside its hits: the query's terms and stop words, the semantic floor, and how
    many hits ``min_score`` hid (and, over several KBs, how many copies of a better hit were dropped)."""
    terms = outcome.query_terms
    return {
        "query_terms": None
        if terms is None
        else {
            "terms": list(terms.terms),
            "words": list(terms.shown_words),
            "stop_words": list(terms.stop_words),
            "only_stop_words": terms.only_stop_words,
            "support": list(terms.support),
        },
        "semantic_floor": outcome.semantic_floor,
        "semantic_scale": None if outcome.semantic_scale is None else outcome.semantic_scale.to_json(),
        "min_score": outcome.settings.min_score,
        "below_min_score": outcome.below_min_score,
        "without_evidence": outcome.without_evidence,
        "duplicates_dropped": outcome.duplicates_dropped,
    }


def result_notes_of(outcome: SearchResult) -> list[Note]:
    """The narrative's notes on ``outcome`` (:func:`kb_core.features.retrieval.narrative.result_notes`): hits hidden by
    min_score, copies dropped, candidates left out, stop words left out."""
    terms = outcome.query_terms
    return result_notes(
        shown=len(outcome.hits),
        top_k=outcome.settings.top_k,
        mode=outcome.settings.mode,
        min_score=outcome.settings.min_score,
        below_min_score=outcome.below_min_score,
        duplicates_dropped=outcome.duplicates_dropped,
        without_evidence=outcome.without_evidence,
        semantic_floor=outcome.semantic_floor,
        vector_weight_used=None if outcome.weights_used is None else outcome.weights_used.vector,
        stop_words=() if terms is None else tuple(terms.stop_words),
        only_stop_words=terms is not None and terms.only_stop_words,
    )


def joined(sentences: Sequence[str]) -> str:
    """Whole sentences one after the other, as one Text (said sentence by sentence in the reader's language)."""
    said = sentences[0]
    for sentence in sentences[1:]:
        said = msg("{first} {then}", first=said, then=sentence)
    return said


def _replaced(text: object, old: str, new: str) -> object:
    """``text`` with ``old`` replaced by ``new``, in its parameters too when it is a :class:`Text` (so it can still
    be said in another language)."""
    if isinstance(text, Text):
        return Text(text.template, {key: _replaced(value, old, new) for key, value in text.params.items()})
    return text if isinstance(text, int | float) else str(text).replace(old, new)


def _import_summary(name: str, total: int, imported: int, failed: int, already: int, cancelled: bool) -> Text:
    """The first sentence of an import's message: how many files were imported (skipped, failed) or cancelled."""
    facts = {"name": name, "total": total, "imported": imported, "failed": failed, "already": already}
    if cancelled:
        return msg(
            "Import into '{name}' cancelled: {imported} of {total} file(s) were imported before the cancel and stay; "
            "the others were not imported.",
            **facts,
        )
    if not already:
        if failed:
            return msg("Imported {imported} of {total} file(s) into '{name}'; {failed} failed.", **facts)
        return msg("Imported {imported} of {total} file(s) into '{name}'.", **facts)
    if already == imported:
        if failed:
            return msg(
                "Imported {imported} of {total} file(s) into '{name}' ({already} already there with the same name and "
                "content: skipped, not imported twice); {failed} failed.",
                **facts,
            )
        return msg(
            "Imported {imported} of {total} file(s) into '{name}' ({already} already there with the same name and "
            "content: skipped, not imported twice).",
            **facts,
        )
    if failed:
        return msg(
            "Imported {imported} of {total} file(s) into '{name}' ({already} already there with the same name and "
            "content: skipped); {failed} failed.",
            **facts,
        )
    return msg(
        "Imported {imported} of {total} file(s) into '{name}' ({already} already there with the same name and "
        "content: skipped).",
        **facts,
    )


def _drop_cross_kb_copies(hits: list[SearchHit]) -> tuple[list[SearchHit], int]:
    """Hits (best first) without those whose text is the same as a better-ranked hit's from another KB (a KB and
    its imported copy); the count of those dropped."""
    from kb_core.engines.near_duplicates import same_text_key

    first_kb: dict[str, str] = {}
    kept: list[SearchHit] = []
    for hit in hits:
        key = same_text_key(hit.content)
        owner = first_kb.setdefault(key, hit.kb_id)
        if owner != hit.kb_id:
            continue
        kept.append(hit)
    return kept, len(hits) - len(kept)


def _budget(allowance: ImportAllowance, replaced: int = 0) -> ChunkBudget | None:
    """The import pipeline's chunk budget for ``allowance`` (``replaced``: chunks the import takes out again)."""
    if allowance.chunk_budget is None:
        return None
    from kb_core.features.ingest.pipeline import ChunkBudget

    return ChunkBudget(allowance.chunk_budget + replaced, allowance.chunk_limit)


def _both(
    first: Callable[[ImportProgress], None] | None, second: Callable[[ImportProgress], None]
) -> Callable[[ImportProgress], None]:
    """A progress callback that calls ``first`` (when given), then ``second``."""
    if first is None:
        return second

    def both(progress: ImportProgress) -> None:
        first(progress)
        second(progress)

    return both


def _expanded_snippet(hit: dict[str, Any], analyzer: Analyzer) -> str:
    """A chunk added by graph expansion matched no query word: its passage is where the chunk begins."""
    from kb_core.features.retrieval.highlight import passage, snippet_text

    content = str(hit.get("content") or "")
    return snippet_text(content, passage(content, (), analyzer))


def _via(hit: dict[str, Any]) -> str | None:
    """``REFERENCES from Document doc_uri=doc-001`` for a hit added by graph expansion."""
    if not hit.get("expanded"):
        return None
    link = (hit.get("breakdown") or {}).get("graph_expansion") or {}
    notes = (hit.get("breakdown") or {}).get("notes") or []
    prefix = "added by graph expansion: "
    note = next((n for n in notes if isinstance(n, str) and n.startswith(prefix)), None)
    return note[len(prefix) :] if note else link.get("edge_type")


class Operations:
    """The per-user view of the service: which KB is current, plus every operation, typed."""

    def __init__(
        self,
        service: SessionResources,
        persistent_name: str | None = None,
        scope: frozenset[str] | None = None,
        allowed_dirs: Sequence[Path] | None = None,
        select_hint: str = "select_knowledge_base(kb_name)",
        *,
        principal: Principal | None = None,
        absolute_paths_only: bool = False,
    ) -> None:
        self.service = service
        # How this session's front end selects a KB, for messages (the CLI: "kb select NAME"; MCP: the tool).
        self.select_hint = select_hint
        self.persistent_name = persistent_name
        # KB ids this session may see (an MCP token's scope); None means all. Out-of-scope KBs answer
        # exactly like nonexistent ones.
        self.scope = scope
        # Who this session acts for: what it may see and change, and its quotas (kb_core.features.principals).
        self.principal: Principal = principal or (TokenScope(scope) if scope is not None else Principal())
        # MCP clients name files by absolute path only: a relative one would resolve against the server's folder.
        self.absolute_paths_only = absolute_paths_only
        # Folders the files named by path must lie in (checked on the opened file), never inside the home; None
        # means anywhere.
        self.allowed_dirs: AllowedFolders | None = (
            None if allowed_dirs is None else AllowedFolders(allowed_dirs, denied=(service.home.root,))
        )
        self._current_kb_id: str | None = None
        # Whose import jobs these are (the session's listing): the persistent name, else one per session.
        self.owner = persistent_name or f"session-{uuid.uuid4().hex}"

    def confined(self, allowed_dirs: Sequence[Path]) -> Operations:
        """This session (same scope, same current KB) reading and writing by path only inside ``allowed_dirs`` and
        never inside the home: for paths typed by someone who may not reach every file of this machine."""
        if not self.principal.server_paths:
            raise PermissionDenied(msg("Files on the server are off in this demo; upload files instead."))
        twin = Operations(
            self.service,
            self.persistent_name,
            self.scope,
            allowed_dirs,
            self.select_hint,
            principal=self.principal,
            absolute_paths_only=self.absolute_paths_only,
        )
        twin._current_kb_id = self._current_kb_id
        twin.owner = self.owner
        return twin

    def visible_kbs(self) -> list[KnowledgeBaseRecord]:
        return self.principal.visible(self.service.store.knowledge_bases())

    def find_kb(self, kb_name: str) -> KnowledgeBaseRecord:
        return self.service.find_kb(kb_name, self.visible_kbs())

    def writable_kb(self, kb_name: str | None, action: str) -> KnowledgeBaseRecord:
        """The KB ``kb_name`` (default: the current one), which this session's principal may ``action`` (``delete``,
        ``import documents into`` …); PERMISSION_DENIED naming the action otherwise."""
        record = self.resolve_kb(kb_name)
        self.principal.check_change(record, action)
        return record

    def change_refusal(self, kb_name: str | None = None) -> str | None:
        """Why this session may not change the KB ``kb_name`` (default: the current one), for a front end to say
        before it offers a change; None when it may (or the KB is not there: the change itself will say so)."""
        try:
            record = self.resolve_kb(kb_name)
        except KBError:
            return None
        return self.principal.change_refusal(record, msg("change"))

    @contextmanager
    def importing(self, record: KnowledgeBaseRecord, files: int) -> Iterator[ImportAllowance]:
        """What an import of ``files`` files into ``record`` may take (the principal's quotas), held while it runs;
        QUOTA_EXCEEDED or RATE_LIMITED when it may not start."""
        allowance = self.principal.import_allowance(record, files)
        try:
            yield allowance
        finally:
            self.principal.import_finished()

    @property
    def scratch_root(self) -> Path | None:
        """Where a front end writes the files it hands this session (uploads, exports to download); None: anywhere."""
        return self.principal.scratch_root()

    @property
    def evaluation_runs(self) -> EvaluationRunStore:
        """The evaluation runs this session keeps and sees: the home's, or a demo visitor's own."""
        home = self.principal.evaluation_runs_home()
        if home is None:
            return self.service.evaluation_runs
        from kb_core.features.evaluation.runs import EvaluationRunStore

        return EvaluationRunStore(home)

    def begin_evaluation(self, folder: Path, queries: int | None, builds_corpus: bool) -> None:
        """Refuse an evaluation this session's principal may not run: judgments from ``folder``, a KB built from the
        folder's corpus or not; called again with ``queries`` (the judged queries to run) once they are read."""
        self.principal.check_evaluation(folder, queries, builds_corpus)

    def demo_status(self) -> DemoStatus:
        """What a public demo tells this session about itself (its kind, tag, limits, KBs and when they expire; the
        operator: every visitor's usage); ``{kind: "local"}`` outside a demo."""
        status = self.principal.status()
        return DemoStatus(msg("This session acts as a {kind} user.", kind=status["kind"]), status)

    def publish_knowledge_base(self, kb_name: str, published: bool = True) -> KBPublished:
        """Share the KB with every visitor of a public demo, read-only (or stop sharing it): the operator's."""
        record = self.find_kb(kb_name)
        self.principal.publish(record, published)
        said = (
            msg("Published '{name}': every visitor may now read it.", name=record.name)
            if published
            else msg("Unpublished '{name}': visitors no longer see it.", name=record.name)
        )
        return KBPublished(said, record.name, published)

    def _administration(self, what: str) -> None:
        if self.principal.hides_server and self.principal.kind != "token":
            raise PermissionDenied(msg("{what} is not offered in a public demo.", what=what))

    # -- current KB ----------------------------------------------------------------------------
    @property
    def current_kb_id(self) -> str | None:
        if self.persistent_name is not None:
            return self.service.home.read_session(self.persistent_name).get("current_kb_id")
        return self._current_kb_id

    def _set_current(self, kb_id: str | None) -> None:
        if self.persistent_name is not None:
            self.service.home.write_session(self.persistent_name, {"current_kb_id": kb_id})
        else:
            self._current_kb_id = kb_id

    def current_kb(self) -> KnowledgeBaseRecord:
        kb_id = self.current_kb_id
        if kb_id is None:
            raise NoCurrentKB(
                msg("No knowledge base is selected; select one first with {hint}.", hint=self.select_hint)
            )
        try:
            record = self.service.store.get(kb_id)
            if not self.principal.sees(record):
                raise KBNotFound(kb_id)
            return record
        except KBNotFound as exc:
            raise NoCurrentKB(
                msg("The selected knowledge base no longer exists (deleted elsewhere); select another one.")
            ) from exc

    def resolve_kb(self, kb_name: str | None) -> KnowledgeBaseRecord:
        return self.find_kb(kb_name) if kb_name else self.current_kb()

    def kb_version(self, kb_name: str | None = None) -> int:
        """The committed version of the KB (default: the current one); it changes with every commit by any process."""
        return self.service.kb_version(self.resolve_kb(kb_name))

    def import_executors(self) -> ExecutorChoices:
        """The import executors, each with why it cannot run here (``None``: it can)."""
        from kb_core.features.ingest.executors import executor_choices

        choices = executor_choices()
        usable = [name for name, reason in choices.items() if reason is None]
        return ExecutorChoices(f"Import executors available here: {', '.join(usable)}.", choices)

    def device_info(self) -> DeviceInfo:
        """Where local embedding models run in this process: ``data.device`` (see ``DeviceChoice.to_json``)."""
        choice = self.service.device()
        return DeviceInfo(
            f"Local models embed documents on {choice.describe()}; queries on the CPU.", choice.to_json(), "cpu"
        )

    def embedding_model_status(self, kb_name: str | None = None, model: str | None = None) -> ModelState:
        """Whether the embedding model of the KB (default: the current one), or the local ``model`` named, is loaded in
        this process: ``{model, loaded, expected_seconds, measured}``. An import loads it before its first chunk, which
        takes seconds the first time; front ends say so (``expected_seconds``: the last load's time in this home when
        ``measured``, else an estimate)."""
        record = None if model is not None and kb_name is None else self.resolve_kb(kb_name)
        state = self.service.model_load_state(record, model)
        said = (
            msg("The embedding model {model} is loaded.", model=state["model"])
            if state["loaded"]
            else msg(
                "The embedding model {model} is not loaded yet (about {seconds:.0f} s).",
                model=state["model"], seconds=state["expected_seconds"],
            )
        )
        return ModelState(said, state)

    def load_embedding_model(self, kb_name: str | None = None, model: str | None = None) -> ModelLoaded:
        """Load the embedding model of the KB (or the local ``model``) now: ``{model, seconds}`` (0 when it was
        loaded already or loads nothing)."""
        record = None if model is not None and kb_name is None else self.resolve_kb(kb_name)
        seconds = self.service.load_model(record, model)
        name = record.embedding_model if record is not None else model
        return ModelLoaded(
            msg("Loaded the embedding model {model} in {seconds:.1f} s.", model=name, seconds=seconds), name, seconds
        )

    def embedding_models(self) -> ModelList:
        """The built-in local models: what each reads, how fast it imports, and whether it is ready offline here
        (``data.models``, see :func:`kb_core.engines.embedding.builtin.model_status`); nothing is built or loaded."""
        from kb_core.engines.embedding import DEFAULT_EMBEDDING_MODEL
        from kb_core.engines.embedding.builtin import BUILTIN_MODELS, model_status

        models = [{**model_status(name), "default": name == DEFAULT_EMBEDDING_MODEL} for name in BUILTIN_MODELS]
        usable = [m["name"] for m in models if m["available"]]
        return ModelList(
            msg(
                "Local models available offline: {models} (default {default}).",
                models=", ".join(usable) or msg("none"), default=DEFAULT_EMBEDDING_MODEL,
            ),
            models,
            DEFAULT_EMBEDDING_MODEL,
        )

    # -- knowledge bases -----------------------------------------------------------------------
    def create_knowledge_base(
        self,
        kb_name: str,
        chunk_size: int,
        embedding_model: str | None = None,
        embedding_endpoint: str | None = None,
        embedding_api_key: str | None = None,
        *,
        progress: Callable[[str], None] | None = None,
    ) -> KBCreated:
        """``progress`` hears about the one-time build of a built-in model on this machine (multilingual-e5-small:
        about 10-20 s), which happens before the KB is created."""
        self.principal.check_create(  # first: a demo's refusal names its models, not the session's folders
            embedding_model if isinstance(embedding_model, str) else None,
            embedding_endpoint if isinstance(embedding_endpoint, str) else None,
        )
        if self.allowed_dirs is not None and not embedding_endpoint:
            self._confine_model_path(embedding_model, self.allowed_dirs)
        name = self.principal.name_for(validate_kb_name(kb_name))
        source = EmbeddingSource(embedding_model, embedding_endpoint, embedding_api_key)
        record = self.service.create_kb(name, chunk_size, source, progress=progress)
        self.principal.created(record)
        return KBCreated(
            msg(
                "Created knowledge base '{name}'. Select it with {hint} to use it.",
                name=record.name, hint=self.select_hint,
            ),
            record.id,
            record.name,
            record.chunk_size,
        )

    def reembed_knowledge_base(
        self,
        kb_name: str | None = None,
        embedding_model: str | None = None,
        new_name: str | None = None,
        *,
        progress: Callable[[ImportProgress], None] | None = None,
        model_progress: Callable[[str], None] | None = None,
        cancel: threading.Event | None = None,
    ) -> KBReembedded:
        """A new KB made with ``embedding_model`` (default: the default model, which reads Chinese and English)
        holding the documents of ``kb_name`` (default: the current KB), imported again from their kept originals at
        their chunk sizes, with the same saved search settings; named ``new_name``, else ``NAME (MODEL)``.

        A new KB rather than the same one re-embedded in place: the old KB keeps answering searches while the
        documents are imported again (about 2x slower with multilingual-e5-small on a CPU), and nothing is lost or
        left half-changed if the import fails or is cancelled; delete the old one once the new one serves."""
        from kb_core.engines.embedding import DEFAULT_EMBEDDING_MODEL
        from kb_core.features.ingest.files import copy_documents

        record = self.resolve_kb(kb_name)
        model = (embedding_model or "").strip() or DEFAULT_EMBEDDING_MODEL
        if record.embedding_endpoint is None and model == record.embedding_model:
            raise InvalidArgument(
                msg("Knowledge base '{name}' already uses {model}.", name=record.name, model=model),
                details={"field": "embedding_model"},
            )
        documents = [d for d in self.service.documents(record) if d["status"] == "ready"]
        if not documents:
            raise InvalidArgument(msg("Knowledge base '{name}' has no documents to embed again.", name=record.name))
        name = new_name or f"{record.name} ({model})"[:64]
        created = self.service.create_kb(name, record.chunk_size, EmbeddingSource(model), progress=model_progress)
        if record.search_settings:
            self.service.store.update_search_settings(created.id, dict(record.search_settings))
        created = self.service.find_kb(created.name)
        outcomes = copy_documents(self.service, record, documents, created, progress, cancel)
        succeeded = [o.to_json() for o in outcomes if o.error is None]
        failed = [o.to_json() for o in outcomes if o.error is not None]
        if succeeded:
            self._measure_floors(created)
        facts = {
            "name": created.name, "model": model, "imported": len(succeeded), "total": len(documents),
            "source": record.name, "failed": len(failed),
        }
        message = (
            msg(
                "Created knowledge base '{name}' with {model} and imported {imported} of {total} document(s) of "
                "'{source}' into it; {failed} failed. '{source}' is unchanged: delete it once '{name}' serves you.",
                **facts,
            )
            if failed
            else msg(
                "Created knowledge base '{name}' with {model} and imported {imported} of {total} document(s) of "
                "'{source}' into it. '{source}' is unchanged: delete it once '{name}' serves you.",
                **facts,
            )
        )
        return KBReembedded(
            message, created.id, created.name, record.name, model, succeeded, failed,
            error=None if succeeded else KBError(message, code="IMPORT_FAILED"),
        )

    @staticmethod
    def _confine_model_path(embedding_model: object, allowed: AllowedFolders) -> None:
        """A confined session names a local model folder only inside its allowed folders: a model name is read as a
        path when it looks like one or names something relative to this process's folder, and the answer must not
        tell a caller whether some path on the server exists."""
        if not isinstance(embedding_model, str) or not embedding_model.strip():
            return
        name = embedding_model.strip()
        reject_nul(name, "embedding_model")
        path = Path(name).expanduser()
        looks_like_a_path = path.is_absolute() or name.startswith(("~", ".")) or ".." in path.parts
        if looks_like_a_path or os.path.lexists(path):
            require_inside(name, Path(os.path.realpath(path)), allowed)

    def list_knowledge_bases(self) -> KBList:
        current = self.current_kb_id
        rows = []
        for record in self.visible_kbs():
            documents, chunks, failed = self.service.kb_counts(record)
            rows.append(
                {
                    "id": record.id,
                    "name": record.name,
                    "chunk_size": record.chunk_size,
                    "embedding_model": record.embedding_model,
                    "embedding_endpoint": shown_endpoint(record.embedding_endpoint),
                    "created_at": record.created_at,
                    "is_current": record.id == current,
                    "document_count": documents,  # imported: a file whose import failed is no document
                    "chunk_count": chunks,
                    "failed_document_count": failed,  # failed imports, kept with their reason (list_documents)
                }
            )
        current_id = current if any(r["id"] == current for r in rows) else None
        return KBList(msg("{count} knowledge base(s).", count=len(rows)), rows, len(rows), current_id)

    def select_knowledge_base(self, kb_name: str) -> KBSelected:
        record = self.find_kb(kb_name)
        self._set_current(record.id)
        documents, _, _ = self.service.kb_counts(record)
        return KBSelected(msg("Selected knowledge base '{name}'.", name=record.name), record.id, record.name, documents)

    def delete_knowledge_base(self, kb_name: str) -> KBDeleted:
        record = self.find_kb(kb_name)
        self.principal.check_change(record, msg("delete"))
        if record.id == self.current_kb_id:
            raise KBIsCurrent(
                msg(
                    "Knowledge base '{name}' is the current one and cannot be deleted; "
                    "select another knowledge base first.",
                    name=record.name,
                ),
                details={"kb_name": record.name},
            )
        self.service.delete_kb(record)
        self.principal.deleted(record)
        return KBDeleted(msg("Deleted knowledge base '{name}' with all its documents.", name=record.name), record.name)

    # -- documents -----------------------------------------------------------------------------
    def import_document(
        self,
        file_paths: Sequence[str],
        chunk_size: int | None = None,
        *,
        progress: Callable[[ImportProgress], None] | None = None,
        display_names: Sequence[str] | None = None,
        source: str = "path",
        kb_name: str | None = None,
        executor: str = "local",
        executor_address: str | None = None,
        cancel: threading.Event | None = None,
    ) -> ImportReport:
        """Import files into the current KB, on this thread. ``display_names`` name uploads (the app passes the
        browser's names). ``executor``: ``local`` (this process) or ``ray`` (Ray Data on the cluster at
        ``executor_address``). ``cancel``: set it to stop the import (what was committed stays; the other files fail
        as cancelled). The import is a job of the service's registry while it runs, so a server that stops cancels
        it (:meth:`start_import` runs one on the service's threads instead)."""
        record = self.writable_kb(kb_name, msg("import documents into"))
        listed = isinstance(file_paths, Sequence) and not isinstance(file_paths, str)
        # the names the pipeline reports its files by: an upload's own name, else the path as given
        shown = display_names if source == "upload" and display_names is not None else file_paths
        names = [str(n) for n in shown] if listed else []  # checked in _import_into
        job = self.service.jobs.add(ImportJob(record.id, record.name, names, None, cancel=cancel, background=False))
        report: ImportReport | None = None
        error: KBError | None = None
        try:
            report = self._import_into(
                record, file_paths, chunk_size, progress=_both(progress, job.on_progress), display_names=display_names,
                source=source, executor=executor, executor_address=executor_address, cancel=job.cancel_event,
                allowed_dirs=self.allowed_dirs, phase=job.set_phase,
            )
        except KBError as exc:
            error = exc
            raise
        finally:  # whatever ended it: a server that waits for its jobs to stop is not kept waiting
            if report is None and error is None:
                error = KBError(msg("The import stopped unexpectedly; see the log."), code="INTERNAL_ERROR")
            job.finish(report, error)
            self.service.jobs.forget(job)
        return report

    def _import_into(
        self,
        record: KnowledgeBaseRecord,
        file_paths: Sequence[str],
        chunk_size: int | None,
        *,
        progress: Callable[[ImportProgress], None] | None,
        display_names: Sequence[str] | None,
        source: str,
        executor: str,
        executor_address: str | None,
        cancel: threading.Event | None,
        allowed_dirs: AllowedFolders | None,
        phase: Callable[..., None] | None = None,
    ) -> ImportReport:
        """The import of :meth:`import_document` into ``record`` (``phase`` hears what it does after the files are
        committed: the KB's compaction, the model's semantic floor)."""
        if isinstance(file_paths, str) or not isinstance(file_paths, Sequence) or not file_paths:
            raise InvalidArgument(
                msg("file_paths must be a non-empty list of file paths."), details={"field": "file_paths"}
            )
        if display_names is not None and len(display_names) != len(file_paths):
            raise InvalidArgument(msg("display_names must name each file in file_paths."))
        reject_nul(list(file_paths), "file_paths")
        size = record.chunk_size if chunk_size is None else validate_chunk_size(chunk_size)
        runner = self.service.import_executor(record, executor, executor_address)
        from kb_core.features.ingest.files import import_files  # the import pipeline loads only for an import

        with self.importing(record, len(file_paths)) as allowance:
            outcomes = import_files(
                self.service,
                record,
                file_paths,
                size,
                allowed_dirs=allowed_dirs,
                runner=runner,
                progress=progress,
                display_names=display_names,
                source=source,
                cancel=cancel,
                max_file_bytes=allowance.max_file_bytes,
                chunk_budget=_budget(allowance),
                absolute_only=self.absolute_paths_only,
                phase=phase,
            )
        results = [o.to_json() for o in outcomes]
        if self.principal.hides_server:  # a refusal names the file, not the folder the app staged it in
            shown = list(display_names) if display_names is not None else [self._source(str(p)) for p in file_paths]
            for row, name in zip(results, shown, strict=True):
                if "error" in row:
                    row["error"] = _replaced(row["error"], str(row["file_path"]), str(name))
        succeeded = [r for r in results if "error" not in r]
        if succeeded and not (cancel is not None and cancel.is_set()):
            if phase is not None:
                phase("calibrating", model=record.embedding_model)
            self._measure_floors(record)
        failed = [r for r in results if "error" in r]
        notice = self._language_notice(record, [o for o in outcomes if o.error is None])
        cancelled = cancel is not None and cancel.is_set()
        already = sum(1 for o in outcomes if o.already_imported)
        sentences = [_import_summary(record.name, len(file_paths), len(succeeded), len(failed), already, cancelled)]
        # each failure's reason in the message too: many MCP clients show only the text, not structured content
        shown = 5
        for failure_row in [] if cancelled else failed[:shown]:
            file, reason = Path(str(failure_row["file_path"])).name, failure_row["error"]
            sentences.append(
                msg("{file}: {reason}", file=file, reason=reason)
                if str(reason).endswith(".")
                else msg("{file}: {reason}.", file=file, reason=reason)
            )
        if len(failed) > shown and not cancelled:
            sentences.append(msg("And {count} more failure(s): see failed_files.", count=len(failed) - shown))
        if notice:
            sentences.append(msg("Note: {notice}", notice=notice))
        message = joined(sentences)
        return ImportReport(
            message,
            total=len(file_paths),
            success_count=len(succeeded),
            failed_count=len(failed),
            success_files=succeeded,
            failed_files=failed,
            warnings=[notice] if notice else None,
            executor=None if runner is None else runner.summary(),  # what ran where (files and chunks per node)
            error=None if succeeded else Cancelled(message) if cancelled else KBError(message, code="IMPORT_FAILED"),
        )

    # -- import jobs (#34): imports on the service's threads, polled and cancelled by id -------------------------------
    def start_import(
        self,
        file_paths: Sequence[str] | None = None,
        chunk_size: int | None = None,
        *,
        uploads: Sequence[tuple[str, bytes]] | None = None,
        kb_name: str | None = None,
        executor: str = "local",
        executor_address: str | None = None,
    ) -> ImportJobStatus:
        """Start importing ``file_paths`` (paths on this machine, as :meth:`import_document` takes them) or
        ``uploads`` (``(file name, content)`` pairs: files a user sent, known by their names) into the KB (default:
        the current one) as a job the service runs on a thread of its own; returns at once with the job's status
        (``data.job_id``). Poll it with :meth:`import_job`, stop it with :meth:`cancel_import`; the session lists its
        jobs (:meth:`import_jobs`). Arguments are checked now; the files when the job reads them."""
        record = self.writable_kb(kb_name, msg("import documents into"))
        self.service.import_executor(record, executor, executor_address)  # an unusable executor is refused now
        if chunk_size is not None:
            validate_chunk_size(chunk_size)
        folder: Path | None = None
        if uploads is not None:
            if file_paths is not None:
                raise InvalidArgument(msg("Give file_paths or uploads, not both."), details={"field": "uploads"})
            paths, names, folder = self._save_uploads(record, uploads)
            display_names: list[str] | None = names
            source, allowed = "upload", None  # files this service wrote: no user path to confine
        else:
            if isinstance(file_paths, str) or not isinstance(file_paths, Sequence) or not file_paths:
                raise InvalidArgument(
                    msg("file_paths must be a non-empty list of file paths."), details={"field": "file_paths"}
                )
            reject_nul(list(file_paths), "file_paths")
            paths, names, display_names = [str(p) for p in file_paths], [str(p) for p in file_paths], None
            source, allowed = "path", self.allowed_dirs
        job = ImportJob(record.id, record.name, names, self.owner)
        if folder is not None:
            job.cleanup.append(folder)

        def work(job: ImportJob) -> None:
            try:
                if executor == "local":  # a Ray cluster loads the model on its own nodes
                    self._load_model_for(job, record)
                report = self._import_into(
                    record, paths, chunk_size, progress=job.on_progress, display_names=display_names, source=source,
                    executor=executor, executor_address=executor_address, cancel=job.cancel_event,
                    allowed_dirs=allowed, phase=job.set_phase,
                )
            except KBError as exc:
                job.finish(None, exc)
                return
            job.finish(report, None)

        try:
            self.service.jobs.start(job, work)
        except KBError:
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)
            raise
        return ImportJobStatus(
            msg(
                "Started importing {count} file(s) into '{name}' (job {job}).",
                count=len(names), name=record.name, job=job.id,
            ),
            job.status(),
        )

    def _save_uploads(
        self, record: KnowledgeBaseRecord, uploads: Sequence[tuple[str, bytes]]
    ) -> tuple[list[str], list[str], Path]:
        """Write uploaded files into a private folder of the KB's staging area (removed when their job ends, and by
        the next open of the KB should this process die first); their paths and names."""
        from kb_core.features.ingest.files import safe_document_name

        if isinstance(uploads, str | bytes) or not isinstance(uploads, Sequence) or not uploads:
            raise InvalidArgument(msg("uploads must be a non-empty list of (file name, content)."),
                                  details={"field": "uploads"})
        for entry in uploads:
            if not (isinstance(entry, tuple | list) and len(entry) == 2 and isinstance(entry[0], str)
                    and isinstance(entry[1], bytes | bytearray | memoryview)):
                raise InvalidArgument(msg("each upload must be a (file name, content bytes) pair."),
                                      details={"field": "uploads"})
        folder = self.service.import_staging(record)
        try:
            folder.parent.mkdir(exist_ok=True)
            folder.mkdir()
        except FileNotFoundError:
            raise KBNotFound(msg("Knowledge base '{name}' was deleted meanwhile.", name=record.name)) from None
        paths, names = [], []
        try:
            for index, (name, content) in enumerate(uploads):
                # A folder per file keeps the user's file name (and its suffix, which the parser reads).
                target = folder / str(index) / safe_document_name(name)
                target.parent.mkdir()
                target.write_bytes(bytes(content))
                paths.append(str(target))
                names.append(name)
        except OSError as exc:
            shutil.rmtree(folder, ignore_errors=True)
            raise KBError(
                msg("The uploaded files could not be saved for the import: {problem}.", problem=exc.strerror or exc),
                code="STORE_ERROR",
            ) from None
        return paths, names, folder

    def _load_model_for(self, job: ImportJob, record: KnowledgeBaseRecord) -> None:
        """Load the KB's embedding model before the import, saying so in the job's phase (seconds the first time)."""
        state = self.service.model_load_state(record)
        if not state["loaded"]:
            job.set_phase("loading_model", model=state["model"], seconds=state["expected_seconds"])
            self.service.load_model(record)
        if job.cancel_event.is_set():
            raise Cancelled(msg("cancelled: the import was stopped before it began"))

    def _job(self, job_id: str) -> ImportJob:
        """The job ``job_id`` if this session may see it (a job of a KB outside its scope answers as unknown)."""
        job = self.service.jobs.get(job_id) if isinstance(job_id, str) else None
        if job is None or not job.background or (self.scope is not None and job.kb_id not in self.scope):
            raise JobNotFound(
                msg(
                    "No import job {job_id!r} (finished jobs are kept until dismissed, the {kept} newest at "
                    "most, while this server runs).",
                    job_id=job_id, kept=KEEP_FINISHED,
                ),
                details={"job_id": job_id},
            )
        return job

    def import_job(self, job_id: str, watch: bool = False) -> ImportJobStatus:
        """The status of import job ``job_id``: state, phase, counts, per-file rows, and once it ended its report.
        ``watch``: this session lists it from now on (a browser that reloaded finds its jobs again)."""
        job = self._job(job_id)
        if watch:
            job.watchers.add(self.owner)
        data = job.status()
        return ImportJobStatus(
            msg(
                "Import job {job} into '{name}': {state}; {summary}.",
                job=job.id, name=job.kb_name, state=STATE_TEXT.get(data["state"], data["state"]),
                summary=data["summary"],
            ),
            data,
        )

    def import_jobs(self, running_only: bool = False) -> ImportJobList:
        """The import jobs this session started or watches, oldest first (``running_only``: those still running)."""
        jobs = [job for job in self.service.jobs.all() if self.owner in job.watchers]
        if self.scope is not None:
            jobs = [job for job in jobs if job.kb_id in self.scope]
        if running_only:
            jobs = [job for job in jobs if job.running]
        running = sum(1 for job in jobs if job.running)
        return ImportJobList(
            msg("{count} import job(s), {running} running.", count=len(jobs), running=running),
            [job.status() for job in jobs],
            len(jobs),
        )

    def cancel_import(self, job_id: str) -> ImportJobStatus:
        """Cancel import job ``job_id``: its parser processes and embedding stop within seconds; what it committed
        stays, the other files fail as cancelled. A job that ended already is left as it is."""
        job = self._job(job_id)
        stopping = job.request_cancel()
        data = job.status()
        said = (
            msg("Import job {job} into '{name}': cancelling.", job=job.id, name=job.kb_name)
            if stopping
            else msg("Import job {job} into '{name}': already {state}.", job=job.id, name=job.kb_name,
                     state=STATE_TEXT.get(data["state"], data["state"]))
        )
        return ImportJobStatus(said, data)

    def dismiss_import_job(self, job_id: str) -> JobDismissed:
        """This session no longer lists import job ``job_id`` (a running job goes on)."""
        job = self._job(job_id)
        self.service.jobs.dismiss(job, self.owner)
        return JobDismissed(msg("Import job {job} is no longer listed in this session.", job=job.id), job.id)

    def import_job_result(self, job_id: str) -> ImportReport:
        """The report of a finished import job, as :meth:`import_document` would have returned it (its error raised
        when the import failed as a whole)."""
        job = self._job(job_id)
        if job.running:
            raise InvalidArgument(msg("Import job {job} is still running.", job=job.id), details={"job_id": job.id})
        if job.error is not None:
            raise job.error
        assert job.report is not None
        return job.report

    def _language_notice(self, record: KnowledgeBaseRecord, imported: Sequence[FileOutcome]) -> str | None:
        """The one notice when the KB's model does not read some of the imported documents (their languages as
        detected at import; see :func:`kb_core.engines.embedding.builtin.unread_language_notice`)."""
        from kb_core.engines.embedding.builtin import unread_language_notice

        if not imported:
            return None
        return unread_language_notice(
            record.embedding_model, {str(o.doc_name): o.language for o in imported if o.doc_name is not None}
        )

    def _measure_floors(self, record: KnowledgeBaseRecord) -> None:
        """Measure the model's semantic floors now, while it is loaded (once per home and model, kept there), so no
        later search waits on them: a rag_search with its 3 s timeout on an endpoint, a cold ``kb search`` that would
        otherwise load torch to embed the calibration texts as documents; best effort."""
        try:
            for query in ("floor", "下限"):
                self.service.semantic_scale(record, query)
        except Exception:  # never fails the import it follows
            logger.info("semantic floor of %s not measured after the import", record.embedding_model, exc_info=True)

    def _live_document(self, record: KnowledgeBaseRecord, doc_name: str) -> dict[str, Any]:
        if not isinstance(doc_name, str) or not doc_name.strip():
            raise InvalidArgument(msg("doc_name must be a non-empty string."), details={"field": "doc_name"})
        documents = self.service.documents(record)
        key = doc_name.strip().casefold()
        matches = [d for d in documents if str(d["name"]).casefold() == key]
        if not matches:
            names = [d["name"] for d in documents]
            shown = ", ".join(repr(n) for n in names[:10]) + (" …" if len(names) > 10 else "")
            raise DocumentNotFound(
                msg(
                    "Document {doc_name!r} is not in knowledge base '{name}'. Documents: {shown}.",
                    doc_name=doc_name, name=record.name, shown=shown or msg("none"),
                ),
                details={"doc_name": doc_name},
            )
        return matches[0]

    def list_documents(self, kb_name: str | None = None) -> DocumentList:
        record = self.resolve_kb(kb_name)
        storage = self.service.store.kb(record)
        rows = [self._shown_source(document_row(d)) for d in storage.documents()]
        for flight in storage.in_flight():
            rows.append(
                {
                    "id": None,
                    "name": flight.get("name") or Path(flight["file_path"]).name,
                    "file_path": self._source(flight["file_path"]),
                    "file_type": Path(flight["file_path"]).suffix.lstrip(".").lower(),
                    "chunk_size": None,
                    "created_at": None,
                    "updated_at": None,
                    "status": flight["status"],
                    "chunk_count": 0,
                    "size_bytes": None,
                    "error": None,
                    "language": None,
                }
            )
        return DocumentList(msg("{count} document(s) in '{name}'.", count=len(rows), name=record.name), rows, len(rows))

    def _source(self, path: Any) -> Any:
        """A document's source as this session may read it: for a session that learns nothing of the server (a demo
        visitor, a scoped token) the file's name without the server folder it was imported from."""
        if not self.principal.hides_server or not isinstance(path, str) or not path:
            return path
        return path.replace("\\", "/").rsplit("/", 1)[-1]

    def _shown_source(self, row: dict[str, Any]) -> dict[str, Any]:
        if not self.principal.hides_server:
            return row
        if "file_path" in row:
            row["file_path"] = self._source(row["file_path"])
        # 本地文件: PATH, worded by kb_core.features.documents
        if row.get("source") == "path" and "source_label" in row:
            row["source_label"] = source_label("path", self._source(row.get("file_path")))
        return row

    def list_chunks(self, doc_name: str, kb_name: str | None = None) -> ChunkList:
        """The chunks of one document in order, with chapter, page, tokens and character offsets."""
        record = self.resolve_kb(kb_name)
        document = self._live_document(record, doc_name)
        rows = [chunk_json(r) for r in self.service.store.kb(record).document_chunks(document)]
        return ChunkList(
            msg("{count} chunk(s) in '{name}'.", count=len(rows), name=document["name"]),
            document["doc_id"],
            document["name"],
            rows,
            len(rows),
        )

    def delete_document(self, doc_name: str, kb_name: str | None = None) -> DocDeleted:
        record = self.writable_kb(kb_name, msg("delete documents of"))
        document = self._live_document(record, doc_name)
        try:
            self.service.store.kb(record).delete_document(document)
        except DocumentNotFound:  # deleted by another process since it was looked up
            raise DocumentNotFound(
                msg("Document {doc_name!r} was already deleted.", doc_name=doc_name), details={"doc_name": doc_name}
            ) from None
        return DocDeleted(msg("Deleted document '{name}' and its chunks.", name=document["name"]), document["name"])

    def update_document(
        self,
        doc_name: str,
        chunk_size: int,
        kb_name: str | None = None,
        progress: Callable[[ImportProgress], None] | None = None,
    ) -> DocUpdated:
        record = self.writable_kb(kb_name, msg("re-chunk documents of"))
        size = validate_chunk_size(chunk_size)
        document = self._live_document(record, doc_name)
        if document["status"] != "ready":
            raise InvalidArgument(
                msg("Document {doc_name!r} failed to import; import it again instead of updating.", doc_name=doc_name)
            )
        from kb_core.features.ingest.files import reimport_document

        with self.importing(record, 1) as allowance:
            budget = _budget(allowance, int(document.get("chunk_count") or 0))  # the document's own are replaced
            state = reimport_document(self.service, record, document, size, progress, chunk_budget=budget)
        if state is None:
            raise DocumentNotFound(msg("Document {doc_name!r} was changed meanwhile; try again.", doc_name=doc_name))
        if state.status != "ready":
            raise KBError(
                msg("Updating {doc_name!r} failed: {reason}", doc_name=doc_name, reason=state.error),
                code="UPDATE_FAILED",
            )
        return DocUpdated(
            msg(
                "Re-chunked '{name}' into {count} chunk(s) of at most {size} tokens.",
                name=document["name"], count=state.chunks_total, size=size,
            ),
            document["doc_id"],
            document["name"],
            state.chunks_total,
            size,
        )

    # -- search --------------------------------------------------------------------------------
    def search_chunks(self, request: SearchRequest) -> SearchResult:
        """The one search entry point: the hits, warnings, settings and weights used for ``request``.

        Each KB searches with its own saved defaults under the request's explicit settings; hit scores share one
        [0, 1] scale, so hits of several KBs are merged by score. With ``request.skip_failing``, a KB whose
        query embedding fails (endpoint down, key refused) is left out with a warning and listed in ``skipped``
        as ``{kb_name, code, message}``; if every KB fails, the first failure is raised with all of them in
        ``details["failed_knowledge_bases"]``.
        """
        query, overrides = validate_query(request.query), dict(request.settings)
        if request.kb_ids:
            records = [r for r in self.visible_kbs() if r.id in set(request.kb_ids)]
        elif request.kb_names:
            records = [self.find_kb(name) for name in request.kb_names]
        else:
            records = [self.current_kb()]
        first_settings: SearchSettings | None = None
        outcome: SearchResult | None = None
        hits: list[SearchHit] = []
        warnings: list[str] = []
        failures: list[EmbeddingError] = []
        skipped: list[dict[str, str]] = []
        floors: dict[str, float] = {}
        for record in records:
            settings = search_settings(record, overrides)
            floors[record.id] = settings.min_score
            try:
                ranked = self.service.search_kb(record, query, settings, request.filters)
            except EmbeddingError as exc:
                if not request.skip_failing:
                    raise
                failures.append(exc)
                skipped.append({"kb_name": record.name, "code": exc.code, "message": exc.message})
                note = msg(
                    "Knowledge base '{name}' was not searched: {reason} ({code}).",
                    name=record.name, reason=exc.message, code=exc.code,
                )
                ranked = RankedHits([], [note])
            if outcome is None or (outcome.weights_used is None and ranked.weights_used is not None):
                first_settings = settings
                outcome = SearchResult(
                    [], [], settings, ranked.weights_used, ranked.auto_weights,
                    semantic_scale=ranked.semantic_scale, query_terms=ranked.query_terms,
                )
            hits.extend(ranked.hits)
            outcome.without_evidence += ranked.without_evidence
            warnings.extend(n for n in ranked.warnings if n not in warnings)
        if failures and len(failures) == len(records):
            failures[0].details = {**failures[0].details, "failed_knowledge_bases": list(skipped)}
            raise failures[0]
        if outcome is None or first_settings is None:
            return SearchResult([], [], search_settings(self.current_kb(), overrides))
        duplicates = 0
        if len(records) > 1:
            hits.sort(key=lambda h: -h.score)
            if request.drop_copies:
                hits, duplicates = _drop_cross_kb_copies(hits)
            hits = hits[: first_settings.top_k]
        # min_score (each KB's own) cuts the hits a person would have seen; the count says how many went
        kept = [h for h in hits if h.score >= floors.get(h.kb_id, 0.0)]
        outcome.below_min_score = len(hits) - len(kept)
        outcome.duplicates_dropped = duplicates
        outcome.hits, outcome.warnings, outcome.skipped = kept, warnings, skipped
        return outcome

    def search(self, request: SearchRequest) -> SearchReport:
        """Hybrid (default), semantic or keyword search; every hit carries its score breakdown.

        Only chunks some signal supports are hits (a query term, stop words left out, or a cosine above the model's
        semantic floor), so there may be fewer than ``top_k``. ``min_score`` (0–1, default the KB's saved value, else
        0) hides hits whose final score is below it; ``data.below_min_score`` counts them.

        Scores lie in [0, 1] (see :mod:`kb_core.engines.fusion`). ``weighting="auto"`` scales the weights by each
        signal's quality for the query; ``language_guard=False`` keeps the vector weight for a query in a language
        the embedding model does not cover. ``data.weights`` holds the requested weights, the weights used and
        those ``weighting="auto"`` would use. ``expand_graph`` follows knowledge-bundle edges: hits on bundle
        documents are followed by their related nodes' first chunks, marked ``expanded`` with
        ``breakdown.graph_expansion``.
        """
        self.principal.check_search()
        outcome = self.search_chunks(request)
        settings = outcome.settings
        analyzer = self.service.analyzer
        chunks = [hit.with_passage(analyzer).to_json(request.explain) for hit in outcome.hits]
        if request.expand_graph:
            chunks = self.expand_hits(chunks)
        found: str = (
            msg(
                "Found {count} chunk(s) (hybrid search, weights used: vector {vector:.2f} / keyword {keyword:.2f}).",
                count=len(chunks), vector=outcome.weights_used.vector, keyword=outcome.weights_used.keyword,
            )
            if settings.mode == "hybrid" and outcome.weights_used is not None
            else {
                "keyword": msg("Found {count} chunk(s) (keyword search).", count=len(chunks)),
                "semantic": msg("Found {count} chunk(s) (semantic search).", count=len(chunks)),
                "hybrid": msg("Found {count} chunk(s) (hybrid search).", count=len(chunks)),
            }.get(settings.mode, msg("Found {count} chunk(s) ({mode} search).", count=len(chunks), mode=settings.mode))
        )
        notes = result_notes_of(outcome)
        message = joined([found, *(note.text for note in notes), *outcome.warnings])
        return SearchReport(
            message,
            chunks,
            len(chunks),
            asdict(settings),
            outcome.weights_json(),
            outcome.warnings,
            **search_facts(outcome),
            notes=notes,
        )

    def explain_search(self, request: SearchRequest, chunk_id: str) -> Explanation:
        """Why chunk ``chunk_id`` ranks where it does for ``query``: its place among the hits (searched up to
        1,000 deep with the KB's settings under the given ones), its full score breakdown, the hit just above it,
        and each step in words. A chunk that is not among the hits (too low, or dropped as a near-duplicate of a
        better-ranked chunk) is explained from its exact scores. Of ``request`` it takes the query and the scoring
        settings (mode, weights, fusion, weighting, language guard): the chunk's own KB is searched 1,000 deep, so a
        request that sets anything else (top_k, min_score, filters, KBs, …) is refused rather than half used."""
        if not isinstance(chunk_id, str) or not chunk_id.strip():
            raise InvalidArgument(
                msg("chunk_id must be a non-empty chunk id (chk_...)."), details={"field": "chunk_id"}
            )
        query = validate_query(request.query)
        unused = [
            f.name for f in fields(SearchRequest)
            if f.name not in EXPLAIN_SETTINGS and f.name not in ("query", "explain")
            and getattr(request, f.name) != (f.default if f.default is not MISSING else ())
        ]
        if unused:
            raise InvalidArgument(
                msg(
                    "explain_search explains one chunk's score for the query and the scoring settings ({used}); "
                    "it does not take {unused}.",
                    used=", ".join(EXPLAIN_SETTINGS), unused=", ".join(unused),
                ),
                details={"field": unused[0]},
            )
        self.principal.check_search()
        chunk_id = chunk_id.strip()
        record = next((r for r in self.visible_kbs() if self.service.has_chunk(r, chunk_id)), None)
        if record is None:
            raise ItemNotFound(
                msg("No live chunk with id {chunk_id!r} exists.", chunk_id=chunk_id), details={"id": chunk_id}
            )
        settings = search_settings(record, {**{k: request.settings[k] for k in EXPLAIN_SETTINGS}, "top_k": 1000})
        data = explain_chunk(self.service, record, query, chunk_id, settings)
        return Explanation("\n".join(data["explanation"]), data)

    def save_search_settings(self, kb_name: str | None = None, **settings: Any) -> SavedSettings:
        """Persist search defaults for the KB; searches without explicit settings use them."""
        record = self.writable_kb(kb_name, msg("save search defaults for"))
        unknown = set(settings) - set(SearchSettings.SAVED_FIELDS)
        if unknown:
            raise InvalidArgument(
                msg(
                    "Unknown search setting(s) {unknown}; allowed: {allowed}.",
                    unknown=sorted(unknown), allowed=", ".join(SearchSettings.SAVED_FIELDS),
                )
            )
        merged = {**record.search_settings, **{k: v for k, v in settings.items() if v is not None}}
        validated = SearchSettings(**merged).validated()
        saved = {k: getattr(validated, k) for k in SearchSettings.SAVED_FIELDS if k in merged}
        self.service.store.update_search_settings(record.id, saved)
        return SavedSettings(msg("Saved search defaults for '{name}'.", name=record.name), record.name, saved)

    def rag_search(
        self, keywords: Sequence[str], top_k: int = 5, timeout: float = 3.0, min_score: float | None = None
    ) -> RagResult:
        """Multi-keyword search; chunks related to all keywords rank first; degrades on timeout or failure. Only
        chunks holding a keyword or clearing the semantic floor are returned, none below ``min_score``."""
        cleaned = validate_keywords(keywords)
        validate_int_range(top_k, "top_k", 1, 10)
        validate_float_range(timeout, "timeout", 0.1, 10.0)
        if min_score is not None:
            validate_float_range(min_score, "min_score", 0.0, 1.0)
        record = self.current_kb()
        self.principal.check_search()
        started = time.monotonic()
        future = self.service.background.submit(rag_rank, self.service, record, cleaned, top_k, min_score)
        try:
            chunks = future.result(timeout=timeout)
        except FuturesTimeout:
            reason = f"the search took longer than the {timeout:g} s timeout"
            problem = self._endpoint_problem(record, started)
            if problem is not None:  # an endpoint failing while it is retried: say what it did, not only the wait
                reason = (
                    f"the embedding endpoint {problem}; it was still being retried when the {timeout:g} s timeout "
                    "passed"
                )
        except KBError as exc:
            reason = f"the search failed: {exc.message} ({exc.code})"
        except Exception:
            logger.exception("rag_search failed unexpectedly")
            reason = "the search failed because of an internal error (see the server log)"
        else:
            return RagResult(msg("Found {count} chunk(s).", count=len(chunks)), chunks, len(chunks), degraded=False)
        # The contract: a slow or failing search never fails the caller; it returns no chunks, marked degraded.
        logger.warning("rag_search degraded to no results: %s", reason)
        return RagResult(f"Returned no results (degraded): {reason}.", [], 0, degraded=True, degraded_reason=reason)

    def search_knowledge_base(
        self, query: str, limit: int, mode: str, expand_graph: bool = False, min_score: float | None = None
    ) -> HitList:
        """search_knowledge_base: every KB the session sees; hybrid uses each KB's saved weights (default 70% semantic +
        30% keyword). Scores lie in [0, 1]. A hit whose text equals a better hit's from another KB is dropped and
        counted; ``min_score`` hides hits below it (counted too)."""
        kb_ids = [r.id for r in self.visible_kbs()]
        hits: list[SearchHit] = []
        warnings: list[str] = []
        skipped: list[dict[str, str]] = []
        below = copies = 0
        floor = 0.0 if min_score is None else min_score
        if kb_ids:
            request = SearchRequest(
                query, limit, mode, min_score=min_score, kb_ids=kb_ids, skip_failing=True, drop_copies=True
            )
            try:
                outcome = self.search_chunks(request)
                hits, warnings, skipped = outcome.hits, outcome.warnings, outcome.skipped
                below, copies = outcome.below_min_score, outcome.duplicates_dropped
                floor = outcome.settings.min_score
            except EmbeddingError as exc:
                skipped = list(exc.details.get("failed_knowledge_bases", ()))
                # The tool contract: an embedding failure is -32603; here only when no KB could be searched.
                reasons = "; ".join(f"knowledge base '{s['kb_name']}': {s['message']}" for s in skipped)
                raise KBError(
                    f"search_knowledge_base could not embed the query for any knowledge base ({reasons}). "
                    "Keyword mode does not need embeddings.",
                    code="INTERNAL_ERROR",
                    details={"cause": exc.code, "failed_knowledge_bases": skipped},
                ) from exc
        elif not isinstance(query, str) or not query.strip():
            self.search_chunks(SearchRequest(query))  # raises the session's INVALID_ARGUMENT
        found = [hit.with_passage(self.service.analyzer).to_json(False) for hit in hits[:limit]]
        if expand_graph and found:
            found = self.expand_hits(found)
        rows = [
            {
                "rank": rank,
                "id": hit["id"],
                "doc_id": hit["doc_id"],
                "title": hit.get("doc_name") or hit["doc_id"],
                "kb_name": hit.get("kb_name"),
                "score": round(float(hit["score"]), 4),
                "snippet": hit.get("snippet") or _expanded_snippet(hit, self.service.analyzer),
                "chapter": hit.get("chapter"),
                "page": hit.get("page"),
                "file_type": hit.get("file_type"),
                "expanded": bool(hit.get("expanded")),
                "via": _via(hit),
            }
            for rank, hit in enumerate(found, start=1)
        ]
        message = f"Found {len(rows)} chunk(s) ({mode} search over {len(kb_ids)} knowledge base(s))."
        added = sum(1 for r in rows if r["expanded"])
        if added:
            message += f" {added} of them were added by graph expansion."
        for note in hit_list_notes(copies, below, floor):
            message += f" {note.text}"
        if warnings:
            message += " " + " ".join(warnings)
        return HitList(message, rows, len(rows), mode, limit, warnings, skipped, floor, below, copies)

    def _endpoint_problem(self, record: KnowledgeBaseRecord, since: float) -> str | None:
        """What the KB's embedding endpoint last did wrong since ``since`` (monotonic), e.g. ``answered HTTP 500
        (Internal Server Error)``; None for a local model or an endpoint that did nothing wrong."""
        if not record.embedding_endpoint:
            return None
        try:
            last = getattr(self.service.embedder(record), "last_problem", None)
        except KBError:
            return None
        if last is None or last[0] < since:
            return None
        return str(last[1])

    def get_item(self, item_id: str, neighbours: int = 1, kb_names: Sequence[str] | None = None) -> Item:
        """A document's full parsed text (``doc_…`` id) or a chunk with its neighbours (``chk_…`` id)."""
        if not isinstance(item_id, str) or not item_id.strip():
            raise InvalidArgument(msg("id must be a non-empty string."), details={"field": "id"})
        if item_id.strip().startswith("node_"):
            return bundles.get_node(self, item_id.strip(), kb_names)
        records = [self.find_kb(n) for n in kb_names] if kb_names else self.visible_kbs()
        item = find_item(self.service, item_id.strip(), records, neighbours)
        return Item(msg("Found {kind} {id}.", kind=item["type"], id=item_id), self._shown_source(item))

    def get_document_info(
        self, knowledge_ids: Sequence[str], kb_names: Sequence[str] | None = None
    ) -> DocumentInfos:
        """Metadata of 1-10 documents by id, looked up concurrently; per-id failures in ``errors``."""
        if isinstance(knowledge_ids, str) or not isinstance(knowledge_ids, Sequence):
            raise InvalidArgument(
                msg("knowledge_ids must be a list of document ids."), details={"field": "knowledge_ids"}
            )
        if len(knowledge_ids) == 0:
            raise InvalidArgument(
                msg("knowledge_ids is empty: give at least one document id."), details={"field": "knowledge_ids"}
            )
        if len(knowledge_ids) > 10:
            raise InvalidArgument(
                msg("knowledge_ids has {count} ids; at most 10 are allowed per call.", count=len(knowledge_ids)),
                details={"field": "knowledge_ids"},
            )
        records = [self.find_kb(n) for n in kb_names] if kb_names else self.visible_kbs()
        ids = list(dict.fromkeys(str(i) for i in knowledge_ids))
        results = list(self.service.background.map(lambda i: document_info(self.service, i, records), ids))
        documents = [self._shown_source(r) for r in results if "parse_status" in r]
        errors = [r for r in results if "parse_status" not in r]
        text = document_info_text(documents, errors, len(ids))
        return DocumentInfos(
            text,
            documents,
            len(documents),
            len(ids),
            errors,
            error=None if documents else DocumentNotFound(text, details={"ids": ids}),
        )

    # -- MCP bearer tokens (kb token create|list|revoke) ---------------------------------------
    def create_token(self, scope: str, capability: str, rate_per_hour: int) -> TokenCreated:
        """A new bearer token for the MCP HTTP server; ``scope``: 'all' or comma-separated KB names. The token is
        in this result only (the home or the database keeps its SHA-256)."""
        self._administration(msg("Creating an MCP token"))
        raw_scope = (scope or "").strip()
        if not raw_scope:
            raise InvalidArgument(msg("--scope must be 'all' or a comma-separated list of knowledge base names."))
        if raw_scope.lower() == "all":
            kb_ids = None
        else:
            names = [n.strip() for n in raw_scope.split(",") if n.strip()]
            kb_ids = sorted({self.service.find_kb(name).id for name in names})
        token, record = self.service.token_store.create(kb_ids, capability, rate_per_hour)
        row = self._token_row(record)
        return TokenCreated(
            msg(
                "Created token {id} ({capability}, scope {scope}, {rate}/hour). It is shown only now; keep it "
                "secret:\n{token}",
                id=record.id, capability=record.capability, scope=row["scope"], rate=record.rate_per_hour, token=token,
            ),
            **row,
            token=token,
        )

    def list_tokens(self) -> TokenList:
        self._administration(msg("Listing MCP tokens"))
        rows = [self._token_row(r) for r in self.service.token_store.list()]
        return TokenList(msg("{count} token(s).", count=len(rows)), rows, len(rows))

    def revoke_token(self, token_id: str) -> TokenRevoked:
        self._administration(msg("Revoking an MCP token"))
        record = self.service.token_store.revoke(token_id)
        return TokenRevoked(msg("Revoked token {token}.", token=record.id), record.id)

    def _token_row(self, record: TokenRecord) -> dict[str, Any]:
        if record.scope is None:
            scope = "all"
        else:
            names = {r.id: r.name for r in self.service.store.knowledge_bases()}
            scope = ",".join(sorted(names.get(kb_id, f"(deleted {kb_id})") for kb_id in record.scope))
        return {
            "id": record.id,
            "scope": scope,
            "capability": record.capability,
            "rate_per_hour": record.rate_per_hour,
            "created_at": record.created_at,
        }

    # -- export and import of the database -----------------------------------------------------
    def export_database(
        self, export_path: str, kb_names: Sequence[str] | None = None, overwrite: bool = False
    ) -> ExportSummary:
        """Write every visible KB (or the named ones) into one portable file; see :mod:`kb_core.features.transfer`. An
        existing file at ``export_path`` is replaced only with ``overwrite``. Data: ``{source_path: the home,
        export_path}``."""
        from kb_core.features.transfer.export import export_database

        return export_database(self, export_path, kb_names, overwrite=overwrite)

    def import_database(
        self, source_db_path: str, *, limits: TransferLimits | None = None, display_name: str | None = None
    ) -> ImportSummary:
        """Validate an export file completely, then merge its KBs into the home (all or nothing). Data:
        ``{source_path, imported_kb_count, imported_doc_count, knowledge_bases, renamed_knowledge_bases}``.
        ``display_name``: what messages call the file (an uploaded export's own name, not its temporary path)."""
        from kb_core.features.transfer.restore import import_database

        self.principal.check_import_database()
        return import_database(self, source_db_path, limits=limits, display_name=display_name)

    # -- knowledge bundles (typed nodes and edges; see kb_core.features.bundles) -------------------------
    # Each is a function of the session, declared once in kb_core.features.bundles.api; here it is a method of it.
    get_knowledge_schema = bundles.get_knowledge_schema  # the JSON Schema of a bundle for the KB, and an example
    import_knowledge_bundle = bundles.import_knowledge_bundle  # validated as a whole, applied in one transaction
    get_ontology = bundles.get_ontology
    set_ontology = bundles.set_ontology
    graph_view = bundles.graph_view
    get_node = bundles.get_node
    repair_index = bundles.repair_index
    export_shadow = bundles.export_shadow
    rebuild_from_shadow = bundles.rebuild_from_shadow
    expand_hits = bundles.expand_hits  # hits on bundle documents followed by their related nodes (``expanded``)

    # -- kept evaluation runs ------------------------------------------------------------------
    def list_evaluation_runs(self) -> EvaluationRuns:
        """The evaluation runs kept in this home, newest first (see :mod:`kb_core.features.evaluation.runs`)."""
        runs = self.evaluation_runs.list()
        return EvaluationRuns(msg("{count} evaluation run(s) kept.", count=len(runs)), runs, len(runs))

    def compare_evaluation_runs(
        self,
        run_a: str,
        run_b: str,
        setting_a: str | None = None,
        setting_b: str | None = None,
        metric: str = "ndcg@10",
        top: int = 10,
    ) -> RunComparison:
        """Setting ``setting_a`` of run ``run_a`` against ``setting_b`` of ``run_b``, query by query."""
        from kb_core.features.evaluation.runs import compare_runs

        store = self.evaluation_runs
        comparison = compare_runs(
            store.load(run_a), store.load(run_b), setting_a=setting_a, setting_b=setting_b, metric=metric
        )
        data = comparison.to_json(validate_int_range(top, "top", 1, 1000))
        compared = msg(
            "{setting_b} ({run_b}) against {setting_a} ({run_a}) on {queries} queries: {wins} wins, {losses} losses, "
            "{ties} ties; mean {metric} {mean_a:.4f} → {mean_b:.4f} ({delta:+.4f}).",
            setting_b=comparison.setting_b, run_b=comparison.run_b, setting_a=comparison.setting_a,
            run_a=comparison.run_a, queries=len(comparison.per_query), wins=comparison.wins, losses=comparison.losses,
            ties=comparison.ties, metric=metric, mean_a=comparison.mean_a, mean_b=comparison.mean_b,
            delta=comparison.mean_delta,
        )
        message = joined([compared, *comparison.warnings])
        return RunComparison(message, data)

    def delete_evaluation_run(self, run_id: str) -> RunDeleted:
        self.evaluation_runs.delete(run_id)
        return RunDeleted(msg("Deleted evaluation run {run}.", run=run_id), run_id)

    # -- maintenance ---------------------------------------------------------------------------
    def compact(self, kb_name: str | None = None) -> Compacted:
        """Merge the KB's segments into one and drop the rows of deleted documents."""
        record = self.writable_kb(kb_name, msg("compact"))
        stats = self.service.compact(record, everything=True)
        return Compacted(
            msg("Compacted '{name}': merged {count} segment(s).", name=record.name, count=stats["segments_merged"]),
            stats,
        )

    def _model_folder_problems(self, repair: bool, repaired: list[str]) -> list[str]:
        """The built model folders the home's KBs use, each checked against its recorded checksums (a damaged one is
        rebuilt on its next load; with ``repair``, now)."""
        from kb_core.engines.embedding.builtin import find_builtin, model_folder, models_dir, verify_model_folder

        problems: list[str] = []
        used = {m.name for r in self.visible_kbs() if (m := find_builtin(r.embedding_model)) is not None and m.built}
        for name in sorted(used):
            try:
                problem = verify_model_folder(name)
            except KBError as exc:
                problems.append(f"model {name}: {exc.message}")
                continue
            if problem is None or problem.startswith("no build marker"):  # never built here: built on first use
                continue
            if repair:
                try:
                    model_folder(name, rebuild=True)
                except KBError as exc:
                    problems.append(f"model {name}: {exc.message}")
                else:
                    repaired.append(f"rebuilt the model folder of {name} ({problem})")
                continue
            problems.append(
                f"model {name}: the folder {models_dir() / name} is damaged ({problem}); it is rebuilt when the model "
                "is next loaded, or now with kb verify --repair"
            )
        return problems

    def verify(self, repair: bool = False) -> Verification:
        """Check the whole home for consistency (what the crash tests assert).

        With ``repair``, first fix what can be fixed without guessing: a bundle import interrupted between its
        index and graph commits is rolled back to the committed graph (the graph is the truth: the bundle was
        never committed, so it is imported again), and staging folders of killed import-db runs are removed.
        """
        from kb_core.features.bundles.indexing import bundle_index_problem

        self._administration(msg("Verifying the home"))
        store = self.service.store
        repaired: list[str] = []
        if repair:
            from kb_core.features.bundles.api import repair_index

            for record in list(store.interrupted_bundle_indexes(bundle_index_problem)):
                try:
                    stats = repair_index(self, record.name).data
                except KBError as exc:
                    raise KBError(f"Repairing '{record.name}' failed: {exc.message}", code="REPAIR_FAILED") from exc
                except Exception as exc:
                    logger.exception("repair_index failed unexpectedly")
                    raise KBError(
                        f"Repairing '{record.name}' failed: repair_index failed because of an internal error; see the "
                        "log.",
                        code="REPAIR_FAILED",
                    ) from exc
                repaired.append(
                    f"{record.name}: rolled the search index back to the committed knowledge graph (removed "
                    f"{stats['documents_removed']} bundle document(s), re-indexed {stats['documents_indexed']}); "
                    "import the interrupted bundle again"
                )
            for folder in store.remove_abandoned_staging():
                repaired.append(f"removed {folder.name}, the staging folder of an import-db that did not finish")
        problems = store.verify(kb_checks=(bundle_index_problem,))
        problems += self._model_folder_problems(repair, repaired)
        found: list[str] = [msg("Repaired {count} problem(s).", count=len(repaired))] if repaired else []
        if problems:
            listed = "\n".join(f"- {p}" for p in problems)
            found.append(msg("{count} problem(s) found:\n{problems}", count=len(problems), problems=listed))
        else:
            found.append(msg("The {store} is consistent.", store=store.subject))
        message = joined(found)
        return Verification(message, problems, repaired)
