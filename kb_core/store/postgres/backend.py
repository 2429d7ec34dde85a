"""PostgreSQL behind the store protocol (:mod:`kb_core.store.base`): :class:`PostgresBackend` (the registry, tokens
and consistency of the database) and :class:`PostgresKB` (one KB's documents, chunks, items and searches, each
read in its own snapshot), over :class:`~kb_core.store.postgres.store.PostgresStore`."""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kb_core.base.errors import KBNotFound
from kb_core.base.removal import own_folder
from kb_core.store.base import POSTGRES_OPERATIONS, FolderAccess, KBCheck, NotOnPostgres
from kb_core.store.postgres.records import StoreChange
from kb_core.store.postgres.searching import PostgresSearcher
from kb_core.store.postgres.store import PostgresStore
from kb_core.store.registry import Home, KnowledgeBaseRecord

if TYPE_CHECKING:
    from kb_core.engines.analysis import Analyzer
    from kb_core.store.base import T
    from kb_core.store.folder_sink import SegmentWriter
    from kb_core.store.postgres.importing import PostgresSink
    from kb_core.store.postgres.tokens import PostgresTokenStore

__all__ = ["PostgresBackend", "PostgresKB"]

logger = logging.getLogger(__name__)


class PostgresBackend:
    """The KBs of one PostgreSQL database (:class:`kb_core.store.base.Store`), shared by every process and host
    pointed at it; ``home`` keeps only what is local to this process's user (import copies among it)."""

    def __init__(self, database: PostgresStore, home: Home) -> None:
        self.database = database
        self.home = home
        self.display = database.display

    @property
    def postgres(self) -> PostgresStore:
        return self.database

    @property
    def subject(self) -> str:
        return f"store {self.display}"

    @property
    def label(self) -> str:
        return self.display  # the URL without the password

    @cached_property
    def tokens(self) -> PostgresTokenStore:
        from kb_core.store.postgres.tokens import PostgresTokenStore

        return PostgresTokenStore(self.database)

    def close(self) -> None:
        self.database.close()

    # -- the registry ------------------------------------------------------------------------
    def knowledge_bases(self) -> list[KnowledgeBaseRecord]:
        return self.database.knowledge_bases()

    def get(self, kb_id: str) -> KnowledgeBaseRecord:
        return self.database.get(kb_id)

    def api_key(self, kb_id: str) -> str | None:
        return self.database.api_key(kb_id)

    def update_search_settings(self, kb_id: str, settings: Mapping[str, Any]) -> KnowledgeBaseRecord:
        return self.database.update_search_settings(kb_id, settings)

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
        # the database's unique name key refuses a name taken meanwhile
        return self.database.create_knowledge_base(
            name, chunk_size, model, analyzer=analyzer, embedding_endpoint=embedding_endpoint, api_key=api_key
        )

    def delete_knowledge_base(self, record: KnowledgeBaseRecord) -> None:
        self.database.delete_knowledge_base(record.id)

    # -- KBs ---------------------------------------------------------------------------------
    def kb(self, record: KnowledgeBaseRecord) -> PostgresKB:
        return PostgresKB(self, record)

    def folder(self) -> FolderAccess:
        raise NotOnPostgres(
            f"This operation is not available on the PostgreSQL store ({self.display}) yet; there the "
            f"workbench can {POSTGRES_OPERATIONS}. Use a folder store (the default) for the rest."
        )

    # -- consistency -------------------------------------------------------------------------
    def verify(self, kb_checks: Sequence[KBCheck] = ()) -> list[str]:
        """Statistics, postings and rows recomputed and compared, KB by KB (``kb_checks`` are folder checks)."""
        return [f"{r.name}: {p}" for r in self.database.knowledge_bases() for p in self.database.verify(r.id)]

    def interrupted_bundle_indexes(self, check: KBCheck) -> Iterator[KnowledgeBaseRecord]:
        return iter(())  # a bundle's documents and graph commit in one transaction

    def remove_abandoned_staging(self) -> list[Path]:
        # import-db unpacks its file into the home on PostgreSQL too, before one transaction commits it
        return self.home.abandoned_transfer_staging(remove=True)

    def document_ids(self) -> set[str]:
        return self.database.document_ids()

    def choose(self, *, folder: Callable[[], T], postgres: Callable[[PostgresStore], T]) -> T:
        return postgres(self.database)


class PostgresKB:
    """One KB of a PostgreSQL store (:class:`kb_core.store.base.KBStorage`): each read is one snapshot."""

    embed_before_search = True  # a searcher holds a transaction: no model or endpoint may work inside it

    def __init__(self, backend: PostgresBackend, record: KnowledgeBaseRecord) -> None:
        self.backend = backend
        self.database = backend.database
        self.record = record

    def counts(self) -> tuple[int, int, int]:
        try:
            with self.database.snapshot(self.record.id) as snapshot:
                documents = snapshot.documents()
                failed = sum(1 for d in documents if d.status == "failed")
                return len(documents) - failed, snapshot.statistics.live_rows, failed
        except KBNotFound:
            return 0, 0, 0

    def version(self) -> int:
        with self.database.snapshot(self.record.id) as snapshot:
            return snapshot.version

    def documents(self) -> list[dict[str, Any]]:
        with self.database.snapshot(self.record.id) as snapshot:
            return [d.to_row() for d in snapshot.documents()]

    def document(self, doc_id: str) -> dict[str, Any] | None:
        try:
            with self.database.snapshot(self.record.id) as snapshot:
                documents = snapshot.documents([doc_id])
        except KBNotFound:  # deleted meanwhile: as absent from the folder store's list of KBs
            return None
        return documents[0].to_row() if documents else None

    def document_chunks(self, document: dict[str, Any]) -> list[dict[str, Any]]:
        with self.database.snapshot(self.record.id) as snapshot:
            return [chunk.to_row() for _, chunk in snapshot.document_chunks(document["doc_id"])]

    def find_item(self, item_id: str, neighbours: int) -> dict[str, Any] | None:
        try:
            with self.database.snapshot(self.record.id) as snapshot:
                if item_id.startswith("doc_"):
                    documents = snapshot.documents([item_id])
                    if not documents:
                        return None
                    return {"type": "document", "row": documents[0].to_row(), "text": snapshot.text(item_id)}
                row_id = snapshot.find_chunk(item_id)
                if row_id is None:
                    return None
                chunk = snapshot.chunks([row_id])[row_id]
                siblings = [c.to_row() for _, c in snapshot.document_chunks(chunk.doc_id)]
                owner = snapshot.documents([chunk.doc_id])
        except KBNotFound:  # deleted meanwhile: as absent from the folder store's list of KBs
            return None
        at = next(i for i, r in enumerate(siblings) if r["chunk_id"] == item_id)
        return {
            "type": "chunk",
            "doc_name": owner[0].name if owner else None,
            "chunk": chunk.to_row(),
            "previous": siblings[max(0, at - neighbours) : at],
            "next": siblings[at + 1 : at + 1 + neighbours],
        }

    def has_chunk(self, chunk_id: str) -> bool:
        with self.database.snapshot(self.record.id) as snapshot:
            return snapshot.find_chunk(chunk_id) is not None

    def in_flight(self) -> list[dict[str, Any]]:
        from kb_core.store.postgres.inflight import in_flight_documents

        return in_flight_documents(self.database, self.record.id)  # on any host

    def delete_document(self, document: dict[str, Any]) -> None:
        self.database.commit(self.record.id, StoreChange(delete=(document["doc_id"],)))

    def import_staging(self) -> Path:
        staging = own_folder(self.backend.home.root / "staging", within=self.backend.home.root)
        staging.mkdir(parents=True, exist_ok=True)
        return staging / f"{os.getpid()}-import-{uuid.uuid4().hex[:8]}"

    def sink(
        self, *, embedder: Any, analyzer: Analyzer, segment_writer: SegmentWriter, executor: str | None = None
    ) -> PostgresSink:
        """A sink that commits each batch in one transaction; it writes no segments, so ``segment_writer`` is
        unused, and it refuses an ``executor``."""
        from kb_core.store.postgres.importing import PostgresSink

        if executor is not None:
            raise NotOnPostgres(
                f"The {executor} executor commits into folder stores only; imports into the PostgreSQL "
                f"store ({self.database.display}) run in this process (executor 'local')."
            )
        return PostgresSink(self.database, self.record.id, analyzer, self.import_staging)

    def preload(self) -> None:
        """Nothing: a database KB has no indexes to load into memory."""

    @contextmanager
    def searcher(self, analyzer: Analyzer) -> Iterator[PostgresSearcher]:
        with self.database.snapshot(self.record.id) as snapshot:
            yield PostgresSearcher(snapshot, analyzer, self.record.embedding_model)

    def compact(self, analyzer: Analyzer, everything: bool) -> dict[str, int]:
        self.backend.folder()  # raises NotOnPostgres: the database needs no compaction
        raise AssertionError("unreachable")

    def compact_quietly(self, analyzer: Analyzer) -> None:
        """Nothing: PostgreSQL needs no compaction."""
