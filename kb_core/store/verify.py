"""Consistency check of a home: what the crash tests assert, and what ``kb verify`` reports."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from kb_core.base.files import CHUNK_ROWS_FILE, CHUNKS_FILE, DOCUMENTS_FILE, EXACT_VECTORS_FILE, SEGMENT_INFO_FILE
from kb_core.store.catalog import read_segment_info
from kb_core.store.kb_store import KBStore, Manifest
from kb_core.store.registry import Home


def verify_home(home: Home, kb_checks: Sequence[Callable[[KBStore], str | None]] = ()) -> list[str]:
    """Every problem found, as readable sentences; an empty list means consistent. ``kb_checks`` are the features'
    own checks of a KB's folder (the session passes the bundle index check), each a problem or None."""
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
        problems.extend(f"{record.name}: {p}" for p in _verify_records(store, manifest))
        for check in kb_checks:
            problem = check(store)
            if problem is not None:
                problems.append(f"{record.name}: {problem}")
    for folder in home.abandoned_transfer_staging():
        size = _folder_bytes(folder)
        problems.append(
            f"{folder.name}: staging folder ({size} bytes) of an import-db that did not finish (its process is "
            "gone); nothing of it was imported, and the next open of the home removes it"
        )
    return problems


def _folder_bytes(folder: Path) -> int:
    total = 0
    for path in folder.rglob("*"):
        try:
            total += path.stat().st_size if path.is_file() else 0
        except FileNotFoundError:  # removed while we counted
            continue
    return total


class _DocumentNames:
    """doc id → (name, source, status) of each segment's documents, read once (None for a segment that is gone
    or unreadable)."""

    def __init__(self, store: KBStore) -> None:
        self.store = store
        self._cache: dict[str, dict[str, tuple[str, str, str]] | None] = {}

    def __call__(self, segment_id: str) -> dict[str, tuple[str, str, str]] | None:
        if segment_id not in self._cache:
            try:
                folder = self.store.segment_dir(segment_id)
                table = pq.read_table(folder / DOCUMENTS_FILE, columns=["doc_id", "name", "source", "status"])
            except (OSError, pa.ArrowException):
                self._cache[segment_id] = None
            else:
                ids = table.column("doc_id").to_pylist()
                rows = zip(*(table.column(c).to_pylist() for c in ("name", "source", "status")), strict=True)
                self._cache[segment_id] = dict(zip(ids, rows, strict=True))
        return self._cache[segment_id]


def live_document_records(store: KBStore) -> dict[str, tuple[str, str, str]] | None:
    """Live doc id → (name, source, status) of the KB's current manifest; None when a segment is gone. KBError when
    the manifest cannot be read."""
    records = _records(store.manifest(), _DocumentNames(store))
    return None if records is None else records[0]


def _records(
    manifest: Manifest, names: _DocumentNames
) -> tuple[dict[str, tuple[str, str, str]], set[str]] | None:
    """(live doc id → (name, source, status), ids of deleted documents still in a segment) of a manifest; None if
    a segment is gone."""
    live: dict[str, tuple[str, str, str]] = {}
    deleted: set[str] = set()
    for ref in manifest.segments:
        documents = names(ref.id)
        if documents is None:
            return None
        dead = manifest.tombstones.get(ref.id, {})
        for doc_id, name in documents.items():
            if doc_id in dead:
                deleted.add(doc_id)
            else:
                live[doc_id] = name
    return live, deleted


def _verify_records(store: KBStore, manifest: Manifest) -> list[str]:
    """Document records: tombstones name documents their segment holds, the counts add up, and no commit of the
    retained history dropped a live document without a deletion (what a faulty compaction would do)."""
    problems: list[str] = []
    names = _DocumentNames(store)
    segment_ids = {ref.id for ref in manifest.segments}
    for segment_id, dead in manifest.tombstones.items():
        documents = names(segment_id) if segment_id in segment_ids else None
        if segment_id not in segment_ids:
            problems.append(f"manifest {manifest.version} has tombstones for segment {segment_id}, not one of its own")
        elif documents is not None and set(dead) - set(documents):
            ghosts = sorted(set(dead) - set(documents))
            problems.append(
                f"manifest {manifest.version} deletes document(s) {ghosts[:5]} from segment {segment_id}, which does "
                "not hold them: its document count is wrong"
            )
    current = _records(manifest, names)
    if current is not None and len(current[0]) != manifest.document_count:
        problems.append(
            f"manifest {manifest.version} counts {manifest.document_count} live document(s) but its segments hold "
            f"{len(current[0])}"
        )
    previous: tuple[int, dict[str, tuple[str, str, str]]] | None = None
    for version in store.manifest_versions():
        try:
            state = _records(store.manifest_at(version), names)
        except (FileNotFoundError, ValueError, KeyError):
            state = None  # collected meanwhile, or unreadable (the newest one is reported by manifest())
        if state is None:
            previous = None
            continue
        if previous is not None and previous[0] == version - 1:
            lost = sorted(set(previous[1]) - set(state[0]) - state[1])
            if lost:
                shown = ", ".join(repr(previous[1][d][0]) for d in lost[:5]) + (" …" if len(lost) > 5 else "")
                problems.append(
                    f"manifest {version} lost {len(lost)} document record(s) that manifest {version - 1} held, "
                    f"without a deletion: {shown}"
                )
        previous = (version, state[0])
    return problems


def _verify_segment(folder: Path, rows: int, documents: int) -> list[str]:
    if not (folder / SEGMENT_INFO_FILE).exists():
        return [f"segment {folder.name} is missing or incomplete"]
    info = read_segment_info(folder)
    problems = []
    if info.rows != rows or info.documents != documents:
        problems.append(f"segment {folder.name} counts differ from the manifest")
    for table, expected in ((CHUNKS_FILE, rows), (DOCUMENTS_FILE, documents)):
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
    exact = folder / EXACT_VECTORS_FILE  # exact vectors beside an 8-bit HNSW index
    if exact.exists():
        try:
            found = int(np.load(exact, mmap_mode="r", allow_pickle=False).shape[0])
        except (OSError, ValueError) as exc:
            problems.append(f"segment {folder.name}: vectors.npy unreadable ({exc})")
        else:
            if found != rows:
                problems.append(f"segment {folder.name}: vectors.npy has {found} rows, expected {rows}")
    return problems
