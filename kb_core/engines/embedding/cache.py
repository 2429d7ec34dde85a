"""Persistent embedding cache shared by several processes, and an embedder that uses it.

Vectors are stored in one SQLite file (stdlib ``sqlite3``: no server, safe for concurrent readers and writers
in WAL mode with a busy timeout), keyed by ``(model_key, sha256(text))``. Re-embedding unchanged text
therefore costs a lookup, not model time, in this process and in any other using the same file.
"""

from __future__ import annotations

import hashlib
import logging
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np

from kb_core.base.errors import StoreError
from kb_core.engines.embedding.base import Embedder, ProgressCallback, TokenIds, Tokenizer, embed_with_token_ids

log = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS embeddings (
    model_key TEXT NOT NULL,
    text_sha256 BLOB NOT NULL,
    dim INTEGER NOT NULL,
    vector BLOB NOT NULL,
    PRIMARY KEY (model_key, text_sha256)
) WITHOUT ROWID
"""
_LOOKUP_BATCH = 500  # stays far below SQLite's bound-parameter limit


def text_digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


class EmbeddingCache:
    """``(model_key, sha256(text)) -> float32 vector`` in a SQLite file; safe across threads and processes."""

    def __init__(self, path: str | Path, *, busy_timeout: float = 30.0) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(
                str(self.path), timeout=busy_timeout, check_same_thread=False, isolation_level=None
            )
            self._conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
            self._conn.execute("PRAGMA journal_mode = WAL")
            self._conn.execute("PRAGMA synchronous = NORMAL")
            self._conn.execute(_SCHEMA)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the embedding cache {self.path}: {exc}") from exc
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"EmbeddingCache({str(self.path)!r})"

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> EmbeddingCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def get_many(self, model_key: str, digests: Sequence[bytes]) -> dict[bytes, np.ndarray]:
        """Vectors found for the given text digests (missing ones are simply absent)."""
        found: dict[bytes, np.ndarray] = {}
        unique = list(dict.fromkeys(digests))
        try:
            with self._lock:
                for s in range(0, len(unique), _LOOKUP_BATCH):
                    part = unique[s : s + _LOOKUP_BATCH]
                    marks = ",".join("?" * len(part))
                    rows = self._conn.execute(
                        "SELECT text_sha256, dim, vector FROM embeddings"
                        f" WHERE model_key = ? AND text_sha256 IN ({marks})",
                        [model_key, *part],
                    ).fetchall()
                    for digest, dim, blob in rows:
                        vec = np.frombuffer(blob, dtype=np.float32)
                        if vec.shape[0] == dim:
                            found[bytes(digest)] = vec
        except sqlite3.Error as exc:
            raise StoreError(f"cannot read the embedding cache {self.path}: {exc}") from exc
        return found

    def put_many(self, model_key: str, items: Iterable[tuple[bytes, np.ndarray]]) -> None:
        rows = [
            (model_key, digest, int(vec.shape[0]), np.ascontiguousarray(vec, dtype=np.float32).tobytes())
            for digest, vec in items
        ]
        if not rows:
            return
        try:
            with self._lock:
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    self._conn.executemany("INSERT OR REPLACE INTO embeddings VALUES (?, ?, ?, ?)", rows)
                except BaseException:
                    self._conn.execute("ROLLBACK")
                    raise
                self._conn.execute("COMMIT")
        except sqlite3.Error as exc:
            raise StoreError(f"cannot write to the embedding cache {self.path}: {exc}") from exc

    def count(self, model_key: str | None = None) -> int:
        with self._lock:
            if model_key is None:
                return int(self._conn.execute("SELECT COUNT(*) FROM embeddings").fetchone()[0])
            return int(
                self._conn.execute("SELECT COUNT(*) FROM embeddings WHERE model_key = ?", (model_key,)).fetchone()[0]
            )


class CachedEmbedder:
    """An :class:`~kb_core.engines.embedding.base.Embedder` that asks ``cache`` first and embeds only the misses.

    Queries are not stored in the cache file (they are short, and some backends embed them differently). With
    ``query_memo`` > 0 the last ``query_memo`` query vectors are remembered in memory: for a deterministic local
    model, where a repeated query (the search lab re-ranking one query under new weights, an evaluation running
    each judged query under every setting) would otherwise cost model time again for the same vector.
    """

    def __init__(
        self,
        embedder: Embedder,
        cache: EmbeddingCache,
        *,
        query_memo: int = 0,
        on_query_embedded: Callable[[], None] | None = None,
    ) -> None:
        """``on_query_embedded`` is called each time the inner embedder computes a query vector (not for the
        memo's answers): the service counts them."""
        self.inner = embedder
        self.cache = cache
        self.query_memo = max(0, int(query_memo))
        self._on_query_embedded = on_query_embedded
        self._queries: OrderedDict[str, np.ndarray] = OrderedDict()
        self._queries_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"CachedEmbedder({self.inner!r}, {self.cache!r})"

    @property
    def model_key(self) -> str:
        return self.inner.model_key

    @property
    def last_problem(self) -> tuple[float, str] | None:
        """The inner embedder's last failed attempt (an endpoint's), if it keeps one."""
        return getattr(self.inner, "last_problem", None)

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    @property
    def max_input_tokens(self) -> int | None:
        return self.inner.max_input_tokens

    @property
    def tokenizer(self) -> Tokenizer:
        return self.inner.tokenizer

    @property
    def loaded(self) -> bool:
        """Whether the inner embedder's model is loaded (true for embedders that load nothing)."""
        return bool(getattr(self.inner, "loaded", True))

    def load(self) -> None:
        load = getattr(self.inner, "load", None)
        if load is not None:
            load()

    def embed_documents(
        self,
        texts: Sequence[str],
        progress: ProgressCallback | None = None,
        *,
        token_ids: Sequence[TokenIds | None] | None = None,
    ) -> np.ndarray:
        """Cached vectors, and the misses embedded by the inner embedder (with their ``token_ids``, if given)."""
        texts = list(texts)
        key = self.inner.model_key
        digests = [text_digest(t) for t in texts]
        found = self.cache.get_many(key, digests)
        hits = sum(1 for d in digests if d in found)
        if progress is not None and hits:
            progress(hits)
        # Embed each distinct missing text once (with the ids of its first occurrence that has any).
        missing: dict[bytes, str] = {}
        missing_ids: dict[bytes, TokenIds] = {}
        ids: Sequence[TokenIds | None] = token_ids if token_ids is not None else [None] * len(texts)
        for d, t, i in zip(digests, texts, ids, strict=True):
            if d not in found:
                missing.setdefault(d, t)
                if i is not None:
                    missing_ids.setdefault(d, i)
        if missing:
            miss_digests = list(missing)
            reported = 0

            def forward(n: int) -> None:
                nonlocal reported
                reported += n
                if progress is not None:
                    progress(n)

            miss_texts = [missing[d] for d in miss_digests]
            miss_ids = [missing_ids.get(d) for d in miss_digests]
            fresh = embed_with_token_ids(self.inner, miss_texts, miss_ids, forward)
            self.cache.put_many(key, zip(miss_digests, fresh, strict=True))
            for d, v in zip(miss_digests, fresh, strict=True):
                found[d] = v
            if progress is not None and len(texts) - hits - reported > 0:
                progress(len(texts) - hits - reported)  # duplicates of embedded texts
        log.debug("embedding cache: %d hits, %d texts embedded", hits, len(missing))
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return np.stack([found[d] for d in digests]).astype(np.float32, copy=False)

    def _embed_query(self, text: str) -> np.ndarray:
        vector = self.inner.embed_query(text)
        if self._on_query_embedded is not None:
            self._on_query_embedded()
        return vector

    def query_cut(self, text: str) -> tuple[int, int] | None:
        """The inner embedder's (tokens read, tokens in all) of a query cut for its vector, else None."""
        cut = getattr(self.inner, "query_cut", None)
        return cut(text) if cut is not None else None

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """:meth:`embed_query` of several texts, in one call where the inner embedder offers one (an endpoint)."""
        batch = getattr(self.inner, "embed_queries", None)
        if batch is not None:
            return np.asarray(batch(list(texts)), dtype=np.float32)
        return np.stack([self.embed_query(t) for t in texts])

    def embed_query(self, text: str) -> np.ndarray:
        if not self.query_memo:
            return self._embed_query(text)
        with self._queries_lock:
            vector = self._queries.get(text)
            if vector is not None:
                self._queries.move_to_end(text)
                return vector.copy()
        vector = self._embed_query(text)
        with self._queries_lock:
            self._queries[text] = vector.copy()
            while len(self._queries) > self.query_memo:
                self._queries.popitem(last=False)
        return vector
