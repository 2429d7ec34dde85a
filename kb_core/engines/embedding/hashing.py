"""A deterministic, model-free embedder for fast unit tests of the modules that need *an* embedder.

Vectors are a bag of hashed words and character n-grams (the "hashing trick"), L2-normalised, so texts that
share words or characters are close. It knows nothing about meaning: never use it to measure retrieval.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from kb_core.base.errors import InvalidArgument
from kb_core.engines.embedding.base import ProgressCallback, TokenIds, l2_normalize

_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af\U00020000-\U0002a6df\U0002a700-\U0002ebef"
# One token per CJK character, one per run of other word characters, one per other non-space character.
_TOKEN_RE = re.compile(rf"[{_CJK}]|[^\W{_CJK}]+|[^\w\s]")


class HashingTokenizer:
    """Whitespace/punctuation word tokenizer that makes every CJK character its own token."""

    boundary_exact = True  # a substring cut between tokens tokenises to exactly the tokens it covered
    chunks_in_workers = True  # pure Python (holds the GIL) and tiny to pickle: parser processes chunk with it

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


def _trigram_feature(key: int) -> str:
    """The feature of a trigram key (three 21-bit code points, see ``HashingEmbedder._matrix``)."""
    return "c:" + chr(key >> 42) + chr((key >> 21) & 0x1FFFFF) + chr(key & 0x1FFFFF)


# Feature slots remembered per embedder: words and trigrams repeat, and hashing each anew was most of the time.
# Bounded so a stream of unique features cannot grow it without end (it is simply emptied when full).
_MAX_MEMO = 1 << 18  # per kind (words, trigrams): some 25 MB each at most


class HashingEmbedder:
    """Deterministic hashed bag-of-features embedder (``model="hashing"`` or ``"hashing-<dim>"``)."""

    max_input_tokens: int | None = None

    def __init__(self, dimension: int = 64) -> None:
        if not isinstance(dimension, int) or dimension < 2:
            raise InvalidArgument(f"hashing embedder dimension must be an integer >= 2, got {dimension!r}")
        self.dimension = dimension
        self.model_key = f"hashing:{dimension}"
        self.tokenizer = HashingTokenizer()
        self._words: dict[str, int] = {}
        self._grams: dict[int, int] = {}  # trigram key (see _matrix) → slot

    def __repr__(self) -> str:
        return f"HashingEmbedder(dimension={self.dimension})"

    def forget_features(self) -> None:
        """Empty the feature memo (benchmarks measure a cold start with it)."""
        self._words.clear()
        self._grams.clear()

    def _slot(self, feature: str) -> int:
        """``feature``'s bucket, plus ``dimension`` when its sign is negative (a column of a ``2·dim`` count)."""
        index, sign = _bucket(feature, self.dimension)
        return index if sign > 0 else index + self.dimension

    def _matrix(self, texts: Sequence[str]) -> np.ndarray:
        """Unnormalised vectors: +1 or -1 per feature (each word, then each character trigram of the lowercased
        words run together) in its bucket, summed; exact, as the sums are small integers.

        The batch is handled as arrays: each trigram is a 63-bit key of its three code points, the batch's
        distinct words and trigrams are looked up once (in a memo, else hashed), one ``bincount`` sums the slots."""
        import pandas as pd  # its hash-table factorize: the distinct values of millions of keys in O(n)

        width = 2 * self.dimension
        words: list[str] = []
        word_counts: list[int] = []
        joined: list[str] = []
        for text in texts:
            # ASCII lowercasing keeps every character in its class, so the text may be lowered whole first.
            lowered = (
                _TOKEN_RE.findall(text.lower()) if text.isascii() else [w.lower() for w in _TOKEN_RE.findall(text)]
            )
            words += lowered
            word_counts.append(len(lowered))
            joined.append("".join(lowered))
        row_ids = np.arange(len(texts), dtype=np.int64)
        word_codes, distinct_words = pd.factorize(np.array(words, dtype=object))
        word_slots = self._slots(self._words, distinct_words.tolist(), lambda w: "w:" + w)[word_codes]
        word_slots += np.repeat(row_ids, word_counts) * width
        lengths = np.fromiter((len(j) for j in joined), dtype=np.int64, count=len(joined))
        codes = np.frombuffer("".join(joined).encode("utf-32-le", "surrogatepass"), dtype=np.uint32).astype(np.int64)
        rows = np.repeat(row_ids, lengths)
        inside = rows[:-2] == rows[2:]  # the trigram starting here ends in the same text
        keys = ((codes[:-2] << 42) | (codes[1:-1] << 21) | codes[2:])[inside]
        gram_codes, distinct_keys = pd.factorize(keys)
        gram_slots = self._slots(self._grams, distinct_keys.tolist(), _trigram_feature)[gram_codes]
        gram_slots += rows[:-2][inside] * width
        slots = np.concatenate([word_slots, gram_slots])
        counts = np.bincount(slots, minlength=len(texts) * width).reshape(len(texts), 2, self.dimension)
        return (counts[:, 0, :] - counts[:, 1, :]).astype(np.float32)

    def _slots(self, memo: dict[Any, int], values: list[Any], feature: Callable[[Any], str]) -> np.ndarray:
        """The slot of each value, from ``memo`` or hashed (and remembered)."""
        if len(memo) > _MAX_MEMO:
            memo.clear()
        slots = [memo.get(v) for v in values]
        if None in slots:
            for i, value in enumerate(values):
                if slots[i] is None:
                    slots[i] = memo[value] = self._slot(feature(value))
        return np.asarray(slots, dtype=np.int64)

    def _vector(self, text: str) -> np.ndarray:
        return self._matrix([text])[0]

    def embed_documents(
        self,
        texts: Sequence[str],
        progress: ProgressCallback | None = None,
        *,
        token_ids: Sequence[TokenIds | None] | None = None,
    ) -> np.ndarray:
        """``token_ids`` is ignored: no model tokenizer makes this embedder's features."""
        out = self._matrix(texts) if len(texts) else np.zeros((0, self.dimension), dtype=np.float32)
        if progress is not None and len(texts):
            progress(len(texts))
        return l2_normalize(out)

    def embed_query(self, text: str) -> np.ndarray:
        return l2_normalize(self._vector(text))
