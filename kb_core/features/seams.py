"""The typed seams between the session layer and the features below it (bundles, transfer, ingest, retrieval).

Features take a :class:`Scope` (what a session, :class:`kb_core.session.operations.Operations`, offers them: the KBs it
may see, and the process's :class:`Resources`) instead of importing the service or the session, so both can delegate to
them without an import cycle. :class:`kb_core.session.service.KnowledgeBaseService` and
:class:`kb_core.session.operations.Operations` satisfy these protocols; a new store (e.g. PostgreSQL) plugs in behind
the same methods. The session's operations themselves are declared once, on ``Operations``: what drives them
(evaluation, the demo build, the edges) sits at or above the session layer and names that class.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from kb_core.engines.analysis import Analyzer
    from kb_core.engines.embedding.base import Embedder
    from kb_core.engines.parsing import ParseLimits
    from kb_core.features.ingest.executors import DocumentExecutor
    from kb_core.features.ingest.pipeline import Importer
    from kb_core.features.principals import ImportAllowance, Principal
    from kb_core.store import Home, KBStore, KnowledgeBaseRecord
    from kb_core.store.base import Store
    from kb_core.store.reader import KBReader


class Resources(Protocol):
    """The process's resources: the store (each KB's storage through ``store.kb(record)``), embedders, the
    analyzer, the per-user home and its evaluation home."""

    @property
    def store(self) -> Store: ...

    @property
    def home(self) -> Home: ...

    @property
    def analyzer(self) -> Analyzer: ...

    def find_kb(self, kb_name: str, among: Sequence[KnowledgeBaseRecord] | None = None) -> KnowledgeBaseRecord: ...

    def kb_store(self, kb_id: str) -> KBStore: ...

    def reader(self, kb_id: str) -> KBReader: ...

    def embedder(self, record: KnowledgeBaseRecord) -> Embedder: ...

    def compact_quietly(self, record: KnowledgeBaseRecord) -> None: ...

    def evaluation_service(self) -> Resources:
        """The resources of this home's evaluation home (``<home>/cache/eval``): evaluation KBs built from a corpus,
        out of the user's KB list (the service answers a service of its own)."""
        ...


class ImportResources(Protocol):
    """What importing files takes from the service (:mod:`kb_core.features.ingest.files`): the parse limits, a private
    staging folder, an importer committing into the KB's store, and the compaction after an import."""

    @property
    def parse_limits(self) -> ParseLimits: ...

    def import_staging(self, record: KnowledgeBaseRecord) -> Path: ...

    def importer(self, record: KnowledgeBaseRecord, executor: DocumentExecutor | None = None) -> Importer: ...

    def documents(self, record: KnowledgeBaseRecord) -> list[dict[str, Any]]: ...

    def compact_quietly(self, record: KnowledgeBaseRecord) -> None: ...


class Scope(Protocol):
    """A session as features see it: which knowledge bases it may use and change, for whom (its principal: what it
    may see, change and spend), and the resources behind it."""

    @property
    def service(self) -> Resources: ...

    @property
    def principal(self) -> Principal: ...

    def visible_kbs(self) -> list[KnowledgeBaseRecord]: ...

    def find_kb(self, kb_name: str) -> KnowledgeBaseRecord: ...

    def resolve_kb(self, kb_name: str | None) -> KnowledgeBaseRecord: ...

    def writable_kb(self, kb_name: str | None, action: str) -> KnowledgeBaseRecord:
        """The KB (default: the current one) this session may ``action``; PermissionDenied otherwise."""
        ...

    def importing(self, record: KnowledgeBaseRecord, files: int) -> AbstractContextManager[ImportAllowance]:
        """What an import into ``record`` may take, held while it runs (a demo visitor's quotas)."""
        ...
