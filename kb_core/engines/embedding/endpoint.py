"""OpenAI-compatible embeddings endpoint backend (``POST {endpoint}/embeddings``).

Texts are sent in batches (``{"model": ..., "input": [...]}``) with ``Authorization: Bearer <key>`` when a key
is given. Connection errors, timeouts, 429 and 5xx answers are retried with exponential backoff; other 4xx
answers fail at once. Vectors are put back in request order by their ``index``, checked to all have the
dimension of the first answer, and L2-normalised.

The endpoint's own tokenizer is unknown, so ``tokenizer`` is the bundled all-MiniLM-L6-v2 WordPiece tokenizer:
chunk sizes are counted in those tokens (one per CJK character, roughly one per English word piece), an
approximation of what the endpoint's model sees. ``max_input_tokens`` is None unless given: no client-side
windowing is done, the server applies its own limit.

The API key is kept private: it appears in no log line, exception message or ``repr``. No text the server
chose ever reaches a message or a log line: servers echo keys in their bodies and even in the HTTP reason phrase,
altered in more ways than a scrubber can list (upper-cased, spaced out, base32, ``\\u``-escaped, hex). Failures
are reported by status code and the standard reason of that code, transport failures by a fixed description of
their kind; the reason phrase is dropped from every response before httpx sees it (httpx logs it at INFO). An
answer with status 200 that is not the expected shape (no list of vectors, an index that is not a whole number,
a vector holding NaN) is an EMBEDDING_ERROR saying what was wrong, never an internal error.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Sequence
from http import HTTPStatus
from typing import Any

import httpx
import numpy as np

from kb_core.base.cancellation import raise_if_cancelled
from kb_core.base.errors import EmbeddingError, InvalidArgument
from kb_core.base.redaction import redact_url, split_credentials
from kb_core.engines.embedding.base import ProgressCallback, TokenIds, Tokenizer, l2_normalize
from kb_core.engines.embedding.wordpiece import bundled_tokenizer

log = logging.getLogger(__name__)

_RETRY_STATUS = {408, 425, 429}
# What a transport failure is called, by kind: httpx's own text may quote the server's bytes (a bad status line).
# Every way of not reaching a port (refused, no route, the connection timing out) reads the same, so the message does
# not tell a closed port from a filtered one or a host that is down.
UNREACHABLE = "the connection could not be made (refused or unreachable)"
_TRANSPORT_FAILURES: tuple[tuple[type[httpx.TransportError], str], ...] = (
    (httpx.ConnectTimeout, UNREACHABLE),
    (httpx.ConnectError, UNREACHABLE),
    (httpx.TimeoutException, "the request timed out"),
    (httpx.RemoteProtocolError, "the server's answer is not valid HTTP"),
    (httpx.NetworkError, "the connection failed"),
    (httpx.ProxyError, "the proxy failed"),
)


def _status_text(status: int) -> str:
    """``HTTP 401 (Unauthorized)``: the code and its standard reason, never the reason phrase the server sent."""
    try:
        return f"HTTP {status} ({HTTPStatus(status).phrase})"
    except ValueError:
        return f"HTTP {status}"


def _transport_failure(exc: httpx.TransportError) -> str:
    for kind, text in _TRANSPORT_FAILURES:
        if isinstance(exc, kind):
            return text
    return "the request failed"


class _NoReasonPhrase(httpx.BaseTransport):
    """Drops the reason phrase (text the server chooses) from each response; httpx then shows the standard one."""

    def __init__(self, inner: httpx.BaseTransport) -> None:
        self._inner = inner

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self._inner.handle_request(request)
        response.extensions = {k: v for k, v in response.extensions.items() if k != "reason_phrase"}
        return response

    def close(self) -> None:
        self._inner.close()


class EndpointEmbedder:
    """:class:`~kb_core.engines.embedding.base.Embedder` over an OpenAI-compatible ``/embeddings`` endpoint."""

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
        # The URL's user information (basic authentication in front of the server) goes in a header, never in a
        # request line a log could show; every message names the endpoint through the one redaction (#37).
        self._url, credentials = split_credentials(endpoint.rstrip("/"))
        self._auth = httpx.BasicAuth(*credentials) if credentials is not None else None
        self.endpoint = redact_url(endpoint.rstrip("/"))
        self.model = model
        self.model_key = f"endpoint:{self.endpoint}#{model}"
        self.batch_size = batch_size
        self.max_retries = max(0, max_retries)
        self.backoff = backoff
        self.max_input_tokens = max_input_tokens
        self.tokenizer: Tokenizer = tokenizer if tokenizer is not None else bundled_tokenizer()
        self._api_key = api_key or None
        self._dimension: int | None = None
        self._lock = threading.Lock()
        # The last failed attempt (monotonic time, what happened), for a caller that gave up waiting while the
        # request was retried (rag_search's timeout) to say why.
        self.last_problem: tuple[float, str] | None = None
        headers = {"Content-Type": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        self._client = httpx.Client(
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
            headers=headers,
            transport=_NoReasonPhrase(transport if transport is not None else httpx.HTTPTransport()),
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
        return EmbeddingError(message, code=code, details={"endpoint": self.endpoint, "model": self.model})

    def _post(self, texts: list[str]) -> Any:
        url = f"{self.endpoint}/embeddings"  # as shown: without a password
        attempt = 0
        while True:
            problem: str
            try:
                resp = self._client.post(
                    f"{self._url}/embeddings",
                    json={"model": self.model, "input": texts},
                    auth=self._auth or httpx.USE_CLIENT_DEFAULT,
                )
            except httpx.TransportError as exc:
                problem = _transport_failure(exc)
                self.last_problem = (time.monotonic(), f"failed: {problem}")
            else:
                if resp.status_code == 200:
                    try:
                        return resp.json()
                    except (ValueError, RecursionError) as exc:
                        raise self._fail(f"embedding endpoint {url} answered with invalid JSON") from exc
                problem = _status_text(resp.status_code)
                self.last_problem = (time.monotonic(), f"answered {problem}")
                log.debug("embedding endpoint %s answered %s with a %d-byte body", url, problem, len(resp.content))
                if resp.status_code in (401, 403):
                    raise self._fail(
                        f"embedding endpoint {url} refused the request ({problem}): "
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
            log.warning("embedding endpoint %s: %s; retrying in %.1fs", url, problem, delay)
            raise_if_cancelled("embedding")
            time.sleep(delay)
            attempt += 1

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        payload = self._post(texts)
        data = payload.get("data") if isinstance(payload, dict) else None
        if not isinstance(data, list) or len(data) != len(texts):
            got = len(data) if isinstance(data, list) else "no"
            raise self._fail(f"embedding endpoint returned {got} vectors for {len(texts)} inputs")
        rows: dict[int, np.ndarray] = {}
        for entry in data:
            index = entry.get("index", 0) if isinstance(entry, dict) else None
            if isinstance(index, float) and math.isfinite(index) and index.is_integer():
                index = int(index)
            if not isinstance(entry, dict) or isinstance(index, bool) or not isinstance(index, int):
                raise self._fail(
                    "embedding endpoint returned malformed vectors: each entry of 'data' must be an object with a "
                    "whole-number 'index' and an 'embedding' list"
                )
            try:
                vector = np.asarray(entry.get("embedding"), dtype=np.float32)
            except (TypeError, ValueError, OverflowError) as exc:
                raise self._fail("embedding endpoint returned malformed vectors: an embedding is not numbers") from exc
            if vector.ndim != 1 or vector.shape[0] == 0 or not np.isfinite(vector).all():
                raise self._fail(
                    "embedding endpoint returned malformed vectors: an embedding must be a non-empty list of finite "
                    "numbers"
                )
            rows[index] = vector
        if sorted(rows) != list(range(len(texts))):
            raise self._fail("embedding endpoint returned vectors with missing or duplicate indexes")
        ordered = [rows[i] for i in range(len(texts))]
        dims = {r.shape for r in ordered}
        if len(dims) != 1:
            raise self._fail(f"embedding endpoint returned vectors of differing shapes {sorted(dims)}")
        dim = ordered[0].shape[0]
        with self._lock:
            if self._dimension is None:
                self._dimension = dim
        if dim != self._dimension:
            raise self._fail(
                f"embedding endpoint returned {dim}-d vectors, expected {self._dimension}-d", code="DIMENSION_MISMATCH"
            )
        return l2_normalize(np.stack(ordered))

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
            raise_if_cancelled("embedding")  # a cancelled import sends no more requests
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
