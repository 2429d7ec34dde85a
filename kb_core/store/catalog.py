"""The catalog tables of a segment, as parquet files an analyst can open with pandas or duckdb.

``documents.parquet``, ``chunks.parquet`` and ``texts.parquet`` live in each segment folder.
``chunks.arrow`` holds the same chunk rows as one uncompressed Arrow IPC record batch: readers memory-map
it and fetch single rows without decoding (or holding in memory) the rest of the segment.
A document deleted later stays in its segment's files but is listed in the manifest's
tombstones; :func:`load_catalog` applies them and returns the live tables.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from kb_core.base.atomic import prefetch, write_atomically, write_json_atomically
from kb_core.base.errors import StoreError
from kb_core.base.files import CHUNK_ROWS_FILE, CHUNKS_FILE, DOCUMENTS_FILE, SEGMENT_INFO_FILE, TEXTS_FILE
from kb_core.engines.near_duplicates import TextSignatures, text_signatures

DOCUMENTS_SCHEMA = pa.schema(
    [
        ("doc_id", pa.string()),
        ("name", pa.string()),
        ("file_name", pa.string()),
        ("file_path", pa.string()),
        ("file_type", pa.string()),
        ("source", pa.string()),  # upload | path | bundle
        ("size_bytes", pa.int64()),
        ("sha256", pa.string()),
        ("chunk_size", pa.int64()),
        ("status", pa.string()),  # ready | failed
        ("error", pa.string()),
        ("chunk_count", pa.int64()),
        ("created_at", pa.string()),
        ("updated_at", pa.string()),
        ("original", pa.string()),  # path of the kept original, relative to the segment folder
        # the detected language (kb_core.engines.text_language: zh, en, ...); null for failed documents and in segments
        # written before it was stored (read with this schema, their files give null)
        ("language", pa.string()),
    ]
)

CHUNKS_SCHEMA = pa.schema(
    [
        ("chunk_id", pa.string()),
        ("doc_id", pa.string()),
        ("chunk_index", pa.int32()),
        ("content", pa.string()),
        ("tokens", pa.int32()),
        ("chapter", pa.string()),
        ("page", pa.int32()),
        ("start_char", pa.int64()),
        ("end_char", pa.int64()),
    ]
)

TEXTS_SCHEMA = pa.schema([("doc_id", pa.string()), ("text", pa.string())])


def _write_table(path: Path, rows: list[dict[str, Any]], schema: pa.Schema) -> None:
    table = pa.Table.from_pylist(rows, schema=schema)
    write_atomically(path, lambda tmp: pq.write_table(table, tmp, compression="zstd"))


def write_documents(folder: Path, rows: list[dict[str, Any]]) -> None:
    _write_table(folder / DOCUMENTS_FILE, rows, DOCUMENTS_SCHEMA)


_PARQUET_ROW_GROUP = 16_384  # chunks of at most 8,192 tokens: well under 2 GB of text per row group
# Large offsets: one record batch may hold more than 2 GB of chunk text.
CHUNK_FIELDS_SCHEMA = pa.schema(
    [pa.field(f.name, pa.large_string() if f.type == pa.string() else f.type) for f in CHUNKS_SCHEMA]
)
# Near-duplicate signatures of each chunk (kb_core.engines.near_duplicates.TextSignatures), computed once when the
# segment is written so a search never shingles chunk text; only in the row store (the catalog table stays as
# documented).
SIGNATURE_SCHEMA = pa.schema(
    [
        ("dedup_hash", pa.uint64()),
        ("shingle_count", pa.int32()),
        ("shingle_sketch", pa.list_(pa.uint64(), 16)),
    ]
)
CHUNK_ROWS_SCHEMA = pa.schema([*CHUNK_FIELDS_SCHEMA, *SIGNATURE_SCHEMA])


def write_chunks(folder: Path, rows: list[dict[str, Any]], signatures: TextSignatures | None = None) -> None:
    """Write chunk rows (see :func:`write_chunk_table`); ``signatures``: theirs, when already computed."""
    write_chunk_table(folder, pa.Table.from_pylist(rows, schema=CHUNKS_SCHEMA), signatures)


def signature_table(signatures: TextSignatures) -> pa.Table:
    sketch = pa.FixedSizeListArray.from_arrays(pa.array(signatures.sketch.reshape(-1), pa.uint64()), 16)
    return pa.Table.from_arrays(
        [pa.array(signatures.text_hash, pa.uint64()), pa.array(signatures.shingle_count, pa.int32()), sketch],
        schema=SIGNATURE_SCHEMA,
    )


def signatures_of(table: pa.Table) -> TextSignatures | None:
    """The stored signatures of a row-store table (or some rows of it); None when its segment predates them."""
    if not set(SIGNATURE_SCHEMA.names) <= set(table.column_names):
        return None
    sketch = table.column("shingle_sketch").combine_chunks()
    values = sketch.flatten().to_numpy(zero_copy_only=False).astype(np.uint64, copy=False)
    return TextSignatures(
        table.column("dedup_hash").to_numpy().astype(np.uint64, copy=False),
        table.column("shingle_count").to_numpy().astype(np.int32, copy=False),
        values.reshape(table.num_rows, 16),
    )


def with_signatures(table: pa.Table, signatures: TextSignatures | None = None) -> pa.Table:
    """Chunk rows in the row-store schema with their signatures: ``signatures`` when given (one row per row),
    else kept when present, else computed from content."""
    rows = table.select(CHUNKS_SCHEMA.names).cast(CHUNK_FIELDS_SCHEMA)
    if signatures is None:
        signatures = signatures_of(table)
    elif len(signatures) != table.num_rows:
        raise StoreError(f"{len(signatures)} near-duplicate signatures for {table.num_rows} chunk rows")
    if signatures is None:
        signatures = text_signatures(rows.column("content").to_pylist())
    columns = signature_table(signatures)
    for name in SIGNATURE_SCHEMA.names:
        rows = rows.append_column(SIGNATURE_SCHEMA.field(name), columns.column(name))
    return rows.combine_chunks()


def write_chunk_table(folder: Path, table: pa.Table, signatures: TextSignatures | None = None) -> None:
    """Write a segment's chunk rows twice: the parquet catalog table and the memory-mappable row store (which
    also holds each row's near-duplicate signatures: ``signatures`` when given, see :func:`with_signatures`)."""
    rows = with_signatures(table, signatures)

    def write_parquet(tmp: Path) -> None:
        # Cast back to the catalog's 32-bit strings per row group: a segment may hold more than 2 GB of text.
        with pq.ParquetWriter(str(tmp), CHUNKS_SCHEMA, compression="zstd") as writer:
            for batch in rows.select(CHUNKS_SCHEMA.names).to_batches(max_chunksize=_PARQUET_ROW_GROUP):
                writer.write_batch(batch.cast(CHUNKS_SCHEMA))

    write_atomically(folder / CHUNKS_FILE, write_parquet)

    def write_rows(tmp: Path) -> None:
        with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, CHUNK_ROWS_SCHEMA) as writer:
            writer.write_table(rows, max_chunksize=max(1, rows.num_rows))

    write_atomically(folder / CHUNK_ROWS_FILE, write_rows)


def open_row_store(folder: Path) -> pa.Table:
    """A segment's chunk rows for random access, with their signatures when the segment stores them:
    memory-mapped from the row store, or (segments written before it existed) read from parquet into one
    in-memory chunk per column."""
    path = folder / CHUNK_ROWS_FILE
    try:
        if path.exists():
            prefetch(path)
            return pa.ipc.open_file(pa.memory_map(str(path), "r")).read_all()
        return pq.read_table(folder / CHUNKS_FILE).cast(CHUNK_FIELDS_SCHEMA).combine_chunks()
    except (OSError, pa.ArrowException) as exc:
        raise StoreError(f"the chunk rows of segment {folder.name} are unreadable: {exc}") from exc


def open_chunk_rows(folder: Path) -> pa.Table:
    """A segment's chunk rows (the catalog columns, 64-bit strings) for random access; see :func:`open_row_store`."""
    return open_row_store(folder).select(CHUNK_FIELDS_SCHEMA.names)


def write_texts(folder: Path, rows: list[dict[str, Any]]) -> None:
    _write_table(folder / TEXTS_FILE, rows, TEXTS_SCHEMA)


@dataclass(frozen=True)
class SegmentInfo:
    id: str
    rows: int
    documents: int
    model_key: str
    dimension: int
    analyzer: str
    created_at: str


def write_segment_info(folder: Path, info: SegmentInfo) -> None:
    """Written last: its presence marks the staged segment complete."""
    write_json_atomically(folder / SEGMENT_INFO_FILE, info.__dict__)


def read_segment_info(folder: Path) -> SegmentInfo:
    with open(folder / SEGMENT_INFO_FILE, encoding="utf-8") as handle:
        return SegmentInfo(**json.load(handle))


def read_documents_table(folder: Path) -> pa.Table:
    """A segment's documents in :data:`DOCUMENTS_SCHEMA`: columns a segment predates (``language``) read as null."""
    return pq.read_table(folder / DOCUMENTS_FILE, schema=DOCUMENTS_SCHEMA)


def read_documents(folder: Path) -> pd.DataFrame:
    return read_documents_table(folder).to_pandas()


def read_document_columns(folder: Path, columns: Sequence[str]) -> dict[str, list[Any]]:
    """Some columns of a segment's documents as lists (no table of every column: a commit's look-up)."""
    table = pq.read_table(folder / DOCUMENTS_FILE, columns=list(columns), schema=DOCUMENTS_SCHEMA)
    return {name: table.column(name).to_pylist() for name in columns}


def read_chunks(folder: Path, columns: list[str] | None = None) -> pd.DataFrame:
    return pq.read_table(folder / CHUNKS_FILE, columns=columns).to_pandas()


def read_text(folder: Path, doc_id: str) -> str | None:
    table = pq.read_table(folder / TEXTS_FILE, filters=[("doc_id", "=", doc_id)])
    values = table.column("text").to_pylist()
    return values[0] if values else None
