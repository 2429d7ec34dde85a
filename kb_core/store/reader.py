"""Read-side view of a knowledge base: the newest manifest plus its loaded, immutable segments.

A :class:`KBReader` checks the manifest version on every call (one ``listdir``) and reloads only
segments it has not seen, so readers see committed changes from other processes without a
restart, and never take a lock. Segments are immutable, so loaded ones are cached by id.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from kb_core.base.files import CHUNKS_FILE
from kb_core.engines.near_duplicates import TextSignatures, text_signatures
from kb_core.store import catalog
from kb_core.store.kb_store import KBStore, Manifest

if TYPE_CHECKING:
    from kb_core.engines.keyword_index import KeywordSegment
    from kb_core.engines.vector_index import VectorSegment

logger = logging.getLogger(__name__)


class LoadedSegment:
    """One segment's catalog rows and indexes, loaded lazily and cached for the process."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.info = catalog.read_segment_info(folder)
        self.id = self.info.id
        self._lock = threading.Lock()
        self._document_keys: dict[tuple[str, ...], list[dict[str, Any]]] = {}

    @cached_property
    def documents(self) -> pd.DataFrame:
        return catalog.read_documents(self.folder)

    def document_keys(self, columns: Sequence[str]) -> list[dict[str, Any]]:
        """Every document's ``columns`` (``segment_id`` among them: this segment's), one dict per document, made
        once per segment and columns (segments are immutable): a commit reads these of the whole KB, and converting
        every document's row again made each commit cost more as the KB grew (#29)."""
        key = tuple(columns)
        with self._lock:
            made = self._document_keys.get(key)
            if made is None:
                read = catalog.read_document_columns(self.folder, [c for c in key if c != "segment_id"])
                count = len(next(iter(read.values()), []))
                values = [[self.id] * count if c == "segment_id" else read[c] for c in key]
                made = [dict(zip(key, row, strict=True)) for row in zip(*values, strict=True)]
                self._document_keys[key] = made
        return made

    @cached_property
    def chunk_doc_codes(self) -> tuple[np.ndarray, np.ndarray]:
        """(doc ids, code per chunk row): compact even at a million rows."""
        path = self.folder / CHUNKS_FILE
        # Read as a dictionary column: a million repeated doc ids never materialise as strings.
        column = pq.read_table(path, columns=["doc_id"], read_dictionary=["doc_id"]).column("doc_id")
        encoded = column.unify_dictionaries().combine_chunks()  # one dictionary across row groups
        values = np.array(encoded.dictionary.to_pylist(), dtype=object)
        codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int32)
        return values, codes

    @cached_property
    def row_store(self) -> pa.Table:
        """The chunk rows with their near-duplicate signatures (when stored), memory-mapped: ``take`` touches only
        the rows it returns."""
        return catalog.open_row_store(self.folder)

    @cached_property
    def chunks(self) -> pa.Table:
        """The chunk rows (catalog columns) as an Arrow table, memory-mapped."""
        return self.row_store.select(catalog.CHUNK_FIELDS_SCHEMA.names)

    def chunk_rows(self, rows: Sequence[int]) -> list[dict[str, Any]]:
        return self.chunks.take(pa.array(list(rows), type=pa.int64())).to_pylist()

    def chunk_rows_with_signatures(self, rows: Sequence[int]) -> tuple[list[dict[str, Any]], TextSignatures]:
        """The given rows and their near-duplicate signatures: stored ones, or computed from the text for a
        segment written before signatures were stored."""
        taken = self.row_store.take(pa.array(list(rows), type=pa.int64()))
        names = catalog.CHUNK_FIELDS_SCHEMA.names
        columns = taken.select(names).to_pydict()  # column by column: ~2x faster than ``to_pylist`` here
        records = [dict(zip(names, values, strict=True)) for values in zip(*columns.values(), strict=True)]
        signatures = catalog.signatures_of(taken)
        if signatures is None:
            signatures = text_signatures([record["content"] for record in records])
        return records, signatures

    def find_chunk(self, chunk_id: str) -> int | None:
        matches = np.flatnonzero(pc.equal(self.chunks.column("chunk_id"), chunk_id).to_numpy(zero_copy_only=False))
        return int(matches[0]) if len(matches) else None

    @cached_property
    def keyword(self) -> KeywordSegment:
        from kb_core.engines.keyword_index import KeywordSegment

        return KeywordSegment.load(self.folder)

    @cached_property
    def vectors(self) -> VectorSegment:
        from kb_core.engines.vector_index import VectorSegment

        return VectorSegment.load(self.folder)

    def text(self, doc_id: str) -> str | None:
        return catalog.read_text(self.folder, doc_id)

    def original_path(self, relative: str) -> Path:
        return self.folder / relative


@dataclass
class Snapshot:
    """A consistent read view: one manifest version and its live rows."""

    kb_id: str
    manifest: Manifest
    segments: list[LoadedSegment]
    cache: dict[str, Any] = field(default_factory=dict)  # per-snapshot derived state (searchers)

    @property
    def version(self) -> int:
        return self.manifest.version

    def live_mask(self, index: int) -> np.ndarray:
        key = f"live:{index}"
        if key not in self.cache:
            segment = self.segments[index]
            deleted = self.manifest.tombstones.get(segment.id, {})
            values, codes = segment.chunk_doc_codes
            if deleted:
                dead = np.flatnonzero(np.isin(values, np.array(list(deleted), dtype=object)))
                mask = ~np.isin(codes, dead)
            else:
                mask = np.ones(len(codes), dtype=bool)
            self.cache[key] = mask
        return self.cache[key]

    def live_document_keys(self, columns: Sequence[str]) -> list[dict[str, Any]]:
        """The live documents' ``columns`` (``segment_id`` may be one), one dict per document: what
        :meth:`documents` gives for those columns, without building a table of the whole KB (a commit's look-up).
        The dicts are shared: read them, never change them."""
        rows: list[dict[str, Any]] = []
        for segment in self.segments:
            keys = segment.document_keys(columns)
            deleted = self.manifest.tombstones.get(segment.id, {})
            rows.extend(keys if not deleted else (d for d in keys if d["doc_id"] not in deleted))
        return rows

    def failed_count(self) -> int:
        """Live documents whose import failed (rows kept with their reason; they hold no chunk)."""
        if "failed" not in self.cache:
            keys = self.live_document_keys(("doc_id", "status"))
            self.cache["failed"] = sum(1 for d in keys if d["status"] == "failed")
        return int(self.cache["failed"])

    def documents(self) -> pd.DataFrame:
        """Live documents of every segment, with a ``segment_id`` column."""
        if "documents" not in self.cache:
            frames = []
            for segment in self.segments:
                frame = segment.documents
                deleted = self.manifest.tombstones.get(segment.id, {})
                if deleted:
                    frame = frame[~frame["doc_id"].isin(list(deleted))]
                frames.append(frame.assign(segment_id=segment.id))
            if frames:
                self.cache["documents"] = pd.concat(frames, ignore_index=True)
            else:
                empty = pd.DataFrame(columns=[*catalog.DOCUMENTS_SCHEMA.names, "segment_id"])
                self.cache["documents"] = empty
        return self.cache["documents"]

    def locate_chunk(self, chunk_id: str) -> tuple[int, int] | None:
        """``(segment index, row)`` of a live chunk, or None when no live chunk has that id."""
        for index, segment in enumerate(self.segments):
            row = segment.find_chunk(chunk_id)
            if row is not None and self.live_mask(index)[row]:
                return index, row
        return None

    def segment_by_id(self, segment_id: str) -> LoadedSegment | None:
        for segment in self.segments:
            if segment.id == segment_id:
                return segment
        return None


class KBReader:
    def __init__(self, store: KBStore) -> None:
        self.store = store
        self._segments: dict[str, LoadedSegment] = {}
        self._snapshot: Snapshot | None = None
        self._lock = threading.Lock()

    def snapshot(self) -> Snapshot:
        version = self.store.latest_version()
        with self._lock:
            if self._snapshot is not None and self._snapshot.version == version:
                return self._snapshot
            manifest = self.store.manifest()
            segments = []
            for ref in manifest.segments:
                loaded = self._segments.get(ref.id)
                if loaded is None:
                    loaded = LoadedSegment(self.store.segment_dir(ref.id))
                    self._segments[ref.id] = loaded
                segments.append(loaded)
            wanted = {ref.id for ref in manifest.segments}
            for stale in set(self._segments) - wanted:
                del self._segments[stale]
            self._snapshot = Snapshot(self.store.kb_id, manifest, segments)
            return self._snapshot
