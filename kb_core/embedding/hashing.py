"""A deterministic, model-free embedder for fast unit tests of the modules that need *an* embedder.

Vectors are a bag of hashed words and character n-grams (the "hashing trick"), L2-normalised, so texts that
share words or characters are close. It knows nothing about meaning: never use it to measure retrieval.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import numpy as np

from kb_core.embedding.base import ProgressCallback, l2_normalize
from kb_core.errors import InvalidArgument

_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af\U00020000-\U0002a6df\U0002a700-\U0002ebef"
# One token per CJK character, one per run of other word characters, one per other non-space character.
_TOKEN_RE = re.compile(rf"[{_CJK}]|[^\W{_CJK}]+|[^\w\s]")


class HashingTokenizer:
    """Whitespace/punctuation word tokenizer that makes every CJK character its own token."""

    boundary_exact = True  # a substring cut between tokens tokenises to exactly the tokens it covered

    def count(self, text: str) -> int:
        return sum(1 for _ in _TOKEN_RE.finditer(text))

    def offsets(self, text: str) -> list[tuple[int, int]]:
        return [m.span() for m in _TOKEN_RE.finditer(text)]

    def count_batch(self, texts: Sequence[str]) -> list[int]:
        return [self.count(t) for t in texts]

    def offsets_batch(self, texts: Sequence[str]) -> list[list[tuple[int, int]]]:
        return [self.offsets(t) for t in texts]

    def __repr__(self) -> str:
        return "HashingTokenizer()"


def _bucket(feature: str, dimension: int) -> tuple[int, float]:
    digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
    value = int.from_bytes(digest, "little")
    return value % dimension, (1.0 if (value >> 63) & 1 else -1.0)


class HashingEmbedder:
    """Deterministic hashed bag-of-features embedder (``model="hashing"`` or ``"hashing-<dim>"``)."""

    max_input_tokens: int | None = None

    def __init__(self, dimension: int = 64) -> None:
        if not isinstance(dimension, int) or dimension < 2:
            raise InvalidArgument(f"hashing embedder dimension must be an integer >= 2, got {dimension!r}")
        self.dimension = dimension
        self.model_key = f"hashing:{dimension}"
        self.tokenizer = HashingTokenizer()

    def __repr__(self) -> str:
        return f"HashingEmbedder(dimension={self.dimension})"

    def _vector(self, text: str) -> np.ndarray:
        vec = np.zeros(self.dimension, dtype=np.float32)
        words = [m.group(0).lower() for m in _TOKEN_RE.finditer(text)]
        features = [f"w:{w}" for w in words]
        joined = "".join(words)
        features += [f"c:{joined[i : i + 3]}" for i in range(max(0, len(joined) - 2))]
        for feature in features:
            idx, sign = _bucket(feature, self.dimension)
            vec[idx] += sign
        return vec

    def embed_documents(self, texts: Sequence[str], progress: ProgressCallback | None = None) -> np.ndarray:
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for i, text in enumerate(texts):
            out[i] = self._vector(text)
        if progress is not None and len(texts):
            progress(len(texts))
        return l2_normalize(out)

    def embed_query(self, text: str) -> np.ndarray:
        return l2_normalize(self._vector(text))
