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

from kb_core.errors import InvalidArgument

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
    """The distinct 4-character shingles of ``compact`` as exact 16-byte keys (4 code points), sorted: the same
    set as :func:`_shingles` (a text shorter than 4 characters is one shingle, padded with a non-code-point)."""
    points = np.frombuffer(compact.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    if not len(points):
        return np.empty(0, dtype="V16")
    if len(points) < _SHINGLE:
        points = np.concatenate([points, np.full(_SHINGLE - len(points), _PAD, dtype=np.uint32)])
    windows = np.ascontiguousarray(np.lib.stride_tricks.sliding_window_view(points, _SHINGLE))
    return np.unique(windows.view("V16").ravel())


def _key_jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Exact Jaccard similarity of two sorted, distinct shingle key arrays (0 when both are empty)."""
    if not len(a) and not len(b):
        return 0.0
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
    small = np.minimum(counts[:, None], counts[None, :])
    large = np.maximum(counts[:, None], counts[None, :])
    sketch = signatures.sketch
    used = sketch != SKETCH_EMPTY
    # Shared sketch values per pair: sort every stored value, and within each run of equal values (one value
    # held by several rows; a sketch's own values are distinct) count every pair of its rows, all with numpy.
    values, owners = sketch[used], np.nonzero(used)[0]
    order = np.argsort(values, kind="stable")
    values, owners = values[order], owners[order]
    starts = np.flatnonzero(np.concatenate(([True], values[1:] != values[:-1])))
    sizes = np.diff(np.append(starts, len(values)))
    run_start = np.repeat(starts, sizes)  # per stored value: where its run starts, and the run's length
    run_size = np.repeat(sizes, sizes)
    left = np.repeat(np.arange(len(values)), run_size)
    offset = np.arange(len(left)) - np.repeat(np.cumsum(run_size) - run_size, run_size)
    right = run_start[left] + offset
    shared = np.bincount(owners[left] * n + owners[right], minlength=n * n).reshape(n, n)
    may_match = ~(small < threshold * large) & (shared >= _SKETCH_SIZE // 2)
    same_hash = signatures.text_hash[:, None] == signatures.text_hash[None, :]
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
    suspects = np.nonzero((same_hash | may_match) & np.tri(n, k=-1, dtype=bool))
    partners: dict[int, list[int]] = {}
    for row, other in zip(suspects[0].tolist(), suspects[1].tolist(), strict=True):
        partners.setdefault(row, []).append(other)
    for row, others in sorted(partners.items()):
        kept = [j for j in others if not drop[j]]
        if any(same_hash[row, j] and normal(row) == normal(j) for j in kept) or any(
            may_match[row, j] and _key_jaccard(shingle_set(row), shingle_set(j)) >= threshold for j in kept
        ):
            drop[row] = True
    return drop
