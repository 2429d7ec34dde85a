"""FAISS vector index over immutable segments, with tombstone (live-mask) filtering.

Every segment of a knowledge base holds L2-normalised float32 vectors; inner product is therefore cosine
similarity. A segment is indexed once, when it is written:

* ``flat`` — :class:`faiss.IndexFlatIP`, exact. The default below ``approximate_threshold`` rows.
* ``hnsw`` — :class:`faiss.IndexHNSWSQ`, approximate; the default above the threshold (chosen by measurement
  in ``benchmarks/bench_vector.py``: recall@10 ≥ 0.95 at a small fraction of a flat scan's latency). The graph
  walks 8-bit scalar-quantised codes (a quarter of the float32 size, held in memory); the exact float32
  vectors live beside it in ``vectors.npy`` and are read by row (``pread``: page cache, not process memory) to
  rescore the candidates exactly, so reported scores are exact cosines. Segments written with
  :class:`faiss.IndexHNSWFlat` (before this layout) still load and search.
* ``ivf`` — :class:`faiss.IndexIVFFlat`, approximate; smaller build time, kept as an option.

Deleted rows are filtered *inside* FAISS with an :class:`faiss.IDSelectorBitmap` passed through
``SearchParameters``, so a search never over-fetches and drops. Approximate indexes can return fewer than
``k`` hits when most rows are deleted (the graph walk visits dead nodes); such searches fall back to an exact
scan of the live rows, so results are never silently short. FAISS pads missing hits with row ``-1``; those are
always removed.

FAISS is used rather than hand-written numpy scans because it gives SIMD/BLAS kernels, the HNSW and IVF
structures, selector-based filtering and memory-mapped loading in one well-kept library.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from kb_core.base import files
from kb_core.base.atomic import prefetch, write_atomically
from kb_core.base.errors import InvalidArgument, StoreError

log = logging.getLogger(__name__)

__all__ = [
    "EXACT_FILENAME",
    "INDEX_FILENAME",
    "ExactVectors",
    "VectorHit",
    "VectorIndexSettings",
    "VectorSearcher",
    "VectorSegment",
]

INDEX_FILENAME = files.VECTOR_INDEX_FILE
EXACT_FILENAME = files.EXACT_VECTORS_FILE
# An approximate search for k rows fetches k + max(k // 2, _RESCORE_EXTRA) candidates, keeps the exact best k.
_RESCORE_EXTRA = 42
_READ_WINDOW_BYTES = 64 << 20  # exact vectors are read in windows of at most this many bytes
KINDS = ("flat", "hnsw", "ivf", "auto")
_NORM_TOLERANCE = 1e-3
_EXACT_BELOW_LIVE_FRACTION = 0.25

_threads_lock = threading.Lock()
_threads_configured = False


def _configure_threads() -> None:
    """Cap FAISS's OpenMP pool once: the machine has few cores and oversubscription slows every search."""
    global _threads_configured
    with _threads_lock:
        if _threads_configured:
            return
        wanted = os.environ.get("KB_FAISS_THREADS")
        threads = int(wanted) if wanted and wanted.isdigit() and int(wanted) > 0 else min(2, os.cpu_count() or 1)
        faiss.omp_set_num_threads(threads)
        _threads_configured = True


@dataclass(frozen=True)
class VectorIndexSettings:
    """How a segment's vectors are indexed.

    ``kind="auto"`` builds an exact flat index below ``approximate_threshold`` rows and an HNSW graph above it.
    The HNSW and IVF defaults come from ``benchmarks/bench_vector.py`` (recall@10 ≥ 0.95 on clustered data).
    """

    kind: str = "auto"
    approximate_threshold: int = 50_000
    hnsw_m: int = 32
    hnsw_ef_construction: int = 80
    hnsw_ef_search: int = 128  # recall@10 vs exact at 1M clustered vectors: 0.928 at 64, 0.967 at 128
    ivf_nlist: int | None = None  # None: about 4·√rows
    ivf_nprobe: int = 32

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise InvalidArgument(f"vector index kind {self.kind!r} is not supported; use one of {', '.join(KINDS)}")
        for name in ("approximate_threshold", "hnsw_m", "hnsw_ef_construction", "hnsw_ef_search", "ivf_nprobe"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise InvalidArgument(f"vector index setting {name}={value!r} must be a positive integer")
        if self.ivf_nlist is not None and (not isinstance(self.ivf_nlist, int) or self.ivf_nlist < 1):
            raise InvalidArgument(f"vector index setting ivf_nlist={self.ivf_nlist!r} must be a positive integer")

    def resolve_kind(self, rows: int) -> str:
        if self.kind != "auto":
            return self.kind
        return "flat" if rows < self.approximate_threshold else "hnsw"


@dataclass(frozen=True, order=True)
class VectorHit:
    """One vector search result: which segment, which row in it, and the cosine similarity."""

    segment_index: int
    row: int
    score: float


def _as_matrix(vectors: np.ndarray) -> np.ndarray:
    array = np.asarray(vectors)
    if array.ndim != 2:
        raise InvalidArgument(f"vectors must be a 2-D array (rows × dimension); got shape {array.shape}")
    if array.shape[1] < 1:
        raise InvalidArgument("vectors must have a dimension of at least 1; got 0 columns")
    if not np.issubdtype(array.dtype, np.floating):
        raise InvalidArgument(f"vectors must be floating point; got dtype {array.dtype}")
    array = np.ascontiguousarray(array, dtype=np.float32)
    if not np.isfinite(array).all():
        raise InvalidArgument("vectors contain NaN or infinite values; only finite embeddings can be indexed")
    return array


def _check_normalised(array: np.ndarray) -> None:
    if array.shape[0] == 0:
        return
    norms = np.linalg.norm(array, axis=1)
    # Zero vectors (e.g. an embedder's answer for empty text) are tolerated: they score 0 against everything.
    bad = ~((np.abs(norms - 1.0) <= _NORM_TOLERANCE) | (norms == 0.0))
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise InvalidArgument(
            f"vectors must be L2-normalised (norm 1) for cosine search; row {first} has norm {norms[first]:.6f}"
        )


class ExactVectors:
    """A segment's float32 vectors by row: in memory after a build, or read from ``vectors.npy`` with ``pread``.

    Reading with ``pread`` rather than a memory map keeps the file in the kernel's page cache instead of the
    search process's resident memory, and a query reads only its few candidate rows.
    """

    def __init__(self, array: np.ndarray | None = None, path: Path | None = None) -> None:
        self._array = array
        self._fd: int | None = None
        if array is not None:
            self.shape = (int(array.shape[0]), int(array.shape[1]))
            return
        assert path is not None
        try:
            with open(path, "rb") as handle:
                version = np.lib.format.read_magic(handle)
                shape, fortran, dtype = (
                    np.lib.format.read_array_header_1_0(handle)
                    if version == (1, 0)
                    else np.lib.format.read_array_header_2_0(handle)
                )
                self._offset = handle.tell()
        except (OSError, ValueError) as exc:
            raise StoreError(f"exact vectors {path} are unreadable: {exc}") from exc
        if fortran or np.dtype(dtype) != np.float32 or len(shape) != 2:
            raise StoreError(f"exact vectors {path} must be a C-ordered float32 matrix; got {dtype} {shape}")
        self.shape = (int(shape[0]), int(shape[1]))
        self._fd = os.open(path, os.O_RDONLY)
        prefetch(path)

    def __del__(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def rows(self, rows: np.ndarray) -> np.ndarray:
        """The vectors of ``rows`` (in range; any order, repeats allowed), as a new ``len(rows) × d`` array."""
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        if self._array is not None:
            return self._array[rows]
        out = np.empty((len(rows), self.shape[1]), dtype=np.float32)
        if not len(rows):
            return out
        order = np.argsort(rows, kind="stable")
        ordered = rows[order]
        gathered = np.empty_like(out)  # rows in ascending order
        window = max(1, _READ_WINDOW_BYTES // (self.shape[1] * 4))
        done = 0
        while done < len(ordered):
            # The rows within one window of the file: read them as one block when they are dense (an exact scan,
            # a compaction), else one read per run of consecutive rows (a query's few candidates).
            first = int(ordered[done])
            end = int(np.searchsorted(ordered, first + window, side="left"))
            group = ordered[done:end]
            span = int(group[-1]) - first + 1
            if len(group) * 4 >= span:
                gathered[done:end] = self._read(first, span)[group - first]
            else:
                breaks = np.flatnonzero(np.diff(group) != 1) + 1
                starts, stops = np.r_[0, breaks], np.r_[breaks, len(group)]
                for a, b in zip(starts.tolist(), stops.tolist(), strict=True):
                    gathered[done + a : done + b] = self._read(int(group[a]), int(group[b - 1]) - int(group[a]) + 1)
            done = end
        out[order] = gathered
        return out

    def _read(self, first: int, count: int) -> np.ndarray:
        """Rows ``first .. first + count - 1``; ``pread`` may return less than asked, so read until complete."""
        assert self._fd is not None
        width = self.shape[1] * 4
        wanted, position = count * width, self._offset + first * width
        parts: list[bytes] = []
        while wanted:
            data = os.pread(self._fd, wanted, position)
            if not data:
                raise StoreError("exact vectors file is shorter than its header says")
            parts.append(data)
            wanted -= len(data)
            position += len(data)
        block = parts[0] if len(parts) == 1 else b"".join(parts)
        return np.frombuffer(block, dtype=np.float32).reshape(count, self.shape[1])

    def save(self, path: Path) -> None:
        assert self._array is not None
        with open(path, "wb") as handle:
            np.save(handle, self._array, allow_pickle=False)
            handle.flush()
            os.fsync(handle.fileno())


class VectorSegment:
    """The FAISS index of one immutable segment's vectors. Rows are numbered 0..size-1 in insertion order."""

    def __init__(
        self,
        index: faiss.Index,
        kind: str,
        ef_search: int = 128,
        nprobe: int = 32,
        exact: ExactVectors | None = None,
    ) -> None:
        self._index = index
        self.kind = kind
        self.dimension: int = int(index.d)
        self.size: int = int(index.ntotal)
        self.ef_search = ef_search
        self.nprobe = nprobe
        self._exact_vectors = exact  # float32 vectors when the index holds only quantised codes

    def __repr__(self) -> str:
        return f"VectorSegment(kind={self.kind!r}, size={self.size}, dimension={self.dimension})"

    @classmethod
    def build(cls, vectors: np.ndarray, settings: VectorIndexSettings | None = None) -> VectorSegment:
        """Index ``vectors`` (rows × dimension, L2-normalised) with the kind ``settings`` resolves to."""
        settings = settings or VectorIndexSettings()
        _configure_threads()
        array = _as_matrix(vectors)
        _check_normalised(array)
        rows, dimension = array.shape
        kind = settings.resolve_kind(rows)
        if kind != "flat" and rows == 0:
            kind = "flat"
        index: faiss.Index
        exact = None
        if kind == "flat":
            index = faiss.IndexFlatIP(dimension)
            index.add(array)
        elif kind == "hnsw":
            index = faiss.IndexHNSWSQ(
                dimension, faiss.ScalarQuantizer.QT_8bit, settings.hnsw_m, faiss.METRIC_INNER_PRODUCT
            )
            index.hnsw.efConstruction = settings.hnsw_ef_construction
            index.hnsw.efSearch = settings.hnsw_ef_search
            index.train(array)  # per-dimension value ranges of the 8-bit codes
            index.add(array)
            exact = ExactVectors(array)
        else:
            # k-means wants ~39+ points per centroid; small segments get fewer lists.
            nlist = settings.ivf_nlist or max(1, min(int(4 * np.sqrt(rows)), rows // 39))
            nlist = min(nlist, rows)
            quantizer = faiss.IndexFlatIP(dimension)
            index = faiss.IndexIVFFlat(quantizer, dimension, nlist, faiss.METRIC_INNER_PRODUCT)
            index.own_fields = True
            quantizer.this.disown()
            sample = array
            if rows > 64 * nlist:
                picks = np.random.default_rng(0).choice(rows, size=64 * nlist, replace=False)
                sample = array[np.sort(picks)]
            index.train(sample)
            index.add(array)
            index.nprobe = settings.ivf_nprobe
            index.make_direct_map()  # lets reconstruct() work after save/load
        log.debug("built %s vector index: %d rows × %d", kind, rows, dimension)
        return cls(index, kind, settings.hnsw_ef_search, settings.ivf_nprobe, exact)

    def save(self, directory: Path) -> None:
        """Write ``directory/vectors.faiss`` (and the exact vectors, if kept) atomically (:func:`write_atomically`)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        if self._exact_vectors is not None:
            exact_target = directory / EXACT_FILENAME
            try:
                write_atomically(exact_target, self._exact_vectors.save)
            except OSError as exc:
                raise StoreError(f"could not write exact vectors {exact_target}: {exc}") from exc
        target = directory / INDEX_FILENAME
        try:
            write_atomically(target, lambda temporary: faiss.write_index(self._index, str(temporary)))
        except (OSError, RuntimeError) as exc:
            raise StoreError(f"could not write vector index {target}: {exc}") from exc

    @classmethod
    def load(cls, directory: Path, mmap: bool = True) -> VectorSegment:
        """Read ``directory/vectors.faiss``; with ``mmap`` the vectors stay in the page cache, not the heap."""
        _configure_threads()
        path = Path(directory) / INDEX_FILENAME
        if not path.is_file():
            raise StoreError(f"vector index {path} does not exist", code="STORE_ERROR")
        flags = 0
        if mmap:
            prefetch(path)
            flags = faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY
            flags |= getattr(faiss, "IO_FLAG_MMAP_IFC", 0)
        try:
            index = faiss.read_index(str(path), flags)
        except RuntimeError as exc:
            if not mmap:
                raise StoreError(f"vector index {path} is unreadable: {exc}") from exc
            log.debug("memory-mapped read of %s failed (%s); reading into memory", path, exc)
            try:
                index = faiss.read_index(str(path))
            except RuntimeError as exc2:
                raise StoreError(f"vector index {path} is unreadable: {exc2}") from exc2
        if isinstance(index, faiss.IndexHNSW):
            exact = None
            if not isinstance(index, faiss.IndexHNSWFlat):  # quantised codes: exact vectors are stored beside
                exact_path = Path(directory) / EXACT_FILENAME
                if not exact_path.is_file():
                    raise StoreError(f"vector index {path} has no exact vectors ({exact_path} is missing)")
                exact = ExactVectors(path=exact_path)
                if exact.shape != (int(index.ntotal), int(index.d)):
                    raise StoreError(f"exact vectors {exact_path} have shape {exact.shape}, the index {index.ntotal}")
            # indexes written with an older, lower default search as wide as the current one
            ef_search = max(int(index.hnsw.efSearch), VectorIndexSettings.hnsw_ef_search)
            return cls(index, "hnsw", ef_search=ef_search, exact=exact)
        if isinstance(index, faiss.IndexIVF):
            return cls(index, "ivf", nprobe=int(index.nprobe))
        return cls(index, "flat")

    def _check_query(self, query: np.ndarray) -> np.ndarray:
        array = np.asarray(query, dtype=np.float32).reshape(1, -1) if np.ndim(query) == 1 else np.asarray(query)
        if array.ndim != 2 or array.shape[0] != 1 or array.shape[1] != self.dimension:
            raise InvalidArgument(
                f"query vector must have dimension {self.dimension} (one query); got shape {np.shape(query)}"
            )
        array = np.ascontiguousarray(array, dtype=np.float32)
        if not np.isfinite(array).all():
            raise InvalidArgument("query vector contains NaN or infinite values")
        return array

    def _check_live(self, live: np.ndarray | None) -> np.ndarray | None:
        if live is None:
            return None
        mask = np.asarray(live)
        if mask.shape != (self.size,) or mask.dtype != np.bool_:
            raise InvalidArgument(
                f"live mask must be a boolean array of shape ({self.size},); got {mask.dtype} of shape {mask.shape}"
            )
        return mask

    def _params(self, selector: Any, k: int, live_fraction: float) -> Any:
        if self.kind == "hnsw":
            # With deletions the walk wastes effort on dead nodes; widen the beam in proportion (bounded).
            ef = max(self.ef_search, k)
            ef = int(min(max(ef, ef / max(live_fraction, 1e-9)), max(1024, k)))
            return faiss.SearchParametersHNSW(sel=selector, efSearch=ef)
        if self.kind == "ivf":
            return faiss.SearchParametersIVF(sel=selector, nprobe=self.nprobe)
        return faiss.SearchParameters(sel=selector) if selector is not None else None

    def search(self, query: np.ndarray, k: int, live: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` live rows for one query: ``(scores, rows)``, best first, never containing ``-1``."""
        if not isinstance(k, int | np.integer) or k < 1:
            raise InvalidArgument(f"k must be a positive integer; got {k!r}")
        q = self._check_query(query)
        mask = self._check_live(live)
        live_count = self.size if mask is None else int(mask.sum())
        k_eff = min(int(k), live_count)
        if k_eff == 0:
            return np.empty(0, dtype=np.float32), np.empty(0, dtype=np.int64)
        live_fraction = live_count / self.size
        if self.kind != "flat" and live_fraction < _EXACT_BELOW_LIVE_FRACTION:
            # Mostly-deleted segment (compaction pending): scanning the few live rows is cheaper and exact.
            return self._exact(q, k_eff, mask)
        selector = None
        bitmap = None
        if mask is not None and live_count < self.size:
            bitmap = np.packbits(mask, bitorder="little")
            selector = faiss.IDSelectorBitmap(bitmap)
        fetch = k_eff if self._exact_vectors is None else min(live_count, k_eff + max(k_eff // 2, _RESCORE_EXTRA))
        scores, rows = self._index.search(q, fetch, params=self._params(selector, fetch, live_fraction))
        scores, rows = scores[0], rows[0]
        keep = rows >= 0
        scores, rows = scores[keep], rows[keep]
        if self._exact_vectors is not None and len(rows):
            # Quantised scores choose the candidates; exact cosines rank them and are what callers see.
            scores = self._exact_vectors.rows(rows) @ q[0]
            best = np.lexsort((rows, -scores))[:k_eff]
            scores, rows = scores[best], rows[best]
        if self.kind != "flat" and len(rows) < k_eff:
            log.debug("approximate search returned %d of %d live hits; exact fallback", len(rows), k_eff)
            scores, rows = self._exact(q, k_eff, mask)
        del bitmap  # kept alive until FAISS is done with the selector
        return scores.astype(np.float32, copy=False), rows.astype(np.int64, copy=False)

    def _exact(self, q: np.ndarray, k: int, mask: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        rows = np.arange(self.size, dtype=np.int64) if mask is None else np.flatnonzero(mask)
        scores = np.empty(len(rows), dtype=np.float32)
        for start in range(0, len(rows), 65_536):  # bounded memory for huge segments
            part = rows[start : start + 65_536]
            scores[start : start + len(part)] = self.reconstruct(part) @ q[0]
        order = np.lexsort((rows, -scores))[:k]
        return scores[order], rows[order]

    def reconstruct(self, rows: np.ndarray) -> np.ndarray:
        """The stored vectors of ``rows`` (any order, repeats allowed) as a ``len(rows) × dimension`` array."""
        wanted = np.asarray(rows, dtype=np.int64).reshape(-1)
        if wanted.size and (wanted.min() < 0 or wanted.max() >= self.size):
            raise InvalidArgument(f"rows must lie in 0..{self.size - 1}; got values outside that range")
        if wanted.size == 0:
            return np.empty((0, self.dimension), dtype=np.float32)
        if self._exact_vectors is not None:
            return self._exact_vectors.rows(wanted)
        return self._index.reconstruct_batch(np.ascontiguousarray(wanted))


class VectorSearcher:
    """Searches several segments at once, each with its live mask, and merges their hits."""

    def __init__(self, segments: Sequence[tuple[VectorSegment, np.ndarray | None]]) -> None:
        self._segments = list(segments)
        dims = {segment.dimension for segment, _ in self._segments}
        if len(dims) > 1:
            raise InvalidArgument(f"segments have different vector dimensions {sorted(dims)}; rebuild with one model")
        self.dimension: int | None = dims.pop() if dims else None
        for segment, live in self._segments:
            segment._check_live(live)

    @property
    def live_count(self) -> int:
        return sum(seg.size if live is None else int(np.count_nonzero(live)) for seg, live in self._segments)

    @property
    def exact(self) -> bool:
        """Whether every segment is a flat index of the vectors themselves: its top ``k`` are the ``k`` best scores
        for any ``k`` (an HNSW walk's or IVF probe's result, and a quantised index's rescored pool, depend on ``k``)."""
        return all(segment.kind == "flat" and segment._exact_vectors is None for segment, _ in self._segments)

    def search(self, query: np.ndarray, k: int) -> list[VectorHit]:
        """Best ``k`` live hits across all segments, best first (ties broken by segment, then row)."""
        if not isinstance(k, int | np.integer) or k < 1:
            raise InvalidArgument(f"k must be a positive integer; got {k!r}")
        segments, rows, scores = self.search_arrays(query, k)
        return [
            VectorHit(si, row, score)
            for si, row, score in zip(segments.tolist(), rows.tolist(), scores.tolist(), strict=True)
        ]

    def search_arrays(self, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`search` as arrays ``(segment indexes, rows, float32 scores)``, best first."""
        if not isinstance(k, int | np.integer) or k < 1:
            raise InvalidArgument(f"k must be a positive integer; got {k!r}")
        parts = [(position, *segment.search(query, k, live)) for position, (segment, live) in enumerate(self._segments)]
        if not parts:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
        segments = np.concatenate([np.full(len(rows), position, dtype=np.int64) for position, _, rows in parts])
        scores = np.concatenate([scores for _, scores, _ in parts]).astype(np.float32, copy=False)
        rows = np.concatenate([rows for _, _, rows in parts]).astype(np.int64, copy=False)
        best = np.lexsort((rows, segments, -scores))[:k]
        return segments[best], rows[best], scores[best]

    def score_rows(self, query: np.ndarray, rows: Sequence[tuple[int, int]]) -> np.ndarray:
        """Exact cosine of the query with each ``(segment_index, row)``, in the given order (float64)."""
        out = np.zeros(len(rows), dtype=np.float64)
        if len(rows) == 0:
            return out
        if self.dimension is None:
            raise InvalidArgument("cannot score rows: the searcher has no segments")
        q = self._segments[0][0]._check_query(query)[0].astype(np.float64)
        pairs = np.asarray(rows, dtype=np.int64).reshape(-1, 2)
        for position in np.unique(pairs[:, 0]):
            if position < 0 or position >= len(self._segments):
                raise InvalidArgument(f"segment index {position} is out of range 0..{len(self._segments) - 1}")
            where = np.flatnonzero(pairs[:, 0] == position)
            vectors = self._segments[int(position)][0].reconstruct(pairs[where, 1])
            out[where] = vectors.astype(np.float64) @ q
        return out
