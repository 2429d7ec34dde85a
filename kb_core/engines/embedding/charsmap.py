"""SentencePiece's "precompiled charsmap": a normalisation table in the binary form the ``tokenizers`` library's
``Precompiled`` normaliser reads (the form SentencePiece ``.model`` files carry).

Layout (SentencePiece ``normalizer.cc``; read by the ``spm_precompiled`` crate inside ``tokenizers``): a
little-endian ``uint32`` byte size of a darts-clone double-array trie, the trie's ``uint32`` units, then the
replacement strings, each ended by a NUL byte. The trie maps the UTF-8 bytes of a source string to the offset of
its replacement. A unit of the trie holds a label (bits 0-7), a "has leaf" flag (bit 8) and the XOR offset of its
children (bits 10-31; bit 9 shifts it by 8 more); a value unit has bit 31 set and the value in bits 0-30. A node's
children sit at ``base ^ label`` and its value at ``base ^ 0``, where ``base = position ^ offset``.

Only the lookup side of darts-clone is fixed by the format; this builder places nodes first-fit (any placement the
lookup walks correctly is valid), which is all a table of a few thousand code points needs.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping

import numpy as np

_HAS_LEAF = 1 << 8
_VALUE_FLAG = 1 << 31
_MAX_OFFSET = 1 << 21  # offsets below this fit bits 10-31 without the extra shift


class _Node:
    __slots__ = ("children", "value")

    def __init__(self) -> None:
        self.children: dict[int, _Node] = {}
        self.value: int | None = None


def _trie(entries: Mapping[bytes, int]) -> _Node:
    root = _Node()
    for key, value in entries.items():
        if not key or 0 in key:
            raise ValueError(f"charsmap keys must be non-empty and free of NUL bytes, got {key!r}")
        node = root
        for byte in key:
            node = node.children.setdefault(byte, _Node())
        node.value = value
    return root


def double_array(entries: Mapping[bytes, int]) -> np.ndarray:
    """The darts-clone units (``uint32``) of a trie mapping each key to its value (``0 <= value < 2**31``)."""
    root = _trie(entries)
    size = 1 << 12
    units = np.zeros(size, dtype=np.uint32)
    used = np.zeros(size, dtype=bool)
    is_base = np.zeros(size, dtype=bool)
    used[0] = True  # the root's own unit
    lowest_free = 1
    # (position of the node's unit, the node, the label that leads to it)
    queue: list[tuple[int, _Node, int]] = [(0, root, 0)]
    while queue:
        position, node, label = queue.pop()
        labels = sorted(node.children)
        slots = ([0] if node.value is not None else []) + labels
        # First fit over whole blocks from the lowest free unit (a base's slots all lie in the base's block).
        start = lowest_free & ~0xFF
        while True:
            candidates = np.arange(start, size)
            fits = ~is_base[candidates]
            for slot in slots:
                fits &= ~used[candidates ^ slot]
            hits = np.flatnonzero(fits)
            if hits.size:
                base = int(candidates[hits[0]])
                break
            start = size
            units, used, is_base = (np.concatenate([a, np.zeros(size, dtype=a.dtype)]) for a in (units, used, is_base))
            size *= 2
        is_base[base] = True
        for slot in slots:
            used[base ^ slot] = True
        while used[lowest_free]:
            lowest_free += 1
        offset = position ^ base
        if offset >= _MAX_OFFSET:
            raise ValueError("charsmap too large for this builder")
        units[position] = (offset << 10) | (_HAS_LEAF if node.value is not None else 0) | label
        if node.value is not None:
            if not 0 <= node.value < _VALUE_FLAG:
                raise ValueError(f"charsmap value out of range: {node.value}")
            units[base] = _VALUE_FLAG | node.value
        queue.extend((base ^ child, node.children[child], child) for child in labels)
    # Lookups read base ^ byte for any byte, so every block a base lies in must exist in full.
    end = (int(np.flatnonzero(is_base)[-1]) | 0xFF) + 1
    return units[:end].copy()


def precompiled_charsmap(mapping: Mapping[str, str]) -> bytes:
    """The precompiled charsmap that replaces each key of ``mapping`` (a string, usually one code point) by its
    value (possibly empty)."""
    pool = bytearray()
    where: dict[str, int] = {}
    entries: dict[bytes, int] = {}
    for source, target in mapping.items():
        if target not in where:
            where[target] = len(pool)
            pool += target.encode("utf-8") + b"\0"
        entries[source.encode("utf-8")] = where[target]
    units = double_array(entries)
    return struct.pack("<I", units.size * 4) + units.astype("<u4").tobytes() + bytes(pool)


def lookup(blob: bytes, key: str) -> str | None:
    """The replacement of ``key`` in a precompiled charsmap (exact match), or None: the reader's walk, for tests."""
    (trie_bytes,) = struct.unpack_from("<I", blob, 0)
    units = np.frombuffer(blob, dtype="<u4", count=trie_bytes // 4, offset=4)
    pool = blob[4 + trie_bytes :]

    def offset_of(unit: int) -> int:
        return (unit >> 10) << ((unit & (1 << 9)) >> 6)

    position = offset_of(int(units[0]))
    unit = 0
    for byte in key.encode("utf-8"):
        position ^= byte
        unit = int(units[position])
        if unit & (_VALUE_FLAG | 0xFF) != byte:
            return None
        position ^= offset_of(unit)
    if not unit & _HAS_LEAF:
        return None
    start = int(units[position]) & (_VALUE_FLAG - 1)
    return pool[start : pool.index(b"\0", start)].decode("utf-8")
