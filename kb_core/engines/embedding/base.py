"""The embedding interfaces every backend implements, and small shared helpers."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

ProgressCallback = Callable[[int], None]
"""Called with the number of texts just finished (an increment, like ``tqdm.update``)."""


@runtime_checkable
class Tokenizer(Protocol):
    """Counts tokens the way a model sees them, without special tokens."""

    def count(self, text: str) -> int: ...

    def offsets(self, text: str) -> list[tuple[int, int]]:
        """Character span ``(start, end)`` of each token in ``text``, in order."""
        ...


@runtime_checkable
class BatchTokenizer(Tokenizer, Protocol):
    """A tokenizer with a fast path for many texts at once (optional; chunking uses it when present)."""

    def count_batch(self, texts: Sequence[str]) -> list[int]: ...

    def offsets_batch(self, texts: Sequence[str]) -> list[list[tuple[int, int]]]: ...


@dataclass(frozen=True, eq=False)
class TokenIds:
    """What a text was tokenised to, so an embedder with the same tokenizer need not tokenise it again (#15).

    ``ids`` (int32, no special tokens) and ``offsets`` (int32 ``(n, 2)`` character spans in the text) are exactly
    what ``tokenizer`` gives for the text; ``tokenizer`` is the making tokenizer's ``fingerprint``, which an
    embedder compares with its own before using the ids.
    """

    ids: np.ndarray
    offsets: np.ndarray
    tokenizer: str

    def __len__(self) -> int:
        return len(self.ids)


@runtime_checkable
class IdTokenizer(BatchTokenizer, Protocol):
    """A batch tokenizer that can also give token ids, tagged with its ``fingerprint``."""

    fingerprint: str

    def ids_offsets_batch(self, texts: Sequence[str]) -> list[TokenIds]: ...


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into L2-normalised float32 vectors.

    ``model_key`` is a stable identity of the model (it keys caches and is stored with indexes), e.g.
    ``"local:all-MiniLM-L6-v2"`` or ``"endpoint:http://host/v1#model"``.
    """

    model_key: str
    dimension: int
    max_input_tokens: int | None
    tokenizer: Tokenizer

    def embed_documents(
        self,
        texts: Sequence[str],
        progress: ProgressCallback | None = None,
        *,
        token_ids: Sequence[TokenIds | None] | None = None,
    ) -> np.ndarray:
        """float32 array of shape ``(len(texts), dimension)``, each row L2-normalised.

        ``token_ids``, aligned with ``texts``, may give what a text was already tokenised to (e.g. by the
        chunker); an embedder uses those whose tokenizer is its own and ignores the rest.
        """
        ...

    def embed_query(self, text: str) -> np.ndarray:
        """float32 array of shape ``(dimension,)``, L2-normalised."""
        ...


def count_batch(tokenizer: Tokenizer, texts: Sequence[str]) -> list[int]:
    """Token counts of many texts, through the tokenizer's batch path when it has one."""
    fn = getattr(tokenizer, "count_batch", None)
    if fn is not None:
        return list(fn(texts))
    return [tokenizer.count(t) for t in texts]


def offsets_batch(tokenizer: Tokenizer, texts: Sequence[str]) -> list[list[tuple[int, int]]]:
    """Token spans of many texts, through the tokenizer's batch path when it has one."""
    fn = getattr(tokenizer, "offsets_batch", None)
    if fn is not None:
        return list(fn(texts))
    return [tokenizer.offsets(t) for t in texts]


def embed_with_token_ids(
    embedder: Embedder,
    texts: Sequence[str],
    token_ids: Sequence[TokenIds | None],
    progress: ProgressCallback | None = None,
) -> np.ndarray:
    """``embedder.embed_documents(texts, progress, token_ids=token_ids)``, the keyword passed only when some text
    has ids: an embedder made outside kb_core (a service's ``embedder_factory``) may not take it, and then nothing
    was tokenised for it anyway."""
    if any(t is not None for t in token_ids):
        return embedder.embed_documents(texts, progress, token_ids=token_ids)
    return embedder.embed_documents(texts, progress)


def l2_normalize(vectors: np.ndarray) -> np.ndarray:
    """Row-wise L2 normalisation to float32; zero rows stay zero instead of becoming NaN."""
    arr = np.asarray(vectors, dtype=np.float32)
    if arr.ndim == 1:
        norm = float(np.linalg.norm(arr))
        return arr / norm if norm > 0 else arr.copy()
    norms = np.linalg.norm(arr, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (arr / norms).astype(np.float32, copy=False)
