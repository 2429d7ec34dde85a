"""The session as the Python API answers it, and the one envelope builder.

An envelope is ``{success, message, data}``; a failure also carries ``error: {code, details}`` with a stable code
from :mod:`kb_core.errors`. Features and the session's operations (:class:`kb_core.operations.Operations`) return
typed results (:mod:`kb_core.results`) and raise :class:`KBError`; :func:`envelope_of` turns one operation's call into
an envelope. It is called by :class:`Session` (every operation as an envelope: what ``service.session()`` returns to
notebooks, the app's pages and the tests) and, through :mod:`kb_core.envelope`, by the CLI and the MCP server.

``Session.operations`` is the typed session itself (results, KBError raised) for code that wants results, not
envelopes, and :meth:`Session.answer` is the envelope of any function of those operations (the bundle functions of
:mod:`kb_core.bundles.api`, for example).

Imports stay light (the operations load on the first session): ``kb --help`` imports this module.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec

from kb_core.errors import KBError

if TYPE_CHECKING:
    from kb_core.ingest.pipeline import ImportProgress
    from kb_core.operations import Operations
    from kb_core.principals import ImportAllowance, Principal
    from kb_core.results import Result, SearchRequest, SearchResult
    from kb_core.safe_files import AllowedFolders
    from kb_core.seams import SessionResources
    from kb_core.store import KnowledgeBaseRecord
    from kb_core.transfer.format import TransferLimits

logger = logging.getLogger("kb_core.envelope")  # the name the failures were always logged under

Envelope = dict[str, Any]
P = ParamSpec("P")


def envelope_of(operation: Callable[P, Result], /, *args: P.args, **kwargs: P.kwargs) -> Envelope:
    """The envelope of ``operation(*args, **kwargs)``: its result as ``{success, message, data}`` (a partial failure,
    such as an import where every file failed, with ``error`` beside its data); a KBError as a failure envelope;
    anything unexpected as INTERNAL_ERROR (logged with its trace, never shown), named after the operation."""
    name = getattr(operation, "__name__", "operation")
    try:
        result = operation(*args, **kwargs)
    except KBError as exc:
        logger.info("%s failed: %s %s", name, exc.code, exc.message)
        return failure(exc)
    except Exception:
        logger.exception("%s failed unexpectedly", name)
        return failure(KBError(f"{name} failed because of an internal error; see the log.", code="INTERNAL_ERROR"))
    error = result.failure()
    built: Envelope = {
        "success": error is None and result.succeeded(),
        "message": result.message,
        "data": result.to_json(),
    }
    if error is not None:
        built["error"] = {"code": error.code, "details": error.details}
    built.update(result.top_level())
    return built


def failure(error: KBError) -> Envelope:
    """The envelope of a refusal: what :func:`envelope_of` answers for a KBError, also for the edges that refuse a
    call before any operation runs (an MCP token's or path's refusal, a home that cannot be opened)."""
    return {
        "success": False,
        "message": error.message,
        "data": None,
        "error": {"code": error.code, "details": error.details},
    }


class Session:
    """The per-user view of the service (which KB is current, which KBs it may see), every operation answered as an
    envelope. Its state lives in :attr:`operations`."""

    def __init__(
        self,
        service: SessionResources,
        persistent_name: str | None = None,
        scope: frozenset[str] | None = None,
        allowed_dirs: Sequence[Path] | None = None,
        select_hint: str = "select_knowledge_base(kb_name)",
        *,
        operations: Operations | None = None,
    ) -> None:
        if operations is None:
            from kb_core.operations import Operations

            operations = Operations(service, persistent_name, scope, allowed_dirs, select_hint)
        self.operations = operations

    def answer(
        self, operation: Callable[Concatenate[Operations, P], Result], /, *args: P.args, **kwargs: P.kwargs
    ) -> Envelope:
        """The envelope of ``operation(self.operations, *args, **kwargs)``."""
        return envelope_of(operation, self.operations, *args, **kwargs)

    # -- the state, and the operations that answer typed values ------------------------------------------------------
    @property
    def service(self) -> SessionResources:
        return self.operations.service

    @property
    def select_hint(self) -> str:
        return self.operations.select_hint

    @property
    def persistent_name(self) -> str | None:
        return self.operations.persistent_name

    @property
    def scope(self) -> frozenset[str] | None:
        return self.operations.scope

    @property
    def allowed_dirs(self) -> AllowedFolders | None:
        return self.operations.allowed_dirs

    @property
    def principal(self) -> Principal:
        return self.operations.principal

    @property
    def scratch_root(self) -> Path | None:
        """Where a front end writes the files it hands this session (uploads, exports to download); None: anywhere."""
        return self.operations.scratch_root

    def writable_kb(self, kb_name: str | None, action: str) -> KnowledgeBaseRecord:
        return self.operations.writable_kb(kb_name, action)

    def change_refusal(self, kb_name: str | None = None) -> str | None:
        """Why this session may not change the KB (default: the current one); None when it may."""
        return self.operations.change_refusal(kb_name)

    def importing(self, record: KnowledgeBaseRecord, files: int) -> AbstractContextManager[ImportAllowance]:
        return self.operations.importing(record, files)

    @property
    def current_kb_id(self) -> str | None:
        return self.operations.current_kb_id

    def confined(self, allowed_dirs: Sequence[Path]) -> Session:
        """This session reading and writing by path only inside ``allowed_dirs`` (see ``Operations.confined``)."""
        twin = self.operations.confined(allowed_dirs)
        return Session(twin.service, operations=twin)

    def visible_kbs(self) -> list[KnowledgeBaseRecord]:
        return self.operations.visible_kbs()

    def find_kb(self, kb_name: str) -> KnowledgeBaseRecord:
        return self.operations.find_kb(kb_name)

    def current_kb(self) -> KnowledgeBaseRecord:
        return self.operations.current_kb()

    def resolve_kb(self, kb_name: str | None) -> KnowledgeBaseRecord:
        return self.operations.resolve_kb(kb_name)

    def kb_version(self, kb_name: str | None = None) -> int:
        return self.operations.kb_version(kb_name)

    def search_chunks(self, request: SearchRequest) -> SearchResult:
        return self.operations.search_chunks(request)

    def expand_hits(self, hits: Sequence[dict[str, Any]], max_related: int = 5) -> list[dict[str, Any]]:
        return self.operations.expand_hits(hits, max_related)

    # -- models and executors --------------------------------------------------------------------------------------
    def import_executors(self) -> Envelope:
        return envelope_of(self.operations.import_executors)

    def device_info(self) -> Envelope:
        return envelope_of(self.operations.device_info)

    def embedding_model_status(self, kb_name: str | None = None, model: str | None = None) -> Envelope:
        return envelope_of(self.operations.embedding_model_status, kb_name, model)

    def load_embedding_model(self, kb_name: str | None = None, model: str | None = None) -> Envelope:
        return envelope_of(self.operations.load_embedding_model, kb_name, model)

    def embedding_models(self) -> Envelope:
        return envelope_of(self.operations.embedding_models)

    # -- knowledge bases -----------------------------------------------------------------------------------------
    def create_knowledge_base(
        self,
        kb_name: str,
        chunk_size: int,
        embedding_model: str | None = None,
        embedding_endpoint: str | None = None,
        embedding_api_key: str | None = None,
        *,
        progress: Callable[[str], None] | None = None,
    ) -> Envelope:
        return envelope_of(
            self.operations.create_knowledge_base,
            kb_name,
            chunk_size,
            embedding_model,
            embedding_endpoint,
            embedding_api_key,
            progress=progress,
        )

    def reembed_knowledge_base(
        self,
        kb_name: str | None = None,
        embedding_model: str | None = None,
        new_name: str | None = None,
        *,
        progress: Callable[[ImportProgress], None] | None = None,
        model_progress: Callable[[str], None] | None = None,
        cancel: threading.Event | None = None,
    ) -> Envelope:
        return envelope_of(
            self.operations.reembed_knowledge_base,
            kb_name,
            embedding_model,
            new_name,
            progress=progress,
            model_progress=model_progress,
            cancel=cancel,
        )

    def list_knowledge_bases(self) -> Envelope:
        return envelope_of(self.operations.list_knowledge_bases)

    def select_knowledge_base(self, kb_name: str) -> Envelope:
        return envelope_of(self.operations.select_knowledge_base, kb_name)

    def delete_knowledge_base(self, kb_name: str) -> Envelope:
        return envelope_of(self.operations.delete_knowledge_base, kb_name)

    def publish_knowledge_base(self, kb_name: str, published: bool = True) -> Envelope:
        return envelope_of(self.operations.publish_knowledge_base, kb_name, published)

    def demo_status(self) -> Envelope:
        return envelope_of(self.operations.demo_status)

    # -- documents -----------------------------------------------------------------------------------------------
    def import_document(
        self,
        file_paths: Sequence[str],
        chunk_size: int | None = None,
        *,
        progress: Callable[[ImportProgress], None] | None = None,
        display_names: Sequence[str] | None = None,
        source: str = "path",
        kb_name: str | None = None,
        executor: str = "local",
        executor_address: str | None = None,
        cancel: threading.Event | None = None,
    ) -> Envelope:
        return envelope_of(
            self.operations.import_document,
            file_paths,
            chunk_size,
            progress=progress,
            display_names=display_names,
            source=source,
            kb_name=kb_name,
            executor=executor,
            executor_address=executor_address,
            cancel=cancel,
        )

    def start_import(
        self,
        file_paths: Sequence[str] | None = None,
        chunk_size: int | None = None,
        *,
        uploads: Sequence[tuple[str, bytes]] | None = None,
        kb_name: str | None = None,
        executor: str = "local",
        executor_address: str | None = None,
    ) -> Envelope:
        return envelope_of(
            self.operations.start_import,
            file_paths,
            chunk_size,
            uploads=uploads,
            kb_name=kb_name,
            executor=executor,
            executor_address=executor_address,
        )

    def import_job(self, job_id: str, watch: bool = False) -> Envelope:
        return envelope_of(self.operations.import_job, job_id, watch)

    def import_jobs(self, running_only: bool = False) -> Envelope:
        return envelope_of(self.operations.import_jobs, running_only)

    def cancel_import(self, job_id: str) -> Envelope:
        return envelope_of(self.operations.cancel_import, job_id)

    def dismiss_import_job(self, job_id: str) -> Envelope:
        return envelope_of(self.operations.dismiss_import_job, job_id)

    def import_job_result(self, job_id: str) -> Envelope:
        return envelope_of(self.operations.import_job_result, job_id)

    def list_documents(self, kb_name: str | None = None) -> Envelope:
        return envelope_of(self.operations.list_documents, kb_name)

    def list_chunks(self, doc_name: str, kb_name: str | None = None) -> Envelope:
        return envelope_of(self.operations.list_chunks, doc_name, kb_name)

    def delete_document(self, doc_name: str, kb_name: str | None = None) -> Envelope:
        return envelope_of(self.operations.delete_document, doc_name, kb_name)

    def update_document(
        self,
        doc_name: str,
        chunk_size: int,
        kb_name: str | None = None,
        progress: Callable[[ImportProgress], None] | None = None,
    ) -> Envelope:
        return envelope_of(self.operations.update_document, doc_name, chunk_size, kb_name, progress)

    # -- search --------------------------------------------------------------------------------------------------
    def search(
        self,
        query: str,
        top_k: int | None = None,
        mode: str | None = None,
        vector_weight: float | None = None,
        keyword_weight: float | None = None,
        jaccard_weight: float | None = None,
        fusion: str | None = None,
        doc_names: Sequence[str] | None = None,
        file_types: Sequence[str] | None = None,
        kb_names: Sequence[str] | None = None,
        explain: bool = True,
        expand_graph: bool = False,
        weighting: str | None = None,
        language_guard: bool | None = None,
        min_score: float | None = None,
    ) -> Envelope:
        return envelope_of(
            self.operations.search,
            query,
            top_k,
            mode,
            vector_weight,
            keyword_weight,
            jaccard_weight,
            fusion,
            doc_names,
            file_types,
            kb_names,
            explain,
            expand_graph,
            weighting,
            language_guard,
            min_score,
        )

    def explain_search(
        self,
        query: str,
        chunk_id: str,
        mode: str | None = None,
        vector_weight: float | None = None,
        keyword_weight: float | None = None,
        jaccard_weight: float | None = None,
        fusion: str | None = None,
        weighting: str | None = None,
        language_guard: bool | None = None,
    ) -> Envelope:
        return envelope_of(
            self.operations.explain_search,
            query,
            chunk_id,
            mode,
            vector_weight,
            keyword_weight,
            jaccard_weight,
            fusion,
            weighting,
            language_guard,
        )

    def save_search_settings(self, kb_name: str | None = None, **settings: Any) -> Envelope:
        return envelope_of(self.operations.save_search_settings, kb_name, **settings)

    def rag_search(
        self, keywords: Sequence[str], top_k: int = 5, timeout: float = 3.0, min_score: float | None = None
    ) -> Envelope:
        return envelope_of(self.operations.rag_search, keywords, top_k, timeout, min_score)

    def get_item(self, item_id: str, neighbours: int = 1, kb_names: Sequence[str] | None = None) -> Envelope:
        return envelope_of(self.operations.get_item, item_id, neighbours, kb_names)

    def get_document_info(self, knowledge_ids: Sequence[str], kb_names: Sequence[str] | None = None) -> Envelope:
        return envelope_of(self.operations.get_document_info, knowledge_ids, kb_names)

    # -- MCP bearer tokens ---------------------------------------------------------------------------------------
    def create_token(self, scope: str, capability: str, rate_per_hour: int) -> Envelope:
        return envelope_of(self.operations.create_token, scope, capability, rate_per_hour)

    def list_tokens(self) -> Envelope:
        return envelope_of(self.operations.list_tokens)

    def revoke_token(self, token_id: str) -> Envelope:
        return envelope_of(self.operations.revoke_token, token_id)

    # -- export and import of the database -----------------------------------------------------------------------
    def export_database(
        self, export_path: str, kb_names: Sequence[str] | None = None, overwrite: bool = False
    ) -> Envelope:
        return envelope_of(self.operations.export_database, export_path, kb_names, overwrite)

    def import_database(
        self, source_db_path: str, *, limits: TransferLimits | None = None, display_name: str | None = None
    ) -> Envelope:
        return envelope_of(self.operations.import_database, source_db_path, limits=limits, display_name=display_name)

    # -- knowledge bundles ---------------------------------------------------------------------------------------
    def get_knowledge_schema(self, kb_name: str | None = None) -> Envelope:
        return envelope_of(self.operations.get_knowledge_schema, kb_name)

    def import_knowledge_bundle(
        self, temp_file_path: str, kb_name: str | None = None, delete_file: bool = True
    ) -> Envelope:
        return envelope_of(self.operations.import_knowledge_bundle, temp_file_path, kb_name, delete_file)

    def get_ontology(self, kb_name: str | None = None) -> Envelope:
        return envelope_of(self.operations.get_ontology, kb_name)

    def set_ontology(self, source: Any, kb_name: str | None = None) -> Envelope:
        return envelope_of(self.operations.set_ontology, source, kb_name)

    def graph_view(self, kb_name: str | None = None, limit: int = 500) -> Envelope:
        return envelope_of(self.operations.graph_view, kb_name, limit)

    # -- kept evaluation runs ------------------------------------------------------------------------------------
    def list_evaluation_runs(self) -> Envelope:
        return envelope_of(self.operations.list_evaluation_runs)

    def compare_evaluation_runs(
        self,
        run_a: str,
        run_b: str,
        setting_a: str | None = None,
        setting_b: str | None = None,
        metric: str = "ndcg@10",
        top: int = 10,
    ) -> Envelope:
        return envelope_of(self.operations.compare_evaluation_runs, run_a, run_b, setting_a, setting_b, metric, top)

    def delete_evaluation_run(self, run_id: str) -> Envelope:
        return envelope_of(self.operations.delete_evaluation_run, run_id)

    # -- maintenance ---------------------------------------------------------------------------------------------
    def compact(self, kb_name: str | None = None) -> Envelope:
        return envelope_of(self.operations.compact, kb_name)

    def verify(self, repair: bool = False) -> Envelope:
        return envelope_of(self.operations.verify, repair)
