"""The service API: every front end (CLI, app, MCP server, notebooks) calls only this.

``KnowledgeBaseService`` owns the home, the loaded models and the index caches; it is opened once
per process. A :class:`Session` carries the "current" knowledge base: the CLI keeps one per home
(persisted), each MCP session and each browser session has its own (in memory). Every public
session method returns the envelope ``{success, message, data}`` (see :mod:`kb_core.envelope`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kb_core.config import resolve_home
from kb_core.envelope import Envelope, enveloped, ok
from kb_core.errors import (
    DocumentNotFound,
    InvalidArgument,
    KBError,
    KBExists,
    KBIsCurrent,
    KBNotFound,
    NoCurrentKB,
    StoreError,
)
from kb_core.importer import Importer, ImportProgress, ImportSource, in_flight_documents
from kb_core.reader import KBReader
from kb_core.store import Change, Home, KBStore, KnowledgeBaseRecord, new_id, utc_now
from kb_core.validation import (
    name_key,
    validate_chunk_size,
    validate_endpoint,
    validate_kb_name,
)

logger = logging.getLogger(__name__)


def default_parse_limits() -> Any:
    # parsing is imported lazily: it pulls in lxml and python-docx
    from kb_core.parsing import ParseLimits

    return ParseLimits()


DEFAULT_EMBEDDING_MODEL = "all-MiniLM-L6-v2"
CLI_SESSION = "cli"


class KnowledgeBaseService:
    """Opened once per process; thread-safe; shares its home safely with other processes."""

    def __init__(
        self,
        home: str | Path | None = None,
        *,
        embedder_factory: Callable[[KnowledgeBaseRecord, str | None], Any] | None = None,
        parse_limits: Any = None,
    ) -> None:
        self.home = Home(resolve_home(home))
        self._embedder_factory = embedder_factory
        self._lock = threading.RLock()
        self._readers: dict[str, KBReader] = {}
        self._embedders: dict[str, Any] = {}
        self._parse_limits = parse_limits

    # -- sessions ------------------------------------------------------------------------------
    def session(self, persistent_name: str | None = None) -> Session:
        """A new session. With ``persistent_name`` (the CLI uses "cli") the current KB is kept in the home."""
        return Session(self, persistent_name)

    # -- knowledge bases -----------------------------------------------------------------------
    def find_kb(self, kb_name: str) -> KnowledgeBaseRecord:
        if not isinstance(kb_name, str) or not kb_name.strip():
            raise InvalidArgument("kb_name must be a non-empty string.", details={"field": "kb_name"})
        key = name_key(kb_name)
        for record in self.home.knowledge_bases():
            if name_key(record.name) == key:
                return record
        names = [r.name for r in self.home.knowledge_bases()]
        listed = ", ".join(repr(n) for n in names[:20]) if names else "none yet"
        raise KBNotFound(
            f"Knowledge base {kb_name!r} does not exist. Existing knowledge bases: {listed}.",
            details={"kb_name": kb_name},
        )

    def kb_store(self, kb_id: str) -> KBStore:
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

    def embedder(self, record: KnowledgeBaseRecord) -> Any:
        """The KB's embedder, loaded once per process, behind the shared embedding cache."""
        key = f"{record.embedding_model}|{record.embedding_endpoint or ''}|{record.id if record.has_api_key else ''}"
        with self._lock:
            embedder = self._embedders.get(key)
            if embedder is None:
                api_key = self.home.api_key(record.id) if record.has_api_key else None
                if self._embedder_factory is not None:
                    embedder = self._embedder_factory(record, api_key)
                else:
                    from kb_core.embedding import CachedEmbedder, EmbeddingCache, get_embedder

                    embedder = CachedEmbedder(
                        get_embedder(record.embedding_model, record.embedding_endpoint, api_key),
                        EmbeddingCache(self.home.embedding_cache_path),
                    )
                self._embedders[key] = embedder
            return embedder

    def importer(self, record: KnowledgeBaseRecord) -> Importer:
        from kb_core.analysis import default_analyzer
        from kb_core.chunking import chunk_document
        from kb_core.parsing import parse_file

        embedder = self.embedder(record)
        reader = self.reader(record.id)
        limits = self._parse_limits or default_parse_limits()

        def live_documents(manifest: Any) -> list[dict[str, Any]]:
            snapshot = reader.snapshot()
            if snapshot.version != manifest.version:
                raise StoreError("The knowledge base changed while committing; try again.")
            return snapshot.documents().to_dict("records")

        return Importer(
            self.kb_store(record.id),
            embedder,
            live_documents,
            analyzer=default_analyzer(),
            parse=lambda path: parse_file(path, limits),
            chunker=lambda parsed, size: chunk_document(parsed, embedder.tokenizer, size),
        )

    def kb_counts(self, record: KnowledgeBaseRecord) -> tuple[int, int]:
        try:
            manifest = self.kb_store(record.id).manifest()
        except KBNotFound:
            return 0, 0
        return manifest.document_count, manifest.chunk_count


class Session:
    """The per-user view of the service: which KB is current, plus every operation as an envelope."""

    def __init__(self, service: KnowledgeBaseService, persistent_name: str | None = None) -> None:
        self.service = service
        self.persistent_name = persistent_name
        self._current_kb_id: str | None = None

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
            return self.service.home.get(kb_id)
        except KBNotFound as exc:
            raise NoCurrentKB(
                "The selected knowledge base no longer exists (deleted elsewhere); select another one."
            ) from exc

    def resolve_kb(self, kb_name: str | None) -> KnowledgeBaseRecord:
        return self.service.find_kb(kb_name) if kb_name else self.current_kb()

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
        for record in self.service.home.knowledge_bases():
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
        record = self.service.find_kb(kb_name)
        self._set_current(record.id)
        documents, _ = self.service.kb_counts(record)
        return ok(
            f"Selected knowledge base '{record.name}'.",
            {"kb_id": record.id, "kb_name": record.name, "document_count": documents},
        )

    @enveloped
    def delete_knowledge_base(self, kb_name: str) -> Envelope:
        record = self.service.find_kb(kb_name)
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
    ) -> Envelope:
        """Import files into the current KB. ``display_names`` name uploads (the app passes the browser's names)."""
        record = self.resolve_kb(kb_name)
        if isinstance(file_paths, str) or not isinstance(file_paths, Sequence) or not file_paths:
            raise InvalidArgument("file_paths must be a non-empty list of file paths.", details={"field": "file_paths"})
        if display_names is not None and len(display_names) != len(file_paths):
            raise InvalidArgument("display_names must name each file in file_paths.")
        size = record.chunk_size if chunk_size is None else validate_chunk_size(chunk_size)
        results: list[dict[str, Any] | None] = [None] * len(file_paths)
        sources: list[ImportSource] = []
        positions: list[int] = []
        for index, raw in enumerate(file_paths):
            path = Path(str(raw)).expanduser()
            if not path.is_absolute():
                path = Path.cwd() / path
            if not path.is_file():
                reason = "is a folder, not a file" if path.is_dir() else "does not exist"
                results[index] = {"file_path": str(raw), "error": f"{raw} {reason}."}
                continue
            name = display_names[index] if display_names is not None else path.name
            sources.append(
                ImportSource(path=path, display_name=_safe_document_name(name), source=source, reported_path=str(raw))
            )
            positions.append(index)
        if sources:
            states, _ = self.service.importer(record).run(sources, size, progress)
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
        message = f"Imported {len(succeeded)} of {len(file_paths)} file(s) into '{record.name}'"
        message += f"; {len(failed)} failed." if failed else "."
        envelope = ok(message, data)
        envelope["success"] = bool(succeeded)
        if not succeeded:
            envelope["error"] = {"code": "IMPORT_FAILED", "details": {}}
        return envelope

    def _live_document(self, record: KnowledgeBaseRecord, doc_name: str) -> dict[str, Any]:
        if not isinstance(doc_name, str) or not doc_name.strip():
            raise InvalidArgument("doc_name must be a non-empty string.", details={"field": "doc_name"})
        documents = self.service.reader(record.id).snapshot().documents()
        key = doc_name.strip().casefold()
        matches = documents[documents["name"].str.casefold() == key]
        if matches.empty:
            names = documents["name"].tolist()
            shown = ", ".join(repr(n) for n in names[:10]) + (" …" if len(names) > 10 else "")
            raise DocumentNotFound(
                f"Document {doc_name!r} is not in knowledge base '{record.name}'. Documents: {shown or 'none'}.",
                details={"doc_name": doc_name},
            )
        return matches.iloc[0].to_dict()

    @enveloped
    def list_documents(self, kb_name: str | None = None) -> Envelope:
        record = self.resolve_kb(kb_name)
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
    def delete_document(self, doc_name: str, kb_name: str | None = None) -> Envelope:
        record = self.resolve_kb(kb_name)
        reader = self.service.reader(record.id)
        document = self._live_document(record, doc_name)

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
        "error": document["error"],
    }


def open_service(home: str | Path | None = None) -> KnowledgeBaseService:
    return KnowledgeBaseService(home)


def _names(values: Sequence[str]) -> str:
    return ", ".join(repr(v) for v in values)
