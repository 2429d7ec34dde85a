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
from kb_core.errors import InvalidArgument, KBExists, KBIsCurrent, KBNotFound, NoCurrentKB
from kb_core.store import Home, KBStore, KnowledgeBaseRecord, new_id, utc_now
from kb_core.validation import (
    name_key,
    validate_chunk_size,
    validate_endpoint,
    validate_kb_name,
)

logger = logging.getLogger(__name__)

DEFAULT_EMBEDDING_MODEL = "all-MiniLM-L6-v2"
CLI_SESSION = "cli"


class KnowledgeBaseService:
    """Opened once per process; thread-safe; shares its home safely with other processes."""

    def __init__(
        self,
        home: str | Path | None = None,
        *,
        embedder_factory: Callable[[KnowledgeBaseRecord, str | None], Any] | None = None,
    ) -> None:
        self.home = Home(resolve_home(home))
        self._embedder_factory = embedder_factory
        self._lock = threading.RLock()
        self._readers: dict[str, Any] = {}
        self._embedders: dict[str, Any] = {}

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


def open_service(home: str | Path | None = None) -> KnowledgeBaseService:
    return KnowledgeBaseService(home)


def _names(values: Sequence[str]) -> str:
    return ", ".join(repr(v) for v in values)
