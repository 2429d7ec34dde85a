"""End-to-end tests of the MCP server, driven by the SDK's own client.

stdio: ``python -m kb_core.edges.cli --home TMP mcp`` as a subprocess. HTTP: ``kb mcp --http`` on a free
loopback port, one server for the module, always killed at the end. KBs use the fast "hashing"
embedder except the one test marked ``model``.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import zipfile
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import docx
import httpx
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import McpError
from mcp.types import CallToolResult

from kb_core.edges.envelopes import Enveloped
from kb_core.store.tokens import TokenStore

REPO_ROOT = Path(__file__).resolve().parents[1]
ALL_TOOLS = {
    "create_knowledge_base",
    "delete_knowledge_base",
    "list_knowledge_bases",
    "select_knowledge_base",
    "import_document",
    "search",
    "explain_search",
    "list_documents",
    "delete_document",
    "update_document",
    "rag_search",
    "search_knowledge_base",
    "get_item",
    "get_document_info",
    "export_database",
    "import_database",
    "get_knowledge_schema",
    "import_knowledge_bundle",
    "start_import",
    "get_import_job",
    "cancel_import",
}
ENGLISH = (
    "Bearer tokens carry a folder scope: the whole library or a specific list of folders. "
    "A read token cannot change anything; a write token can import and delete documents."
)
CHINESE = "令牌携带范围：整个知识库或指定的文件夹列表。只读令牌不能修改任何内容。"


def make_docx(path: Path, *paragraphs: str) -> Path:
    document = docx.Document()
    document.add_heading("Tokens and scope 令牌与范围", level=1)
    for paragraph in paragraphs:
        document.add_paragraph(paragraph)
    path.parent.mkdir(parents=True, exist_ok=True)
    document.save(str(path))
    return path


def server_env() -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}


async def call(session: ClientSession, name: str, **arguments: Any) -> CallToolResult:
    return await session.call_tool(name, arguments)


async def ok(session: ClientSession, name: str, **arguments: Any) -> dict[str, Any]:
    result = await call(session, name, **arguments)
    assert not result.isError, result.content[0].text
    assert result.structuredContent is not None and result.structuredContent["success"] is True
    return result.structuredContent


async def tool_error(session: ClientSession, name: str, code: str, **arguments: Any) -> CallToolResult:
    result = await call(session, name, **arguments)
    assert result.isError, f"{name} should have failed with {code}"
    assert result.structuredContent is not None and result.structuredContent["error"]["code"] == code
    assert result.content[0].text.startswith(f"{code}: ")
    return result


async def rpc_error(session: ClientSession, name: str, code: int, **arguments: Any) -> McpError:
    with pytest.raises(McpError) as caught:
        await call(session, name, **arguments)
    assert caught.value.error.code == code, caught.value.error
    assert "Traceback" not in caught.value.error.message
    return caught.value


# -- stdio ---------------------------------------------------------------------------------------
def stdio_params(home: Path) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "kb_core.edges.cli", "--home", str(home), "mcp"],
        cwd=str(REPO_ROOT),
        env=server_env(),
    )


def run_stdio(home: Path, scenario: Callable[[ClientSession], Awaitable[None]], errlog: Path) -> None:
    async def main() -> None:
        with open(errlog, "w", encoding="utf-8") as log:
            async with stdio_client(stdio_params(home), errlog=log) as (read, write):  # noqa: SIM117
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    await scenario(session)

    anyio.run(main)


def make_broken_kb(home: Path, files: Path) -> None:
    """A KB whose segment files are garbage, so searching it fails inside the service (INTERNAL_ERROR)."""
    from kb_core import KnowledgeBaseService

    (files / "note.txt").write_text("a short note about tokens", encoding="utf-8")
    session = Enveloped(KnowledgeBaseService(home).session())
    assert session.create_knowledge_base("broken", 64, "hashing")["success"]
    assert session.import_document([str(files / "note.txt")], kb_name="broken")["success"]
    for name in ("chunks.parquet", "keyword.npz"):
        for path in home.rglob(name):
            path.write_bytes(b"garbage")


def test_stdio_every_tool_and_error_code(tmp_path: Path) -> None:
    docx_path = make_docx(tmp_path / "files" / "tokens.docx", ENGLISH, CHINESE)
    make_broken_kb(tmp_path / "home", tmp_path / "files")

    async def scenario(s: ClientSession) -> None:
        tools = (await s.list_tools()).tools
        assert {t.name for t in tools} == ALL_TOOLS
        assert all(t.outputSchema is not None and t.description for t in tools)
        by_name = {t.name: t for t in tools}
        limit = by_name["search_knowledge_base"].inputSchema["properties"]["limit"]
        assert (limit["default"], limit["minimum"], limit["maximum"]) == (8, 1, 20)
        assert by_name["search_knowledge_base"].inputSchema["required"] == ["query"]
        assert by_name["rag_search"].inputSchema["properties"]["top_k"]["default"] == 5

        created = await ok(s, "create_knowledge_base", kb_name="docs", chunk_size=64, embedding_model="hashing")
        assert created["data"]["kb_name"] == "docs" and created["data"]["kb_id"].startswith("kb_")
        await ok(s, "create_knowledge_base", kb_name="spare", chunk_size=64, embedding_model="hashing")
        await tool_error(s, "create_knowledge_base", "KB_EXISTS", kb_name="DOCS", chunk_size=64)
        error = await rpc_error(s, "create_knowledge_base", -32602, kb_name="x", chunk_size=1)
        assert "chunk_size" in error.error.message and error.error.data["code"] == "INVALID_ARGUMENT"
        await rpc_error(s, "create_knowledge_base", -32602, kb_name="x")  # chunk_size missing

        await tool_error(s, "search", "NO_CURRENT_KB", query="token")
        await tool_error(s, "select_knowledge_base", "KB_NOT_FOUND", kb_name="nope")
        selected = await ok(s, "select_knowledge_base", kb_name="docs")
        assert selected["data"]["document_count"] == 0

        progress: list[tuple[float, float | None]] = []

        async def on_progress(done: float, total: float | None, message: str | None) -> None:
            progress.append((done, total))

        result = await s.call_tool("import_document", {"file_paths": [str(docx_path)]}, progress_callback=on_progress)
        imported = result.structuredContent
        assert imported["data"]["success_count"] == 1 and imported["data"]["success_files"][0]["chunk_count"] >= 1
        assert progress and progress[-1] == (1.0, 1.0)  # import progress arrives as MCP progress notifications
        failed = await tool_error(s, "import_document", "IMPORT_FAILED", file_paths=[str(tmp_path / "missing.docx")])
        assert failed.structuredContent["data"]["failed_files"][0]["file_path"].endswith("missing.docx")
        await rpc_error(s, "import_document", -32602, file_paths="not a list")

        listing = await ok(s, "list_knowledge_bases")
        assert listing["data"]["count"] == 3 and listing["data"]["current_kb_id"] == created["data"]["kb_id"]
        await ok(s, "select_knowledge_base", kb_name="broken")
        internal = await rpc_error(s, "search", -32603, query="tokens")
        assert internal.error.message == "search failed because of an internal error; see the log."
        await rpc_error(s, "search_knowledge_base", -32603, query="tokens")
        await ok(s, "select_knowledge_base", kb_name="docs")
        await ok(s, "delete_knowledge_base", kb_name="broken")

        documents = (await ok(s, "list_documents"))["data"]["documents"]
        assert [d["name"] for d in documents] == ["tokens.docx"] and documents[0]["status"] == "ready"
        doc_id = documents[0]["id"]

        found = await ok(s, "search", query="令牌 范围", top_k=3)
        assert found["data"]["count"] >= 1 and "令牌" in found["data"]["chunks"][0]["content"]
        await rpc_error(s, "search", -32602, query="   ")

        result = await call(s, "search_knowledge_base", query="read token scope", mode="keyword", limit=5)
        assert not result.isError
        text = result.content[0].text
        assert re.match(r'1\. \(\d\.\d\d\) tokens\.docx\n   ".+"', text), text
        hits = result.structuredContent["data"]["hits"]
        assert hits[0]["rank"] == 1 and hits[0]["title"] == "tokens.docx" and hits[0]["doc_id"] == doc_id
        assert f"({hits[0]['score']:.2f})" in text
        await rpc_error(s, "search_knowledge_base", -32602, query="x", limit=21)
        await rpc_error(s, "search_knowledge_base", -32602, query="x", limit=0)
        await rpc_error(s, "search_knowledge_base", -32602, query="x", mode="fuzzy")
        await rpc_error(s, "search_knowledge_base", -32602, limit=3)

        chunk = await ok(s, "get_item", id=hits[0]["id"])
        assert chunk["data"]["type"] == "chunk" and chunk["data"]["chunk"]["id"] == hits[0]["id"]
        document = await ok(s, "get_item", id=doc_id)
        assert document["data"]["type"] == "document" and "令牌" in document["data"]["text"]
        await tool_error(s, "get_item", "ITEM_NOT_FOUND", id="chk_doesnotexist")

        info = await call(s, "get_document_info", knowledge_ids=[doc_id, "doc_missing"])
        assert not info.isError
        data = info.structuredContent["data"]
        assert [d["id"] for d in data["documents"]] == [doc_id] and data["total_docs"] == 1 and data["requested"] == 2
        assert data["errors"][0]["id"] == "doc_missing"
        described = data["documents"][0]
        assert described["file_type"] == "docx" and described["source"] == "path" and described["parse_status"]
        assert described["size_bytes"] == docx_path.stat().st_size and described["size_human"].endswith("KB")
        assert "tokens.docx" in info.content[0].text and "doc_missing" in info.content[0].text
        await tool_error(s, "get_document_info", "DOCUMENT_NOT_FOUND", knowledge_ids=["doc_missing"])
        empty = await rpc_error(s, "get_document_info", -32602, knowledge_ids=[])
        too_many = await rpc_error(s, "get_document_info", -32602, knowledge_ids=[f"doc_{i}" for i in range(11)])
        assert "empty" in empty.error.message and "at most 10" in too_many.error.message

        rag = await ok(s, "rag_search", keywords=["令牌", "scope"], top_k=2)
        assert rag["degraded"] is False and rag["total_results"] == len(rag["chunks"]) >= 1
        assert rag["chunks"][0]["metadata"]["source"] == "tokens.docx"
        await rpc_error(s, "rag_search", -32602, keywords=["x"], top_k=11)
        await rpc_error(s, "rag_search", -32602, keywords=["x"], timeout=0.01)
        await rpc_error(s, "rag_search", -32602, keywords=[])

        backup = tmp_path / "backup.kbx"
        exported = await ok(s, "export_database", export_path=str(backup))
        assert exported["data"]["export_path"] == str(backup) and backup.stat().st_size > 0
        merged = await ok(s, "import_database", source_db_path=str(backup))
        assert merged["data"]["imported_kb_count"] == 2 and merged["data"]["imported_doc_count"] == 1
        assert all(name not in ("docs", "spare") for name in merged["data"]["knowledge_bases"])  # renamed
        (tmp_path / "junk.kbx").write_bytes(b"not an export")
        await tool_error(s, "import_database", "INVALID_IMPORT_FILE", source_db_path=str(tmp_path / "junk.kbx"))

        updated = await ok(s, "update_document", doc_name="tokens.docx", chunk_size=32)
        assert updated["data"]["chunk_size"] == 32 and updated["data"]["doc_id"] == doc_id
        await rpc_error(s, "update_document", -32602, doc_name="tokens.docx", chunk_size=5)
        await tool_error(s, "update_document", "DOCUMENT_NOT_FOUND", doc_name="nope.docx", chunk_size=64)
        await ok(s, "delete_document", doc_name="tokens.docx")
        await tool_error(s, "delete_document", "DOCUMENT_NOT_FOUND", doc_name="tokens.docx")

        await tool_error(s, "delete_knowledge_base", "KB_IS_CURRENT", kb_name="docs")
        assert (await ok(s, "delete_knowledge_base", kb_name="spare"))["data"]["kb_name"] == "spare"
        await tool_error(s, "delete_knowledge_base", "KB_NOT_FOUND", kb_name="spare")
        unknown = await rpc_error(s, "no_such_tool", -32602)
        assert "search_knowledge_base" in unknown.error.message

    run_stdio(tmp_path / "home", scenario, tmp_path / "stderr.log")


def test_stdio_stdout_carries_protocol_messages_only(tmp_path: Path) -> None:
    """Every line the server writes to stdout is JSON-RPC, even while it logs (-v) and imports."""
    docx_path = make_docx(tmp_path / "a.docx", ENGLISH)
    requests = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "0"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {
                "name": "create_knowledge_base",
                "arguments": {"kb_name": "k", "chunk_size": 64, "embedding_model": "hashing"},
            },
        },
        {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "select_knowledge_base", "arguments": {"kb_name": "k"}},
        },
        {
            "jsonrpc": "2.0",
            "id": 4,
            "method": "tools/call",
            "params": {"name": "import_document", "arguments": {"file_paths": [str(docx_path)]}},
        },
    ]
    process = subprocess.Popen(
        [sys.executable, "-m", "kb_core.edges.cli", "--home", str(tmp_path / "home"), "-v", "mcp"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=REPO_ROOT,
        env=server_env(),
    )
    try:
        lines = []
        assert process.stdin is not None and process.stdout is not None
        for request in requests:
            process.stdin.write((json.dumps(request) + "\n").encode("utf-8"))
            process.stdin.flush()
            if "id" in request:
                lines.append(process.stdout.readline())
        process.stdin.close()
        process.wait(timeout=30)
        lines += process.stdout.read().splitlines()
        stderr = process.stderr.read().decode("utf-8") if process.stderr else ""
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    replies = [json.loads(line) for line in lines if line.strip()]
    assert [r["id"] for r in replies] == [1, 2, 3, 4]
    assert replies[3]["result"]["structuredContent"]["data"]["success_count"] == 1
    assert "INFO" in stderr  # -v logs went to stderr


@pytest.mark.model
def test_stdio_with_a_real_model(tmp_path: Path) -> None:
    docx_path = make_docx(tmp_path / "files" / "tokens.docx", ENGLISH, CHINESE)

    async def scenario(s: ClientSession) -> None:
        await ok(s, "create_knowledge_base", kb_name="real", chunk_size=128, embedding_model="all-MiniLM-L6-v2")
        await ok(s, "select_knowledge_base", kb_name="real")
        await ok(s, "import_document", file_paths=[str(docx_path)])
        result = await call(s, "search_knowledge_base", query="which credential may only read?", mode="semantic")
        hits = result.structuredContent["data"]["hits"]
        # a paraphrase sharing almost no word: just above the model's floor (0.26-0.29 against 0.19 raw)
        assert hits and hits[0]["title"] == "tokens.docx" and hits[0]["score"] > 0
        assert result.content[0].text.startswith(f"1. ({hits[0]['score']:.2f}) tokens.docx")
        kbs = (await ok(s, "list_knowledge_bases"))["data"]["knowledge_bases"]
        assert kbs[0]["embedding_model"] == "all-MiniLM-L6-v2"

    run_stdio(tmp_path / "home", scenario, tmp_path / "stderr.log")


# -- HTTP ----------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class HttpServer:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.home = root / "home"
        self.allowed = root / "allowed"
        self.outside = root / "outside"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.tokens = TokenStore(self.home)
        self.state: dict[str, Any] = {}

    def start(self) -> subprocess.Popen[bytes]:
        self.allowed.mkdir(parents=True)
        self.outside.mkdir(parents=True)
        self.log = open(self.root / "server.log", "wb")  # noqa: SIM115
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kb_core.edges.cli",
                "--home",
                str(self.home),
                "mcp",
                "--http",
                "--port",
                str(self.port),
                "--allow-dir",
                str(self.allowed),
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            cwd=REPO_ROOT,
            env=server_env(),
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"server exited: {(self.root / 'server.log').read_text(encoding='utf-8')}")
            try:
                httpx.post(self.url, json={}, timeout=1)
                return process
            except httpx.TransportError:
                time.sleep(0.2)
        process.kill()
        raise RuntimeError("server did not start within 60 s")

    def token(self, scope: list[str] | None, capability: str = "write", rate: int = 1000) -> str:
        return self.tokens.create(scope, capability, rate)[0]

    def run(self, token: str, scenario: Callable[[ClientSession], Awaitable[Any]]) -> Any:
        async def main() -> Any:
            return await self.session(token, scenario)

        return anyio.run(main)

    async def session(self, token: str, scenario: Callable[[ClientSession], Awaitable[Any]]) -> Any:
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(60, read=120)) as client:  # noqa: SIM117
            async with streamable_http_client(self.url, http_client=client) as (read, write, _):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    return await scenario(session)


@pytest.fixture(scope="module")
def http(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpServer]:
    server = HttpServer(tmp_path_factory.mktemp("mcp-http"))
    process = server.start()
    try:
        admin = server.token(None, "write")
        make_docx(server.allowed / "alpha.docx", ENGLISH)
        make_docx(server.allowed / "beta.docx", CHINESE)

        async def setup(s: ClientSession) -> None:
            for name in ("alpha", "beta"):
                created = await ok(s, "create_knowledge_base", kb_name=name, chunk_size=64, embedding_model="hashing")
                server.state[name] = created["data"]["kb_id"]
                await ok(s, "select_knowledge_base", kb_name=name)
                imported = await ok(s, "import_document", file_paths=[str(server.allowed / f"{name}.docx")])
                assert imported["data"]["success_count"] == 1
                documents = (await ok(s, "list_documents"))["data"]["documents"]
                server.state[f"{name}_doc"] = documents[0]["id"]
                hits = (await ok(s, "search", query="令牌 token scope"))["data"]["chunks"]
                server.state[f"{name}_chunk"] = hits[0]["id"]

        server.run(admin, setup)
        server.state["admin"] = admin
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        server.log.close()


def test_http_requests_without_a_valid_token_get_401(http: HttpServer) -> None:
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
    headers = {"Accept": "application/json, text/event-stream"}
    assert httpx.post(http.url, json=initialize, headers=headers).status_code == 401
    bad = {**headers, "Authorization": "Bearer kbt_not-a-real-token"}
    assert httpx.post(http.url, json=initialize, headers=bad).status_code == 401
    token, record = http.tokens.create(None, "read")
    good = {**headers, "Authorization": f"Bearer {token}"}
    assert httpx.post(http.url, json=initialize, headers=good).status_code == 200
    http.tokens.revoke(record.id)
    assert httpx.post(http.url, json=initialize, headers=good).status_code == 401


def test_http_client_creates_imports_and_searches_a_docx(http: HttpServer) -> None:
    """The setup fixture created two KBs and imported a DOCX into each over HTTP; search them."""

    async def scenario(s: ClientSession) -> None:
        result = await call(s, "search_knowledge_base", query="令牌 范围", mode="keyword")
        titles = [h["title"] for h in result.structuredContent["data"]["hits"]]
        assert titles[0] == "beta.docx" and result.content[0].text.startswith("1. (")
        english = await call(s, "search_knowledge_base", query="write token import documents", mode="hybrid")
        assert english.structuredContent["data"]["hits"][0]["title"] == "alpha.docx"

    http.run(http.state["admin"], scenario)


def test_http_each_session_has_its_own_current_kb(http: HttpServer) -> None:
    async def both() -> None:
        async def first(s: ClientSession) -> None:
            await ok(s, "select_knowledge_base", kb_name="alpha")
            assert (await ok(s, "list_knowledge_bases"))["data"]["current_kb_id"] == http.state["alpha"]

        async def second(s: ClientSession) -> None:
            assert (await ok(s, "list_knowledge_bases"))["data"]["current_kb_id"] is None
            await tool_error(s, "list_documents", "NO_CURRENT_KB")

        await http.session(http.state["admin"], first)
        await http.session(http.state["admin"], second)

    anyio.run(both)


def test_http_scope_isolation_between_two_tokens(http: HttpServer) -> None:
    alpha_token = http.token([http.state["alpha"]], "write")
    beta_token = http.token([http.state["beta"]], "read")

    def scenario(own: str, other: str) -> Callable[[ClientSession], Awaitable[None]]:
        async def run(s: ClientSession) -> None:
            kbs = (await ok(s, "list_knowledge_bases"))["data"]["knowledge_bases"]
            assert [kb["name"] for kb in kbs] == [own]
            hidden = await tool_error(s, "select_knowledge_base", "KB_NOT_FOUND", kb_name=other)
            missing = await tool_error(s, "select_knowledge_base", "KB_NOT_FOUND", kb_name="gamma")
            assert hidden.content[0].text == missing.content[0].text.replace("gamma", other)
            item = await tool_error(s, "get_item", "ITEM_NOT_FOUND", id=http.state[f"{other}_chunk"])
            assert http.state[f"{other}_chunk"] in item.content[0].text
            await tool_error(s, "get_item", "ITEM_NOT_FOUND", id=http.state[f"{other}_doc"])
            await ok(s, "get_item", id=http.state[f"{own}_chunk"])
            info = await call(
                s, "get_document_info", knowledge_ids=[http.state[f"{own}_doc"], http.state[f"{other}_doc"]]
            )
            data = info.structuredContent["data"]
            assert [d["id"] for d in data["documents"]] == [http.state[f"{own}_doc"]]
            assert data["errors"] == [
                {"id": http.state[f"{other}_doc"], "error": f"Document {http.state[f'{other}_doc']!r} not found."}
            ]
            hits = (await ok(s, "search_knowledge_base", query="令牌 token scope", limit=20))["data"]["hits"]
            assert hits and {h["kb_name"] for h in hits} == {own}
            await ok(s, "select_knowledge_base", kb_name=own)
            rag = await ok(s, "rag_search", keywords=["token", "令牌"])
            assert {c["metadata"]["source"] for c in rag["chunks"]} <= {f"{own}.docx"}
            denied = await tool_error(s, "create_knowledge_base", "PERMISSION_DENIED", kb_name="new", chunk_size=64)
            if own == "alpha":  # the write token: scoped tokens cannot create KBs, nor see others to delete
                assert "--scope all" in denied.content[0].text
                await tool_error(s, "delete_knowledge_base", "KB_NOT_FOUND", kb_name=other)
                backup = http.allowed / "alpha-only.kbx"
                await ok(s, "export_database", export_path=str(backup))
                with zipfile.ZipFile(backup) as archive:
                    manifest = json.loads(archive.read("manifest.json"))
                assert [kb["name"] for kb in manifest["knowledge_bases"]] == ["alpha"]
                await tool_error(s, "import_database", "PERMISSION_DENIED", source_db_path=str(backup))

        return run

    http.run(alpha_token, scenario("alpha", "beta"))
    http.run(beta_token, scenario("beta", "alpha"))


def test_http_read_tokens_cannot_call_write_tools(http: HttpServer) -> None:
    reader = http.token(None, "read")
    bundle = http.allowed / "read-bundle.yaml"
    bundle.write_text('- type: Document\n  doc_uri: "r-1"\n  content: "written by a reader"\n', encoding="utf-8")

    async def scenario(s: ClientSession) -> None:
        await ok(s, "select_knowledge_base", kb_name="alpha")
        assert (await ok(s, "get_knowledge_schema"))["data"]["full_bundle_schema"]["type"] == "array"
        for name, arguments in [
            ("create_knowledge_base", {"kb_name": "r", "chunk_size": 64}),
            ("delete_knowledge_base", {"kb_name": "beta"}),
            ("import_document", {"file_paths": [str(http.allowed / "alpha.docx")]}),
            ("delete_document", {"doc_name": "alpha.docx"}),
            ("update_document", {"doc_name": "alpha.docx", "chunk_size": 128}),
            ("export_database", {"export_path": str(http.allowed / "read.kbx")}),
            ("import_database", {"source_db_path": str(http.allowed / "read.kbx")}),
            ("import_knowledge_bundle", {"temp_file_path": str(bundle)}),
        ]:
            denied = await tool_error(s, name, "PERMISSION_DENIED", **arguments)
            assert "write token" in denied.content[0].text
        assert (await ok(s, "list_documents"))["data"]["count"] == 1
        assert bundle.exists()  # a refused import keeps the file

    http.run(reader, scenario)


def test_http_import_paths_are_confined_to_the_allowed_folders(http: HttpServer) -> None:
    secret = make_docx(http.outside / "secret.docx", "top secret")
    (http.allowed / "link.docx").symlink_to(secret)
    (http.allowed / "linked-folder").symlink_to(http.outside, target_is_directory=True)

    async def scenario(s: ClientSession) -> None:
        await ok(s, "select_knowledge_base", kb_name="alpha")
        for path in [
            str(secret),
            str(http.allowed / ".." / "outside" / "secret.docx"),
            str(http.allowed / "link.docx"),
            str(http.allowed / "linked-folder" / "secret.docx"),
        ]:
            refused = await tool_error(s, "import_document", "IMPORT_FAILED", file_paths=[path])  # each file alone
            assert str(http.allowed) in refused.structuredContent["data"]["failed_files"][0]["error"]
        relative = await tool_error(s, "import_document", "IMPORT_FAILED", file_paths=["secret.docx"])
        assert "relative path" in relative.structuredContent["data"]["failed_files"][0]["error"]
        outside = await tool_error(s, "export_database", "PERMISSION_DENIED", export_path=str(http.outside / "y.kbx"))
        assert "may write" in outside.content[0].text  # an export writes: the refusal says so (#25)
        await tool_error(s, "export_database", "PERMISSION_DENIED", export_path=str(http.outside / "x.kbx"))
        await tool_error(s, "export_database", "PERMISSION_DENIED", export_path=str(http.allowed / ".." / "x.kbx"))
        await tool_error(s, "import_database", "PERMISSION_DENIED", source_db_path=str(http.outside / "x.kbx"))
        outside_bundle = http.outside / "bundle.yaml"
        outside_bundle.write_text('- type: Document\n  doc_uri: "x"\n  content: "secret"\n', encoding="utf-8")
        (http.allowed / "bundle-link.yaml").symlink_to(outside_bundle)
        for path in (
            outside_bundle,
            http.allowed / "bundle-link.yaml",
            http.allowed / ".." / "outside" / "bundle.yaml",
        ):
            refused = await tool_error(s, "import_knowledge_bundle", "PERMISSION_DENIED", temp_file_path=str(path))
            assert str(http.allowed) in refused.content[0].text
        assert outside_bundle.exists()
        assert not (http.outside / "x.kbx").exists() and not (http.root / "x.kbx").exists()
        assert (await ok(s, "list_documents"))["data"]["count"] == 1

    http.run(http.state["admin"], scenario)


def test_http_import_fails_each_bad_path_alone_and_export_keeps_an_existing_file(http: HttpServer) -> None:
    """#36: one path outside --allow-dir among three files failed the whole call (nothing imported, no per-file
    list), and export_database silently replaced a file at export_path."""
    good = [make_docx(http.allowed / f"good-{n}.docx", ENGLISH) for n in (1, 2)]
    secret = make_docx(http.outside / "among.docx", "top secret")
    victim = http.allowed / "victim.txt"
    victim.write_text("precious notes", encoding="utf-8")

    async def scenario(s: ClientSession) -> None:
        await ok(s, "create_knowledge_base", kb_name="partial", chunk_size=64, embedding_model="hashing")
        await ok(s, "select_knowledge_base", kb_name="partial")
        paths = [str(good[0]), str(secret), str(good[1])]
        imported = await ok(s, "import_document", file_paths=paths)
        data = imported["data"]
        assert (data["success_count"], data["failed_count"]) == (2, 1)
        assert sorted(f["doc_name"] for f in data["success_files"]) == ["good-1.docx", "good-2.docx"]
        assert data["failed_files"][0]["file_path"] == str(secret)
        assert str(http.allowed) in data["failed_files"][0]["error"]
        relative = await ok(s, "import_document", file_paths=[str(good[0]), "good-2.docx"])
        assert relative["data"]["success_count"] == 1
        assert "relative path" in relative["data"]["failed_files"][0]["error"]

        refused = await tool_error(s, "export_database", "FILE_EXISTS", export_path=str(victim))
        assert "overwrite" in refused.content[0].text
        assert victim.read_text(encoding="utf-8") == "precious notes"
        assert [p.name for p in http.allowed.iterdir() if p.name.startswith(".victim")] == []  # no temporary left
        replaced = await ok(s, "export_database", export_path=str(victim), overwrite=True)
        assert replaced["data"]["export_path"] == str(victim) and victim.read_bytes()[:2] == b"PK"
        await ok(s, "select_knowledge_base", kb_name="alpha")
        await ok(s, "delete_knowledge_base", kb_name="partial")

    http.run(http.state["admin"], scenario)
def test_http_an_import_job_is_started_polled_and_cancelled_by_id_within_the_token_scope(http: HttpServer) -> None:
    """start_import returns at once; get_import_job shows its progress, then import_document's report; the job is
    seen by id by any session whose token reaches its KB, never by others; reading it needs no write token (#34)."""
    files = [make_docx(http.allowed / f"job-{i}.docx", ENGLISH, CHINESE) for i in range(3)]
    found: dict[str, Any] = {}

    async def start(s: ClientSession) -> None:
        await ok(s, "select_knowledge_base", kb_name="alpha")
        started = (await ok(s, "start_import", file_paths=[str(f) for f in files]))["data"]
        assert started["state"] == "running" and started["files_total"] == 3 and started["kb_name"] == "alpha"

        async def ended(job_id: str) -> dict[str, Any]:
            deadline = time.monotonic() + 120
            while True:
                job = (await ok(s, "get_import_job", job_id=job_id))["data"]
                if job["state"] not in ("running", "cancelling") or time.monotonic() > deadline:
                    return job
                await anyio.sleep(0.2)

        job = await ended(started["job_id"])
        assert job["state"] == "finished", job
        # a path outside --allow-dir fails alone, as in import_document (#36)
        outside = (await ok(s, "start_import", file_paths=[str(http.outside / "x.docx")]))["data"]
        refused = await ended(outside["job_id"])
        assert refused["state"] == "failed" and str(http.allowed) in refused["files"][0]["error"]
        assert job["report"]["success_count"] == 3 and job["files_done"] == 3
        assert [f["name"] for f in job["files"]] == [f.name for f in files]
        assert all(f["status"] == "ready" and f["chunks_embedded"] == f["chunks_total"] > 0 for f in job["files"])
        again = await ok(s, "cancel_import", job_id=started["job_id"])  # a job that ended is left as it is
        assert again["data"]["state"] == "finished" and "already finished" in again["message"]
        found["id"] = started["job_id"]

    http.run(http.state["admin"], start)

    async def reader(s: ClientSession) -> None:  # another session, a read token of the job's KB
        assert (await ok(s, "get_import_job", job_id=found["id"]))["data"]["state"] == "finished"
        await tool_error(s, "cancel_import", "PERMISSION_DENIED", job_id=found["id"])

    async def outsider(s: ClientSession) -> None:  # a token of another KB: as if there were no such job
        unknown = await tool_error(s, "get_import_job", "JOB_NOT_FOUND", job_id=found["id"])
        missing = await tool_error(s, "get_import_job", "JOB_NOT_FOUND", job_id="job_" + "0" * 32)
        assert unknown.content[0].text == missing.content[0].text.replace("job_" + "0" * 32, found["id"])

    http.run(http.token([http.state["alpha"]], "read"), reader)
    http.run(http.token([http.state["beta"]], "write"), outsider)


def test_http_rate_limit_answers_32605_with_retry_after(http: HttpServer) -> None:
    limited = http.token(None, "read", rate=3)

    async def scenario(s: ClientSession) -> None:
        await s.list_tools()  # not a tool call: not counted
        for _ in range(3):
            await ok(s, "list_knowledge_bases")
        error = await rpc_error(s, "list_knowledge_bases", -32605)
        assert 3500 <= error.error.data["retry_after_sec"] <= 3600
        await rpc_error(s, "search_knowledge_base", -32605, query="x")

    http.run(limited, scenario)
    http.run(http.state["admin"], lambda s: ok(s, "list_knowledge_bases"))  # other tokens are unaffected


def test_http_eight_concurrent_clients(http: HttpServer) -> None:
    token = http.token(None, "read")
    results: list[str] = []

    async def client(index: int) -> None:
        async def scenario(s: ClientSession) -> None:
            kb = "alpha" if index % 2 else "beta"
            await ok(s, "select_knowledge_base", kb_name=kb)
            for _ in range(3):
                hits = (await ok(s, "search_knowledge_base", query="token 令牌", limit=5))["data"]["hits"]
                assert hits
                documents = (await ok(s, "list_documents"))["data"]["documents"]
                assert documents[0]["name"] == f"{kb}.docx"  # the session kept its own current KB
                await ok(s, "rag_search", keywords=["scope"])
            results.append(kb)

        await http.session(token, scenario)

    async def main() -> None:
        async with anyio.create_task_group() as group:
            for index in range(8):
                group.start_soon(client, index)

    anyio.run(main)
    assert len(results) == 8


def test_http_write_token_imports_a_bundle_from_an_allowed_folder(http: HttpServer) -> None:
    bundle = http.allowed / "bundle.yaml"
    bundle.write_text(
        '- type: Document\n  doc_uri: "kb-notes"\n  content: "Bundles arrive over streamable HTTP as well."\n'
        '- type: Document\n  doc_uri: "kb-笔记"\n  content: "知识包也可以通过 HTTP 导入。"\n'
        '- type: REFERENCES\n  source: { doc_uri: "kb-notes" }\n  target: { doc_uri: "kb-笔记" }\n',
        encoding="utf-8",
    )

    async def scenario(s: ClientSession) -> None:
        await ok(s, "create_knowledge_base", kb_name="bundles", chunk_size=64, embedding_model="hashing")
        await ok(s, "select_knowledge_base", kb_name="bundles")
        imported = await ok(s, "import_knowledge_bundle", temp_file_path=str(bundle))
        assert imported["data"]["stats"]["nodes_upserted"] == 2 and imported["data"]["stats"]["edges_upserted"] == 1
        assert not bundle.exists()
        hits = (await ok(s, "search", query="streamable HTTP bundles", top_k=1, expand_graph=True))["data"]["chunks"]
        assert [h["doc_name"] for h in hits] == ["kb-notes", "kb-笔记"]
        await ok(s, "select_knowledge_base", kb_name="alpha")
        await ok(s, "delete_knowledge_base", kb_name="bundles")

    http.run(http.state["admin"], scenario)
