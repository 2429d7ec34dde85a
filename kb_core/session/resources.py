"""What a session's operations take from the process: :class:`SessionResources`, the service as
:class:`kb_core.session.operations.Operations` sees it (the features' own part of it is :class:`Resources`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from kb_core.features.seams import Resources

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

    from kb_core.engines.embedding.calibration import SemanticScale
    from kb_core.engines.embedding.device import DeviceChoice
    from kb_core.features.evaluation.runs import EvaluationRunStore
    from kb_core.features.ingest.executors import DocumentExecutor
    from kb_core.features.results import EmbeddingSource
    from kb_core.features.retrieval.search import RankedHits, SearchFilters, SearchSettings
    from kb_core.session.jobs import JobRegistry
    from kb_core.store import KnowledgeBaseRecord
    from kb_core.store.base import TokenStorage


class SessionResources(Resources, Protocol):
    """What a session (:class:`kb_core.session.operations.Operations`) asks of the process. The service satisfies it;
    a protocol, so the operations need no import of the service that makes them (that would be a cycle)."""

    @property
    def background(self) -> ThreadPoolExecutor: ...

    @property
    def token_store(self) -> TokenStorage: ...

    @property
    def evaluation_runs(self) -> EvaluationRunStore: ...

    @property
    def jobs(self) -> JobRegistry: ...

    def create_kb(
        self, kb_name: str, chunk_size: int, source: EmbeddingSource, progress: Callable[[str], None] | None = None
    ) -> KnowledgeBaseRecord: ...

    def delete_kb(self, record: KnowledgeBaseRecord) -> None: ...

    def documents(self, record: KnowledgeBaseRecord) -> list[dict[str, Any]]: ...

    def has_chunk(self, record: KnowledgeBaseRecord, chunk_id: str) -> bool: ...

    def kb_counts(self, record: KnowledgeBaseRecord) -> tuple[int, int, int]: ...

    def kb_version(self, record: KnowledgeBaseRecord) -> int: ...

    def compact(self, record: KnowledgeBaseRecord, everything: bool = False) -> dict[str, int]: ...

    def search_kb(
        self,
        record: KnowledgeBaseRecord,
        query: str,
        settings: SearchSettings,
        filters: SearchFilters,
        explain_chunk_ids: Sequence[str] = (),
    ) -> RankedHits: ...

    def semantic_scale(self, record: KnowledgeBaseRecord, query: str) -> SemanticScale: ...

    def device(self) -> DeviceChoice: ...

    def model_load_state(self, record: KnowledgeBaseRecord | None, model: str | None = None) -> dict[str, Any]: ...

    def load_model(self, record: KnowledgeBaseRecord | None, model: str | None = None) -> float: ...

    def import_executor(
        self, record: KnowledgeBaseRecord, executor: str, address: str | None = None
    ) -> DocumentExecutor | None: ...
