"""Two hosts on one PostgreSQL URL, end to end with the real front ends (issue #16's "done when"): ``kb --store URL
mcp --http`` on a free loopback port (host B), driven by the MCP SDK's streamable-HTTP client with a bearer token
that ``kb --store URL token create`` made on host A (tokens live in the database), answers searches over what a
``kb --store URL import`` process on host A committed after B started, with the folder store's hits and
breakdowns; a revocation on host A refuses the token on host B at its next request."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from kb_core import KnowledgeBaseService
from kb_core.edges.envelopes import Enveloped
from kb_core.features.results import SearchRequest
from kb_core.store.postgres.embedded import LocalPostgres
from tests.postgres.conftest import new_database
from tests.postgres.test_pg_service import DEMO_FILES, KB, MODEL, ROOT, assert_same_hits, open_kb, run_cli
from tests.test_mcp_security import wait_listening

QUERIES = [
    ("hybrid search score breakdown", {}),
    ("how does BM25 keyword scoring work", {"mode": "keyword"}),
    ("混合检索的得分解释", {}),
    ("知识库工作台 如何导入文档", {"fusion": "rrf"}),
]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_mcp_http(url: str, home: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        command = [sys.executable, "-m", "kb_core.edges.cli", "--store", url, "--home", str(home), "mcp", "--http"]
        return subprocess.Popen(
            [*command, "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"},
        )


def mcp_calls(url: str, token: str, calls: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Each call's envelope (structured content), in one MCP session over streamable HTTP."""

    async def scenario() -> list[dict[str, Any]]:
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(60, read=120)) as client:  # noqa: SIM117
            async with streamable_http_client(url, http_client=client) as (read, write, _):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    answers = []
                    for name, arguments in calls:
                        result = await session.call_tool(name, arguments)
                        assert not result.isError, result.content[0].text
                        assert result.structuredContent is not None
                        answers.append(result.structuredContent)
                    return answers

    return anyio.run(scenario)


def test_mcp_over_http_on_one_host_searches_what_the_cli_imported_on_another(
    postgres_server: LocalPostgres, tmp_path: Path
) -> None:
    url = new_database(postgres_server, "t_mcp_http_hosts")
    host_a, host_b = tmp_path / "host-a", tmp_path / "host-b"
    service_a = KnowledgeBaseService(host_a, store=url)  # host A: this process and `kb` processes on its home
    cli_a = Enveloped(service_a.session("cli"))  # the current KB that `kb` commands on host A's home use
    assert cli_a.create_knowledge_base(KB, 64, embedding_model=MODEL)["success"]
    assert cli_a.select_knowledge_base(KB)["success"]
    made = run_cli(host_a, "token", "create", "--scope", KB, "--capability", "read", store=url)
    assert made["success"], made["message"]
    token = made["data"]["token"]
    assert not (host_a / "tokens.json").exists()  # the token is in the database, not in host A's home

    port = free_port()
    endpoint = f"http://127.0.0.1:{port}/mcp"
    log = tmp_path / "mcp-http.log"
    server = start_mcp_http(url, host_b, port, log)
    try:
        wait_listening(server, endpoint, log, seconds=90)
        files = DEMO_FILES[::2]
        imported = run_cli(host_a, "import", *files, store=url)  # after host B started serving
        assert imported["data"]["success_count"] == len(files), imported

        folder = open_kb(KnowledgeBaseService(tmp_path / "folder-home"))
        assert folder.import_document(files)["data"]["success_count"] == len(files)
        calls = [("select_knowledge_base", {"kb_name": KB})]
        calls += [("search", {"query": q, "top_k": 8, **settings}) for q, settings in QUERIES]
        answers = mcp_calls(endpoint, token, calls)
        for (query, settings), answer in zip(QUERIES, answers[1:], strict=True):
            assert answer["data"]["chunks"], (query, settings)
            assert_same_hits(
                answer, folder.search(SearchRequest(query, top_k=8, **settings)), ("mcp over http", query, settings)
            )

        service_a.token_store.revoke(made["data"]["id"])
        refused = httpx.post(endpoint, json={}, headers={"Authorization": f"Bearer {token}"}, timeout=10)
        assert refused.status_code == 401  # revoked on host A, refused by host B's server at once
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    service_a.close()
    # (the MCP SDK logs a ClosedResourceError of its SSE writer when a client disconnects: not ours)
    assert "/kb_core/" not in log.read_text(encoding="utf-8")  # no traceback through our code


@pytest.fixture(autouse=True)
def _no_store_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KB_STORE", raising=False)
