"""The store protocol: what the service and the session ask of a store, whichever holds the knowledge bases.

Two stores implement it: the folder store (:mod:`kb_core.store.folder`, over the home's registry, manifests and
segments) and PostgreSQL (:mod:`kb_core.store.postgres.backend`). :func:`kb_core.store.factory.open_store` chooses
one, once per service, from the home and the optional database URL (as txtai's factories choose an ANN or a
database backend from configuration); the session and the features reach the KBs through these protocols (a few
folder-only operations still go through :class:`FolderAccess`, which PostgreSQL refuses by name). Both stores
keep the semantics each docstring states, so a caller never needs to know which one it holds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from kb_core.base.errors import KBError

if TYPE_CHECKING:
    import numpy as np

    from kb_core.engines.analysis import Analyzer
    from kb_core.engines.fusion import CandidateArrays
    from kb_core.engines.keyword_index import RowTerms
    from kb_core.engines.near_duplicates import TextSignatures
    from kb_core.store.folder_sink import SegmentWriter
    from kb_core.store.kb_store import KBStore
    from kb_core.store.postgres import PostgresStore
    from kb_core.store.reader import KBReader
    from kb_core.store.registry import Home, KnowledgeBaseRecord
    from kb_core.store.sink import DocumentSink
    from kb_core.store.tokens import TokenRecord

    # What a feature's PostgreSQL half is given by Store.choose; features name it from here, not from store.postgres.
    Database = PostgresStore

__all__ = [
    "POSTGRES_OPERATIONS",
    "CandidateRequest",
    "FolderAccess",
    "KBStorage",
    "NotOnPostgres",
    "RowKey",
    "Searcher",
    "Store",
    "TokenStorage",
]

T = TypeVar("T")

# A chunk row inside one read view: (part, row); the folder store's part is a segment, PostgreSQL has one part.
RowKey = tuple[int, int]

# What a service on a PostgreSQL store does so far; everything else answers NOT_ON_POSTGRES (issue #16).
POSTGRES_OPERATIONS = (
    "create, list, select and delete knowledge bases; import, list, update and delete documents, list their "
    "chunks, get items and document info; search, explain_search, rag_search and saved search settings; "
    "knowledge bundles, ontologies and the graph; tokens; export and import-db; evaluating a KB (kb eval --kb)"
)


class NotOnPostgres(KBError):
    code = "NOT_ON_POSTGRES"


@dataclass(frozen=True)
class CandidateRequest:
    """What :func:`kb_core.features.retrieval.search.rank` asks a :class:`Searcher` for, computed once from the search
    settings and filters, so the stores need neither.

    ``fetch`` rows are over-fetched from each signal the ``mode`` uses (``query`` for the keyword index, ``vector``
    for the vector index); ``extra_keys`` are rows to explain, added with their scores on both signals. The two
    prefixes are hints a store may use or ignore without changing the ranking: ``keyword_prefix`` (keyword-only
    ranking that reads only its first rows) and ``semantic_prefix`` (semantic ranking likewise).
    ``documents_wanted``: the caller asks :meth:`Searcher.document_of` for every candidate (a filtered search).
    """

    query: str
    vector: np.ndarray | None
    mode: str
    fetch: int
    extra_keys: tuple[RowKey, ...] = ()
    keyword_prefix: int | None = None
    semantic_prefix: int | None = None
    documents_wanted: bool = False


class Searcher(Protocol):
    """One consistent read view of a KB, as ranking reads it (valid while its :meth:`KBStorage.searcher` is open)."""

    kb_id: str
    embedding_model: str
    analyzer: Analyzer

    @property
    def empty(self) -> bool:
        """True when the view holds no live chunk (a search answers "no documents yet")."""
        ...

    @property
    def warnings(self) -> list[str]:
        """What the user should hear about this view (e.g. a standby that lags); empty for most."""
        ...

    def candidates(self, request: CandidateRequest) -> tuple[CandidateArrays, RowTerms]:
        """Over-fetched candidates of both signals as columns: the keyword list, then vector hits it lacks, then
        ``request.extra_keys``. In hybrid mode every candidate is scored on both signals, otherwise only the rows
        to explain are. Also what is known of each row's terms (in candidate order), so neither the Jaccard term
        nor the matched terms need the chunk text."""
        ...

    def keyword_reference(self, terms: Sequence[str]) -> float:
        """The keyword score scale of the query ``terms`` (those :meth:`candidates` looked up)."""
        ...

    def document_of(self, key: RowKey, doc_id: str | None = None) -> dict[str, Any]:
        """The catalog row of the document holding chunk row ``key`` (``doc_id``: that chunk's document, when the
        caller has read it, which spares a lookup)."""
        ...

    def rows_with_signatures(self, keys: Sequence[RowKey]) -> tuple[list[dict[str, Any]], TextSignatures]:
        """The chunk rows of ``keys``, in their order, with their near-duplicate signatures."""
        ...

    def locate(self, chunk_id: str) -> RowKey | None:
        """The key of the live chunk ``chunk_id`` in this view, or None."""
        ...


class KBStorage(Protocol):
    """One knowledge base of a store. Reads are as of now (each call sees every commit made before it, by any
    process); a KB deleted meanwhile reads as :class:`~kb_core.base.errors.KBNotFound` unless a method says
    otherwise."""

    record: KnowledgeBaseRecord

    def counts(self) -> tuple[int, int, int]:
        """(documents imported, live chunks, files whose import failed); (0, 0, 0) for a KB deleted meanwhile. A
        failed import is kept as a row with its reason (the Documents page lists it) but is no document (#34)."""
        ...

    def version(self) -> int:
        """The committed version: every commit (import, deletion, compaction) by any process changes it."""
        ...

    def documents(self) -> list[dict[str, Any]]:
        """The documents (ready and failed) as catalog rows."""
        ...

    def document(self, doc_id: str) -> dict[str, Any] | None:
        """The catalog row of ``doc_id``, or None when this KB does not hold it."""
        ...

    def document_chunks(self, document: dict[str, Any]) -> list[dict[str, Any]]:
        """The chunk rows of ``document`` (a row of :meth:`documents`), in chunk order; [] when it is gone."""
        ...

    def find_item(self, item_id: str, neighbours: int) -> dict[str, Any] | None:
        """The document (``doc_…``: ``{type: "document", row, text}``) or live chunk (``{type: "chunk", doc_name,
        chunk, previous, next}`` with up to ``neighbours`` chunk rows either side in its document) of that id;
        None when this KB holds neither."""
        ...

    def has_chunk(self, chunk_id: str) -> bool:
        """Whether a live chunk has that id."""
        ...

    def in_flight(self) -> list[dict[str, Any]]:
        """The documents of imports still running (``file_path``, ``status``, optional ``name``): on PostgreSQL
        those of every host."""
        ...

    def delete_document(self, document: dict[str, Any]) -> None:
        """Delete ``document`` (a row of :meth:`documents`) and its chunks in one commit."""
        ...

    def import_staging(self) -> Path:
        """A new (not yet created) private folder for the copies an import works on."""
        ...

    def sink(
        self, *, embedder: Any, analyzer: Analyzer, segment_writer: SegmentWriter, executor: str | None = None
    ) -> DocumentSink:
        """Where an import into this KB commits. ``segment_writer`` writes a staged segment in a worker process
        (where the store writes segments); ``executor``: the name of the executor that parses and embeds
        elsewhere, or None for this process (:class:`NotOnPostgres` where the store cannot take its results)."""
        ...

    def preload(self) -> None:
        """Load what searches read into memory, where the store keeps it there (the folder store's indexes)."""
        ...

    def searcher(self, analyzer: Analyzer) -> AbstractContextManager[Searcher]:
        """A consistent read view to rank in. It may hold a database transaction while open: compute query vectors
        before opening it when :attr:`embed_before_search` says so."""
        ...

    @property
    def embed_before_search(self) -> bool:
        """True when :meth:`searcher` holds a transaction, so no model or endpoint may work while it is open."""
        ...

    def compact(self, analyzer: Analyzer, everything: bool) -> dict[str, int]:
        """Merge segments (:class:`NotOnPostgres` where the store needs no compaction)."""
        ...

    def compact_quietly(self, analyzer: Analyzer) -> None:
        """Compaction after an import: best effort, never raises (a store that needs none does nothing)."""
        ...


class TokenStorage(Protocol):
    """The MCP bearer tokens of a store (only each token's hash is kept)."""

    def list(self) -> list[TokenRecord]: ...

    def get(self, token_id: str) -> TokenRecord | None: ...

    def create(self, scope: Sequence[str] | None, capability: str, rate_per_hour: int = ...) -> tuple[str, TokenRecord]:
        """A new token: (the token, shown once; its record). ``scope``: KB ids, or None for all."""
        ...

    def revoke(self, token_id: str) -> TokenRecord:
        """Revoke a token (``TOKEN_NOT_FOUND`` when there is none with that id)."""
        ...

    def verify(self, token: str) -> TokenRecord | None:
        """The record of a presented token, or None when it is unknown or revoked."""
        ...


# A feature's own check of one folder KB (the bundle index against its graph: kb_core.features.bundles.indexing): a
# problem as a sentence, or None.
KBCheck = Callable[["KBStore"], "str | None"]


class FolderAccess(Protocol):
    """What only the folder store offers: each KB's writer side and its reader (one per KB for the process)."""

    def kb_store(self, kb_id: str) -> KBStore: ...

    def reader(self, kb_id: str) -> KBReader: ...


class Store(Protocol):
    """Where the knowledge bases of a service live: their registry, each KB's storage, tokens and consistency."""

    display: str
    home: Home  # the per-user folder (the CLI's current KB, embedding cache, evaluation runs; the folder store's KBs)

    @property
    def tokens(self) -> TokenStorage:
        """The MCP bearer tokens: in the home (``tokens.json``), or in the database, shared by every host."""
        ...

    @property
    def postgres(self) -> PostgresStore | None:
        """The database, for tests and tools that reach it directly (no feature reads it: they go through
        :meth:`choose`); None for the folder store."""
        ...

    def knowledge_bases(self) -> list[KnowledgeBaseRecord]: ...

    def get(self, kb_id: str) -> KnowledgeBaseRecord: ...

    def api_key(self, kb_id: str) -> str | None: ...

    def update_search_settings(self, kb_id: str, settings: Mapping[str, Any]) -> KnowledgeBaseRecord: ...

    def create_knowledge_base(
        self,
        name: str,
        chunk_size: int,
        model: str,
        *,
        analyzer: str,
        embedding_endpoint: str | None,
        api_key: str | None,
    ) -> KnowledgeBaseRecord:
        """Register a new KB; :class:`~kb_core.base.errors.KBExists` when the name (ignoring case) is taken, decided
        atomically (under the registry lock, or by the database's unique name key)."""
        ...

    def delete_knowledge_base(self, record: KnowledgeBaseRecord) -> None: ...

    def kb(self, record: KnowledgeBaseRecord) -> KBStorage:
        """The storage of ``record``'s KB (cheap: the folder store keeps one reader per KB for the process)."""
        ...

    def folder(self) -> FolderAccess:
        """The folder store, for the operations only it offers (its KB stores and readers); PostgreSQL raises
        :class:`NotOnPostgres` naming what it can do."""
        ...

    @property
    def subject(self) -> str:
        """How messages name the store: "home", or "store URL"."""
        ...

    @property
    def label(self) -> str:
        """What ``kb info`` shows as the store: "folder (the home)", or the database URL without its password."""
        ...

    def verify(self, kb_checks: Sequence[KBCheck] = ()) -> list[str]:
        """Every consistency problem of every KB, each a sentence; ``kb_checks`` are the features' own checks of
        a folder KB (PostgreSQL checks its rows in SQL and commits a bundle's documents and graph together)."""
        ...

    def interrupted_bundle_indexes(self, check: KBCheck) -> Iterator[KnowledgeBaseRecord]:
        """KBs whose bundle index was committed without its graph, by the bundles feature's ``check`` (folder store
        only: PostgreSQL commits both in one transaction)."""
        ...

    def remove_abandoned_staging(self) -> list[Path]:
        """Remove the staging folders of import-db runs that did not finish; the folders removed."""
        ...

    def document_ids(self) -> set[str]:
        """The ids of every document of every KB (an import of an export file keeps ids only where none clash)."""
        ...

    def choose(self, *, folder: Callable[[], T], postgres: Callable[[Database], T]) -> T:
        """The feature's own half for this store: ``folder()`` on the folder store, ``postgres(database)`` on
        PostgreSQL. Where a feature works differently per store (a bundle's commit, an export's consistent read,
        an import-db commit) it gives both halves here, so the store answers which one runs and no feature asks
        which store it holds (the store layer stays below the features: it imports neither half)."""
        ...

    def close(self) -> None: ...
