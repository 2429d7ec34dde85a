"""Typed requests and results shared by the session, the CLI, the MCP server and the app.

The session's operations return these and raise :class:`kb_core.base.errors.KBError`; envelopes are built from them by
one function, :func:`kb_core.edges.envelopes.envelope_of`, at the edges.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field, fields
from typing import Any, ClassVar

from kb_core.base.errors import KBError
from kb_core.features.retrieval.narrative import Note
from kb_core.features.retrieval.search import SearchFilters, SearchHit, SearchOutcome, SearchSettings

__all__ = ["SearchHit", "SearchRequest", "SearchResult", "SearchSettings"]


@dataclass(frozen=True)
class SearchRequest:
    """One search, the one declaration of its parameters: the query, the settings given for this call (``None``
    means "not given": each KB's saved defaults fill in the rest), the filters, where (the current KB unless
    ``kb_ids`` or ``kb_names`` is given), and what the answer holds (``explain``: each hit's score breakdown;
    ``expand_graph``: knowledge-bundle neighbours of the hits). The CLI, the MCP tools and the app build one from
    their arguments.

    Keyword-only, for the session's own callers: ``deduplicate=False`` keeps near-duplicate chunks (evaluation's deep
    pass); with ``skip_failing`` a KB whose query embedding fails is left out (see
    :meth:`kb_core.session.operations.Operations.search_chunks`); with ``drop_copies`` (search_knowledge_base) a hit
    whose text is the same as a better-ranked hit's from another KB (a KB and its imported copy) is dropped and
    counted."""

    query: str
    top_k: int | None = None
    mode: str | None = None
    vector_weight: float | None = None
    keyword_weight: float | None = None
    jaccard_weight: float | None = None
    fusion: str | None = None
    doc_names: Sequence[str] = ()
    file_types: Sequence[str] = ()
    kb_names: Sequence[str] = ()
    explain: bool = True
    expand_graph: bool = False
    weighting: str | None = None
    language_guard: bool | None = None
    min_score: float | None = None
    _: KW_ONLY
    deduplicate: bool | None = None
    kb_ids: Sequence[str] = ()
    skip_failing: bool = False
    drop_copies: bool = False  # over several KBs, drop a hit whose text equals a better hit's from another KB

    # The fields that are search settings (kb_core.features.retrieval.search.SearchSettings), each None when not given.
    SETTINGS: ClassVar[tuple[str, ...]] = (
        "top_k", "mode", "vector_weight", "keyword_weight", "jaccard_weight", "fusion", "weighting", "language_guard",
        "min_score", "deduplicate",
    )

    def __post_init__(self) -> None:
        # Lists given by a caller become tuples (None: none), as the search always took them.
        for name in ("doc_names", "file_types", "kb_names", "kb_ids"):
            object.__setattr__(self, name, tuple(getattr(self, name) or ()))

    @property
    def settings(self) -> dict[str, Any]:
        """The settings given for this call, by name (None: not given)."""
        return {name: getattr(self, name) for name in self.SETTINGS}

    @property
    def filters(self) -> SearchFilters:
        return SearchFilters(tuple(self.doc_names), tuple(self.file_types))


@dataclass(frozen=True)
class EmbeddingSource:
    """Where a new KB's vectors come from: a model (a name or a folder; None: the default model), or an HTTP
    endpoint with its API key (never shown in a repr)."""

    model: str | None = None
    endpoint: str | None = None
    api_key: str | None = field(default=None, repr=False)


@dataclass
class SearchResult(SearchOutcome):
    """A search's hits, warnings, settings and weights, plus the KBs left out (``{kb_name, code, message}``)."""

    skipped: list[dict[str, str]] = field(default_factory=list)
    duplicates_dropped: int = 0  # hits of several KBs whose text equals a better-ranked hit's from another KB


# -- what each session operation returns ----------------------------------------------------------------------------
# Each result says in ``message`` what a person reads (the CLI prints it, MCP clients show it) and in ``to_json()``
# the data of the envelope ``{success, message, data}`` that :func:`kb_core.edges.envelopes.envelope_of` builds from it
# at the edges: the dataclass's fields in order (key order is part of the contract), less ``message`` and the fields
# marked ``HIDDEN``, and less the ``OPTIONAL`` fields that are None.
HIDDEN: Mapping[str, bool] = {"hidden": True}
OPTIONAL: Mapping[str, bool] = {"optional": True}


class Result:
    """What a session operation returns: ``message`` and ``to_json()``. A partial failure (an import where every file
    failed, document info where no id was found) is a result whose ``failure()`` is the error: the edges still show
    its data, marked as failed."""

    message: str

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        for item in fields(self):  # type: ignore[arg-type]  # every subclass is a dataclass
            if item.name == "message" or item.metadata.get("hidden"):
                continue
            value = getattr(self, item.name)
            if value is None and item.metadata.get("optional"):
                continue
            data[item.name] = value
        return data

    def failure(self) -> KBError | None:
        return None

    def succeeded(self) -> bool:
        return self.failure() is None

    def top_level(self) -> dict[str, Any]:
        """Fields a tool contract repeats beside ``data`` (rag_search's)."""
        return {}


@dataclass
class JSONResult(Result):
    """A result whose data a feature already shaped (a JSON-ready mapping, key order kept)."""

    message: str
    data: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return self.data


@dataclass
class ExecutorChoices(Result):
    message: str
    executors: dict[str, str | None]  # name → why it cannot run here (None: it can)


@dataclass
class DeviceInfo(Result):
    message: str
    device: dict[str, Any]  # DeviceChoice.to_json()
    query_device: str = "cpu"


@dataclass
class ModelState(JSONResult):
    """Whether an embedding model is loaded: ``{model, loaded, expected_seconds, measured}``."""


@dataclass
class ModelLoaded(Result):
    message: str
    model: str | None
    seconds: float


@dataclass
class ModelList(Result):
    message: str
    models: list[dict[str, Any]]
    default: str


@dataclass
class KBCreated(Result):
    message: str
    kb_id: str
    kb_name: str
    chunk_size: int


@dataclass
class KBReembedded(Result):
    """A KB's documents imported again into a new KB made with another embedding model (the old KB unchanged)."""

    message: str
    kb_id: str
    kb_name: str
    source_kb_name: str
    embedding_model: str
    success_files: list[dict[str, Any]]
    failed_files: list[dict[str, Any]]
    error: KBError | None = field(default=None, metadata=HIDDEN)

    def failure(self) -> KBError | None:
        return self.error


@dataclass
class KBList(Result):
    message: str
    knowledge_bases: list[dict[str, Any]]
    count: int
    current_kb_id: str | None


@dataclass
class KBSelected(Result):
    message: str
    kb_id: str
    kb_name: str
    document_count: int


@dataclass
class KBDeleted(Result):
    message: str
    kb_name: str


@dataclass
class KBPublished(Result):
    message: str
    kb_name: str
    published: bool


@dataclass
class DemoStatus(JSONResult):
    """A public demo's word to a session about itself (:meth:`kb_core.features.principals.Principal.status`)."""


@dataclass
class ImportReport(Result):
    """An import: the files that were imported and those that failed, each with its reason. When every file failed,
    ``error`` is IMPORT_FAILED (the report is still shown)."""

    message: str
    total: int
    success_count: int
    failed_count: int
    success_files: list[dict[str, Any]]
    failed_files: list[dict[str, Any]]
    warnings: list[str] | None = field(default=None, metadata=OPTIONAL)
    executor: dict[str, Any] | None = field(default=None, metadata=OPTIONAL)  # what ran where
    error: KBError | None = field(default=None, metadata=HIDDEN)

    def failure(self) -> KBError | None:
        return self.error


@dataclass
class ImportJobStatus(JSONResult):
    """One import job as :meth:`kb_core.session.jobs.ImportJob.status` describes it (``data``)."""


@dataclass
class ImportJobList(Result):
    """Import jobs (their status, newest last)."""

    message: str
    jobs: list[dict[str, Any]]
    count: int


@dataclass
class JobDismissed(Result):
    message: str
    job_id: str


@dataclass
class DocumentList(Result):
    message: str
    documents: list[dict[str, Any]]
    count: int


@dataclass
class ChunkList(Result):
    message: str
    doc_id: str
    doc_name: str
    chunks: list[dict[str, Any]]
    count: int


@dataclass
class DocDeleted(Result):
    message: str
    doc_name: str


@dataclass
class DocUpdated(Result):
    message: str
    doc_id: str
    doc_name: str
    chunk_count: int
    chunk_size: int


@dataclass
class SearchReport(Result):
    """A search as the front ends show it: the hits as JSON, the settings and weights used, and what the search says
    beside its hits (see :func:`kb_core.session.operations.search_facts`)."""

    message: str
    chunks: list[dict[str, Any]]
    count: int
    settings: dict[str, Any]
    weights: dict[str, Any] | None
    warnings: list[str]
    query_terms: dict[str, Any] | None
    semantic_floor: float | None
    semantic_scale: dict[str, Any] | None
    min_score: float
    below_min_score: int
    without_evidence: int
    duplicates_dropped: int
    # The narrative's notes (kb_core.features.retrieval.narrative.result_notes), as the message says them: for a front
    # end that says them apart (the search lab); the JSON has the message and the counts.
    notes: list[Note] = field(default_factory=list, metadata=HIDDEN)


@dataclass
class HitList(Result):
    """search_knowledge_base: numbered hits over every KB the session sees."""

    message: str
    hits: list[dict[str, Any]]
    count: int
    mode: str
    limit: int
    warnings: list[str]
    failed_knowledge_bases: list[dict[str, str]]
    min_score: float
    below_min_score: int
    duplicates_dropped: int


@dataclass
class Explanation(JSONResult):
    """Why a chunk ranks where it does (see :func:`kb_core.features.retrieval.query.explain_chunk`)."""


@dataclass
class SavedSettings(Result):
    message: str
    kb_name: str
    search_settings: dict[str, Any]


@dataclass
class RagResult(Result):
    """rag_search: a slow or failing search is no failure, it is ``degraded`` with its reason."""

    message: str
    chunks: list[dict[str, Any]]
    total_results: int
    degraded: bool
    degraded_reason: str | None = field(default=None, metadata=OPTIONAL)

    def top_level(self) -> dict[str, Any]:
        return self.to_json()


@dataclass
class Item(JSONResult):
    """A document's full text, a chunk with its neighbours, or a knowledge-graph node."""


@dataclass
class DocumentInfos(Result):
    """Metadata of documents by id; per-id failures in ``errors``; ``error`` when none was found."""

    message: str
    documents: list[dict[str, Any]]
    total_docs: int
    requested: int
    errors: list[dict[str, Any]]
    error: KBError | None = field(default=None, metadata=HIDDEN)

    def failure(self) -> KBError | None:
        return self.error


@dataclass
class TokenCreated(Result):
    message: str
    id: str
    scope: str
    capability: str
    rate_per_hour: int
    created_at: str
    token: str


@dataclass
class TokenList(Result):
    message: str
    tokens: list[dict[str, Any]]
    count: int


@dataclass
class TokenRevoked(Result):
    message: str
    id: str


@dataclass
class EvaluationRuns(Result):
    message: str
    runs: list[dict[str, Any]]
    count: int


@dataclass
class RunComparison(JSONResult):
    """Two settings of kept evaluation runs compared query by query."""


@dataclass
class RunDeleted(Result):
    message: str
    run_id: str


@dataclass
class Compacted(JSONResult):
    """What a compaction merged (the store's statistics)."""


@dataclass
class Verification(Result):
    """``kb verify``: the problems found (a failure when there are any, though no error code) and what was repaired."""

    message: str
    problems: list[str]
    repaired: list[str]

    def succeeded(self) -> bool:
        return not self.problems


# -- knowledge bundles (kb_core.features.bundles.api)
# ------------------------------------------------------------------------
@dataclass
class KnowledgeSchema(Result):
    """The spec's ``{full_bundle_schema, example_yaml}`` for a KB's ontology."""

    message: str
    full_bundle_schema: dict[str, Any]
    example_yaml: str


@dataclass
class OntologyInfo(Result):
    message: str
    kb_name: str
    ontology: dict[str, Any]
    node_count: int
    edge_count: int


@dataclass
class OntologySet(JSONResult):
    """``{kb_name, ontology, graph_version}`` and the re-indexing statistics."""


@dataclass
class BundleImported(Result):
    """The spec's ``{status, stats}`` of an accepted bundle, and the graph version it committed."""

    message: str
    status: str
    stats: dict[str, int]
    graph_version: int


@dataclass
class IndexRepaired(JSONResult):
    """The bundle documents removed from and re-indexed into the search index."""


@dataclass
class ShadowExported(Result):
    message: str
    path: str


@dataclass
class GraphView(Result):
    """Nodes and edges (up to a limit of nodes) for drawing the graph."""

    message: str
    nodes: list[dict[str, Any]]
    edges: list[dict[str, Any]]
    node_total: int
    edge_total: int
    truncated: bool


# -- export and import of the database (kb_core.features.transfer)
# -----------------------------------------------------------
@dataclass(frozen=True)
class ExportSummary(Result):
    """What an export wrote: ``message`` for the user, ``source_path`` (the home or the database; not shown to a
    session with a scope, such as an MCP token limited to some knowledge bases), ``export_path``."""

    message: str
    source_path: str
    export_path: str

    def to_json(self) -> dict[str, Any]:
        return {"source_path": self.source_path, "export_path": self.export_path}


@dataclass(frozen=True)
class ImportSummary(Result):
    """What an import of an export file merged: ``message`` for the user, the file, and the KBs it added."""

    message: str
    source_path: str
    knowledge_bases: list[str]
    document_count: int
    renamed_knowledge_bases: list[tuple[str, str]]

    def to_json(self) -> dict[str, Any]:
        return {
            "source_path": self.source_path,
            "imported_kb_count": len(self.knowledge_bases),
            "imported_doc_count": self.document_count,
            "knowledge_bases": list(self.knowledge_bases),
            "renamed_knowledge_bases": [{"from": a, "to": b} for a, b in self.renamed_knowledge_bases],
        }
