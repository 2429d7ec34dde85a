"""The typed seams between the session layer and the features built on it (bundles, transfer, evaluation, demo).

Features take a :class:`Scope` (what a :class:`kb_core.session.Session` offers them: the KBs it may see, and
the process's :class:`Resources`) instead of importing the service, so the service can delegate to them
without an import cycle. :class:`kb_core.service.KnowledgeBaseService` and :class:`kb_core.session.Session`
satisfy these protocols; a new store (e.g. PostgreSQL) plugs in behind the same methods.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from kb_core.embedding.base import Embedder
    from kb_core.envelope import Envelope
    from kb_core.ingest.pipeline import ImportProgress
    from kb_core.results import SearchRequest, SearchResult
    from kb_core.retrieval.analysis import Analyzer
    from kb_core.store import Home, KBStore, KnowledgeBaseRecord
    from kb_core.store.base import Store
    from kb_core.store.postgres import PostgresStore
    from kb_core.store.reader import KBReader


class Resources(Protocol):
    """The process's resources: the store (each KB's storage through ``store.kb(record)``), embedders, the
    analyzer, the per-user home."""

    @property
    def store(self) -> Store: ...

    @property
    def home(self) -> Home: ...

    @property
    def postgres(self) -> PostgresStore | None:  # the database on a postgresql:// URL; until #28 retires it
        ...

    @property
    def analyzer(self) -> Analyzer: ...

    def find_kb(self, kb_name: str, among: Sequence[KnowledgeBaseRecord] | None = None) -> KnowledgeBaseRecord: ...

    def kb_store(self, kb_id: str) -> KBStore: ...

    def reader(self, kb_id: str) -> KBReader: ...

    def embedder(self, record: KnowledgeBaseRecord) -> Embedder: ...

    def compact_quietly(self, record: KnowledgeBaseRecord) -> None: ...

    def session(
        self,
        persistent_name: str | None = None,
        scope: frozenset[str] | None = None,
        allowed_dirs: Sequence[Path] | None = None,
    ) -> SessionAPI: ...


class Scope(Protocol):
    """A session as features see it: which knowledge bases it may use, and the resources behind it."""

    @property
    def service(self) -> Resources: ...

    def visible_kbs(self) -> list[KnowledgeBaseRecord]: ...

    def find_kb(self, kb_name: str) -> KnowledgeBaseRecord: ...

    def resolve_kb(self, kb_name: str | None) -> KnowledgeBaseRecord: ...


class SessionAPI(Scope, Protocol):
    """The session operations that evaluation and the demo drive, as a front end would."""

    def create_knowledge_base(
        self,
        kb_name: str,
        chunk_size: int,
        embedding_model: str | None = None,
        embedding_endpoint: str | None = None,
        embedding_api_key: str | None = None,
        *,
        progress: Callable[[str], None] | None = None,
    ) -> Envelope: ...

    def list_knowledge_bases(self) -> Envelope: ...

    def import_document(
        self,
        file_paths: Sequence[str],
        chunk_size: int | None = None,
        *,
        progress: Callable[[ImportProgress], None] | None = None,
        display_names: Sequence[str] | None = None,
        kb_name: str | None = None,
    ) -> Envelope: ...

    def list_documents(self, kb_name: str | None = None) -> Envelope: ...

    def search_chunks(self, request: SearchRequest) -> SearchResult: ...
