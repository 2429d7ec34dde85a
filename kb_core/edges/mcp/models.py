"""The output models of the MCP tools: each tool's structured content is a ``ToolEnvelope`` of one of these.

They give clients an output schema; the data itself comes from the session's envelopes. A data model whose fields are
a result dataclass's (:mod:`kb_core.features.results`) is made from it by :func:`data_model`, which names, orders and
types the fields once; the published schemas (tools/list) are the same as when they were written out here. The models
whose fields a feature shapes (search hits aside, which ``SearchHit`` types) stay written out.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, Generic, Literal, TypeVar, get_type_hints

from pydantic import BaseModel, Field, create_model

from kb_core.base.config import DEFAULT_KEYWORD_WEIGHT, DEFAULT_VECTOR_WEIGHT, FUSION_METHODS, SEARCH_MODES, WEIGHTINGS
from kb_core.features import results
from kb_core.features.results import SearchHit

T = TypeVar("T")


class ErrorInfo(BaseModel):
    code: str = Field(description="stable error code, e.g. KB_NOT_FOUND")
    details: dict[str, Any] = Field(default_factory=dict)


class ToolEnvelope(BaseModel, Generic[T]):
    """The service envelope. ``data`` is null and ``error`` set when ``success`` is false."""

    success: bool
    message: str
    data: T | None = None
    error: ErrorInfo | None = None


def data_model(result: type[results.Result], name: str, **overrides: Any) -> Any:
    """The model of ``result.to_json()``: the dataclass's fields in order (less ``message`` and the hidden ones),
    each typed by the dataclass and required, unless ``overrides`` gives it as ``(type, default or Field)`` or leaves
    it out (``None``: a field the tool does not publish)."""
    hints = get_type_hints(result)
    spec: dict[str, Any] = {}
    for item in fields(result):  # type: ignore[arg-type]  # every result is a dataclass
        if item.name == "message" or item.metadata.get("hidden"):
            continue
        given = overrides.pop(item.name, ...)
        if given is not None:
            spec[item.name] = (hints[item.name], ...) if given is ... else given
    if overrides:
        raise TypeError(f"{result.__name__} has no field(s) {sorted(overrides)}")
    return create_model(name, __module__=__name__, **spec)


KBCreated = data_model(results.KBCreated, "KBCreated")
KBNamed = data_model(results.KBDeleted, "KBNamed")


class KBInfo(BaseModel):
    id: str
    name: str
    chunk_size: int
    embedding_endpoint: str | None = None
    created_at: str
    is_current: bool
    document_count: int
    chunk_count: int
    failed_document_count: int = 0  # files whose import failed (kept with their reason; no documents)


KBList = data_model(results.KBList, "KBList", knowledge_bases=(list[KBInfo], ...), current_kb_id=(str | None, None))
KBSelected = data_model(results.KBSelected, "KBSelected")


class ImportedFile(BaseModel):
    file_path: str
    doc_name: str
    chunk_count: int
    already_imported: bool = Field(
        default=False, description="true: a document of this name and content was already there; it was skipped"
    )


class FailedFile(BaseModel):
    file_path: str
    error: str


UNREAD_LANGUAGE = "e.g. documents in a language the knowledge base's model does not read"
ImportResult = data_model(
    results.ImportReport,
    "ImportResult",
    success_files=(list[ImportedFile], ...),
    failed_files=(list[FailedFile], ...),
    warnings=(list[str], Field(default_factory=list, description=UNREAD_LANGUAGE)),
    executor=None,  # kb import --executor ray only
)


class JobFile(BaseModel):
    name: str = Field(description="the file's name")
    file: str = Field(description="the path as given")
    status: Literal["pending", "parsing", "embedding", "ready", "failed"]
    chunks_total: int
    chunks_embedded: int
    error: str | None = None
    doc_name: str | None = None
    already_imported: bool = Field(default=False, description="the KB held this name and content: skipped")


class JobError(BaseModel):
    code: str
    message: str


class ImportJob(BaseModel):
    """An import job (kb_core.session.jobs.ImportJob.status)."""

    job_id: str
    kind: Literal["import"]
    kb_name: str
    state: Literal["running", "cancelling", "finished", "cancelled", "failed"]
    phase: str = Field(description="what it does now: queued, loading_model, importing, compacting, calibrating, "
                       "cancelling, done")
    phase_text: str
    created_at: str
    finished_at: str | None = None
    elapsed_seconds: float
    files_total: int
    files_done: int
    chunks_total: int
    chunks_embedded: int
    chunks_expected: int
    chunks_per_second: float | None = None
    seconds_left: float | None = None
    summary: str
    files: list[JobFile]
    message: str | None = None
    report: ImportResult | None = Field(default=None, description="import_document's data, once the job ended")
    error: JobError | None = None


# Optional in the published schema though a SearchHit always has them: the tools have always published them so.
_OPTIONAL_HIT_FIELDS = ("chapter", "page", "file_type", "kb_id", "kb_name")


def _search_chunk_fields() -> dict[str, Any]:
    """The fields of one search hit as ``SearchHit.to_json`` writes them, named and typed once, by ``SearchHit``."""
    hints = get_type_hints(SearchHit)
    described: dict[str, Any] = {
        "matched_terms": (list[str], Field(default_factory=list)),
        "support_terms": (
            list[str],
            Field(
                default_factory=list,
                description="Chinese character pairs of the query that are no word of it (across two words, or into "
                "a stop word) that this chunk holds: they add to its BM25 beside matched_terms",
            ),
        ),
        "breakdown": (dict[str, Any], Field(default_factory=dict, description="how the score was computed")),
        "snippet": (
            str,
            Field(
                default="",
                description="the passage around the chunk's best-matching words, '…' where it cuts the content",
            ),
        ),
        "passage": (
            dict[str, Any] | None,
            Field(
                default=None,
                description="the snippet's place in content (start, end) and the matched words' spans (marks)",
            ),
        ),
    }
    chunk_fields: dict[str, Any] = {}
    for hit_field in fields(SearchHit):
        name = hit_field.name
        if name == "location":  # internal: where the row lies in its snapshot
            continue
        if name in described:
            chunk_fields[name] = described[name]
        elif name in _OPTIONAL_HIT_FIELDS:
            chunk_fields[name] = (hints[name] | None, None)
        else:
            chunk_fields[name] = (hints[name], ...)
    return chunk_fields


SearchChunk = create_model(
    "SearchChunk",
    __module__=__name__,
    **_search_chunk_fields(),
    expanded=(bool, Field(default=False, description="added by graph expansion (expand_graph), not by the query")),
    graph=(dict[str, Any] | None, Field(default=None, description="the bundle node of this chunk's document")),
)


class SearchResult(BaseModel):
    chunks: list[SearchChunk]
    count: int
    settings: dict[str, Any] = Field(default_factory=dict)
    weights: dict[str, Any] | None = Field(
        default=None, description="hybrid only: requested, used and auto weights, with notes when they differ"
    )
    warnings: list[str] = Field(default_factory=list)
    query_terms: dict[str, Any] | None = Field(
        default=None,
        description="the keyword terms searched with, the query's words, the stop words left out, only_stop_words, "
        "and support (Chinese character pairs that are no word of the query: they add to the BM25 of chunks holding "
        "a word, never find one)",
    )
    semantic_floor: float | None = Field(
        default=None, description="the cosine a chunk must exceed to count as semantic evidence for this model"
    )
    semantic_scale: dict[str, Any] | None = Field(
        default=None,
        description="the model's semantic scale for this query: zero (what unrelated text scores on average: 0 on the "
        "scale), top (what a near-identical text scores: 1), floor (the cosine a chunk must exceed to count), measured",
    )
    min_score: float = Field(default=0.0, description="hits below this final score are not shown")
    below_min_score: int = Field(default=0, description="hits not shown because they scored below min_score")
    without_evidence: int = Field(
        default=0, description="candidates left out: no query term and no cosine above the semantic floor"
    )


class SearchExplanation(BaseModel):
    chunk_id: str
    kb_name: str
    query: str
    rank: int | None = Field(description="1-based rank among the hits; null when the chunk is not among them")
    hits: int
    candidate_position: int = Field(description="position among all scored candidates, before dedup")
    candidates: int
    score: float = Field(description="the score on the 0-1 scale")
    matched_terms: list[str] = Field(default_factory=list)
    support_terms: list[str] = Field(
        default_factory=list,
        description="Chinese bigrams reaching into a stop word that add to this chunk's BM25 (it holds a matched term)",
    )
    breakdown: dict[str, Any] = Field(description="every part of the score; recomputes it exactly")
    above: dict[str, Any] | None = Field(default=None, description="the hit ranked just above: id, doc_name, score")
    settings: dict[str, Any] = Field(default_factory=dict)
    explanation: list[str] = Field(description="the steps of the score as sentences")
    evidence: bool = Field(
        default=True, description="false: no query term and no cosine above the semantic floor, so never a hit"
    )


class DocumentRow(BaseModel):
    id: str | None = Field(description="document id (null while an import is still in flight)")
    name: str
    file_path: str | None = None
    file_type: str | None = None
    chunk_size: int | None = None
    created_at: str | None = None
    updated_at: str | None = None
    status: str
    chunk_count: int = 0
    size_bytes: int | None = None
    source: str | None = None
    error: str | None = None
    language: str | None = Field(default=None, description="detected language: zh, en, ja, ko, ... (null: unknown)")


DocumentList = data_model(results.DocumentList, "DocumentList", documents=(list[DocumentRow], ...))
DocNamed = data_model(results.DocDeleted, "DocNamed")
DocUpdated = data_model(results.DocUpdated, "DocUpdated")


class RagMetadata(BaseModel):
    source: str | None = None
    chapter: str | None = None
    page: int | None = None


class RagChunk(BaseModel):
    chunk_text: str
    metadata: RagMetadata
    score: float
    matched_keywords: int | None = None
    id: str | None = None


DEGRADED_REASON = "why no results were returned: the timeout, or the failure (e.g. the embedding endpoint's answer)"


RagData = data_model(
    results.RagResult,
    "RagData",
    chunks=(list[RagChunk], ...),
    degraded_reason=(str | None, Field(default=None, description=DEGRADED_REASON)),
)


class RagEnvelope(ToolEnvelope[RagData]):
    """rag_search also carries chunks, total_results and degraded at the top level, as its spec shows."""

    chunks: list[RagChunk] = Field(default_factory=list)
    total_results: int = 0
    degraded: bool = False
    degraded_reason: str | None = Field(default=None, description=DEGRADED_REASON)


class Hit(BaseModel):
    rank: int
    id: str = Field(description="chunk id; pass it to get_item for the chunk with its neighbours")
    doc_id: str = Field(description="document id; get_item and get_document_info accept it")
    title: str = Field(description="document title (its name)")
    kb_name: str | None = None
    score: float
    snippet: str
    chapter: str | None = None
    page: int | None = None
    file_type: str | None = None
    expanded: bool = Field(default=False, description="added by graph expansion (expand_graph), not by the query")
    via: str | None = Field(default=None, description="for expanded hits: the edge that led here")


class SkippedKB(BaseModel):
    kb_name: str
    code: str = Field(description="why it was not searched, e.g. EMBEDDING_UNAVAILABLE, EMBEDDING_AUTH_FAILED")
    message: str


class HitList(BaseModel):
    hits: list[Hit]
    count: int
    mode: str
    limit: int
    warnings: list[str] = Field(default_factory=list)
    failed_knowledge_bases: list[SkippedKB] = Field(
        default_factory=list, description="knowledge bases left out because their query embedding failed"
    )
    min_score: float = Field(default=0.0, description="hits below this final score are not shown")
    below_min_score: int = Field(default=0, description="hits not shown because they scored below min_score")
    duplicates_dropped: int = Field(
        default=0, description="hits dropped because a better hit from another knowledge base has the same text"
    )


class ChunkBody(BaseModel):
    id: str
    doc_id: str
    chunk_index: int
    content: str
    tokens: int | None = None
    chapter: str | None = None
    page: int | None = None
    start_char: int | None = None
    end_char: int | None = None


class Neighbour(BaseModel):
    direction: Literal["out", "in"]
    edge_id: str
    edge_type: str
    properties: dict[str, Any] = Field(default_factory=dict)
    node: dict[str, Any] = Field(description="the node at the other end: id, type, identity, doc_name")


class Item(BaseModel):
    """A document (``type`` "document": metadata plus ``text``), a chunk (``type`` "chunk"), or a knowledge-bundle
    node (``type`` "node": node_type, identity, properties and neighbours via edges)."""

    type: Literal["document", "chunk", "node"]
    kb_name: str
    id: str | None = None
    name: str | None = None
    file_path: str | None = None
    file_type: str | None = None
    status: str | None = None
    chunk_count: int | None = None
    size_bytes: int | None = None
    created_at: str | None = None
    updated_at: str | None = None
    text: str | None = None
    doc_name: str | None = None
    chunk: ChunkBody | None = None
    previous: list[ChunkBody] | None = None
    next: list[ChunkBody] | None = None
    node_type: str | None = None
    identity: dict[str, Any] | None = None
    properties: dict[str, Any] | None = None
    doc_id: str | None = Field(default=None, description="for a node: the document holding its indexed text")
    neighbours: list[Neighbour] | None = None


class DocumentInfo(BaseModel):
    id: str
    name: str
    file_name: str | None = Field(
        default=None, description="the original file's name (the document name may carry a clash suffix)"
    )
    kb_name: str | None = None
    file_type: str | None = None
    size_bytes: int | None = None
    size_human: str | None = Field(default=None, description="1024-based, e.g. 1.5 KB")
    source: str | None = Field(default=None, description="upload, path or bundle")
    source_label: str | None = Field(
        default=None, description="readable source, e.g. '本地文件: /data/a.docx', '文件上传'"
    )
    parse_status: str
    status_text: str | None = Field(default=None, description="readable status, e.g. '✅ 已完成', '❌ 失败: reason'")
    parse_error: str | None = None
    error: str | None = None
    chunk_count: int
    created_at: str | None = None
    updated_at: str | None = None


class DocumentInfoError(BaseModel):
    id: str
    error: str


DocumentInfoResult = data_model(
    results.DocumentInfos,
    "DocumentInfoResult",
    documents=(list[DocumentInfo], ...),
    errors=(list[DocumentInfoError], ...),
)


Exported = data_model(
    results.ExportSummary,
    "Exported",
    source_path=(str, Field(description="the home the knowledge bases were exported from")),
)


KnowledgeSchema = data_model(
    results.KnowledgeSchema,
    "KnowledgeSchema",
    full_bundle_schema=(
        dict[str, Any],
        Field(description="JSON Schema draft-07: an array whose items are oneOf the ontology's node and edge types"),
    ),
    example_yaml=(str, Field(description="an example bundle generated from the ontology; it validates")),
)


class BundleStats(BaseModel):
    model_config = {"extra": "allow"}

    nodes_upserted: int = 0
    nodes_deleted: int = 0
    edges_upserted: int = 0
    edges_deleted: int = 0
    edges_cascaded: int = Field(default=0, description="edges deleted because a node they touch was deleted")
    documents_indexed: int = 0
    documents_removed: int = 0
    chunks_indexed: int = 0
    items: int = 0
    nodes_total: int = 0
    edges_total: int = 0


BundleImported = data_model(
    results.BundleImported,
    "BundleImported",
    status=(Literal["success"], ...),
    stats=(BundleStats, ...),
    graph_version=(int | None, None),
)


class ImportedDatabase(BaseModel):
    source_path: str
    imported_kb_count: int
    imported_doc_count: int
    knowledge_bases: list[str] = Field(default_factory=list)
    renamed_knowledge_bases: list[dict[str, str]] = Field(default_factory=list)


# -- parameter types and descriptions shared by several tools ---------------------------------------
SearchMode = Literal[SEARCH_MODES]  # type: ignore[valid-type]
# search_knowledge_base's schema has listed the modes in this order since it came; tools/list must not change.
LibraryMode = Literal[SEARCH_MODES[1:] + SEARCH_MODES[:1]]  # type: ignore[valid-type]
Weighting = Literal[WEIGHTINGS]  # type: ignore[valid-type]
Fusion = Literal[FUSION_METHODS]  # type: ignore[valid-type]
VECTOR_WEIGHT = (
    f"weight of the semantic signal, 0-1 (default from settings, usually {DEFAULT_VECTOR_WEIGHT}); "
    "alone, keyword = 1 − it"
)
KEYWORD_WEIGHT = (
    f"weight of the BM25 signal, 0-1 (default from settings, usually {DEFAULT_KEYWORD_WEIGHT}); alone, vector = 1 − it"
)
MIN_SCORE = "hide hits whose final score (0-1) is below this (default from settings, usually 0)"
JACCARD_WEIGHT = (
    "weight of the query/chunk term-overlap (Jaccard) rerank, 0-1: final = (1 − it) × fused + it × Jaccard "
    "(default from settings, usually 0: no rerank)"
)
WEIGHTING = "fixed: exactly the weights given (default); auto: scaled by each signal's quality for the query"
LANGUAGE_GUARD = (
    "true (default): vector weight 0 when the embedding model does not cover the query's language; false: keep it"
)

