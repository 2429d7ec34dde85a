"""One knowledge base on disk: immutable segments plus a versioned manifest.

Layout::

    kbs/KB_ID/
      manifests/000000000042.json   manifest versions; the highest complete one is the truth
      segments/SEG_ID/              immutable once referenced by a manifest
        segment.json                written last inside staging: marks the segment complete
        documents.parquet           one row per document of this segment (catalog table)
        chunks.parquet              one row per chunk, in vector-row order (catalog table)
        texts.parquet               the full parsed text of each document
        files/DOC_ID.EXT            the original file, kept for update_document and export
        keyword.npz, vectors.faiss  the segment's keyword and vector indexes
        vectors.npy                 exact float32 vectors of an HNSW segment (its index holds 8-bit codes)
        chunks.arrow                the chunk rows as uncompressed Arrow IPC, memory-mapped by readers
      staging/PID-HEX/              segments being written; renamed into segments/ at commit
      write.lock                    writers of this KB serialise here

Commit protocol (under ``write.lock``): read the newest manifest; let the caller check the
change against it; rename the staged segment folders into ``segments/``; write manifest N+1 to a
temporary file, fsync, and ``link`` it to its final name (fails if N+1 exists); fsync the folder.
The link is the commit point. A process killed before it leaves staged or unreferenced folders
that the next open removes; killed after it, the change is complete. Deleting a document writes a
tombstone into the next manifest instead of rewriting its segment, so a commit costs in
proportion to the change. Readers never lock: they read the newest manifest and the immutable
segments it names. Superseded manifests and segments stay for a grace period so that a reader
holding an older manifest can finish.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kb_core.base.atomic import (
    fsync_directory,
    read_json,
    remove_abandoned_folders,
    remove_stale_temporaries,
    write_json_atomically,
)
from kb_core.base.errors import KBNotFound, StoreError
from kb_core.base.files import SEGMENT_INFO_FILE
from kb_core.base.locking import try_writer_lock, writer_lock
from kb_core.base.removal import own_folder, remove_tree
from kb_core.base.versioned import VersionedJSON
from kb_core.store.registry import utc_now

logger = logging.getLogger(__name__)

MANIFESTS_KEPT = 8
GRACE_SECONDS = 600.0


@dataclass(frozen=True)
class SegmentRef:
    id: str
    rows: int
    documents: int

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "rows": self.rows, "documents": self.documents}


@dataclass(frozen=True)
class Manifest:
    version: int
    segments: tuple[SegmentRef, ...]
    # segment id -> {doc id -> number of chunks the tombstone removes}
    tombstones: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    created_at: str = ""

    @property
    def document_count(self) -> int:
        return sum(s.documents for s in self.segments) - sum(len(t) for t in self.tombstones.values())

    @property
    def chunk_count(self) -> int:
        return sum(s.rows for s in self.segments) - sum(sum(t.values()) for t in self.tombstones.values())

    def is_deleted(self, segment_id: str, doc_id: str) -> bool:
        return doc_id in self.tombstones.get(segment_id, {})

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "created_at": self.created_at,
            "segments": [s.to_json() for s in self.segments],
            "tombstones": {seg: dict(docs) for seg, docs in self.tombstones.items()},
        }

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> Manifest:
        return cls(
            version=int(value["version"]),
            segments=tuple(SegmentRef(s["id"], int(s["rows"]), int(s["documents"])) for s in value["segments"]),
            tombstones={seg: {d: int(n) for d, n in docs.items()} for seg, docs in value.get("tombstones", {}).items()},
            created_at=value.get("created_at", ""),
        )


EMPTY_MANIFEST = Manifest(version=0, segments=())


@dataclass
class StagedSegment:
    """A segment being written in ``staging/``; becomes visible only through a commit."""

    id: str
    path: Path
    rows: int = 0
    documents: int = 0

    def ref(self) -> SegmentRef:
        return SegmentRef(self.id, self.rows, self.documents)


@dataclass(frozen=True)
class Change:
    """What one commit does: segments to add, segments to drop (compaction), tombstones to add."""

    add: tuple[StagedSegment, ...] = ()
    drop: tuple[str, ...] = ()
    tombstones: Mapping[str, Mapping[str, int]] = field(default_factory=dict)


class KBStore:
    def __init__(self, root: Path, kb_id: str) -> None:
        self.root = root
        self.kb_id = kb_id
        self._manifests = VersionedJSON(root / "manifests")

    # -- creation ------------------------------------------------------------------------------
    @classmethod
    def create(cls, root: Path, kb_id: str) -> KBStore:
        for sub in ("manifests", "segments", "staging"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        store = cls(root, kb_id)
        write_json_atomically(store._manifest_path(0), EMPTY_MANIFEST.to_json())
        return store

    def exists(self) -> bool:
        return (self.root / "manifests").is_dir()

    # -- reading (never locks) -------------------------------------------------------------------
    def _manifest_path(self, version: int) -> Path:
        return self._manifests.path(version)

    def manifest_versions(self) -> list[int]:
        try:
            return self._manifests.versions()
        except FileNotFoundError as exc:
            raise KBNotFound(f"Knowledge base id '{self.kb_id}' no longer exists.") from exc

    def latest_version(self) -> int:
        versions = self.manifest_versions()
        return versions[-1] if versions else 0

    def manifest(self) -> Manifest:
        versions = self.manifest_versions()
        newest = self._manifests.newest(
            Manifest.from_json, lambda version: f"Manifest {version} of knowledge base {self.kb_id}", versions
        )
        if newest is not None:
            return newest
        if not versions:
            return EMPTY_MANIFEST
        if not self.exists():  # the KB was deleted while we read
            raise KBNotFound(f"Knowledge base id '{self.kb_id}' no longer exists.")
        raise StoreError(f"No readable manifest in {self.root / 'manifests'}")

    def manifest_at(self, version: int) -> Manifest:
        """One manifest version (FileNotFoundError once garbage-collected; ValueError/KeyError if unreadable)."""
        return Manifest.from_json(read_json(self._manifest_path(version)))

    def segment_dir(self, segment_id: str) -> Path:
        return self.root / "segments" / segment_id

    # -- writing -------------------------------------------------------------------------------
    @contextmanager
    def lock(self) -> Iterator[None]:
        try:
            with writer_lock(self.root / "write.lock"):
                # the KB may have been deleted while we waited for its lock
                if not self.exists():
                    raise KBNotFound(f"Knowledge base id '{self.kb_id}' no longer exists.")
                yield
        except FileNotFoundError as exc:
            raise KBNotFound(f"Knowledge base id '{self.kb_id}' no longer exists.") from exc

    def stage_segment(self) -> StagedSegment:
        segment_id = f"seg_{time.strftime('%Y%m%d%H%M%S')}_{uuid.uuid4().hex[:10]}"
        path = own_folder(self.root / "staging", within=self.root) / f"{os.getpid()}-{segment_id}"
        if not self.exists():
            raise KBNotFound(f"Knowledge base id '{self.kb_id}' no longer exists.")
        try:
            (path / "files").mkdir(parents=True)
        except FileNotFoundError as exc:
            raise KBNotFound(f"Knowledge base id '{self.kb_id}' no longer exists.") from exc
        return StagedSegment(id=segment_id, path=path)

    @contextmanager
    def deleted_guard(self) -> Iterator[None]:
        """Turn the file errors of writing into a KB deleted meanwhile into KB_NOT_FOUND."""
        try:
            yield
        except OSError as exc:
            if not self.exists():
                raise KBNotFound(f"Knowledge base id '{self.kb_id}' was deleted while it was being written.") from exc
            raise

    def discard(self, staged: StagedSegment) -> None:
        remove_tree(staged.path, within=self.root)

    def commit(self, plan: Change | Callable[[Manifest], Change]) -> Manifest:
        """Apply a change atomically.

        ``plan`` is the change, or a function that builds it from the newest manifest under the
        lock (to resolve name clashes or check that what it replaces still exists); it may raise
        to abort, leaving the store as it was.
        """
        with self.lock():
            current = self.manifest()
            change = plan(current) if callable(plan) else plan
            for staged in change.add:
                if not (staged.path / SEGMENT_INFO_FILE).exists():
                    raise StoreError(f"Segment {staged.id} is incomplete and cannot be committed.")
            for staged in change.add:
                os.replace(staged.path, self.segment_dir(staged.id))
            if change.add:
                fsync_directory(self.root / "segments")
            dropped = set(change.drop)
            segments = tuple(s for s in current.segments if s.id not in dropped) + tuple(s.ref() for s in change.add)
            tombstones: dict[str, dict[str, int]] = {
                seg: dict(docs) for seg, docs in current.tombstones.items() if seg not in dropped
            }
            live_ids = {s.id for s in segments}
            for seg, docs in change.tombstones.items():
                if seg not in live_ids:
                    raise StoreError(f"Cannot delete from segment {seg}: it is not part of the knowledge base.")
                tombstones.setdefault(seg, {}).update(docs)
            new = Manifest(version=current.version + 1, segments=segments, tombstones=tombstones, created_at=utc_now())
            self._manifests.write(new.version, new.to_json())
            self._collect_garbage(new)
            return new

    # -- recovery and garbage --------------------------------------------------------------------
    def _collect_garbage(self, latest: Manifest) -> None:
        """Drop old manifests and segments no recent manifest names (after a grace period)."""
        versions = self.manifest_versions()
        keep = set(versions[-MANIFESTS_KEPT:])
        referenced: set[str] = set()
        for version in keep:
            try:
                referenced.update(s["id"] for s in read_json(self._manifest_path(version))["segments"])
            except (FileNotFoundError, ValueError, KeyError):
                continue
        self._manifests.prune(versions, MANIFESTS_KEPT, grace_seconds=GRACE_SECONDS)
        now = time.time()
        for folder in (self.root / "segments").iterdir():
            if folder.name in referenced:
                continue
            if now - folder.stat().st_mtime > GRACE_SECONDS or not (folder / SEGMENT_INFO_FILE).exists():
                remove_tree(folder, within=self.root)

    def clean_up(self) -> None:
        """Remove staging folders of dead processes and unreferenced leftovers; skipped if a writer is busy."""
        if not self.exists():
            return
        lock = try_writer_lock(self.root / "write.lock")
        if lock is None:
            return
        try:
            remove_stale_temporaries(self.root / "manifests", within=self.root)
            # an import in progress (this process's too) stays
            remove_abandoned_folders(self.root / "staging", within=self.root)
            latest = self.manifest()
            referenced = {s.id for s in latest.segments}
            for folder in (self.root / "segments").iterdir():
                # A folder that no manifest names yet was moved in by a writer killed before its link.
                if folder.name not in referenced and not self._named_by_any_manifest(folder.name):
                    remove_tree(folder, within=self.root)
        finally:
            lock.release()

    def _named_by_any_manifest(self, segment_id: str) -> bool:
        for version in self.manifest_versions():
            try:
                if any(s["id"] == segment_id for s in read_json(self._manifest_path(version))["segments"]):
                    return True
            except (FileNotFoundError, ValueError, KeyError):
                continue
        return False
