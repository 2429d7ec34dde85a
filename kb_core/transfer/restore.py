"""Export knowledge bases to one portable file, and import such a file into a home.

FORMAT
======

An export file is a ZIP archive (``zipfile``: per-member CRC-32 and sizes, ZIP64 for large files, and every
platform can open it; the standard library reads it, so no new dependency). Members::

    manifest.json                              the description below; the only member at a fixed place
    kb/0000/seg/0000/documents.parquet         live document rows of one segment (catalog DOCUMENTS_SCHEMA)
    kb/0000/seg/0000/chunks.parquet            live chunk rows, in vector-row order (catalog CHUNKS_SCHEMA)
    kb/0000/seg/0000/texts.parquet             full parsed text of each document (catalog TEXTS_SCHEMA)
    kb/0000/seg/0000/vectors.npy               float32 rows x dimension, L2-normalised, one row per chunk row
    kb/0000/seg/0000/files/DOC_ID.EXT          the original file of a document (for update_document)
    kb/0000/graph/state.json                   optional: the KB's knowledge-bundle graph (see below)

``manifest.json``::

    {"format": "kb-workbench-export", "format_version": 1, "created_at": ISO-8601 UTC,
     "knowledge_bases": [
        {"name", "chunk_size", "embedding_model", "embedding_endpoint", "created_at", "search_settings",
         "had_api_key": bool,                      # the key itself is NEVER exported
         "document_count", "chunk_count",
         "documents": [{"doc_id", "name", "chunk_count", "segment"}],
         "segments": [{"path": "kb/0000/seg/0000", "rows", "documents", "dimension", "model_key", "analyzer"}],
         "graph": {"path": "kb/0000/graph/state.json", "version", "nodes", "edges"}}],   # optional
     "files": {MEMBER_NAME: {"sha256": hex, "size": bytes}}}   # every member except manifest.json

Knowledge-bundle graph (optional, still format_version 1): a KB that has a committed graph state
(``HOME/kbs/KB_ID/graph/state-N.json``, see :mod:`kb_core.bundles.graph`: after a bundle import or an
ontology change) carries its newest committed state as ``kb/NNNN/graph/state.json``: compact UTF-8 JSON
``{"version", "ontology", "nodes": [{id, type, identity, properties, doc_id, doc_name, text_sha256}],
"edges": [{id, type, source, target, properties}]}``, nodes and edges sorted by id. The indexed texts of
the nodes are ordinary documents of source "bundle" in the KB's segments (``doc_id`` links them), so their
chunks and vectors travel like any other document's. KBs without a graph have no graph member and no
"graph" key, so such files are byte-for-byte what earlier versions wrote, and files without graphs still
import. The shadow export (``graph/shadow/``) is not shipped: the importer regenerates it from the state.

Only live rows are exported: deleted documents (tombstones) are left out, so every segment is exported
without tombstones. Segment order and row order are kept, so searches rank ties the same way. The keyword
index is not shipped: it is rebuilt from the chunk texts on import (deterministic, so BM25 scores match);
the vector index is rebuilt from ``vectors.npy``, so import needs no embedding model. The importer never
loads FAISS or pickled data from the file.

Consistency: each KB is read from its newest manifest, whose segments are immutable, so the file holds a
committed state of every KB even while imports run (KBs are snapshotted one after the other). A KB with a
graph is snapshotted under its graph write lock, so no bundle import is between its index commit and its
graph commit: the segments and the graph state match. The file is written to a temporary name beside
the target and renamed into place, so a failed export leaves no file.

Import (:func:`import_database`) validates before changing the home: the ZIP structure, member names
(absolute, ``..``, backslashes, drive letters, symlinks, hard links, devices and duplicates refused; only
the names above accepted), declared sizes against limits (:class:`TransferLimits`: per member, total, and
compression ratio, against decompression bombs), the manifest (nesting depth, format, version: a newer
version is refused), every member's size and SHA-256, the tables' schemas and row counts, ids, names, each
``vectors.npy`` header (version, little-endian float32, C order, 2-D, and shape x itemsize equal to the
member's real data size, checked before any array is allocated), and the vector
dimension (consistent across a KB's segments and with its model where known, e.g. 384 for
all-MiniLM-L6-v2, 64 for "hashing"), and each graph state: at most ``TransferLimits.max_graph_bytes``, JSON
parsed without NaN/Infinity (too deep nesting refused), the ontology valid, every node and edge well formed,
its id derived from type plus identity, edge endpoints present and of the edge type's node types, every node
and edge valid against the ontology's schemas (the bundle validator), and every ``doc_id`` naming a "bundle"
document of the same KB (once). A ``doc_id`` naming no exported document (the source crashed between a
bundle's index and graph commits) is cleared and reported: the next bundle import re-indexes that node.
Members are extracted under private names into a staging folder ``HOME/.transfer-PID-HEX/`` (its lock file
``.transfer-PID-HEX.lock``, held while the import runs, lets the next open of the home remove the folder of a
killed import and nothing else) and new KB
folders are built there; only then, under the registry lock, are they moved into ``HOME/kbs/`` and the
registry rewritten once (the commit point). Any failure removes
what was staged, so the home is left as it was. A KB whose name exists gets a suffix
``_YYYYMMDD-HHMMSS`` (UTC); clashing document names in a KB get the same stamp. Document and chunk ids are
kept unless one of the KB's document ids already exists in the home (e.g. the same file imported twice):
then that KB gets fresh ids (its graph's ``doc_id`` links follow). A graph is written as the staged KB's
first state (``graph/state-000000000001.json``) with its shadow export regenerated, inside the KB folder that
the commit moves into place. Imported KBs never have an API key; the result message says so.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import re
import shutil
import stat
import uuid
import zipfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from kb_core.bundles.graph import GraphState, GraphStore, write_shadow
from kb_core.envelope import Envelope, enveloped, ok
from kb_core.errors import ImportFormatError, InvalidArgument, KBError, KBNotFound, StoreError
from kb_core.ingest.pipeline import timestamped_name
from kb_core.safe_files import OutputFolder, UnusablePath, open_input_file, open_output_folder, reject_nul
from kb_core.seams import Resources, Scope
from kb_core.store import Change, KBStore, KnowledgeBaseRecord, Manifest, StagedSegment, catalog, new_id, utc_now
from kb_core.store.atomic import fsync_directory
from kb_core.store.files import CHUNKS_FILE, DOCUMENTS_FILE, EXACT_VECTORS_FILE, TABLE_FILES, TEXTS_FILE
from kb_core.validation import name_key, validate_chunk_size, validate_endpoint, validate_kb_name

logger = logging.getLogger(__name__)

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "MANIFEST_MEMBER",
    "TransferLimits",
    "export_database",
    "import_database",
]

FORMAT_NAME = "kb-workbench-export"
FORMAT_VERSION = 1
MANIFEST_MEMBER = "manifest.json"
VECTORS_FILE = EXACT_VECTORS_FILE
SEGMENT_PATH = re.compile(r"^kb/\d{4}/seg/\d{4}$")
GRAPH_PATH = re.compile(r"^kb/\d{4}/graph/state\.json$")
MEMBER_PATH = re.compile(
    r"^kb/\d{4}/(?:seg/\d{4}/(?:documents\.parquet|chunks\.parquet|texts\.parquet|vectors\.npy"
    r"|files/[A-Za-z0-9][A-Za-z0-9_-]{0,127}(?:\.[A-Za-z0-9]{1,16})?)|graph/state\.json)$"
)
NODE_KEYS = frozenset({"id", "type", "identity", "properties", "doc_id", "doc_name", "text_sha256"})
EDGE_KEYS = frozenset({"id", "type", "source", "target", "properties"})
SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")
ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")
SUFFIX_PATTERN = re.compile(r"^(?:\.[A-Za-z0-9]{1,16})?$")
DOCUMENT_NAME_MAX = 255
READ_BLOCK = 1 << 20
SNAPSHOT_ATTEMPTS = 5
MAX_MANIFEST_DEPTH = 16  # the format nests 5 levels (manifest, KB list, KB, document list, document)
MAX_GRAPH_DEPTH = 64  # a graph state nests its bundles' properties (at most 32 levels, see BundleLimits)
NPY_VERSIONS = ((1, 0), (2, 0))

# Known embedding dimensions (lower-cased base model name → dimension); others are checked for consistency only.
KNOWN_DIMENSIONS = {
    "all-minilm-l6-v2": 384,
    "all-minilm-l12-v2": 384,
    "paraphrase-multilingual-minilm-l12-v2": 384,
    "multi-qa-minilm-l6-cos-v1": 384,
    "all-mpnet-base-v2": 768,
    "paraphrase-multilingual-mpnet-base-v2": 768,
}
_HASHING_MODEL = re.compile(r"^hashing(?:[-:](\d+))?$")


@dataclass(frozen=True)
class TransferLimits:
    """Bounds an import file must respect (decompression-bomb and resource guards)."""

    max_members: int = 500_000
    max_member_bytes: int = 4 << 30
    max_total_bytes: int = 64 << 30
    max_manifest_bytes: int = 256 << 20
    max_ratio: float = 200.0  # uncompressed / compressed size
    ratio_floor_bytes: int = 1 << 20  # smaller members may compress better than max_ratio (tiny files of spaces)
    max_graph_bytes: int = 1 << 30  # one KB's graph state, parsed into memory as a whole


# -- shared helpers ------------------------------------------------------------------------------------------------
def expected_dimension(embedding_model: str, embedding_endpoint: str | None) -> int | None:
    """The vector dimension a KB's model produces, when it is known without loading the model."""
    if embedding_endpoint:
        return None
    name = embedding_model.strip()
    match = _HASHING_MODEL.match(name)
    if match:
        return int(match.group(1)) if match.group(1) else 64
    return KNOWN_DIMENSIONS.get(name.rstrip("/").rsplit("/", 1)[-1].lower())


def _resolve_path(value: object, field_name: str) -> Path:
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str) or not value.strip():
        raise InvalidArgument(f"{field_name} must be a non-empty file path.", details={"field": field_name})
    reject_nul(value, field_name)
    path = Path(value.strip()).expanduser()
    return path if path.is_absolute() else Path.cwd() / path


# -- export --------------------------------------------------------------------------------------------------------
@dataclass
class _SegmentExport:
    path: str
    documents: pa.Table
    chunks: pa.Table
    texts: pa.Table
    vectors: np.ndarray
    originals: dict[str, IO[bytes]]  # member name → open handle (kept open: the folder may be collected meanwhile)
    model_key: str
    analyzer: str


def _live_segment(store: KBStore, manifest: Manifest, segment_id: str, path: str) -> _SegmentExport | None:
    from kb_core.retrieval.vector_index import VectorSegment

    folder = store.segment_dir(segment_id)
    info = catalog.read_segment_info(folder)
    deleted = set(manifest.tombstones.get(segment_id, {}))
    documents = pq.read_table(folder / DOCUMENTS_FILE).select(catalog.DOCUMENTS_SCHEMA.names)
    documents = documents.cast(catalog.DOCUMENTS_SCHEMA)
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
    return _SegmentExport(
        path=path,
        documents=documents,
        chunks=chunks.take(pa.array(live_rows, type=pa.int64())),
        texts=texts.filter(pa.array([d in live_ids for d in text_ids], type=pa.bool_())),
        vectors=vectors,
        originals=originals,
        model_key=info.model_key,
        analyzer=info.analyzer,
    )


def _snapshot_kb(store: KBStore, kb_index: int) -> list[_SegmentExport]:
    """The live segments of a KB's newest manifest; retried if a segment is collected while being read."""
    last_error: Exception | None = None
    for _ in range(SNAPSHOT_ATTEMPTS):
        manifest = store.manifest()
        segments: list[_SegmentExport] = []
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


def _close_segments(segments: Sequence[_SegmentExport]) -> None:
    for segment in segments:
        for handle in segment.originals.values():
            handle.close()


def _snapshot_with_graph(
    service: Resources, record: KnowledgeBaseRecord, kb_index: int
) -> tuple[list[_SegmentExport], GraphState | None]:
    """A KB's live segments and its newest committed graph state (None when it never had one), consistent:
    with a graph, both are read under the graph write lock, which a bundle import holds from before its
    index commit until after its graph commit."""
    from kb_core.store.locking import writer_lock

    if service.postgres is not None:  # one snapshot holds the documents and the graph, consistent
        from kb_core.store.postgres.transfer import export_segments

        return export_segments(service.postgres, record, kb_index, service.embedder(record).model_key)
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
    return json.dumps(state.to_json(), ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode("utf-8")


def _table_bytes(table: pa.Table) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(table, buffer, compression="zstd")
    return buffer.getvalue()


def _write_export(
    target: Path | IO[bytes],
    records: Sequence[KnowledgeBaseRecord],
    snapshots: Sequence[list[_SegmentExport]],
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
                    "embedding_endpoint": record.embedding_endpoint,
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
        data = json.dumps(manifest, ensure_ascii=False, indent=1, sort_keys=True).encode("utf-8")
        archive.writestr(zipfile.ZipInfo(MANIFEST_MEMBER, date_time=_zip_time()), data, zipfile.ZIP_DEFLATED)
    return manifest


def _zip_time() -> tuple[int, int, int, int, int, int]:
    now = datetime.now(UTC)
    return (now.year, now.month, now.day, now.hour, now.minute, now.second)


@enveloped
def export_database(
    session: Scope, export_path: str | os.PathLike[str], kb_names: Sequence[str] | None = None
) -> Envelope:
    """Write every KB the session can see (or only ``kb_names``) to one portable file at ``export_path``.

    Returns ``{source_path: the home, export_path}``. API keys are never exported.
    """
    target = _resolve_path(export_path, "export_path")
    # The folder is opened once; the file is created in it and renamed into place relative to that open
    # folder, so swapping a folder on the way for a symlink cannot redirect the write.
    with open_output_folder(target, "export_path", getattr(session, "allowed_dirs", None)) as folder:
        return _export_into(session, folder, target, kb_names)


def _export_into(session: Scope, folder: OutputFolder, target: Path, kb_names: Sequence[str] | None) -> Envelope:
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
    snapshots: list[list[_SegmentExport]] = []
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
        folder.replace(temporary)
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
    graph_text = ""
    if with_graph:
        graph_text = (
            f", {len(with_graph)} knowledge-bundle graph(s) with {sum(g['nodes'] for g in with_graph)} node(s) and "
            f"{sum(g['edges'] for g in with_graph)} edge(s)"
        )
    message = (
        f"Exported {len(kbs)} knowledge base(s) ({documents} document(s), {chunks} chunk(s){graph_text}) to {target} "
        f"({size} bytes). API keys are never exported."
    )
    logger.info(message)
    source = service.postgres.display if service.postgres is not None else str(home_root)
    return ok(message, {"source_path": source, "export_path": str(target)})


# -- import: reading and validating the file ----------------------------------------------------------------------
def _refuse(message: str, **details: Any) -> ImportFormatError:
    return ImportFormatError(message, details=details)


def _check_member_name(info: zipfile.ZipInfo) -> None:
    name = info.filename
    shown = repr(name)
    if "\x00" in name or any(ord(c) < 32 for c in name):
        raise _refuse(f"Member {shown} has control characters in its name; refused.", member=name)
    if name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", name):
        raise _refuse(f"Member {shown} has an absolute path; only relative member names are accepted.", member=name)
    if "\\" in name:
        raise _refuse(f"Member {shown} uses backslashes; only '/' separated names are accepted.", member=name)
    if ".." in name.split("/"):
        raise _refuse(f"Member {shown} climbs out of the archive with '..'; refused.", member=name)
    mode = info.external_attr >> 16
    kind = stat.S_IFMT(mode)
    if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
        what = {stat.S_IFLNK: "a symbolic link", stat.S_IFCHR: "a device", stat.S_IFBLK: "a device"}.get(
            kind, "a special file"
        )
        raise _refuse(f"Member {shown} is {what}; only regular files are accepted.", member=name)
    if info.is_dir():
        raise _refuse(f"Member {shown} is a folder entry; an export file holds only files.", member=name)
    if info.flag_bits & 0x1:
        raise _refuse(f"Member {shown} is encrypted; export files are never encrypted.", member=name)
    if name != MANIFEST_MEMBER and not MEMBER_PATH.match(name):
        raise _refuse(
            f"Member {shown} is not part of the {FORMAT_NAME} format (expected manifest.json, kb/NNNN/seg/NNNN/… "
            "and kb/NNNN/graph/state.json).",
            member=name,
        )


def _check_sizes(infos: Sequence[zipfile.ZipInfo], limits: TransferLimits) -> int:
    if len(infos) > limits.max_members:
        raise _refuse(f"The file has {len(infos)} members; at most {limits.max_members} are accepted.")
    total = 0
    for info in infos:
        if info.file_size > limits.max_member_bytes:
            raise _refuse(
                f"Member {info.filename!r} declares {info.file_size} bytes uncompressed; "
                f"at most {limits.max_member_bytes} are accepted (decompression bomb?).",
                member=info.filename,
            )
        if info.file_size > limits.ratio_floor_bytes and info.file_size > limits.max_ratio * max(info.compress_size, 1):
            raise _refuse(
                f"Member {info.filename!r} expands {info.file_size / max(info.compress_size, 1):.0f}-fold "
                f"({info.compress_size} → {info.file_size} bytes); at most {limits.max_ratio:g}-fold is accepted "
                "(decompression bomb?).",
                member=info.filename,
            )
        if GRAPH_PATH.match(info.filename) and info.file_size > limits.max_graph_bytes:
            raise _refuse(
                f"Member {info.filename!r} declares a {info.file_size}-byte graph; at most {limits.max_graph_bytes} "
                "bytes are accepted.",
                member=info.filename,
            )
        total += info.file_size
    if total > limits.max_total_bytes:
        raise _refuse(
            f"The file declares {total} bytes uncompressed in all; at most {limits.max_total_bytes} are accepted."
        )
    return total


def _extract(archive: zipfile.ZipFile, info: zipfile.ZipInfo, target: Path | None) -> tuple[str, int, bytes | None]:
    """Stream one member, never past its declared size; returns (sha256, size, bytes if target is None)."""
    digest = hashlib.sha256()
    size = 0
    kept = io.BytesIO() if target is None else None
    out = open(target, "xb") if target is not None else None  # noqa: SIM115
    try:
        with archive.open(info) as source:
            while True:
                block = source.read(READ_BLOCK)
                if not block:
                    break
                size += len(block)
                if size > info.file_size:
                    raise _refuse(f"Member {info.filename!r} holds more data than it declares; refused.")
                digest.update(block)
                (out or kept).write(block)  # type: ignore[union-attr]
    except (zipfile.BadZipFile, EOFError, zlib.error) as exc:
        raise _refuse(f"Member {info.filename!r} is damaged ({exc}); the file is corrupt or truncated.") from exc
    finally:
        if out is not None:
            out.close()
    if size != info.file_size:
        raise _refuse(f"Member {info.filename!r} holds {size} bytes but declares {info.file_size}; refused.")
    return digest.hexdigest(), size, kept.getvalue() if kept is not None else None


@dataclass
class _Package:
    manifest: dict[str, Any]
    members: dict[str, Path]  # member name → extracted file


def _nests_deeper_than(value: Any, limit: int) -> bool:
    """Whether parsed JSON nests more than ``limit`` containers deep (iterative: no recursion to exhaust)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        if not children:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def _read_manifest(data: bytes) -> dict[str, Any]:
    too_deep = _refuse(f"manifest.json nests deeper than {MAX_MANIFEST_DEPTH} levels; this is not an export file.")
    try:
        manifest = json.loads(data.decode("utf-8"))
    except RecursionError:  # the parser stops at the interpreter's recursion limit: bounded time, nothing allocated
        raise too_deep from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise _refuse(f"manifest.json is not valid UTF-8 JSON: {exc}.") from exc
    if _nests_deeper_than(manifest, MAX_MANIFEST_DEPTH):
        raise too_deep  # a value hundreds of levels deep would exhaust the stack of whatever formats it later
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
        found = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
        raise _refuse(f"This is not a {FORMAT_NAME} file (manifest format is {found!r}).")
    version = manifest.get("format_version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise _refuse(f"format_version {version!r} is not valid; this program reads version {FORMAT_VERSION}.")
    if version > FORMAT_VERSION:
        raise _refuse(
            f"The file has format_version {version}, newer than this program understands ({FORMAT_VERSION}); "
            "upgrade KB Workbench to import it.",
            format_version=version,
        )
    if not isinstance(manifest.get("files"), dict) or not isinstance(manifest.get("knowledge_bases"), list):
        raise _refuse("manifest.json lacks its 'files' map or 'knowledge_bases' list.")
    for name, entry in manifest["files"].items():
        if (
            not isinstance(entry, dict)
            or not isinstance(entry.get("sha256"), str)
            or not re.fullmatch(r"[0-9a-f]{64}", entry["sha256"])
            or isinstance(entry.get("size"), bool)
            or not isinstance(entry.get("size"), int)
            or entry["size"] < 0
        ):
            raise _refuse(f"manifest.json entry for {name!r} needs a sha256 (64 hex digits) and a size.")
    return manifest


def _open_package(
    path: Path, staging: Path, limits: TransferLimits, allowed_dirs: Sequence[Path] | None = None
) -> _Package:
    # Opened once (confined where the session is); the archive is read from that open file only.
    try:
        with open_input_file(path, allowed_dirs) as opened:
            handle = opened.reader()
    except UnusablePath as exc:
        raise InvalidArgument(f"source_db_path {str(path)!r} {exc.reason}; give an export file.") from None
    with handle:
        return _read_package(handle, path, staging, limits)


def _read_package(handle: IO[bytes], path: Path, staging: Path, limits: TransferLimits) -> _Package:
    try:
        archive = zipfile.ZipFile(handle)
    except zipfile.BadZipFile as exc:
        raise _refuse(
            f"{path.name} is not a {FORMAT_NAME} file, or it is truncated: it is not a readable ZIP archive ({exc})."
        ) from exc
    except OSError as exc:
        raise _refuse(f"{path.name} cannot be read: {exc.strerror or exc}.") from exc
    with archive:
        infos = archive.infolist()
        names = [i.filename for i in infos]
        duplicates = sorted({n for n in names if names.count(n) > 1}) if len(set(names)) != len(names) else []
        if duplicates:
            raise _refuse(f"Member name(s) {duplicates[:5]} occur more than once; refused.")
        for info in infos:
            _check_member_name(info)
        total = _check_sizes(infos, limits)
        by_name = {i.filename: i for i in infos}
        if MANIFEST_MEMBER not in by_name:
            raise _refuse(f"{path.name} has no {MANIFEST_MEMBER}: it is not a {FORMAT_NAME} file.")
        manifest_info = by_name[MANIFEST_MEMBER]
        if manifest_info.file_size > limits.max_manifest_bytes:
            raise _refuse(f"manifest.json declares {manifest_info.file_size} bytes; refused.")
        _, _, data = _extract(archive, manifest_info, None)
        manifest = _read_manifest(data or b"")
        listed = set(manifest["files"])
        present = set(by_name) - {MANIFEST_MEMBER}
        if listed - present:
            raise _refuse(f"Member(s) listed in the manifest are missing: {sorted(listed - present)[:5]}.")
        if present - listed:
            raise _refuse(f"Member(s) not listed in the manifest: {sorted(present - listed)[:5]}.")
        free = shutil.disk_usage(staging.parent).free
        if total * 2 > free:
            raise StoreError(
                f"Importing needs about {2 * total} bytes of free space in the home; {free} are free.",
                code="INSUFFICIENT_SPACE",
            )
        members: dict[str, Path] = {}
        raw = staging / "raw"
        raw.mkdir()
        for number, name in enumerate(sorted(listed)):
            info = by_name[name]
            expected = manifest["files"][name]
            if info.file_size != expected["size"]:
                raise _refuse(
                    f"Member {name!r} is {info.file_size} bytes but the manifest says {expected['size']}; refused.",
                    member=name,
                )
            target = raw / f"{number:08d}"
            digest, _, _ = _extract(archive, info, target)
            if digest != expected["sha256"]:
                raise _refuse(
                    f"Member {name!r} fails its checksum (sha256 {digest[:12]}…, manifest says "
                    f"{expected['sha256'][:12]}…): the file is damaged or was altered.",
                    member=name,
                )
            members[name] = target
    return _Package(manifest, members)


# -- import: validating KB contents and staging KB folders -------------------------------------------------------
def _string(value: Any, what: str, *, allow_none: bool = False, max_length: int = 4096) -> str | None:
    if value is None and allow_none:
        return None
    if not isinstance(value, str) or len(value) > max_length:
        raise _refuse(f"{what} must be a string of at most {max_length} characters, got {str(value)[:40]!r}.")
    return value


def _int(value: Any, what: str, low: int = 0, high: int = 2**62) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise _refuse(f"{what} must be an integer from {low} to {high}, got {value!r}.")
    return value


def _read_table(path: Path, schema: pa.Schema, what: str) -> list[dict[str, Any]]:
    try:
        table = pq.read_table(path)
        missing = [n for n in schema.names if n not in table.column_names]
        if missing:
            raise _refuse(f"{what} lacks the column(s) {missing}.")
        return table.select(schema.names).cast(schema).to_pylist()
    except ImportFormatError:
        raise
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise _refuse(f"{what} is not a readable table of the expected schema: {exc}.") from exc


def _read_vectors(path: Path, rows: int, what: str) -> np.ndarray:
    """Read a vectors.npy member after checking its header against the member's real size (never allocating
    what a header merely claims)."""
    from numpy.lib import format as npy

    try:
        with open(path, "rb") as handle:
            version = npy.read_magic(handle)
            if version not in NPY_VERSIONS:
                raise _refuse(f"{what} is a .npy file of version {version[0]}.{version[1]}; 1.0 and 2.0 are accepted.")
            read_header = npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0
            shape, fortran_order, dtype = read_header(handle)
            data_bytes = os.fstat(handle.fileno()).st_size - handle.tell()
            if len(shape) != 2 or dtype != np.dtype("<f4") or fortran_order or not 1 <= shape[1] <= 65536:
                order = " in Fortran order" if fortran_order else ""
                raise _refuse(
                    f"{what} must be a 2-D little-endian float32 array in C order with 1 to 65536 columns, got "
                    f"{dtype} of shape {shape}{order}."
                )
            claimed = shape[0] * shape[1] * dtype.itemsize
            if claimed != data_bytes:
                raise _refuse(
                    f"{what}: its header claims shape {shape} ({claimed} bytes) but the member holds {data_bytes} "
                    "bytes of data; refused."
                )
            if shape[0] != rows:
                raise _refuse(f"{what} has {shape[0]} vectors for {rows} chunks.")
            vectors = np.fromfile(handle, dtype=dtype, count=shape[0] * shape[1]).reshape(shape)
    except ImportFormatError:
        raise
    except (OSError, ValueError, EOFError) as exc:
        raise _refuse(f"{what} is not a readable .npy array: {exc}.") from exc
    if not np.isfinite(vectors).all():
        raise _refuse(f"{what} contains NaN or infinite values.")
    norms = np.linalg.norm(vectors, axis=1)
    if rows and not ((np.abs(norms - 1.0) <= 1e-3) | (norms == 0.0)).all():
        raise _refuse(f"{what} holds vectors that are not L2-normalised.")
    return vectors


@dataclass
class _SegmentData:
    documents: list[dict[str, Any]]
    chunks: list[dict[str, Any]]
    texts: list[dict[str, Any]]
    vectors: np.ndarray
    originals: dict[str, Path]  # doc id → extracted original
    model_key: str
    analyzer: str


@dataclass
class _KBPlan:
    record: KnowledgeBaseRecord
    had_api_key: bool
    segments: list[_SegmentData]
    root: Path | None = None
    document_count: int = 0
    renamed_documents: list[str] = field(default_factory=list)
    graph: GraphState | None = None
    graph_unlinked: int = 0  # nodes whose indexed document was not in the file (re-indexed by the next bundle)


def _validate_kb(entry: Any, position: int, package: _Package, graph_paths: set[str] | None = None) -> _KBPlan:
    if not isinstance(entry, dict):
        raise _refuse(f"knowledge_bases[{position}] must be an object.")
    where = f"knowledge_bases[{position}]"
    try:
        name = validate_kb_name(entry.get("name"))
        chunk_size = validate_chunk_size(entry.get("chunk_size"))
        endpoint = validate_endpoint(entry.get("embedding_endpoint"))
    except InvalidArgument as exc:
        raise _refuse(f"{where}: {exc.message}") from exc
    model = _string(entry.get("embedding_model"), f"{where}.embedding_model", max_length=512) or ""
    if not model.strip():
        raise _refuse(f"{where}.embedding_model must not be empty.")
    created_at = _string(entry.get("created_at"), f"{where}.created_at", max_length=64) or utc_now()
    settings = entry.get("search_settings") or {}
    if not isinstance(settings, dict):
        raise _refuse(f"{where}.search_settings must be an object.")
    settings = _validate_search_settings(settings, where)
    segment_entries = entry.get("segments")
    if not isinstance(segment_entries, list):
        raise _refuse(f"{where}.segments must be a list.")
    expected = expected_dimension(model, endpoint)
    dimension: int | None = None
    segments: list[_SegmentData] = []
    seen_docs: set[str] = set()
    seen_chunks: set[str] = set()
    seen_paths: set[str] = set()
    for number, segment in enumerate(segment_entries):
        label = f"{where}.segments[{number}]"
        if not isinstance(segment, dict):
            raise _refuse(f"{label} must be an object.")
        path = _string(segment.get("path"), f"{label}.path", max_length=64) or ""
        if not SEGMENT_PATH.match(path) or path in seen_paths:
            raise _refuse(f"{label}.path {path!r} is not a valid, unique segment path (kb/NNNN/seg/NNNN).")
        seen_paths.add(path)
        for file_name in (*TABLE_FILES, VECTORS_FILE):
            if f"{path}/{file_name}" not in package.members:
                raise _refuse(f"{label}: member {path}/{file_name} is missing.")
        declared = _int(segment.get("dimension"), f"{label}.dimension", 1, 65536)
        if expected is not None and declared != expected:
            raise _refuse(
                f"Knowledge base {name!r} uses {model!r}, whose vectors have {expected} dimensions, but segment "
                f"{path} declares {declared}; refused.",
                kb_name=name,
            )
        if dimension is not None and declared != dimension:
            raise _refuse(f"Knowledge base {name!r} mixes vector dimensions {dimension} and {declared}; refused.")
        dimension = declared
        documents = _read_table(
            package.members[f"{path}/{DOCUMENTS_FILE}"], catalog.DOCUMENTS_SCHEMA, f"{path}/documents"
        )
        chunks = _read_table(package.members[f"{path}/{CHUNKS_FILE}"], catalog.CHUNKS_SCHEMA, f"{path}/chunks")
        texts = _read_table(package.members[f"{path}/{TEXTS_FILE}"], catalog.TEXTS_SCHEMA, f"{path}/texts")
        vectors = _read_vectors(package.members[f"{path}/{VECTORS_FILE}"], len(chunks), f"{path}/{VECTORS_FILE}")
        if vectors.shape[1] != declared:
            raise _refuse(
                f"{path}/{VECTORS_FILE} holds {vectors.shape[1]}-dimensional vectors but the manifest declares "
                f"{declared}; refused.",
                kb_name=name,
            )
        if _int(segment.get("rows"), f"{label}.rows") != len(chunks):
            raise _refuse(f"{label} declares {segment.get('rows')} rows but {path}/chunks has {len(chunks)}.")
        if not documents:
            raise _refuse(f"{label} has no documents.")
        originals: dict[str, Path] = {}
        counts: dict[str, int] = {}
        for row in documents:
            doc_id = _string(row["doc_id"], f"{path}/documents doc_id", max_length=128) or ""
            if not ID_PATTERN.match(doc_id) or doc_id in seen_docs:
                raise _refuse(f"{path}/documents: doc_id {doc_id!r} is malformed or repeated.")
            seen_docs.add(doc_id)
            row["name"] = _document_name(row["name"], path)
            if row["status"] not in ("ready", "failed"):
                raise _refuse(f"{path}/documents: status {row['status']!r} of {doc_id} is not ready or failed.")
            for column in ("size_bytes", "chunk_size", "chunk_count"):
                row[column] = _int(row[column] if row[column] is not None else 0, f"{path}/documents {column}")
            relative = row["original"] or ""
            if relative:
                suffix = Path(relative).suffix
                member = f"{path}/files/{doc_id}{suffix.lower()}"
                if relative != f"files/{doc_id}{suffix}" or member not in package.members:
                    raise _refuse(f"{path}/documents: the original {relative!r} of {doc_id} is not in the file.")
                originals[doc_id] = package.members[member]
                row["original"] = f"files/{doc_id}{suffix.lower()}"
            counts[doc_id] = 0
        for row in chunks:
            chunk_id = _string(row["chunk_id"], f"{path}/chunks chunk_id", max_length=128) or ""
            if not ID_PATTERN.match(chunk_id) or chunk_id in seen_chunks:
                raise _refuse(f"{path}/chunks: chunk_id {chunk_id!r} is malformed or repeated.")
            seen_chunks.add(chunk_id)
            if row["doc_id"] not in counts:
                raise _refuse(f"{path}/chunks: chunk {chunk_id} belongs to no document of its segment.")
            if row["content"] is None:
                raise _refuse(f"{path}/chunks: chunk {chunk_id} has no content.")
            counts[row["doc_id"]] += 1
        for row in documents:
            if counts[row["doc_id"]] != row["chunk_count"]:
                raise _refuse(
                    f"{path}: document {row['doc_id']} declares {row['chunk_count']} chunks but has "
                    f"{counts[row['doc_id']]}."
                )
        texts = [t for t in texts if t["doc_id"] in counts]  # unreferenced rows and originals are not copied
        segments.append(
            _SegmentData(
                documents=documents,
                chunks=chunks,
                texts=texts,
                vectors=vectors,
                originals=originals,
                model_key=str(segment.get("model_key") or ""),
                analyzer=str(segment.get("analyzer") or ""),
            )
        )
    record = KnowledgeBaseRecord(
        id=new_id("kb"),
        name=name,
        chunk_size=chunk_size,
        embedding_model=model.strip(),
        embedding_endpoint=endpoint,
        has_api_key=False,
        created_at=created_at,
        search_settings=settings,
    )
    plan = _KBPlan(record, bool(entry.get("had_api_key")), segments)
    plan.document_count = len(seen_docs)
    if entry.get("graph") is not None:
        documents_by_id = {row["doc_id"]: row for segment in segments for row in segment.documents}
        plan.graph, plan.graph_unlinked = _validate_graph(
            entry["graph"], where, name, package, documents_by_id, graph_paths if graph_paths is not None else set()
        )
    return plan


def _no_constant(value: str) -> Any:
    raise ValueError(f"{value} is not a JSON number")


def _validate_graph(
    entry: Any,
    where: str,
    kb_name: str,
    package: _Package,
    documents: dict[str, dict[str, Any]],
    seen_paths: set[str],
) -> tuple[GraphState, int]:
    """Parse and check one KB's graph state completely; returns it (doc links checked) and the unlinked count."""
    from kb_core.bundles.graph import edge_item, node_item
    from kb_core.bundles.ontology import parse_ontology
    from kb_core.bundles.validation import BundleValidator, edge_id, node_id

    label = f"{where}.graph"
    if not isinstance(entry, dict):
        raise _refuse(f"{label} must be an object.")
    path = _string(entry.get("path"), f"{label}.path", max_length=64) or ""
    if not GRAPH_PATH.match(path) or path in seen_paths or path not in package.members:
        raise _refuse(f"{label}.path {path!r} is not a unique graph member of the file (kb/NNNN/graph/state.json).")
    seen_paths.add(path)
    try:
        raw = json.loads(package.members[path].read_bytes().decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        reason = "it nests too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise _refuse(f"{path} is not valid UTF-8 JSON: {reason}.", kb_name=kb_name) from None
    if _nests_deeper_than(raw, MAX_GRAPH_DEPTH):
        raise _refuse(f"{path} nests deeper than {MAX_GRAPH_DEPTH} levels; refused.", kb_name=kb_name)

    def bad(message: str) -> ImportFormatError:
        return _refuse(f"{path} (graph of knowledge base {kb_name!r}): {message}; refused.", kb_name=kb_name)

    if not isinstance(raw, dict) or set(raw) != {"version", "ontology", "nodes", "edges"}:
        raise bad("it must be an object with exactly version, ontology, nodes and edges")
    version = raw["version"]
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise bad(f"version {version!r} must be a positive integer")
    try:
        ontology = parse_ontology(raw["ontology"])
    except KBError as exc:
        raise bad(f"the ontology is invalid: {exc.message}") from None
    if not isinstance(raw["nodes"], list) or not isinstance(raw["edges"], list):
        raise bad("nodes and edges must be lists")

    nodes: dict[str, dict[str, Any]] = {}
    linked: dict[str, str] = {}  # doc id → node id
    unlinked = 0
    for number, node in enumerate(raw["nodes"]):
        at = f"nodes[{number}]"
        if not isinstance(node, dict) or not {"id", "type", "identity", "properties"} <= set(node) <= NODE_KEYS:
            raise bad(f"{at} must be an object with id, type, identity, properties[, doc_id, doc_name, text_sha256]")
        node = {key: node.get(key) for key in sorted(NODE_KEYS)}
        spec = ontology.nodes.get(node["type"]) if isinstance(node["type"], str) else None
        if spec is None:
            raise bad(f"{at}.type {node['type']!r} is not a node type of its ontology")
        properties, identity = node["properties"], node["identity"]
        if not isinstance(properties, dict) or not isinstance(identity, dict):
            raise bad(f"{at}: identity and properties must be objects")
        if set(identity) != set(spec.identity) or any(properties.get(k) != v for k, v in identity.items()):
            raise bad(f"{at}.identity does not match the identity fields {list(spec.identity)} of its properties")
        expected = node_id(node["type"], identity)
        if node["id"] != expected or expected in nodes:
            raise bad(f"{at}.id {node['id']!r} is not {expected!r} (derived from type and identity) or is repeated")
        doc_id = node["doc_id"]
        if doc_id is not None:
            if not isinstance(doc_id, str) or not ID_PATTERN.match(doc_id) or doc_id in linked:
                raise bad(f"{at}.doc_id {str(doc_id)[:40]!r} is malformed or shared with another node")
            row = documents.get(doc_id)
            if row is not None and row["source"] != "bundle":
                raise bad(f"{at}.doc_id {doc_id!r} names a document of source {row['source']!r}, not 'bundle'")
            if row is None:
                node.update(doc_id=None, doc_name=None, text_sha256=None)
                unlinked += 1
            else:
                linked[doc_id] = expected
        if node["doc_name"] is not None and not isinstance(node["doc_name"], str):
            raise bad(f"{at}.doc_name must be a string or null")
        sha = node["text_sha256"]
        if sha is not None and (not isinstance(sha, str) or not SHA256_HEX.match(sha)):
            raise bad(f"{at}.text_sha256 must be 64 hex digits or null")
        nodes[expected] = node

    edges: dict[str, dict[str, Any]] = {}
    for number, edge in enumerate(raw["edges"]):
        at = f"edges[{number}]"
        if not isinstance(edge, dict) or set(edge) != EDGE_KEYS:
            raise bad(f"{at} must be an object with exactly id, type, source, target, properties")
        spec_ = ontology.edges.get(edge["type"]) if isinstance(edge["type"], str) else None
        if spec_ is None:
            raise bad(f"{at}.type {edge['type']!r} is not an edge type of its ontology")
        source, target = edge["source"], edge["target"]
        if not isinstance(source, str) or not isinstance(target, str) or source not in nodes or target not in nodes:
            raise bad(f"{at}: source and target must be ids of nodes in the graph")
        if (nodes[source]["type"], nodes[target]["type"]) != (spec_.source, spec_.target):
            raise bad(f"{at}: '{edge['type']}' connects {spec_.source} → {spec_.target}")
        if not isinstance(edge["properties"], dict):
            raise bad(f"{at}.properties must be an object")
        expected = edge_id(edge["type"], source, target)
        if edge["id"] != expected or expected in edges:
            raise bad(f"{at}.id {edge['id']!r} is not {expected!r} (derived from type and endpoints) or is repeated")
        edges[expected] = dict(edge)

    state = GraphState(version, ontology, nodes, edges)
    items = [node_item(n) for n in nodes.values()] + [edge_item(e, state) for e in edges.values()]
    validator = BundleValidator(ontology, max_errors=5, max_items=max(len(items), 1))
    _, _, problems = validator.structural(items)
    if problems:
        raise bad("its nodes/edges do not fit its ontology: " + "; ".join(p.text for p in problems))
    return state, unlinked


def _validate_search_settings(settings: dict[str, Any], where: str) -> dict[str, Any]:
    from kb_core.retrieval.search import SearchSettings

    unknown = set(settings) - set(SearchSettings.SAVED_FIELDS)
    if unknown:
        raise _refuse(f"{where}.search_settings has unknown setting(s) {sorted(unknown)}.")
    try:
        SearchSettings(**settings).validated()
    except (InvalidArgument, TypeError) as exc:
        raise _refuse(f"{where}.search_settings are invalid: {exc}") from exc
    return dict(settings)


def _document_name(value: Any, path: str) -> str:
    import unicodedata

    if not isinstance(value, str):
        raise _refuse(f"{path}/documents: a document name is not a string.")
    name = unicodedata.normalize("NFC", value).strip()
    if (
        not name
        or len(name) > DOCUMENT_NAME_MAX
        or "/" in name
        or "\\" in name
        or any(unicodedata.category(c) in ("Cc", "Cf") for c in name)
    ):
        raise _refuse(f"{path}/documents: document name {value[:40]!r} is empty, too long or has path characters.")
    return name


def _home_document_ids(service: Resources) -> set[str]:
    if service.postgres is not None:
        return service.postgres.document_ids()
    ids: set[str] = set()
    for record in service.home.knowledge_bases():
        store = service.kb_store(record.id)
        try:
            manifest = store.manifest()
        except KBError:
            continue
        for ref in manifest.segments:
            try:
                table = pq.read_table(store.segment_dir(ref.id) / DOCUMENTS_FILE, columns=["doc_id"])
            except (OSError, pa.ArrowException):
                continue
            ids.update(table.column("doc_id").to_pylist())
    return ids


def _fresh_ids(plan: _KBPlan) -> None:
    remapped: dict[str, str] = {}
    for segment in plan.segments:
        mapping = {row["doc_id"]: f"doc_{uuid.uuid4().hex[:16]}" for row in segment.documents}
        remapped.update(mapping)
        for row in segment.documents:
            old = row["doc_id"]
            row["doc_id"] = mapping[old]
            if row["original"]:
                row["original"] = f"files/{mapping[old]}{Path(row['original']).suffix}"
        for row in segment.chunks:
            row["doc_id"] = mapping[row["doc_id"]]
            row["chunk_id"] = f"chk_{uuid.uuid4().hex[:16]}"
        for row in segment.texts:
            row["doc_id"] = mapping[row["doc_id"]]
        segment.originals = {mapping[d]: p for d, p in segment.originals.items()}
    if plan.graph is not None:
        for node in plan.graph.nodes.values():
            if node["doc_id"] is not None:
                node["doc_id"] = remapped[node["doc_id"]]


def _unique_document_names(plan: _KBPlan, now: datetime) -> None:
    taken: set[str] = set()
    for segment in plan.segments:
        for row in segment.documents:
            if row["name"].casefold() in taken:
                renamed = timestamped_name(row["name"], taken, now)
                plan.renamed_documents.append(f"{row['name']} → {renamed}")
                row["name"] = renamed
            taken.add(row["name"].casefold())


class _IndexIdentity:
    """What write_segment_files needs of an embedder: only its identity and dimension (no model is loaded)."""

    def __init__(self, model_key: str, dimension: int) -> None:
        self.model_key = model_key
        self.dimension = dimension


def _stage_kb(plan: _KBPlan, staging: Path, analyzer: Any) -> None:
    from kb_core.store.segments import write_segment_files

    root = staging / "kbs" / plan.record.id
    store = KBStore.create(root, plan.record.id)
    staged_segments: list[StagedSegment] = []
    for segment in plan.segments:
        staged = store.stage_segment()
        rows = {row["doc_id"]: row for row in segment.documents}
        for doc_id, source in segment.originals.items():
            shutil.copyfile(source, staged.path / rows[doc_id]["original"])
        write_segment_files(
            staged,
            segment.documents,
            segment.chunks,
            segment.texts,
            segment.vectors,
            _IndexIdentity(segment.model_key, int(segment.vectors.shape[1])),
            analyzer,
        )
        staged_segments.append(staged)
    if staged_segments:
        store.commit(Change(add=tuple(staged_segments)))
    if plan.graph is not None:
        names = {row["doc_id"]: row["name"] for segment in plan.segments for row in segment.documents}
        for node in plan.graph.nodes.values():
            if node["doc_id"] is not None:
                node["doc_name"] = names[node["doc_id"]]  # after renames of clashing document names
        graph = GraphStore(root)
        graph.root.mkdir()
        committed = graph.commit(plan.graph)
        write_shadow(committed, graph.root / "shadow")
    plan.root = root


def _kb_name_with_stamp(name: str, stamp: str, taken: set[str]) -> str:
    from kb_core.validation import KB_NAME_MAX_LENGTH

    counter = 1
    while True:
        suffix = f"_{stamp}" + (f"-{counter}" if counter > 1 else "")
        candidate = name[: KB_NAME_MAX_LENGTH - len(suffix)] + suffix
        if name_key(candidate) not in taken:
            return candidate
        counter += 1


def _commit(home: Any, plans: Sequence[_KBPlan], now: datetime) -> list[tuple[str, str]]:
    """Move the staged KB folders into the home and register them in one registry write (the commit point)."""
    from dataclasses import replace

    renamed: list[tuple[str, str]] = []
    stamp = now.strftime("%Y%m%d-%H%M%S")
    with home.registry_lock():
        existing = home.knowledge_bases()
        taken = {name_key(r.name) for r in existing}
        for plan in plans:
            if name_key(plan.record.name) in taken:
                new_name = _kb_name_with_stamp(plan.record.name, stamp, taken)
                renamed.append((plan.record.name, new_name))
                plan.record = replace(plan.record, name=new_name)
            taken.add(name_key(plan.record.name))
        moved: list[Path] = []
        try:
            for plan in plans:
                assert plan.root is not None
                target = home.kb_dir(plan.record.id)
                os.replace(plan.root, target)
                moved.append(target)
            if moved:
                fsync_directory(home.root / "kbs")
            # One registry write for all KBs: Home.add would commit them one by one.
            home._write_registry([*existing, *(p.record for p in plans)])
        except BaseException:
            registered = {r.id for r in home.knowledge_bases()}
            if not all(p.record.id in registered for p in plans):
                for target in moved:
                    shutil.rmtree(target, ignore_errors=True)
                raise
            logger.exception("registry table rewrite failed after the import was committed")
    return renamed


@enveloped
def import_database(
    session: Scope, source_db_path: str | os.PathLike[str], *, limits: TransferLimits | None = None
) -> Envelope:
    """Merge every KB of an export file into the home, all or nothing.

    Returns ``{source_path, imported_kb_count, imported_doc_count}``. Hostile or damaged files are refused with
    INVALID_IMPORT_FILE before anything in the home changes.
    """
    source = _resolve_path(source_db_path, "source_db_path")
    service = session.service
    home = service.home
    limits = limits or TransferLimits()
    now = datetime.now(UTC)
    home.abandoned_transfer_staging(remove=True)
    staging = home.open_transfer_staging()
    try:
        package = _open_package(source, staging.path, limits, getattr(session, "allowed_dirs", None))
        entries = package.manifest["knowledge_bases"]
        graph_paths: set[str] = set()
        plans = [_validate_kb(entry, position, package, graph_paths) for position, entry in enumerate(entries)]
        taken_ids = _home_document_ids(service)
        for plan in plans:
            ids = {row["doc_id"] for segment in plan.segments for row in segment.documents}
            if ids & taken_ids:
                _fresh_ids(plan)
                ids = {row["doc_id"] for segment in plan.segments for row in segment.documents}
            taken_ids |= ids
            _unique_document_names(plan, now)
        if service.postgres is not None:
            from kb_core.store.postgres.transfer import commit_plans

            renamed = commit_plans(service.postgres, plans, service.analyzer, now)
        else:
            for plan in plans:
                _stage_kb(plan, staging.path, service.analyzer)
            renamed = _commit(home, plans, now)
    finally:
        staging.close()
    documents = sum(p.document_count for p in plans)
    message = f"Imported {len(plans)} knowledge base(s) with {documents} document(s) from {source.name}."
    if renamed:
        message += " Renamed because the name existed: " + ", ".join(f"{a!r} → {b!r}" for a, b in renamed) + "."
    renamed_docs = [r for p in plans for r in p.renamed_documents]
    if renamed_docs:
        message += f" Renamed {len(renamed_docs)} clashing document name(s)."
    graphs = [p.graph for p in plans if p.graph is not None]
    if graphs:
        message += (
            f" Restored {len(graphs)} knowledge-bundle graph(s) with {sum(len(g.nodes) for g in graphs)} node(s) and "
            f"{sum(len(g.edges) for g in graphs)} edge(s)."
        )
    for plan in plans:
        if plan.graph_unlinked:
            message += (
                f" {plan.graph_unlinked} node(s) of {plan.record.name!r} had no indexed document in the file; "
                "the next bundle import into it re-indexes them."
            )
    message += " API keys are never part of an export file: the imported knowledge bases have no API key"
    keyed = [p.record.name for p in plans if p.had_api_key or p.record.embedding_endpoint]
    if keyed:
        message += f"; {', '.join(repr(n) for n in keyed)} use an embedding endpoint and need their key set again."
    else:
        message += "."
    logger.info(message)
    return ok(
        message,
        {
            "source_path": str(source),
            "imported_kb_count": len(plans),
            "imported_doc_count": documents,
            "knowledge_bases": [p.record.name for p in plans],
            "renamed_knowledge_bases": [{"from": a, "to": b} for a, b in renamed],
        },
    )
