"""OpenAI-compatible embeddings endpoint backend (``POST {endpoint}/embeddings``).

Texts are sent in batches (``{"model": ..., "input": [...]}``) with ``Authorization: Bearer <key>`` when a key
is given. Connection errors, timeouts, 429 and 5xx answers are retried with exponential backoff; other 4xx
answers fail at once. Vectors are put back in request order by their ``index``, checked to all have the
dimension of the first answer, and L2-normalised.

The endpoint's own tokenizer is unknown, so ``tokenizer`` is the bundled all-MiniLM-L6-v2 WordPiece tokenizer:
chunk sizes are counted in those tokens (one per CJK character, roughly one per English word piece), an
approximation of what the endpoint's model sees. ``max_input_tokens`` is None unless given: no client-side
windowing is done, the server applies its own limit.

The API key is kept private: it appears in no log line, exception message or ``repr``. Upstream response
bodies never reach a message or a log above DEBUG (servers echo keys in them, altered: JSON-escaped,
URL-encoded, base64, cut short); errors report the HTTP status and its reason. At DEBUG a short body is
logged with every form and fragment of the key scrubbed (:mod:`kb_core.embedding.redaction`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

import httpx
import numpy as np

from kb_core.embedding.base import ProgressCallback, TokenIds, Tokenizer, l2_normalize
from kb_core.embedding.redaction import SecretScrubber
from kb_core.embedding.wordpiece import bundled_tokenizer
from kb_core.errors import EmbeddingError, InvalidArgument

log = logging.getLogger(__name__)

_RETRY_STATUS = {408, 425, 429}
_DEBUG_BODY_CHARS = 200


class EndpointEmbedder:
    """:class:`~kb_core.embedding.base.Embedder` over an OpenAI-compatible ``/embeddings`` endpoint."""

    def __init__(
        self,
        endpoint: str,
        model: str,
        api_key: str | None = None,
        *,
        batch_size: int = 64,
        timeout: float = 60.0,
        max_retries: int = 4,
        backoff: float = 0.5,
        max_input_tokens: int | None = None,
        tokenizer: Tokenizer | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if not endpoint or not endpoint.startswith(("http://", "https://")):
            raise InvalidArgument(f"embedding endpoint must be an http:// or https:// URL, got {endpoint!r}")
        if not model:
            raise InvalidArgument("an embedding endpoint needs a model name (model=...), got none")
        if batch_size < 1:
            raise InvalidArgument(f"batch_size must be >= 1, got {batch_size!r}")
        self.endpoint = endpoint.rstrip("/")
        self.model = model
        self.model_key = f"endpoint:{self.endpoint}#{model}"
        self.batch_size = batch_size
        self.max_retries = max(0, max_retries)
        self.backoff = backoff
        self.max_input_tokens = max_input_tokens
        self.tokenizer: Tokenizer = tokenizer if tokenizer is not None else bundled_tokenizer()
        self._api_key = api_key or None
        self._scrub = SecretScrubber(self._api_key)
        self._dimension: int | None = None
        self._lock = threading.Lock()
        headers = {"Content-Type": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        self._client = httpx.Client(
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)), headers=headers, transport=transport
        )

    def __repr__(self) -> str:
        key = ", api_key=<set>" if self._api_key else ""
        return f"EndpointEmbedder(endpoint={self.endpoint!r}, model={self.model!r}{key})"

    def close(self) -> None:
        self._client.close()

    @property
    def dimension(self) -> int:
        if self._dimension is None:
            self._embed_batch(["dimension probe"])
        assert self._dimension is not None
        return self._dimension

    def _fail(self, message: str, code: str = "EMBEDDING_ERROR") -> EmbeddingError:
        return EmbeddingError(self._scrub(message), code=code, details={"endpoint": self.endpoint, "model": self.model})

    def _post(self, texts: list[str]) -> dict[str, Any]:
        url = f"{self.endpoint}/embeddings"
        attempt = 0
        while True:
            problem: str
            try:
                resp = self._client.post(url, json={"model": self.model, "input": texts})
            except httpx.TransportError as exc:
                problem = f"{type(exc).__name__}: {exc}"
            else:
                if resp.status_code == 200:
                    try:
                        return resp.json()
                    except ValueError as exc:
                        raise self._fail(f"embedding endpoint {url} answered with invalid JSON") from exc
                problem = f"HTTP {resp.status_code}" + (f" {resp.reason_phrase}" if resp.reason_phrase else "")
                log.debug(
                    "embedding endpoint %s answered %s: %s",
                    url,
                    problem,
                    self._scrub(resp.text[:_DEBUG_BODY_CHARS]),
                )
                if resp.status_code in (401, 403):
                    raise self._fail(
                        f"embedding endpoint {url} refused the request (HTTP {resp.status_code}): "
                        "check the API key" + (" (none was given)" if not self._api_key else ""),
                        code="EMBEDDING_AUTH_FAILED",
                    )
                if resp.status_code < 500 and resp.status_code not in _RETRY_STATUS:
                    raise self._fail(
                        f"embedding endpoint {url} rejected the request for model {self.model!r}: {problem}"
                    )
            if attempt >= self.max_retries:
                raise self._fail(
                    f"embedding endpoint {url} failed after {attempt + 1} attempts: {problem}",
                    code="EMBEDDING_UNAVAILABLE",
                )
            delay = self.backoff * (2**attempt)
            log.warning("embedding endpoint %s: %s; retrying in %.1fs", url, self._scrub(problem), delay)
            time.sleep(delay)
            attempt += 1

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        payload = self._post(texts)
        data = payload.get("data") if isinstance(payload, dict) else None
        if not isinstance(data, list) or len(data) != len(texts):
            got = len(data) if isinstance(data, list) else "no"
            raise self._fail(f"embedding endpoint returned {got} vectors for {len(texts)} inputs")
        try:
            ordered = sorted(data, key=lambda d: int(d.get("index", 0)))
            rows = [np.asarray(d["embedding"], dtype=np.float32) for d in ordered]
        except (KeyError, TypeError, ValueError) as exc:
            raise self._fail(f"embedding endpoint returned malformed vectors ({type(exc).__name__})") from exc
        if sorted(int(d.get("index", 0)) for d in data) != list(range(len(texts))):
            raise self._fail("embedding endpoint returned vectors with missing or duplicate indexes")
        dims = {r.shape for r in rows}
        if len(dims) != 1 or rows[0].ndim != 1 or rows[0].shape[0] == 0:
            raise self._fail(f"embedding endpoint returned vectors of differing shapes {sorted(dims)}")
        dim = rows[0].shape[0]
        with self._lock:
            if self._dimension is None:
                self._dimension = dim
        if dim != self._dimension:
            raise self._fail(
                f"embedding endpoint returned {dim}-d vectors, expected {self._dimension}-d", code="DIMENSION_MISMATCH"
            )
        return l2_normalize(np.stack(rows))

    def embed_documents(
        self,
        texts: Sequence[str],
        progress: ProgressCallback | None = None,
        *,
        token_ids: Sequence[TokenIds | None] | None = None,
    ) -> np.ndarray:
        """``token_ids`` is ignored: the endpoint takes text."""
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        parts = []
        for s in range(0, len(texts), self.batch_size):
            batch = texts[s : s + self.batch_size]
            parts.append(self._embed_batch(batch))
            if progress is not None:
                progress(len(batch))
        return np.concatenate(parts, axis=0)

    def embed_query(self, text: str) -> np.ndarray:
        return self._embed_batch([text])[0]

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """:meth:`embed_query` of each text, in one request (the endpoint embeds queries as it embeds documents)."""
        return self._embed_batch(list(texts))
