"""Compaction: merge small segments into one, dropping the rows of deleted documents.

Imports commit one segment each, and deletions only add tombstones, so a KB accumulates segments
and dead rows. Compaction rewrites a group of segments as one (live rows only, indexes rebuilt from
the stored vectors and texts, no model time) and commits a manifest that swaps them; readers keep
using the old segments until they see the new manifest. Tombstones committed while the merge ran
are carried over to the new segment, so no deletion is lost. Runs on demand (``kb compact``) and
automatically after an import once a KB has more than ``AUTO_COMPACT_SEGMENTS`` segments, merging
the smallest ones (a tiered policy in the spirit of Lucene's merge policy).
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from kb_core.base.errors import StoreError
from kb_core.base.files import DOCUMENTS_FILE, TEXTS_FILE
from kb_core.store import Change, KBStore, Manifest, catalog, utc_now
from kb_core.store.reader import LoadedSegment

logger = logging.getLogger(__name__)

AUTO_COMPACT_SEGMENTS = 12
SMALL_SEGMENT_ROWS = 50_000


def choose_segments(manifest: Manifest, *, everything: bool = False) -> list[str]:
    """The segments to merge: all of them, or the small ones once there are too many."""
    if everything:
        dead = {seg for seg, docs in manifest.tombstones.items() if docs}
        return [s.id for s in manifest.segments] if len(manifest.segments) > 1 or dead else []
    small = sorted((s for s in manifest.segments if s.rows < SMALL_SEGMENT_ROWS), key=lambda s: s.rows)
    if len(manifest.segments) <= AUTO_COMPACT_SEGMENTS or len(small) < 2:
        return []
    return [s.id for s in small[: max(2, len(manifest.segments) - AUTO_COMPACT_SEGMENTS // 2)]]


def compact(store: KBStore, analyzer: Any, *, everything: bool = False) -> dict[str, int]:
    """Merge segments of ``store``; returns counts of merged segments and rows kept/dropped."""
    manifest = store.manifest()
    chosen = choose_segments(manifest, everything=everything)
    if not chosen:
        return {"segments_merged": 0, "rows_kept": 0, "rows_dropped": 0}
    staged = store.stage_segment()
    try:
        with store.deleted_guard():
            kept, dropped = _write_merged(store, manifest, chosen, staged.id, staged.path, analyzer)
        staged.rows = kept["chunks"]
        staged.documents = kept["documents"]

        def plan(current: Manifest) -> Change:
            current_ids = {s.id for s in current.segments}
            if not set(chosen) <= current_ids:
                raise StoreError("Another compaction changed these segments meanwhile; nothing was merged.")
            # Deletions committed while we merged: re-point them at the merged segment.
            late: dict[str, int] = {}
            for seg in chosen:
                for doc_id, count in current.tombstones.get(seg, {}).items():
                    if doc_id not in manifest.tombstones.get(seg, {}):
                        late[doc_id] = count
            if kept["documents"] == 0:
                change = Change(drop=tuple(chosen))  # every document in them was deleted
            else:
                change = Change(add=(staged,), drop=tuple(chosen), tombstones={staged.id: late} if late else {})
            _check_nothing_lost(manifest, chosen, change)
            return change

        store.commit(plan)
        if kept["documents"] == 0:
            store.discard(staged)
    except BaseException:
        store.discard(staged)
        raise
    logger.info(
        "Compacted %d segments of %s: kept %d rows, dropped %d", len(chosen), store.kb_id, kept["chunks"], dropped
    )
    return {"segments_merged": len(chosen), "rows_kept": kept["chunks"], "rows_dropped": dropped}


def _check_nothing_lost(manifest: Manifest, chosen: Sequence[str], change: Change) -> None:
    """The merged segment must hold exactly the live documents and rows of its inputs, failed documents (0 rows)
    included; anything else would drop records without a deletion, so the merge is refused before its commit."""
    refs = {s.id: s for s in manifest.segments}
    documents = sum(refs[s].documents - len(manifest.tombstones.get(s, {})) for s in chosen)
    rows = sum(refs[s].rows - sum(manifest.tombstones.get(s, {}).values()) for s in chosen)
    merged_documents = sum(s.documents for s in change.add)
    merged_rows = sum(s.rows for s in change.add)
    if (merged_documents, merged_rows) != (documents, rows):
        raise StoreError(
            f"Compaction would lose records: its inputs hold {documents} live document(s) and {rows} row(s), the "
            f"merged segment {merged_documents} and {merged_rows}; nothing was merged."
        )


def _write_merged(
    store: KBStore, manifest: Manifest, chosen: Sequence[str], segment_id: str, target: Path, analyzer: Any
) -> tuple[dict[str, int], int]:
    from kb_core.engines.keyword_index import KeywordSegment
    from kb_core.engines.vector_index import VectorSegment

    documents: list[pa.Table] = []
    chunks: list[pa.Table] = []
    texts: list[pa.Table] = []
    vectors: list[np.ndarray] = []
    dropped = 0
    info = None
    for source_id in chosen:
        segment = LoadedSegment(store.segment_dir(source_id))
        info = info or segment.info
        dead = list(manifest.tombstones.get(source_id, {}))
        doc_table = catalog.read_documents_table(segment.folder)  # older segments: null language
        chunk_table = segment.row_store  # with signatures, computed here for a segment that predates them
        text_table = pq.read_table(segment.folder / TEXTS_FILE)
        alive_docs = pc.invert(pc.is_in(doc_table.column("doc_id"), pa.array(dead, type=pa.string())))
        alive_rows = pc.invert(pc.is_in(chunk_table.column("doc_id"), pa.array(dead, type=pa.string())))
        alive_texts = pc.invert(pc.is_in(text_table.column("doc_id"), pa.array(dead, type=pa.string())))
        rows = np.flatnonzero(alive_rows.to_numpy(zero_copy_only=False))
        dropped += chunk_table.num_rows - len(rows)
        documents.append(doc_table.filter(alive_docs))
        chunks.append(catalog.with_signatures(chunk_table.take(pa.array(rows))))  # one row-store schema for all
        texts.append(text_table.filter(alive_texts))
        vectors.append(segment.vectors.reconstruct(rows))
        files = target / "files"
        for original in doc_table.filter(alive_docs).column("original").to_pylist():
            if original:
                _link_or_copy(segment.folder / original, target / original, files)
    doc_all = pa.concat_tables(documents)
    chunk_all = pa.concat_tables(chunks)
    text_all = pa.concat_tables(texts)
    pq.write_table(doc_all.cast(catalog.DOCUMENTS_SCHEMA), target / DOCUMENTS_FILE, compression="zstd")
    catalog.write_chunk_table(target, chunk_all)
    pq.write_table(text_all.cast(catalog.TEXTS_SCHEMA), target / TEXTS_FILE, compression="zstd")
    assert info is not None
    if doc_all.num_rows == 0:
        return {"chunks": 0, "documents": 0}, dropped
    # Failed documents have no rows: a merged segment of only those still gets (empty) indexes.
    KeywordSegment.build(chunk_all.column("content").to_pylist(), analyzer).save(target)
    VectorSegment.build(np.vstack(vectors).astype(np.float32)).save(target)
    catalog.write_segment_info(
        target,
        catalog.SegmentInfo(
            id=segment_id,
            rows=chunk_all.num_rows,
            documents=doc_all.num_rows,
            model_key=info.model_key,
            dimension=info.dimension,
            analyzer=info.analyzer,
            created_at=utc_now(),
        ),
    )
    return {"chunks": chunk_all.num_rows, "documents": doc_all.num_rows}, dropped


def _link_or_copy(source: Path, destination: Path, folder: Path) -> None:
    folder.mkdir(exist_ok=True)
    try:
        destination.hardlink_to(source)  # originals are immutable: share them instead of copying
    except OSError:
        shutil.copyfile(source, destination)
