"""``kb mcp --http`` under 2,000 idle half-open connections (#37, row 2), started as the README starts it, on a free
loopback port, with the usual limit of 1,024 open files.

Before, connections that never finished their request headers were held for ever with no cap: ~1,100 of them used
up the server's descriptors, every real client then timed out, and each refused accept logged a traceback. Now a
real client's ``tools/list`` still answers, and the log holds a handful of lines about it.
"""

from __future__ import annotations

import contextlib
import os
import resource
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from kb_core.edges.mcp import http_limits
from kb_core.store.tokens import TokenStore
from tests.conftest import REPO_ROOT, free_port

HALF_OPEN = 2_000
PARTIAL_REQUEST = b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"  # never finished


def _usual_open_files_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, str, Path]]:
    home = tmp_path / "home"
    token = TokenStore(home).create(None, "read", 100_000)[0]
    port = free_port()
    log = tmp_path / "server.log"
    with open(log, "wb") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "kb_core.edges.cli", "--home", str(home), "mcp", "--http", "--port", str(port)],
            stdout=output, stderr=subprocess.STDOUT, cwd=REPO_ROOT, preexec_fn=_usual_open_files_limit,
            env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO_ROOT)},
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 90
        while True:
            assert process.poll() is None, log.read_text(encoding="utf-8")
            try:
                httpx.post(url, json={}, timeout=1)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the server did not start"
                time.sleep(0.2)
        yield url, token, log
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextlib.contextmanager
def half_open(url: str, count: int) -> Iterator[list[socket.socket]]:
    """``count`` connections that send part of a request's headers and then nothing."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < count + 512:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, count + 512), hard))
    port = int(url.split(":")[2].split("/")[0])
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                sock.connect(("127.0.0.1", port))
            sockets.append(sock)
        time.sleep(0.5)
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.send(PARTIAL_REQUEST)
        yield sockets
    finally:
        for sock in sockets:
            sock.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _tools_list(url: str, token: str) -> tuple[float, list[str]]:
    """(seconds tools/list took, the tool names), by the MCP SDK's client; the session set up first."""

    async def main() -> tuple[float, list[str]]:
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(30)) as client:  # noqa: SIM117
            async with streamable_http_client(url, http_client=client) as (read, write, _):
                async with ClientSession(read, write) as session:
                    with anyio.fail_after(30):
                        await session.initialize()
                    started = time.monotonic()
                    with anyio.fail_after(2):  # the Done-when of #37
                        tools = await session.list_tools()
                    return time.monotonic() - started, [t.name for t in tools.tools]

    return anyio.run(main)


def test_2000_half_open_connections_neither_stop_a_real_client_nor_flood_the_log(
    server: tuple[str, str, Path],
) -> None:
    url, token, log = server
    before = log.read_text(encoding="utf-8").count("\n")
    with half_open(url, HALF_OPEN):
        seconds, tools = _tools_list(url, token)
        assert "search" in tools and seconds < 2
        print(f"tools/list answered in {seconds:.3f} s with {HALF_OPEN} half-open connections")  # shown with -s
        seconds, tools = _tools_list(url, token)  # and again, the idle sockets still open
        assert "search" in tools
    lines = log.read_text(encoding="utf-8").splitlines()[before:]
    # About the connections: the guard's lines, and asyncio's accept failures (a traceback each, before). A client's
    # disconnect still logs the SDK's ClosedResourceError traceback, which #34 removes: not counted here.
    about = [line for line in lines if "http_limits" in line or "accept" in line or "open files" in line]
    assert 1 <= len(about) <= 5, "\n".join(lines[:40])
    assert "socket.accept" not in "\n".join(lines)  # asyncio's own report, with a traceback each time


def test_the_guard_closes_the_oldest_idle_connection_never_a_busy_one() -> None:
    class Connection:
        def __init__(self, address: str, idle: bool, served: bool = False, new: bool = False) -> None:
            self.client = (address, 1)
            self.idle = idle
            self.served = served
            self.idle_since = time.monotonic() - (0 if new else 10)
            self.closed = False

        def close_idle(self) -> None:
            self.closed = True

    guard = http_limits.ConnectionGuard(max_connections=3, per_client=2)
    admit: Any = guard.admit
    busy, idle = Connection("10.0.0.1", idle=False), Connection("10.0.0.1", idle=True)
    assert admit(busy) and admit(idle)
    newer = Connection("10.0.0.1", idle=True)
    assert admit(newer) and idle.closed and not busy.closed  # the client's cap: its oldest idle one went
    other = Connection("10.0.0.2", idle=False)
    assert admit(other)  # three open: the server's cap
    third = Connection("10.0.0.3", idle=True)
    assert admit(third) and newer.closed and not other.closed  # the oldest idle of any client went
    admit = http_limits.ConnectionGuard(max_connections=2, per_client=2).admit  # a real client, served before
    client = Connection("127.0.0.1", idle=True, served=True)
    flood = [Connection("127.0.0.1", idle=True) for _ in range(5)]
    assert admit(client) and all(admit(sock) for sock in flood)
    assert not client.closed and all(sock.closed for sock in flood[:-1])  # half-open sockets go first
    admit = http_limits.ConnectionGuard(max_connections=2, per_client=2).admit
    just_answered = Connection("127.0.0.1", idle=True, served=True, new=True)  # its next request may be on its way
    assert admit(just_answered) and admit(Connection("127.0.0.1", idle=False))
    assert not admit(Connection("127.0.0.1", idle=True)) and not just_answered.closed  # the newcomer is refused
    admit = http_limits.ConnectionGuard(max_connections=2, per_client=2).admit
    assert admit(Connection("10.0.0.1", idle=False)) and admit(Connection("10.0.0.1", idle=False))
    assert not admit(Connection("10.0.0.1", idle=True))  # every one busy: the new one is refused
    assert http_limits.connection_limit(1024) == 512 and http_limits.connection_limit(1 << 20) == 1024
    per_client = http_limits.ConnectionGuard(max_connections=100, per_client=1)  # loopback: the server's cap only
    assert per_client.admit(Connection("127.0.0.1", idle=False)) and per_client.admit(Connection("::1", idle=False))
    assert per_client.admit(Connection("127.0.0.1", idle=False))
