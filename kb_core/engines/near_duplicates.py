"""Exact and near-duplicate detection among a search's ranked chunks (4-character shingle Jaccard).

A text is dropped when a better-ranked kept text is the same after Unicode (NFKC), whitespace and case
normalisation, or has a Jaccard similarity ≥ the threshold on its set of 4-character shingles (which works the
same for spaced English and unspaced Chinese). Each chunk's :class:`TextSignatures` (a hash of its normalised
text, its shingle count and a bottom-16 sketch of shingle hashes) are computed once when a segment is written and
stored with the chunk, so a search never shingles text to find the few pairs worth an exact comparison.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from kb_core.base.errors import InvalidArgument

__all__ = [
    "SKETCH_EMPTY",
    "TextSignatures",
    "near_duplicate_keys",
    "near_duplicate_rows",
    "text_signature",
    "text_signatures",
]

_SPACE = re.compile(r"\s+", re.UNICODE)


def _normalise_text(text: str) -> str:
    return _SPACE.sub(" ", unicodedata.normalize("NFKC", text)).strip().casefold()


def same_text_key(text: str) -> str:
    """What two chunks share when their texts are the same after NFKC, whitespace and case normalisation."""
    return _normalise_text(text)


def _shingles(text: str, size: int = 4) -> frozenset[str]:
    """Character shingles: they work the same for spaced (English) and unspaced (Chinese) text."""
    compact = text.replace(" ", "")
    if len(compact) <= size:
        return frozenset([compact]) if compact else frozenset()
    return frozenset(compact[i : i + size] for i in range(len(compact) - size + 1))


def near_duplicate_keys(texts: Mapping[Hashable, str], threshold: float = 0.9) -> set[Hashable]:
    """Keys to drop because an earlier (better-ranked) text is an exact or near duplicate.

    ``texts`` must iterate best-ranked first. Exact duplicates are found after Unicode (NFKC), whitespace and
    case normalisation; near duplicates by Jaccard similarity ≥ ``threshold`` of 4-character shingles. A text
    is dropped when it is that close to any text that is kept. The texts' signatures are computed here; search
    reads them stored with the chunks instead (:func:`near_duplicate_rows`).
    """
    keys = list(texts)
    values = [texts[key] for key in keys]
    drop = near_duplicate_rows(text_signatures(values), values, threshold)
    return {key for key, dropped in zip(keys, drop.tolist(), strict=True) if dropped}


_SKETCH_SIZE = 16
# Hashes use 63 bits, so the all-ones value marks an unused sketch slot (a text of fewer than 16 shingles).
SKETCH_EMPTY = np.uint64(0xFFFFFFFFFFFFFFFF)
_SHINGLE = 4
_PAD = 0x1FFFFF  # not a code point: pads the single shingle of a text shorter than 4 characters
_BMP = 1 << 16  # code points below this pack 4 to a uint64 shingle key
_MIX_1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX_2 = np.uint64(0x94D049BB133111EB)


@dataclass(frozen=True)
class TextSignatures:
    """Near-duplicate signatures of some texts, one row per text (computed once, at import, and stored).

    ``text_hash``: 63-bit hash of the normalised text (exact duplicates; confirmed on the text itself);
    ``shingle_count``: number of distinct 4-character shingles; ``sketch``: the 16 smallest 63-bit shingle
    hashes, ascending, padded with :data:`SKETCH_EMPTY`. Hashes are stable across processes and machines.
    """

    text_hash: np.ndarray  # uint64 (n,)
    shingle_count: np.ndarray  # int32 (n,)
    sketch: np.ndarray  # uint64 (n, 16)

    def __len__(self) -> int:
        return int(self.text_hash.shape[0])

    def take(self, rows: np.ndarray | Sequence[int]) -> TextSignatures:
        index = np.asarray(rows, dtype=np.int64)
        return TextSignatures(self.text_hash[index], self.shingle_count[index], self.sketch[index])

    @staticmethod
    def concatenate(parts: Sequence[TextSignatures]) -> TextSignatures:
        if not parts:
            return text_signatures([])
        return TextSignatures(
            np.concatenate([p.text_hash for p in parts]),
            np.concatenate([p.shingle_count for p in parts]),
            np.concatenate([p.sketch for p in parts]),
        )


def _mix(values: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser on a uint64 array (wrapping arithmetic)."""
    values = (values ^ (values >> np.uint64(30))) * _MIX_1
    values = (values ^ (values >> np.uint64(27))) * _MIX_2
    return values ^ (values >> np.uint64(31))


def _shingle_hashes(compact: str) -> np.ndarray:
    """Distinct 63-bit hashes of the 4-character shingles of ``compact`` (a normalised text without spaces),
    sorted: the same shingles as :func:`_shingles`, hashed with numpy instead of one Python object each."""
    if not compact:
        return np.empty(0, dtype=np.uint64)
    points = np.frombuffer(compact.encode("utf-32-le", "surrogatepass"), dtype=np.uint32).astype(np.uint64)
    if len(points) < _SHINGLE:
        points = np.concatenate([points, np.full(_SHINGLE - len(points), _PAD, dtype=np.uint64)])
    width = len(points) - _SHINGLE + 1
    head = points[:width] | (points[1 : width + 1] << np.uint64(21)) | (points[2 : width + 2] << np.uint64(42))
    hashes = np.sort(_mix(_mix(head) + points[3 : width + 3]) >> np.uint64(1))
    return hashes[np.concatenate(([True], hashes[1:] != hashes[:-1]))]  # sorted, distinct


def _shingle_keys(compact: str) -> np.ndarray:
    """The distinct 4-character shingles of ``compact`` as exact keys, sorted: the same set as :func:`_shingles`
    (a text shorter than 4 characters is one shingle, padded with a non-code-point). A text written in the Basic
    Multilingual Plane (English, Chinese, ...) packs each shingle's 4 code points into one uint64, which sorts
    and intersects far faster than the general 16-byte keys (4 × uint32) used otherwise."""
    points = np.frombuffer(compact.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    if not len(points):
        return np.empty(0, dtype=np.uint64)
    if len(points) < _SHINGLE:
        points = np.concatenate([points, np.full(_SHINGLE - len(points), _PAD, dtype=np.uint32)])
    if int(points.max()) < _BMP:
        wide = points.astype(np.uint64)
        packed = (wide[:-3] << np.uint64(48)) | (wide[1:-2] << np.uint64(32)) | (wide[2:-1] << np.uint64(16))
        keys = np.sort(packed | wide[3:])
        return keys[np.concatenate(([True], keys[1:] != keys[:-1]))]  # sorted, distinct
    windows = np.ascontiguousarray(np.lib.stride_tricks.sliding_window_view(points, _SHINGLE))
    return np.unique(windows.view("V16").ravel())


def _wide_keys(keys: np.ndarray) -> np.ndarray:
    """Shingle keys in the general 16-byte form (packed uint64 keys unpacked), sorted."""
    if keys.dtype != np.uint64:
        return keys
    points = np.stack([(keys >> np.uint64(shift)) & np.uint64(0xFFFF) for shift in (48, 32, 16, 0)], axis=1)
    return np.unique(np.ascontiguousarray(points.astype(np.uint32)).view("V16").ravel())


def _key_jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Exact Jaccard similarity of two sorted, distinct shingle key arrays (0 when both are empty)."""
    if not len(a) or not len(b):
        return 0.0
    if a.dtype != b.dtype:
        a, b = _wide_keys(a), _wide_keys(b)
    shared = len(np.intersect1d(a, b, assume_unique=True))
    return shared / (len(a) + len(b) - shared)


def text_signature(text: str) -> tuple[int, int, np.ndarray]:
    """``(text_hash, shingle_count, sketch)`` of one text (see :class:`TextSignatures`)."""
    normal = _normalise_text(text)
    digest = hashlib.blake2b(normal.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    hashes = _shingle_hashes(normal.replace(" ", ""))
    sketch = np.full(_SKETCH_SIZE, SKETCH_EMPTY, dtype=np.uint64)
    sketch[: min(_SKETCH_SIZE, len(hashes))] = hashes[:_SKETCH_SIZE]
    return int.from_bytes(digest, "little") >> 1, len(hashes), sketch


def text_signatures(texts: Sequence[str]) -> TextSignatures:
    """The signatures of ``texts``, one row each."""
    n = len(texts)
    text_hash = np.zeros(n, dtype=np.uint64)
    counts = np.zeros(n, dtype=np.int32)
    sketch = np.full((n, _SKETCH_SIZE), SKETCH_EMPTY, dtype=np.uint64)
    for row, text in enumerate(texts):
        text_hash[row], counts[row], sketch[row] = text_signature(text)
    return TextSignatures(text_hash, counts, sketch)


_DENSE_RUN = 24  # a sketch value held by at least this many texts is counted in a bitset
_SMALL_WINDOW_WORK = 20_000_000  # texts² × shared values up to which every shared value is counted in a bitset


def _shared_sketch_values(sketch: np.ndarray) -> np.ndarray:
    """``shared[i, j]``: how many sketch values rows ``i`` and ``j`` (i ≠ j) have in common (a sketch's own values
    are distinct; the diagonal is not counted).

    Every stored value is sorted, so each value held by several rows forms a run. A value held by m rows adds
    one to m² pairs: rare values are expanded pair by pair with numpy, while the few values held by many rows
    (common shingles whose hash happens to be small: on SciFact one value sits in 838 of 1,010 sketches) are
    bits of one bitset per row, counted for all pairs at once by popcount, instead of millions of pairs.
    """
    n = len(sketch)
    used = sketch != SKETCH_EMPTY
    values, owners = sketch[used], np.nonzero(used)[0]
    order = np.argsort(values, kind="stable")
    values, owners = values[order], owners[order]
    starts = np.flatnonzero(np.concatenate(([True], values[1:] != values[:-1])))
    sizes = np.diff(np.append(starts, len(values)))
    shared = np.zeros((n, n), dtype=np.uint8)
    # Few texts (a top_k ≤ 100 window): every value held by two or more goes into the bitsets, a few words a row.
    small = n * n * int(np.count_nonzero(sizes >= 2)) <= _SMALL_WINDOW_WORK
    common = sizes >= (2 if small else _DENSE_RUN)
    if common.any():
        # One bit per common value and row; a pair's shared common values are the popcount of the AND.
        run_of_value = np.repeat(np.cumsum(common) - 1, sizes)
        in_common = np.repeat(common, sizes)
        held = np.zeros((n, -(-int(common.sum()) // 64) * 64), dtype=bool)
        held[owners[in_common], run_of_value[in_common]] = True
        bits = np.packbits(held, axis=1, bitorder="little").view(np.uint64)
        for word in range(bits.shape[1]):
            shared += np.bitwise_count(bits[:, word, None] & bits[None, :, word])
    rare = (sizes >= 2) & ~common
    if rare.any():
        starts, sizes = starts[rare], sizes[rare]
        run_start = np.repeat(starts, sizes)  # per value of a rare run: where its run starts, the run's length
        run_size = np.repeat(sizes, sizes)
        members = run_start + (np.arange(len(run_start)) - np.repeat(np.cumsum(sizes) - sizes, sizes))
        left = owners[np.repeat(members, run_size)]
        offset = np.arange(len(left)) - np.repeat(np.cumsum(run_size) - run_size, run_size)
        right = owners[np.repeat(run_start, run_size) + offset]
        pairs, times = np.unique(left * n + right, return_counts=True)
        shared.ravel()[pairs] += times.astype(np.uint8)  # each pair once: no repeated index
    np.fill_diagonal(shared, 0)
    return shared


def near_duplicate_rows(
    signatures: TextSignatures, texts: Sequence[str], threshold: float = 0.9
) -> np.ndarray:
    """Which of ``texts`` (best-ranked first) to drop as exact or near duplicates of a better-ranked kept one.

    The decision is exact: an exact duplicate has the same normalised text; a near duplicate has a Jaccard
    similarity ≥ ``threshold`` of its 4-character shingle *strings*, computed only for the pairs that pass two
    cheap filters on the stored signatures, all pairs at once with numpy: sizes within a factor ``threshold``
    (necessary for that Jaccard), and at least half of the 16 smallest shingle hashes shared (a bottom-k sketch:
    sets that similar share most of them).
    """
    if not 0 < threshold <= 1:
        raise InvalidArgument(f"threshold must lie in (0, 1]; got {threshold!r}")
    n = len(texts)
    if len(signatures) != n:
        raise InvalidArgument(f"{len(signatures)} signatures for {n} texts")
    drop = np.zeros(n, dtype=bool)
    if n < 2:
        return drop
    counts = signatures.shingle_count.astype(np.int64)
    # Suspect pairs (row, better-ranked other), never an n × n matrix beyond the shared-value counts:
    # near: at least half the sketch shared, and sizes within a factor ``threshold`` (Jaccard needs both);
    rows, others = np.nonzero(_shared_sketch_values(signatures.sketch) >= _SKETCH_SIZE // 2)
    better = others < rows
    rows, others = rows[better], others[better]
    small = np.minimum(counts[rows], counts[others])
    large = np.maximum(counts[rows], counts[others])
    sized = ~(small < threshold * large)
    near = _partners(rows[sized], others[sized])
    # exact: the same hash of the normalised text (confirmed on the text).
    exact = _partners(*_equal_value_pairs(signatures.text_hash))
    normals: dict[int, str] = {}
    shingles: dict[int, np.ndarray] = {}

    def normal(row: int) -> str:
        if row not in normals:
            normals[row] = _normalise_text(texts[row])
        return normals[row]

    def shingle_set(row: int) -> np.ndarray:
        if row not in shingles:
            shingles[row] = _shingle_keys(normal(row).replace(" ", ""))
        return shingles[row]

    # Only rows with a better-ranked suspect need a look; whether that one was kept is known by then.
    for row in sorted(exact.keys() | near.keys()):
        if any(not drop[j] and normal(row) == normal(j) for j in exact.get(row, ())) or any(
            not drop[j] and _key_jaccard(shingle_set(row), shingle_set(j)) >= threshold for j in near.get(row, ())
        ):
            drop[row] = True
    return drop


def _partners(rows: np.ndarray, others: np.ndarray) -> dict[int, list[int]]:
    partners: dict[int, list[int]] = {}
    for row, other in zip(rows.tolist(), others.tolist(), strict=True):
        partners.setdefault(row, []).append(other)
    return partners


def _equal_value_pairs(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every pair ``(row, other)`` with ``other < row`` and ``values[row] == values[other]``."""
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
    sizes = np.diff(np.append(starts, len(values)))
    rows: list[int] = []
    others: list[int] = []
    for start, size in zip(starts[sizes > 1].tolist(), sizes[sizes > 1].tolist(), strict=True):
        group = order[start : start + size].tolist()
        for i, row in enumerate(group):
            for other in group[:i]:
                rows.append(max(row, other))
                others.append(min(row, other))
    return np.array(rows, dtype=np.int64), np.array(others, dtype=np.int64)
