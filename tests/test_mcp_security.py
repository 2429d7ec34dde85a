"""Hostile input to the MCP HTTP server: path races against --allow-dir, NUL bytes, Host/Origin checks.

The race tests run the real server (``KBMCPServer`` served by uvicorn on a free loopback port) in this
process and drive it with the SDK's client, so a hook can swap a folder for a symlink at an exact moment:
right after the path was checked, or after the file was opened. The Host/Origin tests start ``kb mcp
--http`` as a subprocess and send real requests with forged headers.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import uvicorn
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import McpError
from mcp.types import INVALID_PARAMS, CallToolResult

from kb_core.edges.cli.main import main
from kb_core.edges.envelopes import Enveloped
from kb_core.edges.mcp import paths as mcp_paths
from kb_core.edges.mcp.server import KBMCPServer
from kb_core.store.tokens import TokenStore
from tests.conftest import REPO_ROOT, free_port
from tests.parser_hooks import copy_then_swap_the_folder

BUNDLE = '- type: Document\n  doc_uri: "{uri}"\n  content: "{content}"\n'


class LiveServer:
    """The HTTP MCP server of this process on a free loopback port, confined to ``allowed``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.home = root / "home"
        self.allowed = root / "allowed"
        self.outside = root / "outside"
        self.allowed.mkdir(parents=True)
        self.outside.mkdir(parents=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.server = KBMCPServer(self.home, http=True, port=self.port, allowed_dirs=[self.allowed])
        self.service = self.server.holder.open()
        self.token = TokenStore(self.home).create(None, "write", 100000)[0]
        config = uvicorn.Config(self.server.http_app(), host="127.0.0.1", port=self.port, log_level="warning")
        self.uvicorn = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.uvicorn.run, name="mcp-http-test", daemon=True)

    def start(self) -> None:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.uvicorn.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the in-process MCP server did not start")
            time.sleep(0.05)

    def stop(self) -> None:
        self.uvicorn.should_exit = True
        self.thread.join(15)

    def run(self, scenario: Callable[[ClientSession], Awaitable[Any]]) -> Any:
        async def main() -> Any:
            headers = {"Authorization": f"Bearer {self.token}"}
            async with httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(60, read=120)) as client:  # noqa: SIM117
                async with streamable_http_client(self.url, http_client=client) as (read, write, _):
                    async with ClientSession(read, write) as session:
                        await session.initialize()
                        return await scenario(session)

        return anyio.run(main)

    def texts(self, kb_name: str) -> str:
        """Every parsed text of the KB (what search can return)."""
        record = self.service.find_kb(kb_name)
        snapshot = self.service.reader(record.id).snapshot()
        parts = []
        for segment in snapshot.segments:
            parts += [segment.text(doc_id) or "" for doc_id in segment.documents["doc_id"]]
        return "\n".join(parts)


@pytest.fixture
def live(tmp_path: Path) -> Iterator[LiveServer]:
    server = LiveServer(tmp_path)
    session = Enveloped(server.service.session())
    assert session.create_knowledge_base("docs", 64, "hashing")["success"]
    server.start()
    try:
        yield server
    finally:
        server.stop()


async def call(session: ClientSession, name: str, **arguments: Any) -> CallToolResult:
    return await session.call_tool(name, arguments)


def swap_for_symlink(folder: Path, target: Path) -> None:
    """What a local attacker does: move the checked folder away and put a symlink to ``target`` in its place."""
    os.rename(folder, folder.with_name(folder.name + "-moved"))
    os.symlink(target, folder, target_is_directory=True)


def run_after(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, action: Callable[[], None]) -> None:
    """Make ``owner.name`` run ``action`` right after its first call returns."""
    original = getattr(owner, name)
    done: list[bool] = []

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        if not done:
            done.append(True)
            action()
        return result

    monkeypatch.setattr(owner, name, wrapper)


def run_before(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, action: Callable[[], None]) -> None:
    original = getattr(owner, name)
    done: list[bool] = []

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not done:
            done.append(True)
            action()
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, wrapper)


# -- item: a folder swapped for a symlink between the check and the use -----------------------------------------
@pytest.mark.parametrize("moment", ["after the path check", "after the file was opened"])
def test_import_document_reads_only_the_file_that_was_checked(
    live: LiveServer, monkeypatch: pytest.MonkeyPatch, moment: str
) -> None:
    import kb_core.engines.parsing

    inbox = live.allowed / "inbox"
    inbox.mkdir()
    (inbox / "report.txt").write_text("harmless quarterly report about apples 苹果", encoding="utf-8")
    (live.outside / "report.txt").write_text("TOPSECRET launch codes 机密文件", encoding="utf-8")
    swap = functools.partial(swap_for_symlink, inbox, live.outside)
    if moment == "after the path check":
        run_after(monkeypatch, mcp_paths, "confine_paths", swap)
    else:  # the parser process opens and copies the file, then the swap (tests/parser_hooks.py)
        real = kb_core.engines.parsing.parse_and_chunk_files

        def swap_after_the_copies(*args: Any, stages: Any = None, **kwargs: Any) -> Any:
            assert stages is not None and all(stages)
            hooked = [functools.partial(copy_then_swap_the_folder, s, str(inbox), str(live.outside)) for s in stages]
            return real(*args, stages=hooked, **kwargs)

        monkeypatch.setattr(kb_core.engines.parsing, "parse_and_chunk_files", swap_after_the_copies)

    async def scenario(s: ClientSession) -> CallToolResult:
        assert not (await call(s, "select_knowledge_base", kb_name="docs")).isError
        imported = await call(s, "import_document", file_paths=[str(inbox / "report.txt")])
        found = await call(s, "search", query="TOPSECRET launch codes 机密文件", top_k=5)
        chunks = found.structuredContent["data"]["chunks"]
        assert all("TOPSECRET" not in c["content"] for c in chunks)
        return imported

    imported = live.run(scenario)
    assert inbox.is_symlink()  # the swap happened
    assert "TOPSECRET" not in live.texts("docs")
    if moment == "after the path check":  # the open finds the file outside and refuses it
        assert imported.isError
        reason = imported.structuredContent["data"]["failed_files"][0]["error"]
        assert "outside" in reason and str(live.allowed) in reason
    else:  # the file was opened before the swap: its content is what was imported
        assert not imported.isError, imported.content[0].text
        assert "harmless quarterly report" in live.texts("docs")


@pytest.mark.parametrize("moment", ["after the path check", "before the delete"])
def test_bundle_import_never_reads_or_deletes_a_file_outside(
    live: LiveServer, monkeypatch: pytest.MonkeyPatch, moment: str
) -> None:
    import kb_core.features.bundles.api

    drop = live.allowed / "drop"
    drop.mkdir()
    (drop / "bundle.yaml").write_text(BUNDLE.format(uri="inside", content="bundled apples"), encoding="utf-8")
    victim = live.outside / "bundle.yaml"
    victim.write_text(BUNDLE.format(uri="outside", content="TOPSECRET bundle"), encoding="utf-8")
    swap = functools.partial(swap_for_symlink, drop, live.outside)
    if moment == "after the path check":
        run_after(monkeypatch, mcp_paths, "confine_path", swap)
    else:
        run_after(monkeypatch, kb_core.features.bundles.api, "_commit_graph", swap)

    async def scenario(s: ClientSession) -> CallToolResult:
        assert not (await call(s, "select_knowledge_base", kb_name="docs")).isError
        return await call(s, "import_knowledge_bundle", temp_file_path=str(drop / "bundle.yaml"))

    result = live.run(scenario)
    assert drop.is_symlink()  # the swap happened
    assert victim.read_text(encoding="utf-8").startswith("- type: Document")  # never deleted
    assert "TOPSECRET" not in live.texts("docs")
    if moment == "after the path check":
        assert result.isError and result.structuredContent["error"]["code"] == "PERMISSION_DENIED"
    else:
        assert not result.isError, result.content[0].text
        assert not (live.allowed / "drop-moved" / "bundle.yaml").exists()  # the checked file was the one deleted


@pytest.mark.parametrize("moment", ["after the path check", "while the file is written"])
def test_export_never_writes_outside_the_allowed_folders(
    live: LiveServer, monkeypatch: pytest.MonkeyPatch, moment: str
) -> None:
    import kb_core.features.transfer.export

    out = live.allowed / "out"
    out.mkdir()
    swap = functools.partial(swap_for_symlink, out, live.outside)
    if moment == "after the path check":
        run_after(monkeypatch, mcp_paths, "confine_path", swap)
    else:
        run_before(monkeypatch, kb_core.features.transfer.export, "_write_export", swap)

    result = live.run(lambda s: call(s, "export_database", export_path=str(out / "backup.kbx")))
    assert out.is_symlink()  # the swap happened
    assert list(live.outside.iterdir()) == []  # nothing written outside, not even a temporary file
    if moment == "after the path check":
        assert result.isError and result.structuredContent["error"]["code"] == "PERMISSION_DENIED"
    else:
        assert not result.isError, result.content[0].text
        assert (live.allowed / "out-moved" / "backup.kbx").stat().st_size > 0
        assert [p.name for p in (live.allowed / "out-moved").iterdir()] == ["backup.kbx"]


def test_import_database_reads_only_the_file_that_was_checked(
    live: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = Enveloped(live.service.session())
    inbox = live.allowed / "inbox"
    inbox.mkdir()
    assert session.export_database(str(inbox / "backup.kbx"))["success"]
    assert session.create_knowledge_base("secret-kb", 64, "hashing")["success"]
    assert session.export_database(str(live.outside / "backup.kbx"), kb_names=["secret-kb"])["success"]
    assert session.delete_knowledge_base("secret-kb")["success"]
    run_after(monkeypatch, mcp_paths, "confine_path", functools.partial(swap_for_symlink, inbox, live.outside))

    result = live.run(lambda s: call(s, "import_database", source_db_path=str(inbox / "backup.kbx")))
    assert inbox.is_symlink()
    assert result.isError and result.structuredContent["error"]["code"] == "PERMISSION_DENIED"
    assert all(not r.name.startswith("secret-kb") for r in live.service.home.knowledge_bases())


# -- item: NUL bytes in paths -----------------------------------------------------------------------------------
NUL_CALLS = [
    ("import_document", {"file_paths": ["/tmp/a\x00b.txt"]}),
    ("export_database", {"export_path": "/tmp/a\x00b.kbx"}),
    ("import_database", {"source_db_path": "/tmp/a\x00b.kbx"}),
    ("import_knowledge_bundle", {"temp_file_path": "/tmp/a\x00b.yaml"}),
]


def nul_calls_inside(folder: Path) -> list[tuple[str, dict[str, Any]]]:
    """The same calls with paths inside ``folder``, so the path check itself meets the NUL byte."""
    inside = str(folder)
    return [
        (
            name,
            {
                k: [p.replace("/tmp", inside) for p in v] if isinstance(v, list) else v.replace("/tmp", inside)
                for k, v in arguments.items()
            },
        )
        for name, arguments in NUL_CALLS
    ]


def test_paths_with_a_nul_byte_are_invalid_params_without_a_trace(
    live: LiveServer, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario(s: ClientSession) -> None:
        assert not (await call(s, "select_knowledge_base", kb_name="docs")).isError
        for name, arguments in NUL_CALLS + nul_calls_inside(live.allowed):
            with pytest.raises(McpError) as caught:
                await s.call_tool(name, arguments)
            assert caught.value.error.code == -32602, (name, caught.value.error)
            assert "NUL" in caught.value.error.message

    with caplog.at_level(logging.DEBUG):
        live.run(scenario)
    traces = [r for r in caplog.records if r.exc_info and r.name.startswith("kb_core")]
    assert not traces, "a NUL byte must not log a stack trace"


def test_stdio_paths_with_a_nul_byte_are_invalid_params(tmp_path: Path) -> None:
    from tests.test_mcp_server import rpc_error, run_stdio

    async def scenario(s: ClientSession) -> None:
        await s.call_tool("create_knowledge_base", {"kb_name": "k", "chunk_size": 64, "embedding_model": "hashing"})
        await s.call_tool("select_knowledge_base", {"kb_name": "k"})
        for name, arguments in NUL_CALLS:
            error = await rpc_error(s, name, -32602, **arguments)
            assert "NUL" in error.error.message

    run_stdio(tmp_path / "home", scenario, tmp_path / "stderr.log")
    assert "Traceback" not in (tmp_path / "stderr.log").read_text(encoding="utf-8")


# -- item: Host/Origin (DNS rebinding) checks on every bind address, and clear errors for bad addresses -------------
def initialize_request(url: str, token: str, host: str | None = None, origin: str | None = None) -> httpx.Response:
    headers = {
        "Authorization": f"Bearer {token}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    if host is not None:
        headers["Host"] = host
    if origin is not None:
        headers["Origin"] = origin
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
    }
    return httpx.post(url, json=body, headers=headers, timeout=10)


def start_cli_server(home: Path, log: Path, *args: str) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "kb_core.edges.cli", "--home", str(home), "mcp", "--http", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=REPO_ROOT,
            env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"},
        )


def wait_listening(process: subprocess.Popen[bytes], url: str, log: Path, seconds: float = 60) -> None:
    """Wait until the HTTP server ``process`` answers at ``url``; its output (in ``log``) if it exits or times out."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"the server exited: {log.read_text(encoding='utf-8')}")
        try:
            httpx.post(url, json={}, timeout=1)
            return
        except httpx.TransportError:
            time.sleep(0.2)
    raise AssertionError(f"the server did not start within {seconds:g} s: {log.read_text(encoding='utf-8')}")


def ipv6_loopback_available() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.parametrize(
    ("bind", "connect"),
    [("127.0.0.2", "127.0.0.2"), ("LOCALHOST", "127.0.0.1"), ("::1", "[::1]"), ("[::1]", "[::1]")],
)
def test_forged_host_and_origin_headers_are_refused_on_every_loopback_address(
    tmp_path: Path, bind: str, connect: str
) -> None:
    if ":" in bind and not ipv6_loopback_available():
        pytest.skip("this machine has no IPv6 loopback")
    home = tmp_path / "home"
    token = TokenStore(home).create(None, "read", 1000)[0]
    port = free_port()
    url = f"http://{connect}:{port}/mcp"
    log = tmp_path / "server.log"
    process = start_cli_server(home, log, "--host", bind, "--port", str(port), "--allowed-host", "KB.example.lan")
    try:
        wait_listening(process, url, log)
        assert initialize_request(url, token).status_code == 200  # the client's own Host header
        assert initialize_request(url, token, host=f"localhost:{port}").status_code == 200
        assert initialize_request(url, token, host=f"kb.example.lan:{port}").status_code == 200
        assert initialize_request(url, token, origin=f"http://{connect}:{port}").status_code == 200
        for forged in (f"attacker.example:{port}", "attacker.example", f"127.0.0.1.attacker.example:{port}"):
            assert initialize_request(url, token, host=forged).status_code == 421, forged
        for forged in (f"http://attacker.example:{port}", "http://attacker.example", "null"):
            assert initialize_request(url, token, origin=forged).status_code == 403, forged
    finally:
        process.kill()
        process.wait()
    assert "Traceback" not in log.read_text(encoding="utf-8")


@pytest.mark.timeout(60)  # the old code served forever on port 0
@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--port", "99999"], "--port must be"),
        (["--port", "0"], "--port must be"),
        (["--port", "-1"], "--port must be"),
        (["--host", "[::1"], "not a valid"),
        (["--host", "no-such-host.invalid"], "cannot listen"),
    ],
)
def test_bad_addresses_give_a_clear_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, args: list[str], expected: str
) -> None:
    code = main(["--home", str(tmp_path / "home"), "mcp", "--http", *args])
    err = capsys.readouterr().err
    assert code == 2 and expected.lower() in err.lower() and "Traceback" not in err, err


def test_a_port_in_use_gives_a_clear_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = main(["--home", str(tmp_path / "home"), "mcp", "--http", "--port", str(port)])
    err = capsys.readouterr().err
    assert code == 1 and "in use" in err and "Traceback" not in err, err


# -- item: the token store is read off the event loop (a database query on PostgreSQL) -----------------------------
def test_a_tool_call_reads_the_token_store_off_the_event_loop_once_per_request(
    live: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[str] = []
    for name in ("verify", "get"):
        original = getattr(TokenStore, name)

        def recorded(self: TokenStore, *args: Any, _original: Any = original, _name: str = name) -> Any:
            reads.append(f"{_name} on {threading.current_thread().name}")
            return _original(self, *args)

        monkeypatch.setattr(TokenStore, name, recorded)

    async def scenario(session: ClientSession) -> None:
        reads.clear()  # the session's own set-up requests are not tool calls
        listed = await call(session, "list_knowledge_bases")
        assert not listed.isError and "docs" in listed.content[0].text

    live.run(scenario)
    # One bearer verification for the tool call's request, in a worker thread: the event loop (the server's
    # thread) never waits on the store, and the tool does not read the token a second time.
    assert reads and all(read.startswith("verify") for read in reads), reads
    assert not any(read.endswith(live.thread.name) for read in reads), reads


# -- arguments no JSON-RPC request may carry: NaN/Infinity numbers, lone surrogates --------------------------------
def _request(number: int, tool: str, arguments: str) -> str:
    """A tools/call request written by hand: NaN, Infinity and \\ud800 escapes are what a client library won't send."""
    params = f'{{"name":"{tool}","arguments":{arguments}}}'
    return f'{{"jsonrpc":"2.0","id":{number},"method":"tools/call","params":{params}}}'


def hostile_calls(folder: Path) -> list[tuple[str, str, str]]:
    """(tool, arguments as JSON text, the field the refusal must name)."""
    return [
        ("search", '{"query":"apples","vector_weight":NaN}', "vector_weight"),
        ("search", '{"query":"apples","keyword_weight":Infinity}', "keyword_weight"),
        ("search", '{"query":"apples","vector_weight":-Infinity}', "vector_weight"),
        ("search", '{"query":"apples","vector_weight":1e999}', "vector_weight"),
        ("rag_search", '{"keywords":["apples"],"timeout":NaN}', "timeout"),
        ("select_knowledge_base", '{"kb_name":"docs\\ud800"}', "kb_name"),
        ("delete_document", '{"doc_name":"\\udc00.txt"}', "doc_name"),
        ("import_document", f'{{"file_paths":["{folder}/\\ud83d.txt"]}}', "file_paths.0"),
        ("search", '{"query":"\\ud800 apples"}', "query"),
    ]


def assert_invalid_params(answer: dict[str, Any], field: str) -> None:
    assert answer.get("error", {}).get("code") == -32602, answer
    message = answer["error"]["message"]
    assert f"{field}: " in message and ("not a finite number" in message or "lone surrogate" in message), message
    assert "Traceback" not in message


def test_nan_infinity_and_lone_surrogates_are_invalid_params_over_http(live: LiveServer) -> None:
    """A NaN weight was once silently replaced by the default; a surrogate got error code 0 or no answer."""
    headers = {"Authorization": f"Bearer {live.token}", "Accept": "application/json, text/event-stream",
               "Content-Type": "application/json"}  # fmt: skip
    with httpx.Client(headers=headers, timeout=30) as client:
        hello = {"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}
        opened = client.post(live.url, json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello})
        client.headers["mcp-session-id"] = opened.headers["mcp-session-id"]
        client.post(live.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
        for number, (tool, arguments, field) in enumerate(hostile_calls(live.allowed), start=1):
            reply = client.post(live.url, content=_request(number, tool, arguments))
            data = [line[5:] for line in reply.text.splitlines() if line.startswith("data:")]
            assert data, reply.text
            assert_invalid_params(json.loads(data[-1]), field)


def test_nan_infinity_and_lone_surrogates_are_invalid_params_over_stdio(tmp_path: Path) -> None:
    import select

    from tests.test_mcp_server import server_env

    process = subprocess.Popen(
        [sys.executable, "-m", "kb_core.edges.cli", "--home", str(tmp_path / "home"), "mcp"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=REPO_ROOT, env=server_env(),
    )  # fmt: skip
    assert process.stdin is not None and process.stdout is not None

    def answer(line: str, number: int) -> dict[str, Any]:
        process.stdin.write(line.encode("utf-8") + b"\n")  # type: ignore[union-attr]
        process.stdin.flush()  # type: ignore[union-attr]
        while True:
            ready, _, _ = select.select([process.stdout], [], [], 60)
            assert ready, f"no answer to {line}"
            message = json.loads(process.stdout.readline())  # type: ignore[union-attr]
            if message.get("id") == number:
                return message

    try:
        hello = {"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}
        answer(json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello}), 0)
        process.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        for number, (tool, arguments, field) in enumerate(hostile_calls(tmp_path), start=1):
            assert_invalid_params(answer(_request(number, tool, arguments), number), field)
    finally:
        process.kill()
        process.wait()


def test_an_embedding_model_path_is_confined_like_any_path(live: LiveServer, tmp_path: Path) -> None:
    """A write token once learned whether a server path exists from the error of a model path outside --allow-dir."""
    models = live.allowed / "models" / "mine"
    models.mkdir(parents=True)
    (models / "config.json").write_text("{}", encoding="utf-8")  # a model folder (#25 refuses what is not one)

    async def scenario(s: ClientSession) -> tuple[list[CallToolResult], McpError]:
        answers = []
        for number, model in enumerate(["/etc", "/no/such/folder", "~/.ssh", "../outside", str(live.outside), models]):
            answers.append(await call(s, "create_knowledge_base", kb_name=f"m{number}", chunk_size=64,
                                      embedding_model=str(model)))  # fmt: skip
        with pytest.raises(McpError) as hub:
            await call(s, "create_knowledge_base", kb_name="hub", chunk_size=64, embedding_model="org/model")
        return answers, hub.value

    answers, hub = live.run(scenario)
    *refused, inside = answers
    for answer in refused:
        assert answer.isError and answer.structuredContent["error"]["code"] == "PERMISSION_DENIED", answer
        assert "outside the folders" in answer.structuredContent["message"]
    assert not inside.isError
    # A hub name is no path: not confined, but refused as invalid parameters, a model not available offline (#25).
    assert hub.error.code == INVALID_PARAMS and hub.error.data["code"] == "INVALID_ARGUMENT", hub.error
    assert "Available offline" in hub.error.message
    names = {r.name for r in live.service.store.knowledge_bases()}
    assert "m5" in names and not names & {"hub", *(f"m{n}" for n in range(5))}


def test_export_never_tells_a_scoped_token_where_the_home_is(live: LiveServer) -> None:
    kb_id = live.service.find_kb("docs").id
    live.token = TokenStore(live.home).create([kb_id], "write", 1000)[0]
    target = live.allowed / "docs.kbx"

    async def scenario(s: ClientSession) -> CallToolResult:
        return await call(s, "export_database", export_path=str(target))

    result = live.run(scenario)
    assert not result.isError and target.is_file(), result.content[0].text
    shown = result.model_dump_json()
    assert str(live.home) not in shown and str(live.service.home.root) not in shown, shown


# -- no coercion where the service has none (#37 row 15) -----------------------------------------------------------
COERCED = [
    ("search", {"query": "apples", "min_score": True}, "min_score"),
    ("search", {"query": "apples", "min_score": "0.5"}, "min_score"),
    ("search", {"query": "apples", "top_k": "5"}, "top_k"),
    ("search", {"query": "apples", "vector_weight": False}, "vector_weight"),
    ("search", {"query": "apples", "language_guard": "false"}, "language_guard"),
    ("rag_search", {"keywords": ["apples"], "min_score": True}, "min_score"),
    ("rag_search", {"keywords": ["apples"], "top_k": True}, "top_k"),
    ("search_knowledge_base", {"query": "apples", "min_score": True}, "min_score"),
    ("search_knowledge_base", {"query": "apples", "limit": "3"}, "limit"),
    ("import_document", {"file_paths": '["/tmp/a.txt"]'}, "file_paths"),
]


def test_booleans_and_strings_are_not_coerced_to_numbers(live: LiveServer) -> None:
    """``min_score: true`` once ran as 1.0 and hid every hit, while the service and the CLI refuse a boolean."""

    async def scenario(session: ClientSession) -> list[tuple[str, Any]]:
        await call(session, "select_knowledge_base", kb_name="docs")
        answers = []
        for tool, arguments, field in COERCED:
            try:
                result = await session.call_tool(tool, arguments)
            except McpError as exc:
                answers.append((field, exc.error))
            else:
                answers.append((field, result))
        return answers

    for (tool, arguments, _), (field, answer) in zip(COERCED, live.run(scenario), strict=True):
        assert not isinstance(answer, CallToolResult), f"{tool} {arguments} ran: {answer.content}"
        assert answer.code == INVALID_PARAMS and f"{field}: " in answer.message, (tool, arguments, answer.message)
