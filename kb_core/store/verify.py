"""Consistency check of a home: what the crash tests assert, and what ``kb verify`` reports."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from kb_core.store.catalog import CHUNK_ROWS_FILE, read_segment_info
from kb_core.store.kb_store import KBStore
from kb_core.store.registry import Home


def verify_home(home: Home) -> list[str]:
    """Every problem found, as readable sentences; an empty list means consistent."""
    problems: list[str] = []
    records = home.knowledge_bases()
    ids = [r.id for r in records]
    if len(ids) != len(set(ids)):
        problems.append("registry lists a knowledge base id twice")
    names = [r.name.casefold() for r in records]
    if len(names) != len(set(names)):
        problems.append("registry lists a knowledge base name twice")
    for record in records:
        store = KBStore(home.kb_dir(record.id), record.id)
        if not store.exists():
            problems.append(f"{record.name}: folder {store.root} is missing")
            continue
        manifest = store.manifest()
        for ref in manifest.segments:
            problems.extend(f"{record.name}: {p}" for p in _verify_segment(store.segment_dir(ref.id), ref.rows,
                                                                          ref.documents))
        if manifest.chunk_count < 0 or manifest.document_count < 0:
            problems.append(f"{record.name}: manifest counts are negative")
    return problems


def _verify_segment(folder: Path, rows: int, documents: int) -> list[str]:
    if not (folder / "segment.json").exists():
        return [f"segment {folder.name} is missing or incomplete"]
    info = read_segment_info(folder)
    problems = []
    if info.rows != rows or info.documents != documents:
        problems.append(f"segment {folder.name} counts differ from the manifest")
    for table, expected in (("chunks.parquet", rows), ("documents.parquet", documents)):
        try:
            found = pq.read_metadata(folder / table).num_rows
        except (OSError, ValueError) as exc:
            problems.append(f"segment {folder.name}: {table} unreadable ({exc})")
            continue
        if found != expected:
            problems.append(f"segment {folder.name}: {table} has {found} rows, expected {expected}")
    row_store = folder / CHUNK_ROWS_FILE
    if row_store.exists():  # segments written before the row store existed have none
        try:
            found = pa.ipc.open_file(pa.memory_map(str(row_store), "r")).read_all().num_rows
        except (OSError, pa.ArrowInvalid) as exc:
            problems.append(f"segment {folder.name}: {CHUNK_ROWS_FILE} unreadable ({exc})")
        else:
            if found != rows:
                problems.append(f"segment {folder.name}: {CHUNK_ROWS_FILE} has {found} rows, expected {rows}")
    exact = folder / "vectors.npy"  # exact vectors beside an 8-bit HNSW index
    if exact.exists():
        try:
            found = int(np.load(exact, mmap_mode="r", allow_pickle=False).shape[0])
        except (OSError, ValueError) as exc:
            problems.append(f"segment {folder.name}: vectors.npy unreadable ({exc})")
        else:
            if found != rows:
                problems.append(f"segment {folder.name}: vectors.npy has {found} rows, expected {rows}")
    return problems
