"""Export knowledge bases to one portable file (``docs/export-format.md``).

Each KB is read from its newest manifest (immutable segments), a KB with a graph under its graph write lock; the
file is written to a temporary name beside the target and renamed into place, so a failed export leaves no file.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import zipfile
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from kb_core.base.errors import InvalidArgument, KBNotFound, StoreError
from kb_core.base.files import CHUNKS_FILE, DOCUMENTS_FILE, TEXTS_FILE
from kb_core.base.i18n import msg
from kb_core.base.json_text import json_text
from kb_core.base.redaction import shown_endpoint
from kb_core.base.safe_files import OutputFolder, open_output_folder
from kb_core.features.bundles.graph import GraphState, GraphStore
from kb_core.features.results import ExportSummary
from kb_core.features.seams import Resources, Scope
from kb_core.features.transfer.format import (
    FORMAT_NAME,
    FORMAT_VERSION,
    MANIFEST_MEMBER,
    READ_BLOCK,
    SNAPSHOT_ATTEMPTS,
    SUFFIX_PATTERN,
    VECTORS_FILE,
    SegmentExport,
    resolve_path,
)
from kb_core.store import KBStore, KnowledgeBaseRecord, Manifest, catalog, utc_now

if TYPE_CHECKING:
    from kb_core.store.base import Database

logger = logging.getLogger(__name__)


def _live_segment(store: KBStore, manifest: Manifest, segment_id: str, path: str) -> SegmentExport | None:
    from kb_core.engines.vector_index import VectorSegment

    folder = store.segment_dir(segment_id)
    info = catalog.read_segment_info(folder)
    deleted = set(manifest.tombstones.get(segment_id, {}))
    documents = catalog.read_documents_table(folder)
    chunks = pq.read_table(folder / CHUNKS_FILE).select(catalog.CHUNKS_SCHEMA.names).cast(catalog.CHUNKS_SCHEMA)
    texts = pq.read_table(folder / TEXTS_FILE).select(catalog.TEXTS_SCHEMA.names).cast(catalog.TEXTS_SCHEMA)
    doc_ids = documents.column("doc_id").to_pylist()
    keep_docs = np.array([d not in deleted for d in doc_ids], dtype=bool)
    if not keep_docs.any():
        return None
    live_ids = {d for d, keep in zip(doc_ids, keep_docs, strict=True) if keep}
    chunk_docs = chunks.column("doc_id").to_pylist()
    live_rows = np.flatnonzero(np.array([d in live_ids for d in chunk_docs], dtype=bool))
    vectors_index = VectorSegment.load(folder)
    if vectors_index.size != chunks.num_rows:
        raise StoreError(f"Segment {segment_id}: {vectors_index.size} vectors for {chunks.num_rows} chunks.")
    vectors = np.ascontiguousarray(vectors_index.reconstruct(live_rows), dtype=np.float32)
    if len(live_rows) == 0:
        vectors = np.zeros((0, info.dimension or vectors_index.dimension), dtype=np.float32)
    text_ids = texts.column("doc_id").to_pylist()
    documents = documents.filter(pa.array(keep_docs))
    rows = documents.to_pylist()
    originals: dict[str, IO[bytes]] = {}
    try:
        for row in rows:
            relative = row.get("original") or ""
            if not relative:
                continue
            suffix = Path(relative).suffix.lower()
            if not SUFFIX_PATTERN.match(suffix):
                suffix = ""
            member = f"{path}/files/{row['doc_id']}{suffix}"
            originals[member] = open(folder / relative, "rb")  # noqa: SIM115 (closed by the caller)
    except BaseException:
        for handle in originals.values():
            handle.close()
        raise
    return SegmentExport(
        path=path,
        documents=documents,
        chunks=chunks.take(pa.array(live_rows, type=pa.int64())),
        texts=texts.filter(pa.array([d in live_ids for d in text_ids], type=pa.bool_())),
        vectors=vectors,
        originals=originals,
        model_key=info.model_key,
        analyzer=info.analyzer,
    )


def _snapshot_kb(store: KBStore, kb_index: int) -> list[SegmentExport]:
    """The live segments of a KB's newest manifest; retried if a segment is collected while being read."""
    last_error: Exception | None = None
    for _ in range(SNAPSHOT_ATTEMPTS):
        manifest = store.manifest()
        segments: list[SegmentExport] = []
        try:
            for ref in manifest.segments:
                exported = _live_segment(store, manifest, ref.id, f"kb/{kb_index:04d}/seg/{len(segments):04d}")
                if exported is not None:
                    segments.append(exported)
            return segments
        except FileNotFoundError as exc:
            last_error = exc
            for segment in segments:
                for handle in segment.originals.values():
                    handle.close()
            if not store.exists():
                raise KBNotFound(f"Knowledge base id '{store.kb_id}' was deleted during the export.") from exc
    raise StoreError(f"Knowledge base {store.kb_id} kept changing during the export; try again ({last_error}).")


def _close_segments(segments: Sequence[SegmentExport]) -> None:
    for segment in segments:
        for handle in segment.originals.values():
            handle.close()


def _snapshot_with_graph(
    service: Resources, record: KnowledgeBaseRecord, kb_index: int
) -> tuple[list[SegmentExport], GraphState | None]:
    """A KB's live segments and its newest committed graph state (None when it never had one), consistent:
    with a graph, both are read under the graph write lock, which a bundle import holds from before its
    index commit until after its graph commit."""

    def in_database(database: Database) -> tuple[list[SegmentExport], GraphState | None]:
        from kb_core.features.transfer.postgres import export_segments

        # one snapshot holds the documents and the graph, consistent
        return export_segments(database, record, kb_index, service.embedder(record).model_key)

    return service.store.choose(
        folder=lambda: _folder_snapshot_with_graph(service, record, kb_index), postgres=in_database
    )


def _folder_snapshot_with_graph(
    service: Resources, record: KnowledgeBaseRecord, kb_index: int
) -> tuple[list[SegmentExport], GraphState | None]:
    from kb_core.base.locking import writer_lock

    graph = GraphStore(service.home.kb_dir(record.id))
    store = service.kb_store(record.id)
    if not graph.root.is_dir():
        segments = _snapshot_kb(store, kb_index)
        if not graph.root.is_dir():  # no bundle import had begun: it creates the folder before its commits
            return segments, None
        _close_segments(segments)
    with writer_lock(graph.root / "write.lock"):
        try:
            segments = _snapshot_kb(store, kb_index)
        except KBNotFound:
            _remove_recreated_lock(graph.root)
            raise
        try:
            state = graph.load()
        except BaseException:
            _close_segments(segments)
            raise
    return segments, state if state.version > 0 else None


def _remove_recreated_lock(graph_root: Path) -> None:
    """The KB was deleted while we waited: the lock file (filelock creates missing folders) must not stay behind."""
    (graph_root / "write.lock").unlink(missing_ok=True)
    for folder in (graph_root, graph_root.parent):
        try:
            folder.rmdir()  # only if empty
        except OSError:
            break


def _graph_bytes(state: GraphState) -> bytes:
    return json_text(state.to_json(), sort_keys=True, separators=(",", ":")).encode("utf-8")


def _table_bytes(table: pa.Table) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(table, buffer, compression="zstd")
    return buffer.getvalue()


def _write_export(
    target: Path | IO[bytes],
    records: Sequence[KnowledgeBaseRecord],
    snapshots: Sequence[list[SegmentExport]],
    graphs: Sequence[GraphState | None],
) -> dict[str, Any]:
    files: dict[str, dict[str, Any]] = {}
    knowledge_bases: list[dict[str, Any]] = []
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED, allowZip64=True) as archive:

        def add_bytes(name: str, data: bytes, compress: int) -> None:
            archive.writestr(zipfile.ZipInfo(name, date_time=_zip_time()), data, compress_type=compress)
            files[name] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}

        for kb_index, (record, segments, graph) in enumerate(zip(records, snapshots, graphs, strict=True)):
            documents: list[dict[str, Any]] = []
            segment_entries: list[dict[str, Any]] = []
            for segment in segments:
                # parquet is already zstd-compressed: stored, not deflated again
                add_bytes(f"{segment.path}/{DOCUMENTS_FILE}", _table_bytes(segment.documents), zipfile.ZIP_STORED)
                add_bytes(f"{segment.path}/{CHUNKS_FILE}", _table_bytes(segment.chunks), zipfile.ZIP_STORED)
                add_bytes(f"{segment.path}/{TEXTS_FILE}", _table_bytes(segment.texts), zipfile.ZIP_STORED)
                buffer = io.BytesIO()
                np.save(buffer, segment.vectors, allow_pickle=False)
                add_bytes(f"{segment.path}/{VECTORS_FILE}", buffer.getvalue(), zipfile.ZIP_DEFLATED)
                for member, handle in segment.originals.items():
                    info = zipfile.ZipInfo(member, date_time=_zip_time())
                    info.compress_type = zipfile.ZIP_DEFLATED
                    digest = hashlib.sha256()
                    size = 0
                    with archive.open(info, "w", force_zip64=True) as out:
                        for block in iter(lambda h=handle: h.read(READ_BLOCK), b""):  # type: ignore[misc]
                            digest.update(block)
                            size += len(block)
                            out.write(block)
                    files[member] = {"sha256": digest.hexdigest(), "size": size}
                for row in segment.documents.to_pylist():
                    documents.append(
                        {
                            "doc_id": row["doc_id"],
                            "name": row["name"],
                            "chunk_count": int(row["chunk_count"] or 0),
                            "segment": segment.path,
                        }
                    )
                segment_entries.append(
                    {
                        "path": segment.path,
                        "rows": segment.chunks.num_rows,
                        "documents": segment.documents.num_rows,
                        "dimension": int(segment.vectors.shape[1]),
                        "model_key": segment.model_key,
                        "analyzer": segment.analyzer,
                    }
                )
            entry: dict[str, Any] = {}
            if graph is not None:
                graph_member = f"kb/{kb_index:04d}/graph/state.json"
                add_bytes(graph_member, _graph_bytes(graph), zipfile.ZIP_DEFLATED)
                entry["graph"] = {
                    "path": graph_member,
                    "version": graph.version,
                    "nodes": len(graph.nodes),
                    "edges": len(graph.edges),
                }
            knowledge_bases.append(
                {
                    **entry,
                    "name": record.name,
                    "chunk_size": record.chunk_size,
                    "embedding_model": record.embedding_model,
                    # its password is a secret, which is never exported
                    "embedding_endpoint": shown_endpoint(record.embedding_endpoint),
                    "created_at": record.created_at,
                    "search_settings": dict(record.search_settings),
                    "had_api_key": record.has_api_key,
                    "document_count": len(documents),
                    "chunk_count": sum(s["rows"] for s in segment_entries),
                    "documents": documents,
                    "segments": segment_entries,
                }
            )
        manifest = {
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "created_at": utc_now(),
            "knowledge_bases": knowledge_bases,
            "files": files,
        }
        data = json_text(manifest, indent=1, sort_keys=True).encode("utf-8")
        archive.writestr(zipfile.ZipInfo(MANIFEST_MEMBER, date_time=_zip_time()), data, zipfile.ZIP_DEFLATED)
    return manifest


def _zip_time() -> tuple[int, int, int, int, int, int]:
    now = datetime.now(UTC)
    return (now.year, now.month, now.day, now.hour, now.minute, now.second)


HIDDEN_SOURCE = "(not shown to a session limited to some knowledge bases)"


def export_database(
    session: Scope,
    export_path: str | os.PathLike[str],
    kb_names: Sequence[str] | None = None,
    *,
    overwrite: bool = False,
) -> ExportSummary:
    """Write every KB the session can see (or only ``kb_names``) to one portable file at ``export_path``. A file
    already there is refused (FILE_EXISTS, left as it is) unless ``overwrite``.

    Raises KBError for what stops it. API keys are never exported.
    """
    target = resolve_path(export_path, "export_path")
    # The folder is opened once; the file is created in it and renamed into place relative to that open
    # folder, so swapping a folder on the way for a symlink cannot redirect the write.
    with open_output_folder(target, "export_path", getattr(session, "allowed_dirs", None)) as folder:
        if not overwrite and folder.target_exists():  # said before the work; the final link decides
            raise folder.exists_error("export_path", str(target))
        return _export_into(session, folder, target, kb_names, overwrite)


def _export_into(
    session: Scope, folder: OutputFolder, target: Path, kb_names: Sequence[str] | None, overwrite: bool
) -> ExportSummary:
    service = session.service
    home_root: Path = service.home.root
    if (folder.real_path.resolve() / folder.name).is_relative_to(home_root.resolve() / "kbs"):
        raise InvalidArgument(f"export_path {str(target)!r} lies inside the store; choose a path outside {home_root}.")
    if kb_names:
        if isinstance(kb_names, str):
            kb_names = [kb_names]
        records = list({r.id: r for r in (session.find_kb(n) for n in kb_names)}.values())
    else:
        records = list(session.visible_kbs())
    snapshots: list[list[SegmentExport]] = []
    graphs: list[GraphState | None] = []
    kept: list[KnowledgeBaseRecord] = []
    temporary: str | None = None
    try:
        for record in records:
            try:
                segments, graph = _snapshot_with_graph(service, record, len(kept))
            except KBNotFound:
                if kb_names:
                    raise
                logger.info("Knowledge base %s was deleted during the export; left out", record.name)
                continue
            snapshots.append(segments)
            graphs.append(graph)
            kept.append(record)
        temporary, handle = folder.create_temporary()
        with handle:
            manifest = _write_export(handle, kept, snapshots, graphs)
            handle.flush()
            os.fsync(handle.fileno())
            size = os.fstat(handle.fileno()).st_size
        if overwrite:
            folder.replace(temporary)
        else:
            folder.place(temporary, "export_path", str(target))
        temporary = None
    except OSError as exc:
        raise StoreError(f"Cannot write the export file {str(target)!r}: {exc.strerror or exc}") from exc
    finally:
        if temporary is not None:
            folder.discard(temporary)
        for segments in snapshots:
            _close_segments(segments)
    kbs = manifest["knowledge_bases"]
    documents = sum(kb["document_count"] for kb in kbs)
    chunks = sum(kb["chunk_count"] for kb in kbs)
    with_graph = [kb["graph"] for kb in kbs if "graph" in kb]
    # A public demo's session names no server path: its export is written where the app then reads it for download.
    shown = target.name if not session.principal.server_paths else str(target)
    facts = {"kbs": len(kbs), "documents": documents, "chunks": chunks, "target": shown, "size": size}
    message = (
        msg(
            "Exported {kbs} knowledge base(s) ({documents} document(s), {chunks} chunk(s), {graphs} knowledge-bundle "
            "graph(s) with {nodes} node(s) and {edges} edge(s)) to {target} ({size} bytes). API keys are never "
            "exported.",
            graphs=len(with_graph), nodes=sum(g["nodes"] for g in with_graph),
            edges=sum(g["edges"] for g in with_graph), **facts,
        )
        if with_graph
        else msg(
            "Exported {kbs} knowledge base(s) ({documents} document(s), {chunks} chunk(s)) to {target} ({size} "
            "bytes). API keys are never exported.",
            **facts,
        )
    )
    logger.info(message)
    source = service.store.display  # the home folder, or the database URL without its password
    if session.principal.hides_server:  # a token limited to some KBs, a demo's visitor: nothing of the server
        source = HIDDEN_SOURCE
    return ExportSummary(message, source, shown)
