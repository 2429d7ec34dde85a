"""The MCP server: the knowledge-base tools over stdio and streamable HTTP.

Built on the official MCP Python SDK v1 (``mcp.server.fastmcp.FastMCP``; v2 renamed it, so
pyproject pins ``mcp<2``). Every tool calls one :class:`kb_core.service.Session` method and returns
the service envelope ``{success, message, data[, error]}`` as structured content, with an output schema.

Errors (one rule for every tool):

- invalid parameters (schema violations, and service failures with code ``INVALID_ARGUMENT``)
  → JSON-RPC error −32602 ``InvalidParams``; ``data`` carries ``code`` and ``details``;
- unknown tools → −32602; internal failures (``INTERNAL_ERROR`` envelopes, unexpected exceptions)
  → −32603 with a generic message, never a stack trace (the trace goes to the server log);
- a token over its rate → −32605 with ``data.retry_after_sec``;
- every other service failure (KB_NOT_FOUND, NO_CURRENT_KB, DOCUMENT_NOT_FOUND, ITEM_NOT_FOUND,
  KB_EXISTS, KB_IS_CURRENT, IMPORT_FAILED, PERMISSION_DENIED, ...) → a tool error: ``isError: true``,
  text ``"<CODE>: <message>"`` and the failure envelope as ``structuredContent``, so the model can
  read it and recover.

The SDK turns every exception raised inside a tool into an ``isError`` result, so ``tools/call`` is
dispatched by :meth:`KBMCPServer._dispatch_call_tool`, which raises ``McpError`` for the JSON-RPC cases.

HTTP security: bearer tokens from :mod:`kb_core.tokens` (401 without a valid one, via the SDK's
``TokenVerifier`` and ``RequireAuthMiddleware``); the SDK binds each HTTP session to the token that
created it. A token's scope becomes the session's KB scope (out-of-scope KBs answer like nonexistent
ones); read tokens cannot call write tools; paths given to ``import_document``, ``export_database`` and
``import_database`` must resolve (symlinks followed) inside the ``--allow-dir`` folders, checked again by the
session on the file it opens (:mod:`kb_core.safe_files`), so a folder swapped for a symlink after the check
cannot redirect a read, a write or the bundle file's delete. A path with a NUL byte is invalid (−32602). The
Host and Origin headers must name this server (the bind address, the loopback names, ``--allowed-host``
names) on every bind address, against DNS rebinding: others get 421 / 403. stdio is local and trusted: no
tokens, no path limits.

Knowledge bundles (``../shared/specs/knowledge-bundle.md``): ``get_knowledge_schema`` returns the current
KB's ``{full_bundle_schema, example_yaml}`` (its text content is that JSON, as the spec's tool returns);
``import_knowledge_bundle`` is a write tool whose ``temp_file_path`` is confined like the import paths. A
refused bundle is a tool error ``BUNDLE_INVALID: ...`` listing every problem at its exact place (``Validation
error at [1].doc_uri: "doc_uri" is required``; ``error.details.errors`` has them as objects) and the file is
kept for a retry; after a successful import the file is deleted. ``search`` and ``search_knowledge_base``
take ``expand_graph`` (default false): hits on bundle documents are followed by the documents related to
them by edges, marked ``expanded`` (and ``via`` / ``breakdown.graph_expansion``).
"""

from __future__ import annotations

import dataclasses
import errno
import ipaddress
import json
import logging
import math
import os
import socket
import sys
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from io import TextIOWrapper
from pathlib import Path
from typing import Annotated, Any, Generic, Literal, TypeVar

import anyio
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.fastmcp import Context, FastMCP
from mcp.server.fastmcp.exceptions import ToolError
from mcp.server.fastmcp.tools import Tool
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import McpError
from mcp.types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    CallToolRequest,
    CallToolResult,
    ErrorData,
    ServerResult,
    TextContent,
    ToolAnnotations,
)
from pydantic import BaseModel, Field, ValidationError

from kb_core.envelope import Envelope, failure
from kb_core.errors import EmbeddingError, InvalidArgument, KBError, PermissionDenied
from kb_core.safe_files import reject_nul
from kb_core.tokens import SlidingWindowLimiter, TokenRecord, TokenStore

logger = logging.getLogger(__name__)

RATE_LIMITED = -32605
DEFAULT_HTTP_PORT = 8765
WRITE_TOOLS = frozenset(
    {
        "create_knowledge_base",
        "delete_knowledge_base",
        "import_document",
        "delete_document",
        "update_document",
        "export_database",
        "import_database",
        "import_knowledge_bundle",
    }
)
SNIPPET_CHARS = 220


# -- output schemas ------------------------------------------------------------------------------
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


class KBCreated(BaseModel):
    kb_id: str
    kb_name: str
    chunk_size: int


class KBNamed(BaseModel):
    kb_name: str


class KBInfo(BaseModel):
    id: str
    name: str
    chunk_size: int
    embedding_model: str | None = None
    embedding_endpoint: str | None = None
    created_at: str
    is_current: bool
    document_count: int
    chunk_count: int


class KBList(BaseModel):
    knowledge_bases: list[KBInfo]
    count: int
    current_kb_id: str | None = None


class KBSelected(BaseModel):
    kb_id: str
    kb_name: str
    document_count: int


class ImportedFile(BaseModel):
    file_path: str
    doc_name: str
    chunk_count: int


class FailedFile(BaseModel):
    file_path: str
    error: str


class ImportResult(BaseModel):
    total: int
    success_count: int
    failed_count: int
    success_files: list[ImportedFile]
    failed_files: list[FailedFile]


class SearchChunk(BaseModel):
    id: str
    doc_id: str
    content: str
    tokens: int
    chunk_index: int
    doc_name: str
    score: float
    chapter: str | None = None
    page: int | None = None
    file_type: str | None = None
    kb_id: str | None = None
    kb_name: str | None = None
    matched_terms: list[str] = Field(default_factory=list)
    breakdown: dict[str, Any] = Field(default_factory=dict, description="how the score was computed")
    expanded: bool = Field(default=False, description="added by graph expansion (expand_graph), not by the query")
    graph: dict[str, Any] | None = Field(default=None, description="the bundle node of this chunk's document")


class SearchResult(BaseModel):
    chunks: list[SearchChunk]
    count: int
    settings: dict[str, Any] = Field(default_factory=dict)
    weights: dict[str, Any] | None = Field(
        default=None, description="hybrid only: requested, used and auto weights, with notes when they differ"
    )
    warnings: list[str] = Field(default_factory=list)


SearchMode = Literal["hybrid", "semantic", "keyword"]
Weighting = Literal["fixed", "auto"]
Fusion = Literal["weighted", "rrf"]
_VECTOR_WEIGHT = "weight of the semantic signal, 0-1 (default from settings, usually 0.7); alone, keyword = 1 − it"
_KEYWORD_WEIGHT = "weight of the BM25 signal, 0-1 (default from settings, usually 0.3); alone, vector = 1 − it"
_WEIGHTING = "fixed: exactly the weights given (default); auto: scaled by each signal's quality for the query"
_LANGUAGE_GUARD = (
    "true (default): vector weight 0 when the embedding model does not cover the query's language; false: keep it"
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
    breakdown: dict[str, Any] = Field(description="every part of the score; recomputes it exactly")
    above: dict[str, Any] | None = Field(default=None, description="the hit ranked just above: id, doc_name, score")
    settings: dict[str, Any] = Field(default_factory=dict)
    explanation: list[str] = Field(description="the steps of the score as sentences")


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


class DocumentList(BaseModel):
    documents: list[DocumentRow]
    count: int


class DocNamed(BaseModel):
    doc_name: str


class DocUpdated(BaseModel):
    doc_id: str
    doc_name: str
    chunk_count: int
    chunk_size: int


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


_DEGRADED_REASON = "why no results were returned: the timeout, or the failure (e.g. the embedding endpoint's answer)"


class RagData(BaseModel):
    chunks: list[RagChunk]
    total_results: int
    degraded: bool
    degraded_reason: str | None = Field(default=None, description=_DEGRADED_REASON)


class RagEnvelope(ToolEnvelope[RagData]):
    """rag_search also carries chunks, total_results and degraded at the top level, as its spec shows."""

    chunks: list[RagChunk] = Field(default_factory=list)
    total_results: int = 0
    degraded: bool = False
    degraded_reason: str | None = Field(default=None, description=_DEGRADED_REASON)


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
    source_label: str | None = Field(default=None, description="readable source, e.g. 'Local file: /data/a.docx'")
    parse_status: str
    status_text: str | None = Field(default=None, description="readable status, e.g. '✅ Completed'")
    parse_error: str | None = None
    error: str | None = None
    chunk_count: int
    created_at: str | None = None
    updated_at: str | None = None


class DocumentInfoError(BaseModel):
    id: str
    error: str


class DocumentInfoResult(BaseModel):
    documents: list[DocumentInfo]
    total_docs: int
    requested: int
    errors: list[DocumentInfoError]


class Exported(BaseModel):
    source_path: str = Field(description="the home the knowledge bases were exported from")
    export_path: str


class KnowledgeSchema(BaseModel):
    full_bundle_schema: dict[str, Any] = Field(
        description="JSON Schema draft-07: an array whose items are oneOf the ontology's node and edge types"
    )
    example_yaml: str = Field(description="an example bundle generated from the ontology; it validates")


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


class BundleImported(BaseModel):
    status: Literal["success"]
    stats: BundleStats
    graph_version: int | None = None


class ImportedDatabase(BaseModel):
    source_path: str
    imported_kb_count: int
    imported_doc_count: int
    knowledge_bases: list[str] = Field(default_factory=list)
    renamed_knowledge_bases: list[dict[str, str]] = Field(default_factory=list)


# -- descriptions (from ../shared/specs) ---------------------------------------------------------
_RETURN = "\n\nReturn value: {success, message, data} (structured); on failure data is null and error has a code."
_WRITE = "\nOver HTTP this tool needs a token with the write capability."

_CONFINED = " Over HTTP the path must lie inside the folders the server was started with (--allow-dir)."

DESCRIPTIONS: dict[str, str] = {
    "export_database": (
        "Export every knowledge base this session can see (documents, chunks, vectors, original files and "
        "knowledge-bundle graphs) to one "
        "portable file at the specified path; import_database reads it. API keys are never exported.\n\n"
        "Parameters:\n- export_path: Export path (absolute path, required), e.g. /backups/kb.kbx\n\n"
        "data: source_path (the home), export_path." + _WRITE + _CONFINED
    ),
    "import_database": (
        "Import a file written by export_database and merge its knowledge bases into this home, all or nothing. "
        "Name conflicts are resolved by adding a timestamp to knowledge base names.\n\nParameters:\n"
        "- source_db_path: Source file path (absolute path, required)\n\n"
        "data: source_path, imported_kb_count, imported_doc_count."
        + _WRITE
        + _CONFINED
        + " Tokens scoped to specific knowledge bases cannot import."
    ),
    "create_knowledge_base": (
        "Create a new knowledge base. A knowledge base is a container for documents, and each knowledge base can "
        "have its own chunk_size and embedding configuration. After creation, you need to call select_knowledge_base "
        "to select this knowledge base before using it.\n\nParameters:\n- kb_name: Knowledge base name (required, "
        "must be unique, 1-64 characters, case-insensitive)\n- chunk_size: Chunk size in tokens (required, 32-8192, "
        "e.g. 512, 1024)\n- embedding_model: Embedding model name (optional; default all-MiniLM-L6-v2)\n"
        "- embedding_endpoint: OpenAI-compatible embedding service endpoint URL (optional)\n"
        "- embedding_api_key: Embedding service API key (optional, only with embedding_endpoint)\n\n"
        "data: kb_id, kb_name, chunk_size." + _WRITE + " Tokens scoped to specific knowledge bases cannot create new "
        "ones."
    ),
    "delete_knowledge_base": (
        "Delete the specified knowledge base. Cannot delete the currently active knowledge base. Deleting a "
        "knowledge base will cascade delete all documents and chunks under it.\n\nParameters:\n- kb_name: Knowledge "
        "base name (required)\n\ndata: kb_name (the deleted knowledge base)." + _WRITE
    ),
    "list_knowledge_bases": (
        "List all available knowledge bases. Returns detailed information about all knowledge bases, including the "
        "currently selected one.\n\nParameters: none\n\ndata: knowledge_bases (each: id, name, chunk_size, "
        "embedding_model, created_at, is_current, document_count, chunk_count), count, current_kb_id."
    ),
    "select_knowledge_base": (
        "Select a knowledge base as the currently active one for this MCP session. After selection, subsequent "
        "operations such as document import and search will be performed in this knowledge base.\n\nParameters:\n"
        "- kb_name: Knowledge base name (required)\n\ndata: kb_id, kb_name, document_count."
    ),
    "import_document": (
        "Import documents into the currently selected knowledge base (supports concurrent import of multiple files). "
        "Supports TXT, DOCX, and DOC formats. Documents are parsed, split into chunks and embedded. If the document "
        "name already exists, a timestamp is added to avoid conflicts.\n\nParameters:\n- file_paths: List of file "
        "paths (absolute paths), 1..n files (required)\n- chunk_size: Chunk size in tokens (optional, defaults to "
        "the knowledge base's chunk_size)\n\nsuccess is true if any file was imported. data: total, success_count, "
        "failed_count, success_files (file_path, doc_name, chunk_count), failed_files (file_path, error)."
        + _WRITE
        + " Over HTTP the paths must lie inside the folders the server was started with (--allow-dir)."
    ),
    "search": (
        "Perform hybrid search in the currently selected knowledge base. Combines keyword search (BM25) and vector "
        "search, merges results using a weighted approach (keyword weight 0.3, vector weight 0.7 unless the "
        "knowledge base saved other defaults; the weights given are the weights used), reranks with Jaccard "
        "similarity, and returns the top-k most relevant results. Every score lies in [0, 1], higher is better, in "
        "every mode: vector part = max(0, cosine); keyword part = 1 − exp(−BM25 / BM25 of a chunk holding each query "
        "term once); hybrid = the weighted sum.\n\nParameters:\n- query: Query text (required)\n- top_k: Number of "
        "results to return (optional, default from the knowledge base's settings, usually 5)\n- mode: hybrid | "
        "semantic | keyword (optional)\n- vector_weight, keyword_weight: 0-1 (optional; one alone sets the other "
        "to its complement)\n- weighting: fixed (the weights as given, default) | auto (scaled by how well each "
        "signal separates its top hits for this query)\n- language_guard: true (default) gives the vector signal "
        "weight 0 when the embedding model does not cover the query's language, with a warning; false keeps the "
        "requested weights\n- fusion: weighted (default) | rrf\n- expand_graph: follow knowledge-bundle edges "
        "(optional, default false): each hit on a bundle document is followed by the first chunk of every document "
        "related to it by an edge, marked expanded=true with breakdown.graph_expansion.\n\ndata: chunks (each: id, "
        "doc_id, content, tokens, chunk_index, doc_name, score, and a score breakdown that recomputes it), count, "
        "settings, weights (requested, used, and what auto weighting would use), warnings."
    ),
    "explain_search": (
        "Explain why a chunk ranks where it does for a query: its rank among the hits (searched up to 1,000 deep "
        "with the knowledge base's settings, or the ones given), its score on the 0-1 scale and every step of it "
        "(raw cosine, raw BM25 and the query's reference BM25, each normalised value, the weights used and asked, "
        "matched terms, notes such as the language guard), and the hit just above it. A chunk that is not among "
        "the hits (ranked too low, or dropped as a near-duplicate of a better-ranked chunk) is explained from its "
        "exact scores.\n\nParameters:\n- query: the query text (required)\n- chunk_id: a chunk id (chk_...) from "
        "a search hit (required)\n- mode, vector_weight, keyword_weight, weighting, language_guard, fusion: as in "
        "search (optional)\n\ndata: rank, hits, candidate_position, candidates, score, matched_terms, breakdown, "
        "above, settings, explanation (the steps as sentences; also the text content)."
    ),
    "get_knowledge_schema": (
        "Get the knowledge base validation schema. Returns the complete validation rules (JSON Schema Draft 7) of "
        "the currently selected knowledge base, generated from its ontology, used to validate the input of "
        "import_knowledge_bundle: the whole YAML file is an array of knowledge items.\n\nParameters: none\n\n"
        "data: full_bundle_schema (type array; items is a oneOf over the node and edge types; every item has a "
        "const 'type' and an 'action' upsert | delete, default upsert; nodes require their identity fields, edges "
        "require 'source' and 'target' objects with the identity fields of their endpoint types; a delete needs "
        "only the identity; no other fields are allowed) and example_yaml (an example bundle that validates). "
        "The text content is the same JSON."
    ),
    "import_knowledge_bundle": (
        "Import a knowledge bundle. Imports data from a YAML file into the currently selected knowledge base. The "
        "file is an array; each element contains:\n- type: entity type (a node or edge type name)\n- action: "
        "upsert | delete, default upsert\n- nodes: their identity fields (and other properties)\n- edges: source "
        "and target objects (the identity fields of the endpoint nodes)\n\nBefore anything changes the whole file "
        "is validated against the schema returned by get_knowledge_schema; it is then applied as one transaction, "
        "all or nothing. Upsert inserts or replaces by type plus identity; deleting a node deletes its edges. "
        "Indexed text fields (Document.content by default) become searchable documents (source 'bundle').\n\n"
        "Parameters:\n- temp_file_path: absolute path of the temporary YAML file (required)\n\nOn success the "
        "file is deleted and data is {status: 'success', stats: {nodes_upserted, nodes_deleted, edges_upserted, "
        "edges_deleted, edges_cascaded, chunks_indexed, ...}}. On a refusal the file is kept so you can fix it and "
        "retry: the error BUNDLE_INVALID lists every problem with its exact place, e.g. 'Validation error at "
        "[4].doc_uri: \"doc_uri\" is required' or \"Entity type 'Human' is not defined. Did you mean "
        "'Person'?\", and error.details.errors holds them as objects (index, path, message)." + _WRITE + _CONFINED
    ),
    "list_documents": (
        "List all documents in the currently selected knowledge base. Documents still being imported are listed too, "
        "with id null and their current status.\n\nParameters: none\n\ndata: documents (each: id, name, file_path, "
        "file_type, chunk_size, created_at, updated_at, status, chunk_count, size_bytes), count."
    ),
    "delete_document": (
        "Delete the specified document from the currently selected knowledge base. Deleting a document will cascade "
        "delete all chunks of that document.\n\nParameters:\n- doc_name: Document name (required)\n\ndata: doc_name."
        + _WRITE
    ),
    "update_document": (
        "Update the document's chunk_size and re-parse the document: existing chunks are replaced by chunks of the "
        "new size, embedded again.\n\nParameters:\n- doc_name: Document name (required)\n- chunk_size: New chunk "
        "size in tokens (required, 32-8192)\n\ndata: doc_id, doc_name, chunk_count, chunk_size." + _WRITE
    ),
    "rag_search": (
        "Search the currently selected knowledge base for passages related to several keywords at once; passages "
        "related to all keywords rank first. Degrades instead of failing: after the timeout, or when the search "
        "fails (e.g. the embedding endpoint is down or refuses the API key), it returns no chunks, degraded=true "
        "and the reason in degraded_reason and the message.\n\nParameters:\n- keywords: list of keywords (required, "
        "at least one), e.g. ['青龙', '坎宫', '用神']\n- top_k: number of results, 1-10, default 5\n"
        "- timeout: seconds, 0.1-10.0, default 3.0\n\nReturns success, chunks (chunk_text, metadata {source, "
        "chapter, page}, score on the 0-1 scale of search), total_results, degraded, degraded_reason."
    ),
    "search_knowledge_base": (
        "Semantic, keyword, or hybrid search over every knowledge base this session can see (the user's library). "
        "Returns the top matching chunks as a numbered list '1. (0.84) <document title>' with a quoted snippet; the "
        "score lies in [0, 1] (higher is better; the same scale in every mode and knowledge base, so hits of "
        "several knowledge bases are merged by it); structured content has the same hits with ids that get_item "
        "accepts and explain_search explains.\n\nParameters:\n- query: "
        "natural-language query (required)\n- limit: maximum number of chunks, 1-20, default 8\n- mode: semantic | "
        "keyword | hybrid, default hybrid.\n\nModes: semantic = vector similarity, best when the answer paraphrases "
        "the source; keyword = full-text (BM25) search, best for exact strings, names, API names and error codes; "
        "hybrid = 70% semantic + 30% keyword (or the weights a knowledge base saved as its default), catches both.\n"
        "- expand_graph: optional, default false; also list "
        "the documents related by knowledge-bundle edges to each hit on a bundle document, numbered after the hits "
        "and marked '[via EDGE_TYPE ...]' (structured: expanded=true, via).\n\nIf the embedding endpoint of a "
        "knowledge base fails, the others are still searched and the failure is reported as a warning (after the "
        "hits in the text; warnings and failed_knowledge_bases in structured content); when no knowledge base can "
        "be searched the call fails with -32603 (keyword mode needs no embeddings)."
    ),
    "get_item": (
        "Fetch the full content of a search hit: a chunk id (chk_...) gives the chunk with its neighbouring chunks; "
        "a document id (doc_...) gives the document's metadata and full parsed text; a knowledge-bundle node id "
        "(node_...) gives the node's properties and its neighbours via edges.\n\nParameters:\n- id: chunk or "
        "document id (required)\n- neighbours: chunks to include before and after a chunk, 0-10, default 1."
    ),
    "get_document_info": (
        "Metadata of up to 10 documents by id, looked up concurrently: name, original file name (file_name), file "
        "type, size in bytes and human-readable (1024-based), source (upload, path, bundle) with a readable "
        "source_label, parse status with a readable status_text (e.g. '✅ Completed', '❌ Failed: reason'), chunk "
        "count, created and updated times. Ids that cannot be found are listed in errors; success is true when any "
        "id was found.\n\n"
        "Parameters:\n- knowledge_ids: list of 1-10 document ids (doc_...), e.g. the doc_id of search hits."
    ),
}

_WRITE_ZH = "通过 HTTP 调用时需要具有写权限的令牌。"
_CONFINED_ZH = "通过 HTTP 调用时，路径必须位于服务器启动时指定的目录（--allow-dir）之内。"

# The same descriptions in Chinese (the seeds give both; users write Chinese as well as English).
DESCRIPTIONS_ZH: dict[str, str] = {
    "export_database": (
        "将本会话可见的所有知识库（文档、chunks、向量、原始文件和知识包图谱）导出到指定路径的一个可移植文件；"
        "import_database 可以读取该文件。API Key 永远不会被导出。\n\n参数说明：\n"
        "- export_path：导出路径（绝对路径，必填），例如 /backups/kb.kbx\n\n"
        "返回值 data：source_path（导出来源的主目录）、export_path。" + _WRITE_ZH + _CONFINED_ZH
    ),
    "import_database": (
        "导入一个由 export_database 写出的文件，将其中的知识库合并到当前主目录：要么全部导入，要么完全不变。"
        "重名冲突会自动处理，为知识库名称添加时间戳。\n\n参数说明：\n"
        "- source_db_path：源文件路径（绝对路径，必填）\n\n"
        "返回值 data：source_path、imported_kb_count、imported_doc_count。"
        + _WRITE_ZH
        + _CONFINED_ZH
        + "限定了知识库范围的令牌不能导入。"
    ),
    "create_knowledge_base": (
        "创建一个新的知识库。知识库是文档的容器，每个知识库可以有自己的 chunk_size 和 embedding 配置。"
        "创建后需要调用 select_knowledge_base 选择该知识库才能使用。\n\n参数说明：\n"
        "- kb_name：知识库名称（必填，必须唯一，1-64 个字符，不区分大小写）\n"
        "- chunk_size：chunk 大小，单位 token（必填，32-8192，例如 512、1024）\n"
        "- embedding_model：向量化模型名称（可选，默认 all-MiniLM-L6-v2）\n"
        "- embedding_endpoint：OpenAI 兼容的向量化服务端点 URL（可选）\n"
        "- embedding_api_key：向量化服务 API Key（可选，仅与 embedding_endpoint 一起使用）\n\n"
        "返回值 data：kb_id、kb_name、chunk_size。" + _WRITE_ZH + "限定了知识库范围的令牌不能创建新知识库。"
    ),
    "delete_knowledge_base": (
        "删除指定的知识库。不能删除当前正在使用的知识库。删除知识库会级联删除该知识库下的所有文档和 chunks。\n\n"
        "参数说明：\n- kb_name：知识库名称（必填）\n\n返回值 data：kb_name（已删除的知识库名称）。" + _WRITE_ZH
    ),
    "list_knowledge_bases": (
        "列出所有可用的知识库。返回所有知识库的详细信息，包括当前选中的知识库。\n\n参数说明：无参数\n\n"
        "返回值 data：knowledge_bases（每个知识库包含 id、name、chunk_size、embedding_model、created_at、"
        "is_current、document_count、chunk_count）、count（知识库数量）、current_kb_id（当前选中的知识库 ID）。"
    ),
    "select_knowledge_base": (
        "为当前 MCP 会话选择一个知识库作为当前使用的知识库。选择后，后续的文档导入、查询等操作都会在该知识库中进行。"
        "\n\n参数说明：\n- kb_name：知识库名称（必填）\n\n"
        "返回值 data：kb_id、kb_name、document_count（该知识库下的文档数量）。"
    ),
    "import_document": (
        "导入文档到当前选中的知识库（支持多文件并发导入）。支持 TXT、DOCX、DOC 格式。文档会被解析、切分为 chunks "
        "并生成向量。如果文档名称已存在，会自动添加时间戳避免冲突。\n\n参数说明：\n"
        "- file_paths：文件路径列表（绝对路径），支持 1~n 个文件（必填）\n"
        "- chunk_size：chunk 大小，单位 token（可选，默认使用知识库的 chunk_size）\n\n"
        "只要有文件导入成功，success 即为 true。返回值 data：total、success_count、failed_count、"
        "success_files（file_path、doc_name、chunk_count）、failed_files（file_path、error）。"
        + _WRITE_ZH
        + _CONFINED_ZH
    ),
    "search": (
        "在当前选中的知识库中进行混合检索。结合关键词检索（BM25）和向量检索，使用加权方式合并结果（关键词权重 0.3，"
        "向量权重 0.7，除非知识库保存了其他默认值；给定的权重就是实际使用的权重），用 Jaccard 相似度重排序，返回最相关"
        "的 top-k 个结果。所有模式下分数都在 [0, 1] 之间，越高越好：向量部分 = max(0, 余弦相似度)；关键词部分 = "
        "1 − exp(−BM25 / 每个查询词各出现一次的 chunk 的 BM25)；混合分数为二者的加权和。\n\n"
        "参数说明：\n- query：查询文本（必填）\n- top_k：返回数量（可选，默认取知识库的设置，通常为 5）\n"
        "- mode：hybrid | semantic | keyword（可选）\n- vector_weight、keyword_weight：0-1（可选；只给一个时另一个取"
        "其补数）\n- weighting：fixed（按给定权重，默认）| auto（按每个信号对本次查询的区分度调整权重）\n"
        "- language_guard：true（默认）时，若向量模型不支持查询的语言，则向量信号权重为 0 并给出警告；false 时保持"
        "请求的权重\n- fusion：weighted（默认）| rrf\n"
        "- expand_graph：沿知识包的边扩展（可选，默认 false）：每个命中知识包文档的结果之后，附上通过边与之相关的"
        "每个文档的第一个 chunk，标记为 expanded=true，并在 breakdown.graph_expansion 中说明。\n\n"
        "返回值 data：chunks（每个包含 id、doc_id、content、tokens、chunk_index、doc_name、score 以及可复算分数的"
        "分数明细）、count、settings、weights（请求的权重、实际使用的权重以及 auto 会使用的权重）、warnings。"
    ),
    "explain_search": (
        "解释某个 chunk 在某个查询下为什么排在这个位置：它在命中结果中的排名（按知识库的设置或给定的设置，最多检索 "
        "1000 条）、它在 0-1 分数尺度上的得分及每一步计算（原始余弦相似度、原始 BM25 及该查询的参考 BM25、各自的归一化"
        "值、实际使用和请求的权重、匹配的词、语言保护等说明），以及排在它前面的那个结果。不在命中结果中的 chunk（排名"
        "太低，或作为排名更高的 chunk 的近似重复被去掉）按其精确分数解释。\n\n参数说明：\n- query：查询文本（必填）\n"
        "- chunk_id：检索结果中的 chunk id（chk_...，必填）\n- mode、vector_weight、keyword_weight、weighting、"
        "language_guard、fusion：与 search 相同（可选）\n\n返回值 data：rank、hits、candidate_position、candidates、"
        "score、matched_terms、breakdown、above、settings、explanation（逐句说明，也是文本内容）。"
    ),
    "get_knowledge_schema": (
        "获取知识库校验 Schema。返回当前选中知识库的完整校验规则（JSON Schema Draft 7），由其本体（ontology）生成，"
        "用于校验 import_knowledge_bundle 的输入：整个 YAML 文件是一个知识条目数组。\n\n参数说明：无参数\n\n"
        "返回值 data：full_bundle_schema（type 为 array；items 是各节点类型和边类型的 oneOf；每个条目都有常量 type 和 "
        "action（upsert 或 delete，默认 upsert）；节点必须包含其 identity 字段，边必须包含 source 和 target 对象，"
        "其中是端点类型的 identity 字段；delete 只需要 identity；不允许其他字段）和 example_yaml（一个能通过校验的"
        "示例知识包）。文本内容是同样的 JSON。"
    ),
    "import_knowledge_bundle": (
        "导入知识包。从 YAML 文件导入数据到当前选中的知识库。文件格式为数组，每个元素包含：\n"
        "- type：实体类型（节点类型或边类型名称）\n- action：操作类型（upsert 或 delete），默认 upsert\n"
        "- 节点：identity 字段（以及其他属性）\n- 边：source 和 target 对象（端点节点的 identity 字段）\n\n"
        "导入前会使用 get_knowledge_schema 返回的 Schema 对整个文件进行完整校验，然后作为一个事务整体应用："
        "要么全部成功，要么完全不变。upsert 按类型加 identity 插入或替换；删除节点会同时删除它的边。"
        "被索引的文本字段（默认是 Document.content）会成为可检索的文档（来源为 bundle）。\n\n"
        "参数说明：\n- temp_file_path：临时 YAML 文件的绝对路径（必填）\n\n"
        "成功后文件会被删除，data 为 {status: 'success', stats: {nodes_upserted, nodes_deleted, edges_upserted, "
        "edges_deleted, edges_cascaded, chunks_indexed, ...}}。被拒绝时文件会保留，便于修改后重试：错误 "
        "BUNDLE_INVALID 列出每个问题及其确切位置，例如 'Validation error at [4].doc_uri: \"doc_uri\" is required' "
        "或 \"Entity type 'Human' is not defined. Did you mean 'Person'?\"，error.details.errors 以对象形式"
        "（index、path、message）给出这些问题。" + _WRITE_ZH + _CONFINED_ZH
    ),
    "list_documents": (
        "查看当前选中的知识库下的所有文档列表。正在导入的文档也会列出，其 id 为 null，status 为当前进度。\n\n"
        "参数说明：无参数\n\n返回值 data：documents（每个文档包含 id、name、file_path、file_type、chunk_size、"
        "created_at、updated_at、status、chunk_count、size_bytes）、count（文档数量）。"
    ),
    "delete_document": (
        "删除当前选中的知识库下的指定文档。删除文档会级联删除该文档的所有 chunks。\n\n参数说明：\n"
        "- doc_name：文档名称（必填）\n\n返回值 data：doc_name（已删除的文档名称）。" + _WRITE_ZH
    ),
    "update_document": (
        "修改文档的 chunk_size 并重新解析文档：原有的 chunks 会被按新大小切分的 chunks 替换，并重新生成向量。\n\n"
        "参数说明：\n- doc_name：文档名称（必填）\n- chunk_size：新的 chunk 大小，单位 token（必填，32-8192）\n\n"
        "返回值 data：doc_id、doc_name、chunk_count、chunk_size。" + _WRITE_ZH
    ),
    "rag_search": (
        "在当前选中的知识库中按多个关键词检索相关片段，与所有关键词都相关的片段排在最前。超时或检索失败（例如向量化"
        "服务不可用或拒绝了 API Key）时自动降级而不报错：返回空结果和 degraded=true，并在 degraded_reason 和 "
        "message 中说明原因，不影响主流程。\n\n参数说明：\n"
        "- keywords：检索关键词列表（必填，至少一个），例如 ['青龙', '坎宫', '用神']\n"
        "- top_k：返回结果数量，1-10，默认 5\n- timeout：超时时间（秒），0.1-10.0，默认 3.0\n\n"
        "返回值：success、chunks（chunk_text、metadata {source, chapter, page}、score，与 search 相同的 0-1 分数）、"
        "total_results、degraded、degraded_reason。"
    ),
    "search_knowledge_base": (
        "对本会话可见的所有知识库（用户的资料库）进行语义、关键词或混合检索。以编号列表 '1. (0.84) <文档标题>' "
        "加引用片段的形式返回最匹配的 chunks；分数在 [0, 1] 之间（越高越好；各模式和各知识库使用同一尺度，因此多个"
        "知识库的结果按分数合并）；结构化内容包含同样的命中结果，其 id 可传给 get_item 和 explain_search。\n\n"
        "参数说明：\n- query：自然语言查询（必填）\n- limit：返回 chunk 的最大数量，1-20，默认 8\n"
        "- mode：semantic | keyword | hybrid，默认 hybrid\n\n"
        "模式说明：semantic = 向量相似度，适合答案是对原文的转述时；keyword = 全文（BM25）检索，适合精确字符串、"
        "名称、API 名称和错误码；hybrid = 70% 语义 + 30% 关键词（或知识库保存的默认权重），两者兼顾。\n"
        "- expand_graph：可选，默认 false；对命中知识包文档的结果，同时列出通过知识包的边与之相关的文档，编号排在"
        "命中结果之后，并标记 '[via 边类型 ...]'（结构化内容中为 expanded=true 和 via）。\n\n"
        "某个知识库的向量化服务失败时，其他知识库照常检索，失败作为警告列出（文本中在命中结果之后；结构化内容中为 "
        "warnings 和 failed_knowledge_bases）；没有任何知识库能够检索时返回 -32603 错误（keyword 模式不需要向量化）。"
    ),
    "get_item": (
        "获取检索命中结果的完整内容：chunk id（chk_...）返回该 chunk 及其相邻的 chunks；文档 id（doc_...）返回文档的"
        "元数据和完整解析文本；知识包节点 id（node_...）返回节点的属性及其通过边相连的邻居。\n\n参数说明：\n"
        "- id：chunk、文档或节点的 id（必填）\n- neighbours：在 chunk 前后各包含的 chunk 数量，0-10，默认 1。"
    ),
    "get_document_info": (
        "按 id 批量获取最多 10 个文档的元数据（并发查询）：名称、原始文件名（file_name）、文件类型、文件大小（字节数"
        "及 1024 进制的可读格式）、来源（source：upload、path、bundle）及可读的来源说明（source_label）、解析状态"
        "（parse_status）及可读的状态说明（status_text，例如 '✅ Completed'、'❌ Failed: 原因'）、chunk 数量、创建和"
        "更新时间。找不到的 id 列在 errors 中；只要有一个 id 找到，success 即为 true。\n\n参数说明：\n"
        "- knowledge_ids：1-10 个文档 id（doc_...）的列表，例如检索结果中的 doc_id。"
    ),
}


def tool_description(name: str) -> str:
    """The tool's description in English, then in Chinese."""
    return DESCRIPTIONS[name] + "\n\n" + DESCRIPTIONS_ZH[name]


# -- helpers -------------------------------------------------------------------------------------
def _plain(value: Any) -> Any:
    """JSON-safe copy: numpy scalars to Python, NaN to null (the catalog is pandas/arrow)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, float):
        return None if math.isnan(value) or math.isinf(value) else value
    if value is None or isinstance(value, str | int | bool):
        return value
    if hasattr(value, "item"):
        return _plain(value.item())
    return str(value)


def _snippet(content: str, terms: Sequence[str]) -> str:
    text = " ".join(content.split())
    if len(text) <= SNIPPET_CHARS:
        return text
    folded = text.casefold()
    positions = [folded.find(t.casefold()) for t in terms if t and folded.find(t.casefold()) >= 0]
    start = max(0, min(positions) - 60) if positions else 0
    start = min(start, len(text) - SNIPPET_CHARS)
    piece = text[start : start + SNIPPET_CHARS].strip()
    return ("..." if start > 0 else "") + piece + ("..." if start + SNIPPET_CHARS < len(text) else "")


def format_hits(hits: Sequence[dict[str, Any]]) -> str:
    """The numbered list of search_knowledge_base: ``1. (0.84) <title>`` then the indented quoted snippet."""
    lines = []
    for hit in hits:
        via = f" [via {hit['via']}]" if hit.get("expanded") and hit.get("via") else ""
        lines.append(f"{hit['rank']}. ({hit['score']:.2f}) {hit['title']}{via}")
        lines.append(f'   "{hit["snippet"]}"')
    return "\n".join(lines)


def is_loopback(host: str) -> bool:
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def url_host(host: str) -> str:
    """``host`` as it appears in a URL or a Host header: IPv6 addresses in brackets, names in lower case."""
    bare = host.strip().strip("[]")
    try:
        address = ipaddress.ip_address(bare)
    except ValueError:
        return host.strip().lower()
    return f"[{address.compressed}]" if address.version == 6 else address.compressed


def transport_security(host: str, port: int, extra_hosts: Sequence[str] = ()) -> TransportSecuritySettings:
    """DNS-rebinding protection for every bind address: the Host header must name this server (the bind
    address, the loopback names, the machine's names for a wildcard bind, and ``extra_hosts``) with its port,
    and an Origin header, when sent, must be one of those over http or https."""
    names = {"127.0.0.1", "localhost", "[::1]"}
    bare = host.strip().strip("[]")
    try:
        wildcard = ipaddress.ip_address(bare).is_unspecified
    except ValueError:
        wildcard = False
    if wildcard:
        names |= {socket.gethostname().lower(), socket.getfqdn().lower()}
    else:
        names.add(url_host(host))
    names |= {url_host(extra) for extra in extra_hosts if extra.strip()}
    hosts = [f"{name}:{port}" for name in sorted(names)]
    origins = [f"{scheme}://{name}:{port}" for name in sorted(names) for scheme in ("http", "https")]
    if port in (80, 443):  # clients leave the default port out
        hosts += sorted(names)
        origins += [f"{'http' if port == 80 else 'https'}://{name}" for name in sorted(names)]
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins)


def confine_paths(file_paths: Any, allowed_dirs: Sequence[Path]) -> Any:
    """Over HTTP: every path must resolve (symlinks followed) inside an allowed folder. Returns resolved paths.

    This early check gives one clear refusal for the whole call; the service checks again on the files it
    opens (see :mod:`kb_core.safe_files`), which is what a folder swapped after this check meets."""
    if isinstance(file_paths, str) or not isinstance(file_paths, list):
        return file_paths  # the service reports the wrong type
    reject_nul(file_paths, "file_paths")
    if not allowed_dirs:
        raise PermissionDenied(
            "Importing files by path over HTTP is disabled on this server; start it with --allow-dir DIR."
        )
    allowed = ", ".join(str(d) for d in allowed_dirs)
    resolved_paths = []
    for raw in file_paths:
        if not isinstance(raw, str) or not raw.strip():
            return file_paths
        path = Path(raw).expanduser()
        if not path.is_absolute():
            raise PermissionDenied(f"{raw!r} is not an absolute path; over HTTP give absolute paths under: {allowed}.")
        resolved = Path(os.path.realpath(path))  # unlike Path.resolve, never raises on a symlink loop
        if not any(resolved.is_relative_to(d) for d in allowed_dirs):
            raise PermissionDenied(
                f"{raw!r} resolves to {resolved}, outside the folders this server may read ({allowed}); refused.",
                details={"file_path": raw},
            )
        resolved_paths.append(str(resolved))
    return resolved_paths


def confine_path(raw: Any, allowed_dirs: Sequence[Path], field: str) -> Any:
    """Like :func:`confine_paths` for one path (export target or import source)."""
    if not isinstance(raw, str) or not raw.strip():
        return raw  # the service reports it
    reject_nul(raw, field)
    if not allowed_dirs:
        raise PermissionDenied(f"{field} over HTTP is disabled on this server; start it with --allow-dir DIR.")
    return confine_paths([raw], allowed_dirs)[0]


class ServiceHolder:
    """Opens the KnowledgeBaseService once per process, at server start."""

    def __init__(self, home: str | Path | None, service: Any = None) -> None:
        self.home = home
        self._service = service
        self._lock = threading.Lock()

    def open(self, *, warm_up_first: bool = False) -> Any:
        """The service. ``warm_up_first`` (the entry points, before serving) loads what searches need before
        returning; otherwise that happens in the background."""
        with self._lock:
            if self._service is None:
                from kb_core.service import KnowledgeBaseService

                self._service = KnowledgeBaseService(self.home)
                logger.info("Opened knowledge bases in %s", self._service.home.root)
                if warm_up_first:
                    self._warm_up()
                else:
                    threading.Thread(target=self._warm_up, name="kb-mcp-warm-up", daemon=True).start()
            return self._service

    def _warm_up(self) -> None:
        # A first query embedding loads torch and the local model (about 10 s on two cores): done before the
        # first call, rag_search's timeout does not run out on it. Endpoints are not called (one that is down
        # would only delay the start); the analyzer (jieba) and each KB's indexes are loaded too.
        started = time.monotonic()
        try:
            self._service.analyzer.tokens("warm up 预热")
            records = self._service.registry.knowledge_bases()
        except Exception:
            logger.warning("Could not preload the search models; they load on first use.", exc_info=True)
            return
        for record in records:
            try:
                if self._service.postgres is None:  # a database KB has no indexes to load into memory
                    self._service.reader(record.id).snapshot()
                if not record.embedding_endpoint:
                    self._service.embedder(record).embed_query("warm up")
            except Exception:
                logger.warning("Could not preload knowledge base %r; it loads on first use", record.name, exc_info=True)
        elapsed = time.monotonic() - started
        logger.info("Loaded the models and indexes of %d knowledge base(s) in %.1f s", len(records), elapsed)


@dataclasses.dataclass
class _Caller:
    token: TokenRecord | None  # None: stdio, trusted


class _TokenVerifier:
    """The SDK's TokenVerifier protocol over :class:`TokenStore` (client_id = token id, never the token)."""

    def __init__(self, store: TokenStore) -> None:
        self.store = store

    async def verify_token(self, token: str) -> AccessToken | None:
        record = self.store.verify(token)
        if record is None:
            return None
        return AccessToken(token=record.id, client_id=record.id, scopes=[record.capability])


# -- the server ----------------------------------------------------------------------------------
class KBMCPServer:
    """Builds the FastMCP server. ``http`` switches on tokens, rate limits and path confinement."""

    def __init__(
        self,
        home: str | Path | None = None,
        *,
        http: bool = False,
        host: str = "127.0.0.1",
        port: int = DEFAULT_HTTP_PORT,
        allowed_dirs: Sequence[str | Path] = (),
        allowed_hosts: Sequence[str] = (),
        service: Any = None,
    ) -> None:
        self.holder = ServiceHolder(home, service)
        self.http = http
        self.allowed_dirs = tuple(Path(d).expanduser().resolve() for d in allowed_dirs)
        self.limiter = SlidingWindowLimiter()
        self._sessions: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
        self._sessions_lock = threading.Lock()
        self.tokens: TokenStore | None = None
        auth: dict[str, Any] = {}
        if http:
            from kb_core.config import resolve_home

            self.tokens = TokenStore(resolve_home(home))
            auth = {
                "token_verifier": _TokenVerifier(self.tokens),
                "auth": AuthSettings(issuer_url=f"http://{url_host(host)}:{port}", resource_server_url=None),
                "transport_security": transport_security(host, port, allowed_hosts),
            }
        self.tools = {tool.name: tool for tool in self._build_tools()}
        self.mcp = FastMCP(
            name="kb-workbench",
            instructions=(
                "Local knowledge bases for retrieval. Select a knowledge base (select_knowledge_base) before "
                "import/search/list_documents; search_knowledge_base searches every visible knowledge base."
            ),
            tools=list(self.tools.values()),
            lifespan=self._lifespan,
            host=host,
            port=port,
            log_level="WARNING",
            **auth,
        )
        # The SDK reports every exception inside a tool as an isError result; the JSON-RPC error codes
        # this server promises (-32602, -32603, -32605) need the tools/call request handled here.
        self.mcp._mcp_server.request_handlers[CallToolRequest] = self._dispatch_call_tool

    @asynccontextmanager
    async def _lifespan(self, _: FastMCP) -> AsyncIterator[Any]:
        # Over HTTP this runs per session; the holder opens the service only the first time.
        yield await anyio.to_thread.run_sync(self.holder.open)

    # -- per-request state ---------------------------------------------------------------------
    def _caller(self, ctx: Context) -> _Caller:
        request = ctx.request_context.request if ctx.request_context else None
        if not self.http:
            return _Caller(None)
        user = request.scope.get("user") if request is not None else None
        record = None
        if isinstance(user, AuthenticatedUser) and self.tokens is not None:
            record = self.tokens.get(user.access_token.client_id)
        if record is None:
            raise McpError(ErrorData(code=INVALID_REQUEST, message="A valid bearer token is required."))
        return _Caller(record)

    def _session(self, ctx: Context) -> Any:
        caller = self._caller(ctx)
        key = ctx.session
        token_id = caller.token.id if caller.token else None
        with self._sessions_lock:
            by_token = self._sessions.setdefault(key, {})
            session = by_token.get(token_id)
            if session is None:
                scope = caller.token.scope if caller.token else None
                allowed_dirs = self.allowed_dirs if self.http else None
                session = self.holder.open().session(scope=scope, allowed_dirs=allowed_dirs)
                by_token[token_id] = session
            return session

    async def _dispatch_call_tool(self, request: CallToolRequest) -> ServerResult:
        name = request.params.name
        arguments = request.params.arguments or {}
        tool = self.tools.get(name)
        if tool is None:
            raise McpError(
                ErrorData(code=INVALID_PARAMS, message=f"Unknown tool {name!r}; tools: {', '.join(self.tools)}.")
            )
        ctx = self.mcp.get_context()
        caller = self._caller(ctx)
        if caller.token is not None:
            retry_after = self.limiter.acquire(caller.token.id, caller.token.rate_per_hour)
            if retry_after is not None:
                raise McpError(
                    ErrorData(
                        code=RATE_LIMITED,
                        message=f"Rate limit of {caller.token.rate_per_hour} calls per hour reached for this token; "
                        f"retry in {retry_after} s.",
                        data={"retry_after_sec": retry_after, "limit_per_hour": caller.token.rate_per_hour},
                    )
                )
            if name in WRITE_TOOLS and not caller.token.can_write:
                denied = PermissionDenied(
                    f"{name} changes knowledge bases and needs a write token; this one is read-only."
                )
                return ServerResult(_result(failure(denied)))
        try:
            tool.fn_metadata.arg_model.model_validate(tool.fn_metadata.pre_parse_json(arguments))
        except ValidationError as exc:
            problems = [
                {"field": ".".join(str(p) for p in e["loc"]) or "(arguments)", "problem": e["msg"]}
                for e in exc.errors(include_url=False, include_input=False)
            ]
            text = "; ".join(f"{p['field']}: {p['problem']}" for p in problems)
            raise McpError(
                ErrorData(
                    code=INVALID_PARAMS,
                    message=f"Invalid arguments for {name}: {text}",
                    data={"code": "INVALID_ARGUMENT", "details": {"errors": problems}},
                )
            ) from None
        try:
            result = await tool.run(arguments, context=ctx, convert_result=True)
        except ToolError as exc:
            if isinstance(exc.__cause__, McpError):
                raise exc.__cause__ from None
            logger.error("Tool %s failed unexpectedly", name, exc_info=exc.__cause__ or exc)
            raise McpError(
                ErrorData(code=INTERNAL_ERROR, message=f"{name} failed because of an internal error; see the log.")
            ) from None
        return ServerResult(result)

    async def _call(
        self, ctx: Context, operation: Callable[[Any], Envelope], text: Callable[[Envelope], str] | None = None
    ) -> CallToolResult:
        session = self._session(ctx)
        envelope = await anyio.to_thread.run_sync(operation, session)
        return _result(envelope, text)

    # -- tools ---------------------------------------------------------------------------------
    def _build_tools(self) -> list[Tool]:
        server = self
        write = ToolAnnotations(readOnlyHint=False, destructiveHint=False)
        destructive = ToolAnnotations(readOnlyHint=False, destructiveHint=True)
        read = ToolAnnotations(readOnlyHint=True)

        async def create_knowledge_base(
            kb_name: Annotated[str, Field(description="unique name, 1-64 characters, case-insensitive")],
            chunk_size: Annotated[int, Field(description="chunk size in tokens, 32-8192, e.g. 512")],
            ctx: Context,
            embedding_model: Annotated[str | None, Field(description="model name; default all-MiniLM-L6-v2")] = None,
            embedding_endpoint: Annotated[str | None, Field(description="OpenAI-compatible endpoint URL")] = None,
            embedding_api_key: Annotated[str | None, Field(description="API key for the endpoint")] = None,
        ) -> Annotated[CallToolResult, ToolEnvelope[KBCreated]]:
            caller = server._caller(ctx)
            if caller.token is not None and caller.token.scope is not None:
                return _result(
                    failure(
                        PermissionDenied(
                            "This token is limited to specific knowledge bases and cannot create new ones; "
                            "use a token created with --scope all."
                        )
                    )
                )
            return await server._call(
                ctx,
                lambda s: s.create_knowledge_base(
                    kb_name, chunk_size, embedding_model, embedding_endpoint, embedding_api_key
                ),
            )

        async def delete_knowledge_base(
            kb_name: Annotated[str, Field(description="knowledge base name")], ctx: Context
        ) -> Annotated[CallToolResult, ToolEnvelope[KBNamed]]:
            return await server._call(ctx, lambda s: s.delete_knowledge_base(kb_name))

        async def list_knowledge_bases(ctx: Context) -> Annotated[CallToolResult, ToolEnvelope[KBList]]:
            return await server._call(ctx, lambda s: s.list_knowledge_bases())

        async def select_knowledge_base(
            kb_name: Annotated[str, Field(description="knowledge base name")], ctx: Context
        ) -> Annotated[CallToolResult, ToolEnvelope[KBSelected]]:
            return await server._call(ctx, lambda s: s.select_knowledge_base(kb_name))

        async def import_document(
            file_paths: Annotated[list[str], Field(description="absolute paths of .txt/.docx/.doc files, 1..n")],
            ctx: Context,
            chunk_size: Annotated[int | None, Field(description="tokens per chunk; default: the KB's")] = None,
        ) -> Annotated[CallToolResult, ToolEnvelope[ImportResult]]:
            paths: Any = file_paths
            if server.http:
                try:
                    paths = confine_paths(file_paths, server.allowed_dirs)
                except KBError as exc:
                    return _result(failure(exc))
            report = _progress_reporter(ctx)
            return await server._call(ctx, lambda s: s.import_document(paths, chunk_size, progress=report))

        async def search(
            query: Annotated[str, Field(description="query text")],
            ctx: Context,
            top_k: Annotated[
                int | None, Field(description="number of results; default from settings, usually 5")
            ] = None,
            expand_graph: Annotated[
                bool, Field(description="also return documents related to bundle hits by graph edges")
            ] = False,
            mode: Annotated[SearchMode | None, Field(description="default from settings, usually hybrid")] = None,
            vector_weight: Annotated[float | None, Field(ge=0, le=1, description=_VECTOR_WEIGHT)] = None,
            keyword_weight: Annotated[float | None, Field(ge=0, le=1, description=_KEYWORD_WEIGHT)] = None,
            weighting: Annotated[Weighting | None, Field(description=_WEIGHTING)] = None,
            language_guard: Annotated[bool | None, Field(description=_LANGUAGE_GUARD)] = None,
            fusion: Annotated[Fusion | None, Field(description="weighted (default) or rrf")] = None,
        ) -> Annotated[CallToolResult, ToolEnvelope[SearchResult]]:
            return await server._call(
                ctx,
                lambda s: s.search(
                    query,
                    top_k=top_k,
                    expand_graph=expand_graph,
                    mode=mode,
                    vector_weight=vector_weight,
                    keyword_weight=keyword_weight,
                    weighting=weighting,
                    language_guard=language_guard,
                    fusion=fusion,
                ),
            )

        async def explain_search(
            query: Annotated[str, Field(description="the query text")],
            chunk_id: Annotated[str, Field(description="a chunk id (chk_...) from a search hit")],
            ctx: Context,
            mode: Annotated[SearchMode | None, Field(description="default from settings, usually hybrid")] = None,
            vector_weight: Annotated[float | None, Field(ge=0, le=1, description=_VECTOR_WEIGHT)] = None,
            keyword_weight: Annotated[float | None, Field(ge=0, le=1, description=_KEYWORD_WEIGHT)] = None,
            weighting: Annotated[Weighting | None, Field(description=_WEIGHTING)] = None,
            language_guard: Annotated[bool | None, Field(description=_LANGUAGE_GUARD)] = None,
            fusion: Annotated[Fusion | None, Field(description="weighted (default) or rrf")] = None,
        ) -> Annotated[CallToolResult, ToolEnvelope[SearchExplanation]]:
            return await server._call(
                ctx,
                lambda s: s.explain_search(
                    query,
                    chunk_id,
                    mode=mode,
                    vector_weight=vector_weight,
                    keyword_weight=keyword_weight,
                    weighting=weighting,
                    language_guard=language_guard,
                    fusion=fusion,
                ),
                lambda e: e["message"],
            )

        async def list_documents(ctx: Context) -> Annotated[CallToolResult, ToolEnvelope[DocumentList]]:
            return await server._call(ctx, lambda s: s.list_documents())

        async def delete_document(
            doc_name: Annotated[str, Field(description="document name")], ctx: Context
        ) -> Annotated[CallToolResult, ToolEnvelope[DocNamed]]:
            return await server._call(ctx, lambda s: s.delete_document(doc_name))

        async def update_document(
            doc_name: Annotated[str, Field(description="document name")],
            chunk_size: Annotated[int, Field(description="new chunk size in tokens, 32-8192")],
            ctx: Context,
        ) -> Annotated[CallToolResult, ToolEnvelope[DocUpdated]]:
            report = _progress_reporter(ctx)
            return await server._call(ctx, lambda s: s.update_document(doc_name, chunk_size, progress=report))

        async def rag_search(
            keywords: Annotated[
                list[str],
                Field(description="keywords, e.g. ['青龙', '坎宫', '用神']", json_schema_extra={"minItems": 1}),
            ],
            ctx: Context,
            top_k: Annotated[int, Field(ge=1, le=10, description="number of results, 1-10")] = 5,
            timeout: Annotated[
                float, Field(ge=0.1, le=10.0, description="seconds before degrading to no results")
            ] = 3.0,
        ) -> Annotated[CallToolResult, RagEnvelope]:
            return await server._call(ctx, lambda s: s.rag_search(keywords, top_k=top_k, timeout=timeout))

        async def search_knowledge_base(
            query: Annotated[str, Field(description="natural-language query to search for")],
            ctx: Context,
            limit: Annotated[int, Field(ge=1, le=20, description="maximum number of chunks, 1-20")] = 8,
            mode: Annotated[Literal["semantic", "keyword", "hybrid"], Field(description="search mode")] = "hybrid",
            expand_graph: Annotated[
                bool, Field(description="also list documents related to bundle hits by graph edges")
            ] = False,
        ) -> Annotated[CallToolResult, ToolEnvelope[HitList]]:
            return await server._call(ctx, lambda s: _search_library(s, query, limit, mode, expand_graph), _hits_text)

        async def get_item(
            id: Annotated[str, Field(description="chunk id (chk_...), document id (doc_...) or node id (node_...)")],
            ctx: Context,
            neighbours: Annotated[int, Field(ge=0, le=10, description="chunks before/after a chunk")] = 1,
        ) -> Annotated[CallToolResult, ToolEnvelope[Item]]:
            return await server._call(ctx, lambda s: s.get_item(id, neighbours=neighbours))

        async def get_document_info(
            knowledge_ids: Annotated[
                list[str],
                Field(description="1-10 document ids (doc_...)", json_schema_extra={"minItems": 1, "maxItems": 10}),
            ],
            ctx: Context,
        ) -> Annotated[CallToolResult, ToolEnvelope[DocumentInfoResult]]:
            return await server._call(ctx, lambda s: s.get_document_info(knowledge_ids), lambda e: e["message"])

        async def export_database(
            export_path: Annotated[str, Field(description="absolute path of the file to write")], ctx: Context
        ) -> Annotated[CallToolResult, ToolEnvelope[Exported]]:
            from kb_core.transfer import export_database as export

            path: Any = export_path
            if server.http:
                try:
                    path = confine_path(export_path, server.allowed_dirs, "export_path")
                except KBError as exc:
                    return _result(failure(exc))
            return await server._call(ctx, lambda s: export(s, path))

        async def import_database(
            source_db_path: Annotated[str, Field(description="absolute path of a file written by export_database")],
            ctx: Context,
        ) -> Annotated[CallToolResult, ToolEnvelope[ImportedDatabase]]:
            from kb_core.transfer import import_database as merge

            caller = server._caller(ctx)
            path: Any = source_db_path
            try:
                if caller.token is not None and caller.token.scope is not None:
                    raise PermissionDenied(
                        "This token is limited to specific knowledge bases and cannot import new ones; "
                        "use a token created with --scope all."
                    )
                if server.http:
                    path = confine_path(source_db_path, server.allowed_dirs, "source_db_path")
            except KBError as exc:
                return _result(failure(exc))
            return await server._call(ctx, lambda s: merge(s, path))

        async def get_knowledge_schema(ctx: Context) -> Annotated[CallToolResult, ToolEnvelope[KnowledgeSchema]]:
            return await server._call(ctx, lambda s: s.get_knowledge_schema(), _schema_text)

        async def import_knowledge_bundle(
            temp_file_path: Annotated[
                str, Field(description="absolute path of the YAML bundle file; deleted after a successful import")
            ],
            ctx: Context,
        ) -> Annotated[CallToolResult, ToolEnvelope[BundleImported]]:
            path: Any = temp_file_path
            if server.http:
                try:
                    path = confine_path(temp_file_path, server.allowed_dirs, "temp_file_path")
                except KBError as exc:
                    return _result(failure(exc))
            return await server._call(ctx, lambda s: s.import_knowledge_bundle(path, delete_file=True))

        functions: list[tuple[Callable[..., Any], ToolAnnotations]] = [
            (create_knowledge_base, write),
            (delete_knowledge_base, destructive),
            (list_knowledge_bases, read),
            (select_knowledge_base, read),
            (import_document, write),
            (search, read),
            (explain_search, read),
            (list_documents, read),
            (delete_document, destructive),
            (update_document, write),
            (rag_search, read),
            (search_knowledge_base, read),
            (get_item, read),
            (get_document_info, read),
            (export_database, write),
            (import_database, write),
            (get_knowledge_schema, read),
            (import_knowledge_bundle, write),
        ]
        return [
            Tool.from_function(
                fn, description=tool_description(fn.__name__), annotations=annotations, structured_output=True
            )
            for fn, annotations in functions
        ]

    # -- transports ----------------------------------------------------------------------------
    async def run_stdio(self, protocol_out: Any = None) -> None:
        """Serve on stdin and ``protocol_out`` (default: stdout)."""
        from mcp.server.stdio import stdio_server

        lowlevel = self.mcp._mcp_server
        async with stdio_server(stdout=protocol_out) as (read_stream, write_stream):
            await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())

    def http_app(self) -> Any:
        """The Starlette app of the streamable HTTP transport (endpoint /mcp)."""
        return self.mcp.streamable_http_app()


def _result(envelope: Envelope, text: Callable[[Envelope], str] | None = None) -> CallToolResult:
    """The CallToolResult of an envelope, or a JSON-RPC error for INVALID_ARGUMENT / INTERNAL_ERROR."""
    envelope = _plain(envelope)
    if envelope.get("success"):
        body = text(envelope) if text else _default_text(envelope)
        return CallToolResult(content=[TextContent(type="text", text=body)], structuredContent=envelope, isError=False)
    error = envelope.get("error") or {"code": "INTERNAL_ERROR", "details": {}}
    envelope["error"] = error
    if error["code"] == "INVALID_ARGUMENT":
        raise McpError(ErrorData(code=INVALID_PARAMS, message=envelope["message"], data=error))
    if error["code"] == "INTERNAL_ERROR":
        data = {"code": "INTERNAL_ERROR", **({"details": error["details"]} if error.get("details") else {})}
        raise McpError(ErrorData(code=INTERNAL_ERROR, message=envelope["message"], data=data))
    body = f"{error['code']}: {envelope['message']}"
    return CallToolResult(content=[TextContent(type="text", text=body)], structuredContent=envelope, isError=True)


def _default_text(envelope: Envelope) -> str:
    data = envelope.get("data")
    if data is None:
        return envelope["message"]
    return envelope["message"] + "\n" + json.dumps(data, ensure_ascii=False, default=str)


def _hits_text(envelope: Envelope) -> str:
    hits = envelope["data"]["hits"]
    if not hits:
        return envelope["message"]
    warnings = envelope["data"].get("warnings") or []
    return format_hits(hits) + "".join(f"\n\nWarning: {w}" for w in warnings)


def _schema_text(envelope: Envelope) -> str:
    """The spec's tool returns the schema as JSON text; so does ours (structured content has it too)."""
    return json.dumps(envelope["data"], ensure_ascii=False, indent=2)


def _search_library(session: Any, query: str, limit: int, mode: str, expand_graph: bool = False) -> Envelope:
    """search_knowledge_base: every KB the session sees; hybrid uses each KB's saved weights (default 70% semantic +
    30% keyword). Scores lie in [0, 1]."""
    from kb_core.envelope import enveloped, ok

    @enveloped
    def search_knowledge_base() -> Envelope:
        kb_ids = [r.id for r in session.visible_kbs()]
        hits, warnings, skipped = [], [], []
        if kb_ids:
            try:
                outcome = session.run_search(query, kb_ids=kb_ids, top_k=limit, mode=mode, skipped=skipped)
                hits, warnings = outcome.hits, outcome.warnings
            except EmbeddingError as exc:
                # search-knowledge-base.md: an embedding failure is -32603; here only when no KB could be searched.
                reasons = "; ".join(f"knowledge base '{s['kb_name']}': {s['message']}" for s in skipped)
                raise KBError(
                    f"search_knowledge_base could not embed the query for any knowledge base ({reasons}). "
                    "Keyword mode does not need embeddings.",
                    code="INTERNAL_ERROR",
                    details={"cause": exc.code, "failed_knowledge_bases": skipped},
                ) from exc
        elif not isinstance(query, str) or not query.strip():
            session.run_search(query)  # raises the service's INVALID_ARGUMENT
        found = [hit.to_json(False) for hit in hits[:limit]]
        if expand_graph and found:
            found = session.expand_hits(found)
        rows = [
            {
                "rank": rank,
                "id": hit["id"],
                "doc_id": hit["doc_id"],
                "title": hit.get("doc_name") or hit["doc_id"],
                "kb_name": hit.get("kb_name"),
                "score": round(float(hit["score"]), 4),
                "snippet": _snippet(hit["content"], hit.get("matched_terms") or ()),
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
        if warnings:
            message += " " + " ".join(warnings)
        return ok(
            message,
            {
                "hits": rows,
                "count": len(rows),
                "mode": mode,
                "limit": limit,
                "warnings": warnings,
                "failed_knowledge_bases": skipped,
            },
        )

    return search_knowledge_base()


def _via(hit: dict[str, Any]) -> str | None:
    """``REFERENCES from Document doc_uri=doc-001`` for a hit added by graph expansion."""
    if not hit.get("expanded"):
        return None
    link = (hit.get("breakdown") or {}).get("graph_expansion") or {}
    notes = (hit.get("breakdown") or {}).get("notes") or []
    prefix = "added by graph expansion: "
    note = next((n for n in notes if isinstance(n, str) and n.startswith(prefix)), None)
    return note[len(prefix) :] if note else link.get("edge_type")


def _progress_reporter(ctx: Context) -> Callable[[Any], None] | None:
    """Forward import progress as MCP progress notifications when the client asked for them."""
    meta = ctx.request_context.meta if ctx.request_context else None
    if meta is None or meta.progressToken is None:
        return None

    def report(progress: Any) -> None:
        try:
            message = f"{progress.files_done}/{progress.files_total} files, {progress.chunks_embedded} chunks embedded"
            anyio.from_thread.run(ctx.report_progress, float(progress.files_done), float(progress.files_total), message)
        except Exception:
            logger.debug("Could not send a progress notification", exc_info=True)

    return report


# -- entry points --------------------------------------------------------------------------------
def serve_stdio(home: str | Path | None = None) -> None:
    """Serve on stdio. From here on, stray writes to stdout (ours, a library's, a C extension's) go to
    stderr: file descriptor 1 is pointed at stderr and the protocol keeps a private copy of the old one."""
    protocol_out = anyio.wrap_file(TextIOWrapper(os.fdopen(os.dup(1), "wb"), encoding="utf-8"))
    sys.stdout.flush()
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    server = KBMCPServer(home)
    server.holder.open(warm_up_first=True)
    anyio.run(server.run_stdio, protocol_out)


def listening_socket(host: str, port: int, allow_remote: bool = False) -> socket.socket:
    """A TCP socket bound to ``host`` (an address, ``[v6]`` or a name) and ``port``, not yet listening.

    Raises InvalidArgument for a malformed port or host, PermissionDenied for an address other machines can
    reach without ``allow_remote`` (checked on what the name resolves to), and KBError ``CANNOT_LISTEN``
    when the address cannot be bound (in use, not this machine's, a privileged port)."""
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise InvalidArgument(f"--port must be between 1 and 65535, got {port!r}.")
    text = host.strip()
    if text.startswith("[") or text.endswith("]"):
        inner = text[1:-1] if text.startswith("[") and text.endswith("]") else ""
        try:
            text = ipaddress.IPv6Address(inner).compressed
        except ValueError:
            raise InvalidArgument(
                f"--host {host!r} is not a valid address; write an IPv6 address as ::1 or [::1]."
            ) from None
    if not text:
        raise InvalidArgument("--host must not be empty; the default is 127.0.0.1.")
    try:
        found = socket.getaddrinfo(text, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as exc:
        reason = exc.strerror if isinstance(exc, socket.gaierror) and exc.strerror else str(exc)
        raise InvalidArgument(f"Cannot listen on {host!r}: the name does not resolve ({reason}).") from None
    addresses = [info for info in found if info[0] in (socket.AF_INET, socket.AF_INET6)]
    if not addresses:
        raise InvalidArgument(f"Cannot listen on {host!r}: it resolves to no IPv4 or IPv6 address.")
    remote = [str(info[4][0]) for info in addresses if not ipaddress.ip_address(str(info[4][0])).is_loopback]
    if remote and not allow_remote:
        raise PermissionDenied(
            f"Refusing to listen on {host!r} ({remote[0]}), which is reachable from other machines; "
            "pass --allow-remote to do so."
        )
    family, kind, proto, _, address = addresses[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        where = f"{url_host(str(address[0]))}:{port}"
        if exc.errno == errno.EADDRINUSE:
            reason = f"port {port} is already in use (another server?); choose another with --port"
        elif exc.errno == errno.EACCES:
            reason = "permission denied (ports below 1024 need privileges); choose another with --port"
        elif exc.errno == errno.EADDRNOTAVAIL:
            reason = "the address does not belong to this machine"
        else:
            reason = exc.strerror or str(exc)
        raise KBError(f"Cannot listen on {where}: {reason}.", code="CANNOT_LISTEN") from None
    return sock


def serve_http(
    home: str | Path | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = DEFAULT_HTTP_PORT,
    allowed_dirs: Sequence[str | Path] = (),
    allow_remote: bool = False,
    allowed_hosts: Sequence[str] = (),
) -> None:
    """Serve streamable HTTP at http://HOST:PORT/mcp. A non-loopback host needs ``allow_remote``;
    ``allowed_hosts`` adds names clients may use in the Host header (see :func:`transport_security`)."""
    import uvicorn

    for folder in allowed_dirs:
        if not Path(folder).expanduser().is_dir():
            raise KBError(f"--allow-dir {folder!r} is not a folder.", code="INVALID_ARGUMENT")
    sock = listening_socket(host, port, allow_remote)
    try:
        bound = url_host(str(sock.getsockname()[0]))
        names = [*allowed_hosts, host]  # the name given to --host is one clients use too
        server = KBMCPServer(home, http=True, host=bound, port=port, allowed_dirs=allowed_dirs, allowed_hosts=names)
        server.holder.open(warm_up_first=True)
        logger.warning("MCP server listening on http://%s:%d/mcp", bound, port)
        uvicorn.Server(uvicorn.Config(server.http_app(), log_level="warning")).run(sockets=[sock])
    finally:
        sock.close()
