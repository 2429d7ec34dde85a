"""The process's resources: :class:`KnowledgeBaseService` owns the store (the home's folders or PostgreSQL, chosen
once by :func:`kb_core.store.factory.open_store`), the embedders, the analyzer, the importer and the background
pool; it is opened once per process. Front ends work through its sessions (:meth:`KnowledgeBaseService.session`,
an :class:`kb_core.session.operations.Operations`).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kb_core.base.atomic import read_json, write_json_atomically
from kb_core.base.config import ALLOW_ENDPOINTS_ENVIRONMENT_VARIABLE, allowed_endpoints, resolve_home
from kb_core.base.errors import InvalidArgument, KBError, KBNotFound, PermissionDenied
from kb_core.base.i18n import msg
from kb_core.base.redaction import shown_endpoint
from kb_core.base.validation import (
    ITEM_ID,
    endpoint_origin,
    endpoint_refusal,
    name_key,
    validate_chunk_size,
    validate_endpoint,
    validate_kb_name,
)
from kb_core.engines.embedding import DEFAULT_EMBEDDING_MODEL
from kb_core.engines.embedding.device import DeviceChoice, DeviceRequest, device_request
from kb_core.store import Home, KBStore, KnowledgeBaseRecord
from kb_core.store.base import POSTGRES_OPERATIONS, NotOnPostgres, Store, TokenStorage
from kb_core.store.factory import open_store

if TYPE_CHECKING:
    from kb_core.engines.analysis import Analyzer
    from kb_core.engines.embedding.base import Embedder
    from kb_core.engines.embedding.calibration import SemanticScale
    from kb_core.features.evaluation.runs import EvaluationRunStore
    from kb_core.features.ingest.executors import DocumentExecutor
    from kb_core.features.ingest.pipeline import Importer
    from kb_core.features.principals import Principal
    from kb_core.features.results import EmbeddingSource
    from kb_core.features.retrieval.search import RankedHits, SearchFilters, SearchSettings
    from kb_core.session.jobs import JobRegistry
    from kb_core.session.operations import Operations
    from kb_core.store.reader import KBReader

logger = logging.getLogger(__name__)
# Where a home keeps its evaluation home (open_eval_service): evaluation KBs built from BEIR corpora.
EVAL_HOME = Path("cache") / "eval"
# Query vectors an evaluation home's embedders remember (each judged query runs under every setting): 150 MB at
# most at 384 dimensions.
EVAL_QUERY_MEMO = 100_000
# Query vectors of local models remembered per service (see CachedEmbedder): 384 floats each, 1.5 MB at most.
QUERY_MEMO = 1024
# How long loading a local model takes before this home has measured it: all-MiniLM-L6-v2 with torch and
# sentence-transformers on 2 busy cores; each load then records its own time (HOME/cache/model_load_seconds.json).
MODEL_LOAD_SECONDS = 15.0


def check_endpoint_allowed(endpoint: str) -> None:
    """Refuse, before any connection, an embedding endpoint that is neither on this machine's loopback nor under
    a URL prefix of ``$KB_ALLOW_ENDPOINTS`` (see :func:`kb_core.base.validation.endpoint_refusal`)."""
    reason = endpoint_refusal(endpoint, allowed_endpoints(), loopback=True)
    if reason is not None:
        raise PermissionDenied(
            msg(
                "{reason} To allow it, start with {variable}={origin}.",
                reason=reason, variable=ALLOW_ENDPOINTS_ENVIRONMENT_VARIABLE, origin=endpoint_origin(endpoint),
            ),
            details={"field": "embedding_endpoint"},
        )


def default_parse_limits() -> Any:
    # parsing is imported lazily: it pulls in lxml and olefile
    from kb_core.engines.parsing import ParseLimits

    return ParseLimits()


CLI_SESSION = "cli"
__all__ = [
    "CLI_SESSION",
    "EVAL_HOME",
    "POSTGRES_OPERATIONS",
    "KnowledgeBaseService",
    "NotOnPostgres",
    "open_eval_service",
]


class ServiceCounters:
    """Work the service has done since it opened, for front ends to show and tests to read: ``searches`` (one KB
    searched once, by any front end) and ``query_vectors`` (query vectors a model computed; repeats of a query are
    answered by the embedders' memo and not counted)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = {"searches": 0, "query_vectors": 0}

    def add(self, name: str, count: int = 1) -> None:
        with self._lock:
            self._counts[name] += count

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)


class KnowledgeBaseService:
    """Opened once per process; thread-safe; shares its home safely with other processes.

    The knowledge bases live in the home folder (the default), or, with ``store`` (or ``$KB_STORE``) a
    ``postgresql://`` URL, in that database, shared by every process and host pointed at it; ``read_url`` (or
    ``$KB_STORE_READ_URL``) names a streaming standby that searches prefer. On PostgreSQL the home keeps only what
    is local to this process's user: the CLI's current KB, the embedding cache, kept evaluation runs, and the staging
    folders of imports and import-db runs while they run.
    """

    def __init__(
        self,
        home: str | Path | None = None,
        *,
        store: str | None = None,
        read_url: str | None = None,
        embedder_factory: Callable[[KnowledgeBaseRecord, str | None], Any] | None = None,
        parse_limits: Any = None,
        device: str | DeviceRequest | None = None,
    ) -> None:
        """``device`` (``auto``, ``cpu``, ``cuda``, ``cuda:N``, ``mps``; default ``$KB_DEVICE``, else auto) is where
        local models embed documents. A malformed ``device`` raises :class:`InvalidArgument` here; a malformed
        ``$KB_DEVICE`` fails each operation that needs a local model, with the same message, so the rest works."""
        self.device_argument = device  # as given, so services opened for this one (evaluation) use the same
        self._device_error: InvalidArgument | None = None
        if device is not None:
            self._device_request = device if isinstance(device, DeviceRequest) else device_request(device)
        else:
            try:
                self._device_request = device_request()
            except InvalidArgument as exc:
                self._device_request, self._device_error = DeviceRequest(), exc
        self.store: Store = open_store(resolve_home(home), store, read_url)
        self._embedder_factory = embedder_factory
        self._lock = threading.RLock()
        self._embedders: dict[str, Any] = {}
        self._floors: dict[tuple[str, str], SemanticScale] = {}
        self._parse_limits = parse_limits
        self.counters = ServiceCounters()
        self._evaluation_lock = threading.Lock()
        self._evaluation_service: KnowledgeBaseService | None = None

    @property
    def home(self) -> Home:
        """The per-user folder: the CLI's current KB, the embedding cache, kept evaluation runs (and, on the folder
        store, the KBs)."""
        return self.store.home

    def close(self, timeout: float = 8.0) -> None:
        """Cancel the running imports (waiting up to ``timeout`` seconds for them to stop: what they committed stays,
        their staging copies and uploads are removed), then close the database connections (a folder store holds
        none). For a server that stops."""
        started = time.monotonic()
        if "jobs" in self.__dict__:  # a registry was made: imports may run
            self.jobs.shutdown(timeout)
            from kb_core.features.ingest.files import wait_for_staging_removals

            # their staging copies are removed on threads of their own: a process that stops next must not cut them
            wait_for_staging_removals()
        with self._evaluation_lock:
            evaluation = self._evaluation_service
        if evaluation is not None:  # its imports (evaluation KBs built from a corpus) too
            evaluation.close(max(0.5, timeout - (time.monotonic() - started)))
        self.store.close()

    # -- sessions ------------------------------------------------------------------------------
    def session(
        self,
        persistent_name: str | None = None,
        scope: frozenset[str] | None = None,
        allowed_dirs: Sequence[Path] | None = None,
        select_hint: str | None = None,
        *,
        principal: Principal | None = None,
        absolute_paths_only: bool = False,
    ) -> Operations:
        """A new session: its typed operations (results, KBError raised). With ``persistent_name`` (the CLI uses
        "cli") the current KB is kept in the home; ``scope`` limits it to those KB ids (MCP tokens); ``allowed_dirs``
        (resolved folders) confines the files it reads and writes by path (the MCP server's --allow-dir over HTTP);
        ``select_hint`` says in messages how its front end selects a KB (default: the MCP tool,
        ``select_knowledge_base(kb_name)``). ``principal``: who it acts for (:mod:`kb_core.features.principals`;
        default a local user, or the token ``scope``); ``absolute_paths_only``: a relative file path fails (MCP
        clients)."""
        from kb_core.session.operations import Operations

        return Operations(
            self,
            persistent_name,
            scope,
            allowed_dirs,
            select_hint or "select_knowledge_base(kb_name)",
            principal=principal,
            absolute_paths_only=absolute_paths_only,
        )

    # -- knowledge bases -----------------------------------------------------------------------
    def find_kb(self, kb_name: str, among: Sequence[KnowledgeBaseRecord] | None = None) -> KnowledgeBaseRecord:
        """The KB named ``kb_name`` (ignoring case), among ``among`` (default: all KBs of the home)."""
        if not isinstance(kb_name, str) or not kb_name.strip():
            raise InvalidArgument(msg("kb_name must be a non-empty string."), details={"field": "kb_name"})
        records = self.store.knowledge_bases() if among is None else list(among)
        key = name_key(kb_name)
        for record in records:
            if name_key(record.name) == key:
                return record
        listed = ", ".join(repr(r.name) for r in records[:20]) if records else msg("none yet")
        raise KBNotFound(
            msg("Knowledge base {kb_name!r} does not exist. Existing knowledge bases: {listed}.", kb_name=kb_name,
                listed=listed),
            details={"kb_name": kb_name},
        )

    def kb_store(self, kb_id: str) -> KBStore:
        """The folder store's writer side of a KB (:class:`NotOnPostgres` on PostgreSQL)."""
        return self.store.folder().kb_store(kb_id)

    def create_kb(
        self, kb_name: str, chunk_size: int, source: EmbeddingSource, progress: Callable[[str], None] | None = None
    ) -> KnowledgeBaseRecord:
        """A new KB (what the session's ``create_knowledge_base`` asks for, validated here). ``progress`` hears about
        the one-time build of a built-in model's folder (see :func:`prepare_embedding_model`), which happens here,
        before the KB exists, when this machine has none."""
        embedding_model, embedding_endpoint, embedding_api_key = source.model, source.endpoint, source.api_key
        name = validate_kb_name(kb_name)
        size = validate_chunk_size(chunk_size)
        endpoint = validate_endpoint(embedding_endpoint)
        if endpoint is not None:
            check_endpoint_allowed(endpoint)
        model = (embedding_model or "").strip() or DEFAULT_EMBEDDING_MODEL
        if endpoint is None and self._embedder_factory is None:
            from kb_core.engines.embedding import check_model_available

            check_model_available(model)  # refused now, not 14 s later at the first import
        if embedding_api_key is not None and not isinstance(embedding_api_key, str):
            raise InvalidArgument(msg("embedding_api_key must be a string."), details={"field": "embedding_api_key"})
        api_key = (embedding_api_key or "").strip() or None
        if endpoint is None and api_key is not None:
            raise InvalidArgument(
                msg("embedding_api_key was given without embedding_endpoint; a key is only used with an endpoint."),
                details={"field": "embedding_api_key"},
            )
        if endpoint is None:
            model = prepare_embedding_model(model, progress)
        record = self.store.create_knowledge_base(
            name, size, model, analyzer=self.analyzer.name, embedding_endpoint=endpoint, api_key=api_key
        )
        logger.info("Created knowledge base %s (%s) in %s", record.name, record.id, self.store.display)
        return record

    def delete_kb(self, record: KnowledgeBaseRecord) -> None:
        self.store.delete_knowledge_base(record)
        logger.info("Deleted knowledge base %s (%s)", record.name, record.id)

    def reader(self, kb_id: str) -> KBReader:
        """The folder store's reader of a KB, one per process (:class:`NotOnPostgres` on PostgreSQL)."""
        return self.store.folder().reader(kb_id)

    def embedder(self, record: KnowledgeBaseRecord) -> Embedder:
        """The KB's embedder, loaded once per process, behind the shared embedding cache."""
        key = f"{record.embedding_model}|{record.embedding_endpoint or ''}|{record.id if record.has_api_key else ''}"
        with self._lock:
            embedder = self._embedders.get(key)
            if embedder is None:
                if record.embedding_endpoint:  # also for a KB made before the address was refused
                    check_endpoint_allowed(record.embedding_endpoint)
                api_key = self.store.api_key(record.id) if record.has_api_key else None
                if self._embedder_factory is not None:
                    embedder = self._embedder_factory(record, api_key)
                else:
                    from kb_core.engines.embedding import CachedEmbedder, EmbeddingCache, get_embedder, is_hashing_model

                    local = not record.embedding_endpoint and not is_hashing_model(record.embedding_model)
                    # A local model gives the same query vector every time, so repeated queries are remembered;
                    # an endpoint is asked each time (it may change, or fail, between searches).
                    embedder = CachedEmbedder(
                        get_embedder(
                            record.embedding_model,
                            record.embedding_endpoint,
                            api_key,
                            device=self.device_request if local else None,
                        ),
                        EmbeddingCache(self.home.embedding_cache_path),
                        query_memo=0 if record.embedding_endpoint else QUERY_MEMO,
                        on_query_embedded=lambda: self.counters.add("query_vectors"),
                    )
                self._embedders[key] = embedder
            return embedder

    def _model_embedder(self, record: KnowledgeBaseRecord | None, model: str | None) -> Any:
        """The embedder an import into ``record`` uses, or the shared one of the local ``model`` (None for a model
        that loads nothing: the hashing embedder)."""
        if record is not None:
            return self.embedder(record)
        from kb_core.engines.embedding import get_embedder, is_hashing_model

        name = model or DEFAULT_EMBEDDING_MODEL
        return None if is_hashing_model(name) else get_embedder(name, device=self.device_request)

    @property
    def _model_load_path(self) -> Path:
        return self.home.root / "cache" / "model_load_seconds.json"

    def model_load_state(self, record: KnowledgeBaseRecord | None, model: str | None = None) -> dict[str, Any]:
        """Whether the embedding model of ``record`` (or the local ``model``) is loaded in this process, and how many
        seconds loading it took last time in this home (else an estimate)."""
        embedder = self._model_embedder(record, model)
        loaded = embedder is None or bool(getattr(embedder, "loaded", True))
        name = record.embedding_model if record is not None else (model or DEFAULT_EMBEDDING_MODEL)
        measured = None
        if embedder is not None:
            try:
                measured = read_json(self._model_load_path).get(embedder.model_key)
            except (OSError, ValueError, AttributeError):
                measured = None
        return {
            "model": name,
            "loaded": loaded,
            "expected_seconds": float(measured) if isinstance(measured, int | float) else MODEL_LOAD_SECONDS,
            "measured": isinstance(measured, int | float),
        }

    def load_model(self, record: KnowledgeBaseRecord | None, model: str | None = None) -> float:
        """Load the embedding model of ``record`` (or the local ``model``) now; the seconds it took, recorded in the
        home for the next estimate (0 when it was loaded already or loads nothing)."""
        embedder = self._model_embedder(record, model)
        if embedder is None or bool(getattr(embedder, "loaded", True)):
            return 0.0
        started = time.perf_counter()
        embedder.load()
        seconds = time.perf_counter() - started
        with self._lock:
            try:
                known = read_json(self._model_load_path)
            except (OSError, ValueError):
                known = {}
            known = known if isinstance(known, dict) else {}
            known[embedder.model_key] = round(seconds, 1)
            write_json_atomically(self._model_load_path, known)
        logger.info("loaded the embedding model %s in %.1f s", embedder.model_key, seconds)
        return seconds

    def semantic_scale(self, record: KnowledgeBaseRecord, query: str) -> SemanticScale:
        """The scale the cosines of ``record``'s model are read on for ``query``
        (:mod:`kb_core.engines.embedding.calibration`): its zero (what unrelated text in the query's script scores on
        average), its floor (a chunk must exceed it for semantic evidence) and its top (what a near-identical text
        scores), measured once and kept in the home. If the model cannot embed the calibration texts (an endpoint down)
        the scale is the unmeasured one this time, logged.
        """
        from kb_core.engines.embedding.calibration import CALIBRATION_VERSION, SemanticScale, measure_scale
        from kb_core.features.retrieval.search import detect_language

        embedder = self.embedder(record)
        key = (str(getattr(embedder, "model_key", record.embedding_model)), detect_language(query))
        with self._lock:
            scale = self._floors.get(key)
        if scale is not None:
            return scale
        # kept in the home too (per model, script and calibration version), so each process need not measure again
        path = self.home.embedding_cache_path.with_name("semantic_floors.json")
        name = f"{key[0]}|{key[1]}|{CALIBRATION_VERSION}"
        try:
            kept = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            kept = {}
        if not isinstance(kept, dict):
            kept = {}
        scale = _kept_scale(kept.get(name))
        if scale is None:
            try:
                scale = measure_scale(embedder, key[1])
            except KBError as exc:
                logger.warning("semantic scale of %s not measured (%s); raw cosines this time", key[0], exc.message)
                return SemanticScale.unmeasured()
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                kept[name] = {"floor": scale.floor, "top": scale.top, "mean": scale.mean, "std": scale.std,
                              "pairs": scale.pairs}
                write_json_atomically(path, kept)
            except OSError:
                logger.warning("could not keep the semantic scale in %s", path, exc_info=True)
        with self._lock:
            self._floors[key] = scale
        return scale

    @property
    def device_request(self) -> DeviceRequest:
        """The device asked for (checked for form; raises the ``$KB_DEVICE`` error if that was malformed)."""
        if self._device_error is not None:
            raise self._device_error
        return self._device_request

    def device(self) -> DeviceChoice:
        """The device local models embed documents on in this process (imports torch; may raise
        :class:`InvalidArgument` naming the available devices)."""
        from kb_core.engines.embedding.device import resolve_device

        return resolve_device(self.device_request)

    def embedding_device(self, record: KnowledgeBaseRecord) -> str:
        """Where ``record``'s documents are embedded, in words: the local device, the endpoint, or none."""
        from kb_core.engines.embedding import is_hashing_model

        if record.embedding_endpoint:
            return f"endpoint {shown_endpoint(record.embedding_endpoint)}"
        if is_hashing_model(record.embedding_model):
            return "none (the hashing embedder runs no model)"
        return self.device().describe()

    def import_executor(
        self, record: KnowledgeBaseRecord, executor: str, address: str | None = None
    ) -> DocumentExecutor | None:
        """The executor named ``executor`` (``local``: ``None``, the importer's own threads; ``ray``: Ray Data on
        the cluster at ``address``, else the one this process is connected to, else a new local one)."""
        from kb_core.features.ingest.executors import EXECUTORS

        if executor not in EXECUTORS:
            raise InvalidArgument(
                msg("unknown executor {executor!r}: use one of {names}", executor=executor, names=", ".join(EXECUTORS)),
                details={"field": "executor"},
            )
        if executor == "local":
            if address:
                raise InvalidArgument(msg("an address is for the ray executor only"), details={"field": "address"})
            return None
        from kb_core.engines.embedding import is_hashing_model
        from kb_core.features.ingest.executors.ray_data import ray_executor_for

        local_model = not record.embedding_endpoint and not is_hashing_model(record.embedding_model)
        return ray_executor_for(
            model=record.embedding_model,
            endpoint=record.embedding_endpoint,
            device=self.device_request if local_model else DeviceRequest(),
            cache_path=str(self.home.embedding_cache_path),
            limits=self._parse_limits or default_parse_limits(),
            address=address,
        )

    def importer(self, record: KnowledgeBaseRecord, executor: DocumentExecutor | None = None) -> Importer:
        from kb_core.engines.chunking import chunk_document
        from kb_core.engines.parsing import parse_and_chunk_files, parse_file
        from kb_core.engines.parsing.isolation import write_segment_in_worker
        from kb_core.features.ingest.pipeline import Importer
        from kb_core.store.segment_jobs import write_segment_job

        embedder = self.embedder(record)
        limits = self._parse_limits or default_parse_limits()
        sink = self.store.kb(record).sink(
            embedder=embedder,
            analyzer=self.analyzer,
            segment_writer=lambda job: write_segment_in_worker(job, limits, write_segment_job),
            executor=executor.name if executor is not None else None,
        )
        return Importer(
            sink,
            embedder,
            parse=lambda path: parse_file(path, limits),
            chunker=lambda parsed, size: chunk_document(parsed, embedder.tokenizer, size),
            kb_name=record.name,
            executor=executor,
            # payloads from parser processes go only to a sink that writes them in worker processes
            parse_and_chunk=None
            if not sink.writes_in_workers
            else lambda paths, size, clock=None, stages=None: parse_and_chunk_files(
                paths,
                limits,
                embedder.tokenizer,
                size,
                analyzer=self.analyzer,
                embedder=embedder,
                payloads=True,
                clock=clock,
                stages=stages,
            ),
        )

    @cached_property
    def evaluation_runs(self) -> EvaluationRunStore:
        """The kept evaluation runs of this home (``HOME/evaluations``)."""
        from kb_core.features.evaluation.runs import EvaluationRunStore

        return EvaluationRunStore(self.home.root)

    def evaluation_service(self) -> KnowledgeBaseService:
        """The service on this home's evaluation home (``<home>/cache/eval``, :func:`open_eval_service`), opened
        once per service: evaluation KBs built from a corpus, and their embedding cache, stay out of the user's KB
        list. The evaluation package reaches it through :class:`kb_core.features.seams.Resources`."""
        with self._evaluation_lock:
            if self._evaluation_service is None:
                self._evaluation_service = open_eval_service(self)
            return self._evaluation_service

    @property
    def parse_limits(self) -> Any:
        """The limits every parse of this service runs under."""
        return self._parse_limits or default_parse_limits()

    @property
    def token_store(self) -> TokenStorage:
        """The MCP HTTP bearer tokens: in the database on PostgreSQL (shared by every host), else in the home
        (``HOME/tokens.json``)."""
        return self.store.tokens

    @cached_property
    def jobs(self) -> JobRegistry:
        """The imports of this process, as jobs (:mod:`kb_core.session.jobs`): started, polled and cancelled through the
        sessions; :meth:`close` cancels the running ones."""
        from kb_core.session.jobs import JobRegistry

        return JobRegistry()

    @cached_property
    def analyzer(self) -> Analyzer:
        from kb_core.engines.analysis import default_analyzer

        return default_analyzer()

    @cached_property
    def background(self) -> ThreadPoolExecutor:
        return ThreadPoolExecutor(max_workers=4, thread_name_prefix="kb-service")

    def search_kb(
        self,
        record: KnowledgeBaseRecord,
        query: str,
        settings: SearchSettings,
        filters: SearchFilters,
        explain_chunk_ids: Sequence[str] = (),
    ) -> RankedHits:
        """One KB's ranked hits. The place of each of ``explain_chunk_ids`` (live chunks) among the scored candidates
        is in ``RankedHits.explained_by_id``, whether or not it made the hits."""
        from kb_core.features.retrieval.search import RankedHits, rank

        self.counters.add("searches")
        storage = self.store.kb(record)

        def query_vector() -> tuple[Any, SemanticScale | None]:
            if settings.mode == "keyword":
                return None, None
            return self.embedder(record).embed_query(query), self.semantic_scale(record, query)

        embedded = query_vector() if storage.embed_before_search else None
        with storage.searcher(self.analyzer) as searcher:
            if searcher.empty:
                return RankedHits([], [msg("Knowledge base '{name}' has no documents yet.", name=record.name)])
            vector, scale = embedded if embedded is not None else query_vector()
            located = {chunk_id: searcher.locate(chunk_id) for chunk_id in explain_chunk_ids}
            keys = [key for key in located.values() if key is not None]
            ranked = rank(searcher, query, vector, settings, filters, record.name, keys, scale)
            cut = self._query_cut(record, query) if vector is not None else None
            if cut is not None:
                ranked.warnings.append(
                    msg(
                        "The query is {length:,} tokens long; its vector (semantic score) is computed from its first "
                        "{used:,}, which bounds the cost of a long query; keyword scores read all of it.",
                        length=cut[1], used=cut[0],
                    )
                )
            for warning in searcher.warnings:
                if warning not in ranked.warnings:
                    ranked.warnings.append(warning)
        ranked.explained_by_id = {
            chunk_id: ranked.explained[key] for chunk_id, key in located.items() if key in ranked.explained
        }
        return ranked

    def _query_cut(self, record: KnowledgeBaseRecord, query: str) -> tuple[int, int] | None:
        cut = getattr(self.embedder(record), "query_cut", None)
        return cut(query) if cut is not None else None

    def kb_version(self, record: KnowledgeBaseRecord) -> int:
        """The KB's committed version. Every commit by any process (an import, a deletion, a compaction) changes it,
        so what is derived from the KB (the search lab's results) may be remembered under it."""
        return self.store.kb(record).version()

    def compact(self, record: KnowledgeBaseRecord, everything: bool = False) -> dict[str, int]:
        return self.store.kb(record).compact(self.analyzer, everything)

    def compact_quietly(self, record: KnowledgeBaseRecord) -> None:
        """Automatic compaction after an import: best effort, never fails the import (PostgreSQL needs none)."""
        self.store.kb(record).compact_quietly(self.analyzer)

    def documents(self, record: KnowledgeBaseRecord) -> list[dict[str, Any]]:
        """The KB's documents (ready and failed) as catalog rows, as of now."""
        return self.store.kb(record).documents()

    def has_chunk(self, record: KnowledgeBaseRecord, chunk_id: str) -> bool:
        return bool(ITEM_ID.match(chunk_id)) and self.store.kb(record).has_chunk(chunk_id)

    def import_staging(self, record: KnowledgeBaseRecord) -> Path:
        """A new private folder for the copies an import works on: inside the KB's folder (never recreated for a
        KB deleted meanwhile), or in the home on PostgreSQL."""
        return self.store.kb(record).import_staging()

    def kb_counts(self, record: KnowledgeBaseRecord) -> tuple[int, int, int]:
        """(documents imported, live chunks, failed imports)."""
        return self.store.kb(record).counts()


def _kept_scale(value: Any) -> SemanticScale | None:
    """A scale kept in ``semantic_floors.json``, or None when the entry is missing or malformed."""
    from kb_core.engines.embedding.calibration import SemanticScale

    if not isinstance(value, dict):
        return None
    floor, top = value.get("floor"), value.get("top")
    numbers = [v for v in (floor, top) if isinstance(v, int | float) and not isinstance(v, bool)]
    if len(numbers) != 2 or not 0.0 <= float(floor) < float(top) <= 1.0:  # type: ignore[arg-type]
        return None
    mean, std, pairs = value.get("mean"), value.get("std"), value.get("pairs")
    if not isinstance(mean, int | float) or isinstance(mean, bool) or not -1.0 <= float(mean) <= float(floor):
        return None  # the scale's zero
    return SemanticScale(
        float(floor),  # type: ignore[arg-type]
        float(top),  # type: ignore[arg-type]
        float(mean),
        float(std) if isinstance(std, int | float) else 0.0,
        int(pairs) if isinstance(pairs, int) else 0,
    )


def prepare_embedding_model(model: str, progress: Callable[[str], None] | None = None) -> str:
    """The name a KB records for the local model ``model``: a built-in model under its own name (an alias or
    another case resolves to it), its folder built first where this machine has none (raises
    :class:`~kb_core.base.errors.EmbeddingError` when its package is missing); any other name unchanged."""
    from kb_core.engines.embedding.builtin import find_builtin, model_folder

    builtin = find_builtin(model)
    if builtin is None:
        return model
    if builtin.built:
        model_folder(builtin.name, progress)
    return builtin.name


def open_eval_service(service_or_home: KnowledgeBaseService | str | os.PathLike[str]) -> KnowledgeBaseService:
    """A :class:`KnowledgeBaseService` on the evaluation home ``<home>/cache/eval`` of the given service (or home
    folder), so evaluation KBs and their embedding cache stay out of the user's KB list. Front ends take the one of
    their service (:meth:`KnowledgeBaseService.evaluation_service`); notebooks and benchmarks open one from a home."""
    from kb_core.base.config import FOLDER_STORE

    if isinstance(service_or_home, str | os.PathLike):
        root, device = Path(service_or_home).expanduser(), None
    else:
        root, device = Path(service_or_home.home.root), service_or_home.device_argument
    home = root / EVAL_HOME

    def embedder_factory(record: KnowledgeBaseRecord, api_key: str | None) -> Any:
        # The service's own recipe (shared model, persistent document cache) with a larger query memo, for endpoints
        # too: an evaluation embeds each query once instead of once per pass and setting. The vectors are the same.
        from kb_core.engines.embedding import CachedEmbedder, EmbeddingCache, get_embedder, is_hashing_model

        local = not record.embedding_endpoint and not is_hashing_model(record.embedding_model)
        device = eval_service.device_request if local else None
        inner = get_embedder(record.embedding_model, record.embedding_endpoint, api_key, device=device)
        return CachedEmbedder(inner, EmbeddingCache(home / "cache" / "embeddings.sqlite"), query_memo=EVAL_QUERY_MEMO)

    # always a folder: evaluation KBs stay out of a shared PostgreSQL store ($KB_STORE) too
    eval_service = KnowledgeBaseService(home, store=FOLDER_STORE, embedder_factory=embedder_factory, device=device)
    return eval_service
