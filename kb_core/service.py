"""The service API: every front end (CLI, app, MCP server, notebooks) calls only this.

``KnowledgeBaseService`` owns the home, the loaded models and the index caches; it is opened once
per process. A :class:`Session` carries the "current" knowledge base: the CLI keeps one per home
(persisted), each MCP session and each browser session has its own (in memory). Every public
session method returns the envelope ``{success, message, data}`` (see :mod:`kb_core.envelope`).
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FuturesTimeout
from dataclasses import asdict
from functools import cached_property
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow.compute as pc

from kb_core.config import resolve_home, resolve_store
from kb_core.embedding import DEFAULT_EMBEDDING_MODEL
from kb_core.embedding.device import DeviceChoice, DeviceRequest, device_request
from kb_core.envelope import Envelope, envelope, enveloped, ok
from kb_core.errors import (
    DocumentNotFound,
    EmbeddingError,
    InvalidArgument,
    ItemNotFound,
    KBError,
    KBExists,
    KBIsCurrent,
    KBNotFound,
    NoCurrentKB,
    PermissionDenied,
    StoreError,
)
from kb_core.fusion import ScoreBreakdown
from kb_core.importer import Importer, ImportProgress, ImportSource, in_flight_documents
from kb_core.reader import KBReader
from kb_core.safe_files import UnusablePath, open_input_file, reject_nul
from kb_core.search import (
    RankedHits,
    SearchFilters,
    SearchHit,
    SearchOutcome,
    SearchSettings,
    SnapshotSearcher,
    rank,
)
from kb_core.store import Change, Home, KBStore, KnowledgeBaseRecord, new_id, utc_now
from kb_core.validation import (
    name_key,
    validate_chunk_size,
    validate_endpoint,
    validate_float_range,
    validate_int_range,
    validate_kb_name,
)

if TYPE_CHECKING:
    from kb_core.analysis import Analyzer
    from kb_core.embedding.base import Embedder
    from kb_core.evaluation_runs import EvaluationRunStore
    from kb_core.executors import DocumentExecutor
    from kb_core.store.postgres import PostgresStore

logger = logging.getLogger(__name__)
# Query vectors of local models remembered per service (see CachedEmbedder): 384 floats each, 1.5 MB at most.
QUERY_MEMO = 1024


def default_parse_limits() -> Any:
    # parsing is imported lazily: it pulls in lxml and olefile
    from kb_core.parsing import ParseLimits

    return ParseLimits()


CLI_SESSION = "cli"
# What a service on a PostgreSQL store does so far; everything else answers NOT_ON_POSTGRES (issue #16).
POSTGRES_OPERATIONS = (
    "create, list, select and delete knowledge bases; import, list and delete documents and list their chunks; "
    "search, explain_search, rag_search and saved search settings"
)


class NotOnPostgres(KBError):
    code = "NOT_ON_POSTGRES"


class KBRegistry(Protocol):
    """The KB registry both stores offer (:class:`kb_core.store.Home`, :class:`PostgresStore`)."""

    def knowledge_bases(self) -> list[KnowledgeBaseRecord]: ...

    def get(self, kb_id: str) -> KnowledgeBaseRecord: ...

    def api_key(self, kb_id: str) -> str | None: ...

    def update_search_settings(self, kb_id: str, settings: dict[str, Any]) -> KnowledgeBaseRecord: ...


class KnowledgeBaseService:
    """Opened once per process; thread-safe; shares its home safely with other processes.

    The knowledge bases live in the home folder (the default), or, with ``store`` (or ``$KB_STORE``) a
    ``postgresql://`` URL, in that database, shared by every process and host pointed at it; ``read_url`` (or
    ``$KB_STORE_READ_URL``) names a streaming standby that searches prefer. On PostgreSQL the home keeps only what
    is local to this process's user: the CLI's current KB, the embedding cache, kept evaluation runs.
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
        url, standby = resolve_store(store, read_url)
        self.postgres: PostgresStore | None = None
        if url is not None:
            from kb_core.store.postgres import PostgresStore

            self.postgres = PostgresStore.open(url, read_url=standby)
        self.home = Home(resolve_home(home))
        self._embedder_factory = embedder_factory
        self._lock = threading.RLock()
        self._readers: dict[str, KBReader] = {}
        self._embedders: dict[str, Any] = {}
        self._parse_limits = parse_limits

    @property
    def registry(self) -> KBRegistry:
        """Where the KBs are registered: the database on PostgreSQL, else the home."""
        return self.postgres if self.postgres is not None else self.home

    def close(self) -> None:
        """Close the database connections (a folder store holds none)."""
        if self.postgres is not None:
            self.postgres.close()

    # -- sessions ------------------------------------------------------------------------------
    def session(
        self,
        persistent_name: str | None = None,
        scope: frozenset[str] | None = None,
        allowed_dirs: Sequence[Path] | None = None,
    ) -> Session:
        """A new session. With ``persistent_name`` (the CLI uses "cli") the current KB is kept in the home;
        ``scope`` limits it to those KB ids (MCP tokens); ``allowed_dirs`` (resolved folders) confines the
        files it reads and writes by path (the MCP server's --allow-dir over HTTP)."""
        return Session(self, persistent_name, scope, allowed_dirs)

    # -- knowledge bases -----------------------------------------------------------------------
    def find_kb(self, kb_name: str, among: Sequence[KnowledgeBaseRecord] | None = None) -> KnowledgeBaseRecord:
        """The KB named ``kb_name`` (ignoring case), among ``among`` (default: all KBs of the home)."""
        if not isinstance(kb_name, str) or not kb_name.strip():
            raise InvalidArgument("kb_name must be a non-empty string.", details={"field": "kb_name"})
        records = self.registry.knowledge_bases() if among is None else list(among)
        key = name_key(kb_name)
        for record in records:
            if name_key(record.name) == key:
                return record
        listed = ", ".join(repr(r.name) for r in records[:20]) if records else "none yet"
        raise KBNotFound(
            f"Knowledge base {kb_name!r} does not exist. Existing knowledge bases: {listed}.",
            details={"kb_name": kb_name},
        )

    def kb_store(self, kb_id: str) -> KBStore:
        if self.postgres is not None:
            raise NotOnPostgres(
                f"This operation is not available on the PostgreSQL store ({self.postgres.display}) yet; there the "
                f"workbench can {POSTGRES_OPERATIONS}. Use a folder store (the default) for the rest."
            )
        return KBStore(self.home.kb_dir(kb_id), kb_id)

    def create_kb(
        self,
        kb_name: str,
        chunk_size: int,
        embedding_model: str | None = None,
        embedding_endpoint: str | None = None,
        embedding_api_key: str | None = None,
    ) -> KnowledgeBaseRecord:
        name = validate_kb_name(kb_name)
        size = validate_chunk_size(chunk_size)
        endpoint = validate_endpoint(embedding_endpoint)
        model = (embedding_model or "").strip() or DEFAULT_EMBEDDING_MODEL
        if embedding_api_key is not None and not isinstance(embedding_api_key, str):
            raise InvalidArgument("embedding_api_key must be a string.", details={"field": "embedding_api_key"})
        api_key = (embedding_api_key or "").strip() or None
        if endpoint is None and api_key is not None:
            raise InvalidArgument(
                "embedding_api_key was given without embedding_endpoint; a key is only used with an endpoint.",
                details={"field": "embedding_api_key"},
            )
        if self.postgres is not None:  # the database's unique name key refuses a name taken meanwhile
            record = self.postgres.create_knowledge_base(
                name, size, model, analyzer=self.analyzer.name, embedding_endpoint=endpoint, api_key=api_key
            )
            logger.info("Created knowledge base %s (%s) in %s", record.name, record.id, self.postgres.display)
            return record
        with self.home.registry_lock():
            key = name_key(name)
            for record in self.home.knowledge_bases():
                if name_key(record.name) == key:
                    raise KBExists(
                        f"A knowledge base named {record.name!r} already exists (names ignore case); choose another.",
                        details={"kb_name": name},
                    )
            record = KnowledgeBaseRecord(
                id=new_id("kb"),
                name=name,
                chunk_size=size,
                embedding_model=model,
                embedding_endpoint=endpoint,
                has_api_key=api_key is not None,
                created_at=utc_now(),
            )
            KBStore.create(self.home.kb_dir(record.id), record.id)
            if api_key is not None:
                self.home.store_api_key(record.id, api_key)
            self.home.add(record)  # the commit point
        logger.info("Created knowledge base %s (%s)", record.name, record.id)
        return record

    def delete_kb(self, record: KnowledgeBaseRecord) -> None:
        if self.postgres is not None:
            self.postgres.delete_knowledge_base(record.id)
            logger.info("Deleted knowledge base %s (%s)", record.name, record.id)
            return
        with self.home.registry_lock(), self.kb_store(record.id).lock():
            self.home.remove(record.id)
        with self._lock:
            self._readers.pop(record.id, None)
        logger.info("Deleted knowledge base %s (%s)", record.name, record.id)

    def reader(self, kb_id: str) -> KBReader:
        with self._lock:
            reader = self._readers.get(kb_id)
            if reader is None:
                store = self.kb_store(kb_id)
                store.clean_up()
                reader = KBReader(store)
                self._readers[kb_id] = reader
            return reader

    def embedder(self, record: KnowledgeBaseRecord) -> Embedder:
        """The KB's embedder, loaded once per process, behind the shared embedding cache."""
        key = f"{record.embedding_model}|{record.embedding_endpoint or ''}|{record.id if record.has_api_key else ''}"
        with self._lock:
            embedder = self._embedders.get(key)
            if embedder is None:
                api_key = self.registry.api_key(record.id) if record.has_api_key else None
                if self._embedder_factory is not None:
                    embedder = self._embedder_factory(record, api_key)
                else:
                    from kb_core.embedding import CachedEmbedder, EmbeddingCache, get_embedder, is_hashing_model

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
                    )
                self._embedders[key] = embedder
            return embedder

    @property
    def device_request(self) -> DeviceRequest:
        """The device asked for (checked for form; raises the ``$KB_DEVICE`` error if that was malformed)."""
        if self._device_error is not None:
            raise self._device_error
        return self._device_request

    def device(self) -> DeviceChoice:
        """The device local models embed documents on in this process (imports torch; may raise
        :class:`InvalidArgument` naming the available devices)."""
        from kb_core.embedding.device import resolve_device

        return resolve_device(self.device_request)

    def embedding_device(self, record: KnowledgeBaseRecord) -> str:
        """Where ``record``'s documents are embedded, in words: the local device, the endpoint, or none."""
        from kb_core.embedding import is_hashing_model

        if record.embedding_endpoint:
            return f"endpoint {record.embedding_endpoint}"
        if is_hashing_model(record.embedding_model):
            return "none (the hashing embedder runs no model)"
        return self.device().describe()

    def import_executor(
        self, record: KnowledgeBaseRecord, executor: str, address: str | None = None
    ) -> DocumentExecutor | None:
        """The executor named ``executor`` (``local``: ``None``, the importer's own threads; ``ray``: Ray Data on
        the cluster at ``address``, else the one this process is connected to, else a new local one)."""
        from kb_core.executors import EXECUTORS

        if executor not in EXECUTORS:
            raise InvalidArgument(
                f"unknown executor {executor!r}: use one of {', '.join(EXECUTORS)}", details={"field": "executor"}
            )
        if executor == "local":
            if address:
                raise InvalidArgument("an address is for the ray executor only", details={"field": "address"})
            return None
        from kb_core.embedding import is_hashing_model
        from kb_core.executors.ray_data import ray_executor_for

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
        from kb_core.chunking import chunk_document
        from kb_core.parsing import parse_and_chunk_file, parse_file

        embedder = self.embedder(record)
        limits = self._parse_limits or default_parse_limits()
        if self.postgres is not None:
            from kb_core.store.postgres.importing import PostgresImporter

            if executor is not None:
                raise NotOnPostgres(
                    f"The {executor.name} executor commits into folder stores only; imports into the PostgreSQL "
                    f"store ({self.postgres.display}) run in this process (executor 'local')."
                )

            return PostgresImporter(
                self.postgres,
                record.id,
                embedder,
                analyzer=self.analyzer,
                parse=lambda path: parse_file(path, limits),
                chunker=lambda parsed, size: chunk_document(parsed, embedder.tokenizer, size),
                kb_name=record.name,
            )
        reader = self.reader(record.id)

        def live_documents(manifest: Any) -> list[dict[str, Any]]:
            snapshot = reader.snapshot()
            if snapshot.version != manifest.version:
                raise StoreError("The knowledge base changed while committing; try again.")
            return snapshot.documents().to_dict("records")

        return Importer(
            self.kb_store(record.id),
            embedder,
            live_documents,
            analyzer=self.analyzer,
            parse=lambda path: parse_file(path, limits),
            chunker=lambda parsed, size: chunk_document(parsed, embedder.tokenizer, size),
            kb_name=record.name,
            executor=executor,
            parse_and_chunk=lambda path, size: parse_and_chunk_file(path, limits, embedder.tokenizer, size),
        )

    @cached_property
    def evaluation_runs(self) -> EvaluationRunStore:
        """The kept evaluation runs of this home (``HOME/evaluations``)."""
        from kb_core.evaluation_runs import EvaluationRunStore

        return EvaluationRunStore(self.home.root)

    @cached_property
    def analyzer(self) -> Analyzer:
        from kb_core.analysis import default_analyzer

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
        if self.postgres is not None:
            from kb_core.store.postgres.searching import search_snapshot

            # embedded before the snapshot opens: no transaction stays open while a model or endpoint works
            vector = None if settings.mode == "keyword" else self.embedder(record).embed_query(query)
            with self.postgres.snapshot(record.id) as pg_snapshot:
                return search_snapshot(
                    pg_snapshot, record, self.analyzer, query, vector, settings, filters, explain_chunk_ids
                )
        snapshot = self.reader(record.id).snapshot()
        if snapshot.manifest.chunk_count == 0:
            return RankedHits([], [f"Knowledge base '{record.name}' has no documents yet."])
        searcher = SnapshotSearcher.for_snapshot(snapshot, self.analyzer, record.embedding_model)
        query_vector = None
        if settings.mode != "keyword":
            query_vector = self.embedder(record).embed_query(query)
        located = {chunk_id: snapshot.locate_chunk(chunk_id) for chunk_id in explain_chunk_ids}
        keys = [key for key in located.values() if key is not None]
        ranked = rank(searcher, query, query_vector, settings, filters, record.name, keys)
        ranked.explained_by_id = {
            chunk_id: ranked.explained[key] for chunk_id, key in located.items() if key in ranked.explained
        }
        return ranked

    def find_item(self, item_id: str, records: Sequence[KnowledgeBaseRecord], neighbours: int) -> dict[str, Any]:
        for record in records:
            snapshot = self.reader(record.id).snapshot()
            documents = snapshot.documents()
            if item_id.startswith("doc_"):
                match = documents[documents["doc_id"] == item_id]
                if match.empty:
                    continue
                row = match.iloc[0].to_dict()
                segment = snapshot.segment_by_id(row["segment_id"])
                text = segment.text(item_id) if segment is not None else None
                return {"type": "document", "kb_name": record.name, **_document_row(row), "text": text or ""}
            for index, segment in enumerate(snapshot.segments):
                position = segment.find_chunk(item_id)
                if position is None or not snapshot.live_mask(index)[position]:
                    continue
                chunk = segment.chunk_rows([position])[0]
                doc_rows = segment.chunks.filter(pc.equal(segment.chunks.column("doc_id"), chunk["doc_id"]))
                siblings = sorted(doc_rows.to_pylist(), key=lambda r: r["chunk_index"])
                at = next(i for i, r in enumerate(siblings) if r["chunk_id"] == item_id)
                name = documents[documents["doc_id"] == chunk["doc_id"]]["name"]
                return {
                    "type": "chunk",
                    "kb_name": record.name,
                    "doc_name": name.iloc[0] if not name.empty else None,
                    "chunk": _chunk_json(chunk),
                    "previous": [_chunk_json(r) for r in siblings[max(0, at - neighbours) : at]],
                    "next": [_chunk_json(r) for r in siblings[at + 1 : at + 1 + neighbours]],
                }
        raise ItemNotFound(f"No document or chunk with id {item_id!r} exists.", details={"id": item_id})

    def document_info(self, doc_id: str, records: Sequence[KnowledgeBaseRecord]) -> dict[str, Any]:
        for record in records:
            documents = self.reader(record.id).snapshot().documents()
            match = documents[documents["doc_id"] == doc_id]
            if not match.empty:
                document = match.iloc[0].to_dict()
                row = _document_row(document)
                return {
                    "id": row["id"],
                    "name": row["name"],
                    "file_name": _original_file_name(document),
                    "kb_name": record.name,
                    "file_type": row["file_type"],
                    "size_bytes": row["size_bytes"],
                    "size_human": human_size(row["size_bytes"]),
                    "source": row["source"],
                    "source_label": _source_label(row["source"], row["file_path"]),
                    "parse_status": row["status"],
                    "status_text": _status_text(row["status"], row["error"]),
                    "parse_error": row["error"],
                    "chunk_count": row["chunk_count"],
                    "created_at": row["created_at"],
                    "updated_at": row["updated_at"],
                }
        return {"id": doc_id, "error": f"Document {doc_id!r} not found."}

    def compact(self, record: KnowledgeBaseRecord, everything: bool = False) -> dict[str, int]:
        from kb_core.compaction import compact

        return compact(self.kb_store(record.id), self.analyzer, everything=everything)

    def compact_quietly(self, record: KnowledgeBaseRecord) -> None:
        """Automatic compaction after an import: best effort, never fails the import (PostgreSQL needs none)."""
        if self.postgres is not None:
            return
        try:
            self.compact(record)
        except Exception:
            logger.warning("automatic compaction of %s failed; it will be retried later", record.name, exc_info=True)

    def documents(self, record: KnowledgeBaseRecord) -> list[dict[str, Any]]:
        """The KB's documents (ready and failed) as catalog rows, as of now."""
        if self.postgres is not None:
            with self.postgres.snapshot(record.id) as snapshot:
                return [d.to_row() for d in snapshot.documents()]
        return self.reader(record.id).snapshot().documents().to_dict("records")

    def has_chunk(self, record: KnowledgeBaseRecord, chunk_id: str) -> bool:
        if self.postgres is not None:
            with self.postgres.snapshot(record.id) as snapshot:
                return snapshot.find_chunk(chunk_id) is not None
        return self.reader(record.id).snapshot().locate_chunk(chunk_id) is not None

    def import_staging(self, record: KnowledgeBaseRecord) -> Path:
        """A new private folder for the copies an import works on: inside the KB's folder (never recreated for a
        KB deleted meanwhile), or in the home on PostgreSQL."""
        name = f"{os.getpid()}-import-{uuid.uuid4().hex[:8]}"
        if self.postgres is not None:
            staging = self.home.root / "staging"
            staging.mkdir(parents=True, exist_ok=True)
            return staging / name
        return self.kb_store(record.id).root / "staging" / name

    def kb_counts(self, record: KnowledgeBaseRecord) -> tuple[int, int]:
        if self.postgres is not None:
            try:
                with self.postgres.snapshot(record.id) as snapshot:
                    return len(snapshot.documents()), snapshot.statistics.live_rows
            except KBNotFound:
                return 0, 0
        try:
            manifest = self.kb_store(record.id).manifest()
        except KBNotFound:
            return 0, 0
        return manifest.document_count, manifest.chunk_count


class Session:
    """The per-user view of the service: which KB is current, plus every operation as an envelope."""

    def __init__(
        self,
        service: KnowledgeBaseService,
        persistent_name: str | None = None,
        scope: frozenset[str] | None = None,
        allowed_dirs: Sequence[Path] | None = None,
    ) -> None:
        self.service = service
        self.persistent_name = persistent_name
        # KB ids this session may see (an MCP token's scope); None means all. Out-of-scope KBs answer
        # exactly like nonexistent ones.
        self.scope = scope
        # Folders the files named by path must lie in (checked on the opened file); None means anywhere.
        self.allowed_dirs: tuple[Path, ...] | None = None if allowed_dirs is None else tuple(allowed_dirs)
        self._current_kb_id: str | None = None

    def visible_kbs(self) -> list[KnowledgeBaseRecord]:
        records = self.service.registry.knowledge_bases()
        return records if self.scope is None else [r for r in records if r.id in self.scope]

    def find_kb(self, kb_name: str) -> KnowledgeBaseRecord:
        return self.service.find_kb(kb_name, None if self.scope is None else self.visible_kbs())

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
            raise NoCurrentKB("No knowledge base is selected; call select_knowledge_base(kb_name) first.")
        try:
            record = self.service.registry.get(kb_id)
            if self.scope is not None and record.id not in self.scope:
                raise KBNotFound(kb_id)
            return record
        except KBNotFound as exc:
            raise NoCurrentKB(
                "The selected knowledge base no longer exists (deleted elsewhere); select another one."
            ) from exc

    def resolve_kb(self, kb_name: str | None) -> KnowledgeBaseRecord:
        return self.find_kb(kb_name) if kb_name else self.current_kb()

    @enveloped
    def import_executors(self) -> Envelope:
        """The import executors, each with why it cannot run here (``None``: it can)."""
        from kb_core.executors import executor_choices

        choices = executor_choices()
        usable = [name for name, reason in choices.items() if reason is None]
        return ok(f"Import executors available here: {', '.join(usable)}.", {"executors": choices})

    @enveloped
    def device_info(self) -> Envelope:
        """Where local embedding models run in this process: ``data.device`` (see ``DeviceChoice.to_json``)."""
        choice = self.service.device()
        return ok(f"Local models embed documents on {choice.describe()}; queries on the CPU.", {
            "device": choice.to_json(),
            "query_device": "cpu",
        })

    # -- knowledge bases -----------------------------------------------------------------------
    @enveloped
    def create_knowledge_base(
        self,
        kb_name: str,
        chunk_size: int,
        embedding_model: str | None = None,
        embedding_endpoint: str | None = None,
        embedding_api_key: str | None = None,
    ) -> Envelope:
        record = self.service.create_kb(kb_name, chunk_size, embedding_model, embedding_endpoint, embedding_api_key)
        return ok(
            f"Created knowledge base '{record.name}'. Select it with select_knowledge_base to use it.",
            {"kb_id": record.id, "kb_name": record.name, "chunk_size": record.chunk_size},
        )

    @enveloped
    def list_knowledge_bases(self) -> Envelope:
        current = self.current_kb_id
        rows = []
        for record in self.visible_kbs():
            documents, chunks = self.service.kb_counts(record)
            rows.append(
                {
                    "id": record.id,
                    "name": record.name,
                    "chunk_size": record.chunk_size,
                    "embedding_model": record.embedding_model,
                    "embedding_endpoint": record.embedding_endpoint,
                    "created_at": record.created_at,
                    "is_current": record.id == current,
                    "document_count": documents,
                    "chunk_count": chunks,
                }
            )
        current_id = current if any(r["id"] == current for r in rows) else None
        return ok(
            f"{len(rows)} knowledge base(s).",
            {"knowledge_bases": rows, "count": len(rows), "current_kb_id": current_id},
        )

    @enveloped
    def select_knowledge_base(self, kb_name: str) -> Envelope:
        record = self.find_kb(kb_name)
        self._set_current(record.id)
        documents, _ = self.service.kb_counts(record)
        return ok(
            f"Selected knowledge base '{record.name}'.",
            {"kb_id": record.id, "kb_name": record.name, "document_count": documents},
        )

    @enveloped
    def delete_knowledge_base(self, kb_name: str) -> Envelope:
        record = self.find_kb(kb_name)
        if record.id == self.current_kb_id:
            raise KBIsCurrent(
                f"Knowledge base '{record.name}' is the current one and cannot be deleted; "
                "select another knowledge base first.",
                details={"kb_name": record.name},
            )
        self.service.delete_kb(record)
        return ok(f"Deleted knowledge base '{record.name}' with all its documents.", {"kb_name": record.name})

    # -- documents -----------------------------------------------------------------------------
    @enveloped
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
    ) -> Envelope:
        """Import files into the current KB. ``display_names`` name uploads (the app passes the browser's names).
        ``executor``: ``local`` (this process) or ``ray`` (Ray Data on the cluster at ``executor_address``).
        ``cancel``: set it to stop the import (what was committed stays; the other files fail as cancelled)."""
        record = self.resolve_kb(kb_name)
        runner = self.service.import_executor(record, executor, executor_address)
        if isinstance(file_paths, str) or not isinstance(file_paths, Sequence) or not file_paths:
            raise InvalidArgument("file_paths must be a non-empty list of file paths.", details={"field": "file_paths"})
        if display_names is not None and len(display_names) != len(file_paths):
            raise InvalidArgument("display_names must name each file in file_paths.")
        reject_nul(list(file_paths), "file_paths")
        size = record.chunk_size if chunk_size is None else validate_chunk_size(chunk_size)
        results: list[dict[str, Any] | None] = [None] * len(file_paths)
        sources: list[ImportSource] = []
        positions: list[int] = []
        # Each file is opened once and copied into this private folder; everything after works on the
        # copy, so the path cannot be redirected (a folder swapped for a symlink) after its check.
        copies = self.service.import_staging(record)
        copied_names: set[str] = set()
        try:
            for index, raw in enumerate(file_paths):
                path = Path(str(raw)).expanduser()
                if not path.is_absolute():
                    path = Path.cwd() / path
                # One shared folder, and a folder of its own only for a repeated name: a folder per file cost
                # more than the import of a small file (removing thousands of folders is slow).
                repeated = path.name.casefold() in copied_names
                copied_names.add(path.name.casefold())
                try:
                    copy = self._copy_for_import(path, copies / (str(index) if repeated else "files"))
                except (UnusablePath, PermissionDenied) as exc:
                    reason = f"{raw} {exc.reason}." if isinstance(exc, UnusablePath) else exc.message
                    results[index] = {"file_path": str(raw), "error": reason}
                    continue
                name = display_names[index] if display_names is not None else path.name
                sources.append(
                    ImportSource(
                        path=copy, display_name=_safe_document_name(name), source=source, reported_path=str(raw)
                    )
                )
                positions.append(index)
            states = self.service.importer(record, runner).run(sources, size, progress, cancel)[0] if sources else []
        finally:
            shutil.rmtree(copies, ignore_errors=True)
        if sources:
            self.service.compact_quietly(record)
            for position, state in zip(positions, states, strict=True):
                if state.status == "ready":
                    results[position] = {
                        "file_path": state.file_path,
                        "doc_name": state.doc_name,
                        "chunk_count": state.chunks_total,
                    }
                else:
                    results[position] = {"file_path": state.file_path, "error": state.error or "import failed"}
        succeeded = [r for r in results if r is not None and "error" not in r]
        failed = [r for r in results if r is not None and "error" in r]
        data = {
            "total": len(file_paths),
            "success_count": len(succeeded),
            "failed_count": len(failed),
            "success_files": succeeded,
            "failed_files": failed,
        }
        if runner is not None:
            data["executor"] = runner.summary()  # what ran where (files and chunks per node)
        message = f"Imported {len(succeeded)} of {len(file_paths)} file(s) into '{record.name}'"
        message += f"; {len(failed)} failed." if failed else "."
        return envelope(message, data, error=None if succeeded else KBError(message, code="IMPORT_FAILED"))

    def _copy_for_import(self, path: Path, folder: Path) -> Path:
        """Open ``path`` (confined to the session's folders) and copy it to ``folder/<its name>``."""
        limit = (self.service._parse_limits or default_parse_limits()).max_file_bytes
        with open_input_file(path, self.allowed_dirs) as opened:
            if opened.stat.st_size > limit:
                raise UnusablePath(
                    path, f"is {opened.stat.st_size / 1e6:.1f} MB, over the import limit of {limit / 1e6:.1f} MB"
                )
            try:  # inside the KB's staging/, which is never recreated for a KB deleted meanwhile
                folder.parent.mkdir(exist_ok=True)
                folder.mkdir(exist_ok=True)
            except FileNotFoundError:
                raise KBNotFound("The knowledge base was deleted during the import.") from None
            copy = folder / path.name
            try:
                opened.copy_to(copy, limit)
            except OSError as exc:
                raise UnusablePath(
                    path, f"could not be read and copied for the import ({exc.strerror or exc})"
                ) from None
        return copy

    def _live_document(self, record: KnowledgeBaseRecord, doc_name: str) -> dict[str, Any]:
        if not isinstance(doc_name, str) or not doc_name.strip():
            raise InvalidArgument("doc_name must be a non-empty string.", details={"field": "doc_name"})
        documents = self.service.documents(record)
        key = doc_name.strip().casefold()
        matches = [d for d in documents if str(d["name"]).casefold() == key]
        if not matches:
            names = [d["name"] for d in documents]
            shown = ", ".join(repr(n) for n in names[:10]) + (" …" if len(names) > 10 else "")
            raise DocumentNotFound(
                f"Document {doc_name!r} is not in knowledge base '{record.name}'. Documents: {shown or 'none'}.",
                details={"doc_name": doc_name},
            )
        return matches[0]

    @enveloped
    def list_documents(self, kb_name: str | None = None) -> Envelope:
        record = self.resolve_kb(kb_name)
        if self.service.postgres is not None:
            rows = [_document_row(d) for d in self.service.documents(record)]
            return ok(f"{len(rows)} document(s) in '{record.name}'.", {"documents": rows, "count": len(rows)})
        reader = self.service.reader(record.id)
        documents = reader.snapshot().documents()
        rows = [_document_row(d) for d in documents.to_dict("records")]
        for flight in in_flight_documents(reader.store):
            rows.append(
                {
                    "id": None,
                    "name": flight.get("name") or Path(flight["file_path"]).name,
                    "file_path": flight["file_path"],
                    "file_type": Path(flight["file_path"]).suffix.lstrip(".").lower(),
                    "chunk_size": None,
                    "created_at": None,
                    "updated_at": None,
                    "status": flight["status"],
                    "chunk_count": 0,
                    "size_bytes": None,
                    "error": None,
                }
            )
        return ok(f"{len(rows)} document(s) in '{record.name}'.", {"documents": rows, "count": len(rows)})

    @enveloped
    def list_chunks(self, doc_name: str, kb_name: str | None = None) -> Envelope:
        """The chunks of one document in order, with chapter, page, tokens and character offsets."""
        record = self.resolve_kb(kb_name)
        document = self._live_document(record, doc_name)
        rows: list[dict[str, Any]] = []
        if self.service.postgres is not None:
            with self.service.postgres.snapshot(record.id) as snapshot:
                rows = [_chunk_json(chunk.to_row()) for _, chunk in snapshot.document_chunks(document["doc_id"])]
            segment = None
        else:
            segment = self.service.reader(record.id).snapshot().segment_by_id(document["segment_id"])
        if segment is not None:
            table = segment.chunks.filter(pc.equal(segment.chunks.column("doc_id"), document["doc_id"]))
            rows = sorted((_chunk_json(r) for r in table.to_pylist()), key=lambda r: r["chunk_index"])
        return ok(
            f"{len(rows)} chunk(s) in '{document['name']}'.",
            {"doc_id": document["doc_id"], "doc_name": document["name"], "chunks": rows, "count": len(rows)},
        )

    @enveloped
    def delete_document(self, doc_name: str, kb_name: str | None = None) -> Envelope:
        record = self.resolve_kb(kb_name)
        document = self._live_document(record, doc_name)
        if self.service.postgres is not None:
            from kb_core.store.postgres import StoreChange

            self.service.postgres.commit(record.id, StoreChange(delete=(document["doc_id"],)))
            return ok(f"Deleted document '{document['name']}' and its chunks.", {"doc_name": document["name"]})
        reader = self.service.reader(record.id)

        def plan(manifest: Any) -> Change:
            if manifest.is_deleted(document["segment_id"], document["doc_id"]) or not any(
                s.id == document["segment_id"] for s in manifest.segments
            ):
                raise DocumentNotFound(f"Document {doc_name!r} was already deleted.", details={"doc_name": doc_name})
            return Change(tombstones={document["segment_id"]: {document["doc_id"]: int(document["chunk_count"])}})

        reader.store.commit(plan)
        return ok(f"Deleted document '{document['name']}' and its chunks.", {"doc_name": document["name"]})

    @enveloped
    def update_document(
        self,
        doc_name: str,
        chunk_size: int,
        kb_name: str | None = None,
        progress: Callable[[ImportProgress], None] | None = None,
    ) -> Envelope:
        record = self.resolve_kb(kb_name)
        size = validate_chunk_size(chunk_size)
        document = self._live_document(record, doc_name)
        if document["status"] != "ready":
            raise InvalidArgument(f"Document {doc_name!r} failed to import; import it again instead of updating.")
        segment = self.service.reader(record.id).snapshot().segment_by_id(document["segment_id"])
        if segment is None:
            raise DocumentNotFound(f"Document {doc_name!r} was changed meanwhile; try again.")
        original = segment.original_path(document["original"])
        source = ImportSource(
            path=original,
            display_name=document["name"],
            source=document["source"],
            reported_path=document["file_path"],
            doc_id=document["doc_id"],
            created_at=document["created_at"],
            replaces=(document["segment_id"], document["doc_id"]),
        )
        states, _ = self.service.importer(record).run([source], size, progress)
        state = states[0]
        if state.status != "ready":
            raise KBError(f"Updating {doc_name!r} failed: {state.error}", code="UPDATE_FAILED")
        return ok(
            f"Re-chunked '{document['name']}' into {state.chunks_total} chunk(s) of at most {size} tokens.",
            {
                "doc_id": document["doc_id"],
                "doc_name": document["name"],
                "chunk_count": state.chunks_total,
                "chunk_size": size,
            },
        )

    # -- search --------------------------------------------------------------------------------
    def _search_settings(self, record: KnowledgeBaseRecord, overrides: dict[str, Any]) -> SearchSettings:
        """The KB's saved defaults overridden by the call's settings. One weight given alone takes the other
        as its complement (vector 0.2 means keyword 0.8), so a single slider means what it shows."""
        saved = {k: v for k, v in record.search_settings.items() if k in SearchSettings.SAVED_FIELDS}
        given = {k: v for k, v in overrides.items() if v is not None}
        if "mode" in given and isinstance(given["mode"], str):
            given["mode"] = given["mode"].strip().lower()
        for name, other in (("vector_weight", "keyword_weight"), ("keyword_weight", "vector_weight")):
            value = given.get(name)
            if other not in given and isinstance(value, int | float) and not isinstance(value, bool):
                given[other] = round(1.0 - float(value), 12)
        return SearchSettings(**{**saved, **given}).validated()

    def run_search(
        self,
        query: str,
        *,
        kb_names: Sequence[str] | None = None,
        kb_ids: Sequence[str] | None = None,
        filters: SearchFilters | None = None,
        skipped: list[dict[str, str]] | None = None,
        **overrides: Any,
    ) -> SearchOutcome:
        """Search the current KB (or the named ones): hits, warnings, the settings and the weights used.

        Each KB searches with its own saved defaults under the call's explicit settings; hit scores share one
        [0, 1] scale, so hits of several KBs are merged by score. With ``skipped`` (a list to fill), a KB whose
        query embedding fails (endpoint down, key refused) is left out with a warning and appended as
        ``{kb_name, code, message}``; if every KB fails, the first failure is raised with all of them in
        ``details["failed_knowledge_bases"]``.
        """
        if not isinstance(query, str) or not query.strip():
            raise InvalidArgument("query must be a non-empty string.", details={"field": "query"})
        if kb_ids:
            records = [r for r in self.visible_kbs() if r.id in set(kb_ids)]
        elif kb_names:
            records = [self.find_kb(name) for name in kb_names]
        else:
            records = [self.current_kb()]
        first_settings: SearchSettings | None = None
        outcome: SearchOutcome | None = None
        hits: list[SearchHit] = []
        warnings: list[str] = []
        failures: list[EmbeddingError] = []
        for record in records:
            settings = self._search_settings(record, overrides)
            try:
                ranked = self.service.search_kb(record, query, settings, filters or SearchFilters())
            except EmbeddingError as exc:
                if skipped is None:
                    raise
                failures.append(exc)
                skipped.append({"kb_name": record.name, "code": exc.code, "message": exc.message})
                note = f"Knowledge base '{record.name}' was not searched: {exc.message} ({exc.code})."
                ranked = RankedHits([], [note])
            if outcome is None or (outcome.weights_used is None and ranked.weights_used is not None):
                first_settings = settings
                outcome = SearchOutcome([], [], settings, ranked.weights_used, ranked.auto_weights)
            hits.extend(ranked.hits)
            warnings.extend(n for n in ranked.warnings if n not in warnings)
        if failures and len(failures) == len(records):
            failures[0].details = {**failures[0].details, "failed_knowledge_bases": list(skipped or ())}
            raise failures[0]
        if outcome is None or first_settings is None:
            return SearchOutcome([], [], self._search_settings(self.current_kb(), overrides))
        if len(records) > 1:
            hits.sort(key=lambda h: -h.score)
            hits = hits[: first_settings.top_k]
        outcome.hits, outcome.warnings = hits, warnings
        return outcome

    @enveloped
    def search(
        self,
        query: str,
        top_k: int | None = None,
        mode: str | None = None,
        vector_weight: float | None = None,
        keyword_weight: float | None = None,
        jaccard_weight: float | None = None,
        fusion: str | None = None,
        doc_names: Sequence[str] | None = None,
        file_types: Sequence[str] | None = None,
        kb_names: Sequence[str] | None = None,
        explain: bool = True,
        expand_graph: bool = False,
        weighting: str | None = None,
        language_guard: bool | None = None,
    ) -> Envelope:
        """Hybrid (default), semantic or keyword search; every hit carries its score breakdown.

        Scores lie in [0, 1] (see :mod:`kb_core.fusion`). ``weighting="auto"`` scales the weights by each
        signal's quality for the query; ``language_guard=False`` keeps the vector weight for a query in a language
        the embedding model does not cover. ``data.weights`` holds the requested weights, the weights used and
        those ``weighting="auto"`` would use. ``expand_graph`` follows knowledge-bundle edges: hits on bundle
        documents are followed by their related nodes' first chunks, marked ``expanded`` with
        ``breakdown.graph_expansion``.
        """
        outcome = self.run_search(
            query,
            kb_names=kb_names,
            filters=SearchFilters(tuple(doc_names or ()), tuple(file_types or ())),
            top_k=top_k,
            mode=mode,
            vector_weight=vector_weight,
            keyword_weight=keyword_weight,
            jaccard_weight=jaccard_weight,
            fusion=fusion,
            weighting=weighting,
            language_guard=language_guard,
        )
        settings = outcome.settings
        chunks = [hit.to_json(explain) for hit in outcome.hits]
        if expand_graph:
            chunks = self.expand_hits(chunks)
        message = f"Found {len(chunks)} chunk(s) ({settings.mode} search"
        if settings.mode == "hybrid" and outcome.weights_used is not None:
            message += (
                f", weights used: vector {outcome.weights_used.vector:.2f} / keyword "
                f"{outcome.weights_used.keyword:.2f}"
            )
        message += ")."
        if outcome.warnings:
            message += " " + " ".join(outcome.warnings)
        return ok(
            message,
            {
                "chunks": chunks,
                "count": len(chunks),
                "settings": asdict(settings),
                "weights": outcome.weights_json(),
                "warnings": outcome.warnings,
            },
        )

    @enveloped
    def explain_search(
        self,
        query: str,
        chunk_id: str,
        mode: str | None = None,
        vector_weight: float | None = None,
        keyword_weight: float | None = None,
        jaccard_weight: float | None = None,
        fusion: str | None = None,
        weighting: str | None = None,
        language_guard: bool | None = None,
    ) -> Envelope:
        """Why chunk ``chunk_id`` ranks where it does for ``query``: its place among the hits (searched up to
        1,000 deep with the KB's settings under the given ones), its full score breakdown, the hit just above it,
        and each step in words. A chunk that is not among the hits (too low, or dropped as a near-duplicate of a
        better-ranked chunk) is explained from its exact scores."""
        if not isinstance(chunk_id, str) or not chunk_id.strip():
            raise InvalidArgument("chunk_id must be a non-empty chunk id (chk_...).", details={"field": "chunk_id"})
        if not isinstance(query, str) or not query.strip():
            raise InvalidArgument("query must be a non-empty string.", details={"field": "query"})
        chunk_id = chunk_id.strip()
        record = next((r for r in self.visible_kbs() if self.service.has_chunk(r, chunk_id)), None)
        if record is None:
            raise ItemNotFound(f"No live chunk with id {chunk_id!r} exists.", details={"id": chunk_id})
        overrides = {
            "mode": mode,
            "vector_weight": vector_weight,
            "keyword_weight": keyword_weight,
            "jaccard_weight": jaccard_weight,
            "fusion": fusion,
            "weighting": weighting,
            "language_guard": language_guard,
        }
        settings = self._search_settings(record, {**overrides, "top_k": 1000})
        ranked = self.service.search_kb(record, query, settings, SearchFilters(), explain_chunk_ids=[chunk_id])
        explained = ranked.explained_by_id.get(chunk_id)
        if explained is None:  # deleted between the lookup and the search
            raise ItemNotFound(f"No live chunk with id {chunk_id!r} exists.", details={"id": chunk_id})
        position = next((i for i, hit in enumerate(ranked.hits, start=1) if hit.id == chunk_id), None)
        breakdown = asdict(explained.breakdown)
        breakdown["notes"] = list(breakdown["notes"])
        above = ranked.hits[position - 2] if position and position > 1 else None
        if position is None:
            above = next((h for h in ranked.hits if h.score < explained.breakdown.final_score), None)
        lines = _explanation_lines(settings.mode, explained.breakdown, explained.matched_terms)
        if position is not None:
            lines.insert(0, f"Ranked {position} of {len(ranked.hits)} hits in '{record.name}'.")
        else:
            lines.insert(
                0,
                f"Not among the hits of '{record.name}': {explained.position} of {explained.candidates} scored "
                "candidates before near-duplicate removal"
                + (
                    "; a better-ranked chunk with nearly the same text was kept instead."
                    if explained.position <= len(ranked.hits) + 10
                    else "."
                ),
            )
        if position is not None and above is not None:
            lines.append(
                f"The hit above it ({above.id}, {above.doc_name}) scores {above.score:.4f}, "
                f"{above.score - explained.breakdown.final_score:+.4f} more."
            )
        data = {
            "chunk_id": chunk_id,
            "kb_name": record.name,
            "query": query,
            "rank": position,
            "hits": len(ranked.hits),
            "candidate_position": explained.position,
            "candidates": explained.candidates,
            "score": explained.breakdown.final_score,
            "matched_terms": explained.matched_terms,
            "breakdown": breakdown,
            "above": None if above is None else {"id": above.id, "doc_name": above.doc_name, "score": above.score},
            "settings": asdict(settings),
            "explanation": lines,
        }
        return ok("\n".join(lines), data)

    @enveloped
    def save_search_settings(self, kb_name: str | None = None, **settings: Any) -> Envelope:
        """Persist search defaults for the KB; searches without explicit settings use them."""
        record = self.resolve_kb(kb_name)
        unknown = set(settings) - set(SearchSettings.SAVED_FIELDS)
        if unknown:
            raise InvalidArgument(
                f"Unknown search setting(s) {sorted(unknown)}; allowed: {', '.join(SearchSettings.SAVED_FIELDS)}."
            )
        merged = {**record.search_settings, **{k: v for k, v in settings.items() if v is not None}}
        validated = SearchSettings(**merged).validated()
        saved = {k: getattr(validated, k) for k in SearchSettings.SAVED_FIELDS if k in merged}
        self.service.registry.update_search_settings(record.id, saved)
        return ok(f"Saved search defaults for '{record.name}'.", {"kb_name": record.name, "search_settings": saved})

    @enveloped
    def rag_search(self, keywords: Sequence[str], top_k: int = 5, timeout: float = 3.0) -> Envelope:
        """Multi-keyword search; chunks related to all keywords rank first; degrades on timeout or failure."""
        if isinstance(keywords, str) or not isinstance(keywords, Sequence) or not keywords:
            raise InvalidArgument("keywords must be a list of at least one keyword.", details={"field": "keywords"})
        cleaned = [k.strip() for k in keywords if isinstance(k, str) and k.strip()]
        if len(cleaned) != len(keywords):
            raise InvalidArgument("Every keyword must be a non-empty string.", details={"field": "keywords"})
        validate_int_range(top_k, "top_k", 1, 10)
        validate_float_range(timeout, "timeout", 0.1, 10.0)
        record = self.current_kb()
        future = self.service.background.submit(self._rag_rank, record, cleaned, top_k)
        try:
            chunks = future.result(timeout=timeout)
        except FuturesTimeout:
            reason = f"the search took longer than the {timeout:g} s timeout"
        except KBError as exc:
            reason = f"the search failed: {exc.message} ({exc.code})"
        except Exception:
            logger.exception("rag_search failed unexpectedly")
            reason = "the search failed because of an internal error (see the server log)"
        else:
            data = {"chunks": chunks, "total_results": len(chunks), "degraded": False}
            return envelope(f"Found {len(chunks)} chunk(s).", data, **data)
        # The contract: a slow or failing search never fails the caller; it returns no chunks, marked degraded.
        logger.warning("rag_search degraded to no results: %s", reason)
        data = {"chunks": [], "total_results": 0, "degraded": True, "degraded_reason": reason}
        return envelope(f"Returned no results (degraded): {reason}.", data, **data)

    def _rag_rank(self, record: KnowledgeBaseRecord, keywords: list[str], top_k: int) -> list[dict[str, Any]]:
        settings = self._search_settings(record, {"top_k": min(100, top_k * 4), "mode": "hybrid"})
        hits = self.service.search_kb(record, " ".join(keywords), settings, SearchFilters()).hits
        analyzer = self.service.analyzer
        keyword_terms = [frozenset(analyzer.tokens(k)) or frozenset({k.casefold()}) for k in keywords]

        def coverage(hit: SearchHit) -> int:
            terms = frozenset(analyzer.tokens(hit.content))
            text = hit.content.casefold()
            return sum(1 for k, t in zip(keywords, keyword_terms, strict=True) if t <= terms or k.casefold() in text)

        ranked = sorted(hits, key=lambda h: (-coverage(h), -h.score))[:top_k]
        return [
            {
                "chunk_text": hit.content,
                "metadata": {"source": hit.doc_name, "chapter": hit.chapter, "page": hit.page},
                "score": hit.score,
                "matched_keywords": coverage(hit),
                "id": hit.id,
            }
            for hit in ranked
        ]

    @enveloped
    def get_item(self, item_id: str, neighbours: int = 1, kb_names: Sequence[str] | None = None) -> Envelope:
        """A document's full parsed text (``doc_…`` id) or a chunk with its neighbours (``chk_…`` id)."""
        if not isinstance(item_id, str) or not item_id.strip():
            raise InvalidArgument("id must be a non-empty string.", details={"field": "id"})
        if item_id.strip().startswith("node_"):
            from kb_core import bundles

            return bundles.get_node(self, item_id.strip(), kb_names)
        records = [self.find_kb(n) for n in kb_names] if kb_names else self.visible_kbs()
        item = self.service.find_item(item_id.strip(), records, neighbours)
        return ok(f"Found {item['type']} {item_id}.", item)

    @enveloped
    def get_document_info(self, knowledge_ids: Sequence[str], kb_names: Sequence[str] | None = None) -> Envelope:
        """Metadata of 1-10 documents by id, looked up concurrently; per-id failures in ``errors``."""
        if isinstance(knowledge_ids, str) or not isinstance(knowledge_ids, Sequence):
            raise InvalidArgument("knowledge_ids must be a list of document ids.", details={"field": "knowledge_ids"})
        if len(knowledge_ids) == 0:
            raise InvalidArgument(
                "knowledge_ids is empty: give at least one document id.", details={"field": "knowledge_ids"}
            )
        if len(knowledge_ids) > 10:
            raise InvalidArgument(
                f"knowledge_ids has {len(knowledge_ids)} ids; at most 10 are allowed per call.",
                details={"field": "knowledge_ids"},
            )
        records = [self.find_kb(n) for n in kb_names] if kb_names else self.visible_kbs()
        ids = list(dict.fromkeys(str(i) for i in knowledge_ids))
        results = list(self.service.background.map(lambda i: self.service.document_info(i, records), ids))
        documents = [r for r in results if "parse_status" in r]
        errors = [r for r in results if "parse_status" not in r]
        lines = []
        for doc in documents:
            lines += [
                "",
                f"📄 {doc['name']}",
                f"   ID: {doc['id']}",
                f"   Knowledge base: {doc['kb_name']}",
                f"   Original file: {doc['file_name'] or '(none: not imported from a file)'}",
                f"   Type: {doc['file_type']}",
                f"   Size: {doc['size_human']} ({doc['size_bytes']} bytes)",
                f"   Source: {doc['source_label']}",
                f"   Status: {doc['status_text']}",
                f"   Chunks: {doc['chunk_count']}",
                f"   Created: {doc['created_at']}",
                f"   Updated: {doc['updated_at']}",
            ]
        if errors:
            lines += ["", "Not found:"] + [f"- {e['id']}: {e['error']}" for e in errors]
        text = f"Document info for {len(documents)} of {len(ids)} id(s):\n" + "\n".join(lines)
        return envelope(
            text,
            {"documents": documents, "total_docs": len(documents), "requested": len(ids), "errors": errors},
            error=None if documents else DocumentNotFound(text, details={"ids": ids}),
        )

    # -- export and import of the database -----------------------------------------------------
    def export_database(self, export_path: str, kb_names: Sequence[str] | None = None) -> Envelope:
        """Write every visible KB (or the named ones) into one portable file; see :mod:`kb_core.transfer`."""
        from kb_core import transfer

        return transfer.export_database(self, export_path, kb_names)

    def import_database(self, source_db_path: str) -> Envelope:
        """Validate an export file completely, then merge its KBs into the home (all or nothing)."""
        from kb_core import transfer

        return transfer.import_database(self, source_db_path)

    # -- knowledge bundles (typed nodes and edges; see kb_core.bundles) -------------------------
    def get_knowledge_schema(self, kb_name: str | None = None) -> Envelope:
        """The JSON Schema a bundle must satisfy for the KB's ontology, and an example bundle in YAML."""
        from kb_core import bundles

        return bundles.get_knowledge_schema(self, kb_name)

    def import_knowledge_bundle(
        self, temp_file_path: str, kb_name: str | None = None, delete_file: bool = True
    ) -> Envelope:
        """Validate a YAML bundle as a whole, then apply it in one transaction (see kb_core.bundles)."""
        from kb_core import bundles

        return bundles.import_knowledge_bundle(self, temp_file_path, kb_name, delete_file=delete_file)

    def get_ontology(self, kb_name: str | None = None) -> Envelope:
        from kb_core import bundles

        return bundles.get_ontology(self, kb_name)

    def set_ontology(self, source: Any, kb_name: str | None = None) -> Envelope:
        from kb_core import bundles

        return bundles.set_ontology(self, source, kb_name)

    def graph_view(self, kb_name: str | None = None, limit: int = 500) -> Envelope:
        from kb_core import bundles

        return bundles.graph_view(self, kb_name, limit)

    def expand_hits(self, hits: Sequence[dict[str, Any]], max_related: int = 5) -> list[dict[str, Any]]:
        """Search hits on bundle documents followed by their related nodes (marked ``expanded``)."""
        from kb_core import bundles

        return bundles.expand_hits(self, hits, max_related)

    # -- kept evaluation runs ------------------------------------------------------------------
    @enveloped
    def list_evaluation_runs(self) -> Envelope:
        """The evaluation runs kept in this home, newest first (see :mod:`kb_core.evaluation_runs`)."""
        runs = self.service.evaluation_runs.list()
        return ok(f"{len(runs)} evaluation run(s) kept.", {"runs": runs, "count": len(runs)})

    @enveloped
    def compare_evaluation_runs(
        self,
        run_a: str,
        run_b: str,
        setting_a: str | None = None,
        setting_b: str | None = None,
        metric: str = "ndcg@10",
        top: int = 10,
    ) -> Envelope:
        """Setting ``setting_a`` of run ``run_a`` against ``setting_b`` of ``run_b``, query by query."""
        from kb_core.evaluation_runs import compare_runs

        store = self.service.evaluation_runs
        comparison = compare_runs(
            store.load(run_a), store.load(run_b), setting_a=setting_a, setting_b=setting_b, metric=metric
        )
        data = comparison.to_json(validate_int_range(top, "top", 1, 1000))
        message = (
            f"{comparison.setting_b} ({comparison.run_b}) against {comparison.setting_a} ({comparison.run_a}) on "
            f"{len(comparison.per_query)} queries: {comparison.wins} wins, {comparison.losses} losses, "
            f"{comparison.ties} ties; mean {metric} {comparison.mean_a:.4f} → {comparison.mean_b:.4f} "
            f"({comparison.mean_delta:+.4f})."
        )
        if comparison.warnings:
            message += " " + " ".join(comparison.warnings)
        return ok(message, data)

    @enveloped
    def delete_evaluation_run(self, run_id: str) -> Envelope:
        self.service.evaluation_runs.delete(run_id)
        return ok(f"Deleted evaluation run {run_id}.", {"run_id": run_id})

    # -- maintenance ---------------------------------------------------------------------------
    @enveloped
    def compact(self, kb_name: str | None = None) -> Envelope:
        """Merge the KB's segments into one and drop the rows of deleted documents."""
        record = self.resolve_kb(kb_name)
        stats = self.service.compact(record, everything=True)
        return ok(f"Compacted '{record.name}': merged {stats['segments_merged']} segment(s).", stats)

    @enveloped
    def verify(self, repair: bool = False) -> Envelope:
        """Check the whole home for consistency (what the crash tests assert).

        With ``repair``, first fix what can be fixed without guessing: a bundle import interrupted between its
        index and graph commits is rolled back to the committed graph (the graph is the truth: the bundle was
        never committed, so it is imported again), and staging folders of killed import-db runs are removed.
        """
        from kb_core.store.verify import bundle_index_problem, verify_home

        postgres = self.service.postgres
        if postgres is not None:  # statistics, postings and rows recomputed and compared, KB by KB
            problems = [f"{r.name}: {p}" for r in postgres.knowledge_bases() for p in postgres.verify(r.id)]
            message = f"{len(problems)} problem(s) found:\n" + "\n".join(f"- {p}" for p in problems)
            return envelope(
                message if problems else f"The store {postgres.display} is consistent.",
                {"problems": problems, "repaired": []},
                success=not problems,
            )
        repaired: list[str] = []
        if repair:
            from kb_core.bundles import repair_index

            for record in self.service.home.knowledge_bases():
                if bundle_index_problem(self.service.kb_store(record.id)) is None:
                    continue
                result = repair_index(self, record.name)
                if not result["success"]:
                    raise KBError(f"Repairing '{record.name}' failed: {result['message']}", code="REPAIR_FAILED")
                stats = result["data"]
                repaired.append(
                    f"{record.name}: rolled the search index back to the committed knowledge graph (removed "
                    f"{stats['documents_removed']} bundle document(s), re-indexed {stats['documents_indexed']}); "
                    "import the interrupted bundle again"
                )
            for folder in self.service.home.abandoned_transfer_staging(remove=True):
                repaired.append(f"removed {folder.name}, the staging folder of an import-db that did not finish")
        problems = verify_home(self.service.home)
        message = f"Repaired {len(repaired)} problem(s). " if repaired else ""
        if problems:
            message += f"{len(problems)} problem(s) found:\n" + "\n".join(f"- {p}" for p in problems)
        else:
            message += "The home is consistent."
        return envelope(message, {"problems": problems, "repaired": repaired}, success=not problems)


def _explanation_lines(mode: str, b: ScoreBreakdown, matched_terms: Sequence[str]) -> list[str]:
    """The steps of a score in words; every figure is in the breakdown."""
    lines = [f"Score {b.final_score:.4f} on a 0–1 scale ({mode} search, {b.fusion_method} fusion)."]
    cosine = "none" if b.vector_score is None else f"{b.vector_score:.4f}"
    bm25 = "none" if b.keyword_score is None else f"{b.keyword_score:.3f}"
    if b.normalization == "reciprocal rank":
        lines.append(f"Vector: rank {b.vector_rank or '-'} → {b.vector_normalized:.4f} (reciprocal rank, k 60).")
        lines.append(f"Keyword: rank {b.keyword_rank or '-'} → {b.keyword_normalized:.4f}.")
    else:
        lines.append(
            f"Vector: cosine {cosine} → {b.vector_normalized:.4f} (negative cosines count as 0); "
            f"rank {b.vector_rank or 'not retrieved'} in the vector list."
        )
        lines.append(
            f"Keyword: BM25 {bm25}; the reference match for this query (each term once, average length) scores "
            f"{b.keyword_reference:.3f}, so 1 − exp(−{bm25}/{b.keyword_reference:.3f}) = {b.keyword_normalized:.4f}; "
            f"rank {b.keyword_rank or 'not retrieved'} in the keyword list; matched terms: "
            f"{', '.join(matched_terms) or 'none'}."
        )
    lines.append(
        f"Weights used: vector {b.vector_weight:.2f}, keyword {b.keyword_weight:.2f} ({b.weighting}; asked "
        f"{b.requested_vector_weight:.2f} / {b.requested_keyword_weight:.2f}): "
        f"{b.vector_weight:.2f} × {b.vector_normalized:.4f} + {b.keyword_weight:.2f} × {b.keyword_normalized:.4f} "
        f"= {b.fused_score:.4f}."
    )
    if b.jaccard_weight:
        lines.append(
            f"Jaccard rerank: (1 − {b.jaccard_weight:.2f}) × {b.fused_score:.4f} + {b.jaccard_weight:.2f} × "
            f"{b.jaccard:.4f} = {b.final_score:.4f}."
        )
    lines += [f"Note: {note}" for note in b.notes]
    return lines


def _safe_document_name(name: str) -> str:
    """A document name from a file name: no folders, no control characters, not empty."""
    import unicodedata

    base = str(name).replace("\\", "/").rsplit("/", 1)[-1]
    base = "".join(c for c in unicodedata.normalize("NFC", base) if unicodedata.category(c) not in ("Cc", "Cf"))
    base = base.strip().lstrip(".") or "document"
    return base[:200]


def _document_row(document: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": document["doc_id"],
        "name": document["name"],
        "file_path": document["file_path"],
        "file_type": document["file_type"],
        "chunk_size": int(document["chunk_size"]),
        "created_at": document["created_at"],
        "updated_at": document["updated_at"],
        "status": document["status"],
        "chunk_count": int(document["chunk_count"]),
        "size_bytes": int(document["size_bytes"]),
        "source": document["source"],
        "error": document["error"] if isinstance(document["error"], str) else None,
    }


def _original_file_name(document: dict[str, Any]) -> str | None:
    """The name the file had when it was imported (clash renaming and re-chunking keep it); None for bundles."""
    if document["source"] == "bundle":
        return None
    # file_path is what the importer was given (an upload's temporary path ends in the browser's file name);
    # the catalog's file_name is the kept copy's after update_document.
    path, kept = document.get("file_path"), document.get("file_name")
    if isinstance(path, str) and PurePath(path).name:
        return PurePath(path).name
    return kept if isinstance(kept, str) else None


def _source_label(source: str, file_path: str | None) -> str:
    """A readable source, as the seed's formatSource gives it."""
    if source == "upload":
        return "File upload"
    if source == "bundle":
        where = (file_path or "").removeprefix("bundle:")
        return f"Knowledge bundle: {where}" if where else "Knowledge bundle"
    return f"Local file: {file_path}"


def _status_text(status: str, error: str | None) -> str:
    """A readable parse status, as the seed's formatParseStatus gives it."""
    if status == "ready":
        return "✅ Completed"
    if status == "failed":
        return f"❌ Failed: {error}" if error else "❌ Failed"
    return f"⏳ In progress ({status})"


def _chunk_json(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": row["chunk_id"],
        "doc_id": row["doc_id"],
        "chunk_index": row["chunk_index"],
        "content": row["content"],
        "tokens": row["tokens"],
        "chapter": row["chapter"],
        "page": row["page"],
        "start_char": row["start_char"],
        "end_char": row["end_char"],
    }


def human_size(size: int) -> str:
    """1024-based: 1536 → '1.5 KB'."""
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TB"


def open_service(home: str | Path | None = None) -> KnowledgeBaseService:
    return KnowledgeBaseService(home)
