"""A server or command that is told to stop during an import stops within seconds (#34): SIGTERM (what a service
manager sends, and Ctrl-C at a terminal) to ``kb import``, ``kb mcp --http`` and ``kb mcp`` (stdio) cancels the
running import (its parser processes are killed), keeps what was committed, leaves no staging copy, upload or
in-flight file behind, and the home verifies. The app's server (scripts/run.sh's) is stopped the same way in
tests/browser/test_app_jobs_browser.py."""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import anyio
import httpx
import pytest

from kb_core import KnowledgeBaseService
from kb_core.edges.envelopes import Enveloped
from kb_core.store.tokens import TokenStore

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
STOP_SECONDS = 10.0


def environment() -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1",
            "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}


def big_text(path: Path, paragraphs: int = 20_000) -> Path:
    """About 10 MB of text: its parsing and chunking take the parser process many seconds."""
    chooser = random.Random(1)
    words = ["alpha", "beta", "gamma", "delta", "search", "index", "token", "vector", "混合", "检索"]
    path.write_text(
        "\n\n".join(" ".join(chooser.choice(words) for _ in range(80)) + "." for _ in range(paragraphs)),
        encoding="utf-8",
    )
    return path


def prepared(tmp_path: Path) -> tuple[Path, list[str]]:
    home = tmp_path / "home"
    session = Enveloped(KnowledgeBaseService(home).session())
    assert session.create_knowledge_base("kb", 256, embedding_model="hashing")["success"]
    small = tmp_path / "small.txt"
    small.write_text("A small note about hybrid search. 一条关于混合检索的短笔记。", encoding="utf-8")
    assert session.import_document([str(small)], kb_name="kb")["success"]  # committed before: it stays
    return home, [str(big_text(tmp_path / "big.txt"))]


def wait_for_import(home: Path, process: subprocess.Popen[bytes] | subprocess.Popen[str]) -> None:
    """Until the import has begun (its in-flight file is published), then a moment into its parsing."""
    deadline = time.monotonic() + 120
    while not list(home.glob("kbs/*/jobs/*.json")):
        assert process.poll() is None, "the process ended before the import began"
        assert time.monotonic() < deadline, "the import did not begin within 120 s"
        time.sleep(0.05)
    time.sleep(1.0)
    assert process.poll() is None


def terminate(process: subprocess.Popen[bytes] | subprocess.Popen[str]) -> float:
    started = time.monotonic()
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        pytest.fail("the process did not stop within 30 s of SIGTERM")
    return time.monotonic() - started


def assert_clean(home: Path) -> None:
    # looked at first: listing the documents removes the in-flight files of processes that died
    assert list(home.glob("kbs/*/staging/*")) == [] and list(home.glob("kbs/*/jobs/*")) == []
    session = Enveloped(KnowledgeBaseService(home).session())
    documents = session.list_documents("kb")["data"]["documents"]
    assert [(d["name"], d["status"]) for d in documents] == [("small.txt", "ready")]  # the committed prefix only
    assert session.verify()["data"]["problems"] == []


def test_sigterm_cancels_a_running_kb_import(tmp_path: Path) -> None:
    home, files = prepared(tmp_path)
    assert subprocess.run([sys.executable, "-m", "kb_core.edges.cli", "--home", str(home), "select", "kb"],
                          env=environment(), check=False).returncode == 0
    process = subprocess.Popen(
        [sys.executable, "-m", "kb_core.edges.cli", "--home", str(home), "--json", "import", *files],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment(),
    )
    wait_for_import(home, process)
    seconds = terminate(process)
    assert seconds < STOP_SECONDS, f"kb import took {seconds:.1f} s to stop"
    out, err = process.communicate()
    result = json.loads(out)
    assert "cancelled" in result["message"] and "cancelling the import" in err
    assert result["data"]["failed_files"][0]["error"].startswith("cancelled")
    assert_clean(home)


def test_sigterm_stops_kb_mcp_http_during_an_import_job(tmp_path: Path) -> None:
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    home, files = prepared(tmp_path)
    token = TokenStore(home).create(None, "write", 1000)[0]
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = tmp_path / "server.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "kb_core.edges.cli", "--home", str(home), "mcp", "--http", "--port", str(port),
             "--allow-dir", str(tmp_path)],
            stdout=out, stderr=subprocess.STDOUT, env=environment(),
        )
    url = f"http://127.0.0.1:{port}/mcp"
    deadline = time.monotonic() + 60
    while True:
        try:
            httpx.post(url, json={}, timeout=1)
            break
        except httpx.TransportError:
            assert process.poll() is None and time.monotonic() < deadline, log.read_text(encoding="utf-8")
            time.sleep(0.2)

    async def start() -> None:
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as client:  # noqa: SIM117
            async with streamable_http_client(url, http_client=client) as (read, write, _):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    await session.call_tool("select_knowledge_base", {"kb_name": "kb"})
                    started = await session.call_tool("start_import", {"file_paths": files})
                    assert started.structuredContent["data"]["state"] == "running", started.content

    anyio.run(start)  # the client went away: the server's job goes on
    wait_for_import(home, process)
    seconds = terminate(process)
    assert seconds < STOP_SECONDS, f"kb mcp --http took {seconds:.1f} s to stop"
    text = log.read_text(encoding="utf-8")
    assert "cancelled 1 running import(s)" in text
    assert "Traceback" not in text  # a client that disconnects is no error (#34)
    assert_clean(home)


def test_sigterm_stops_kb_mcp_stdio_during_an_import_call(tmp_path: Path) -> None:
    home, files = prepared(tmp_path)
    process = subprocess.Popen(
        [sys.executable, "-m", "kb_core.edges.cli", "--home", str(home), "mcp"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=environment(),
    )
    assert process.stdin is not None and process.stdout is not None

    def send(message: dict[str, object]) -> None:
        process.stdin.write((json.dumps(message) + "\n").encode("utf-8"))  # type: ignore[union-attr]
        process.stdin.flush()  # type: ignore[union-attr]

    send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}})
    assert b'"id":1' in process.stdout.readline()
    send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    send({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
          "params": {"name": "select_knowledge_base", "arguments": {"kb_name": "kb"}}})
    send({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
          "params": {"name": "import_document", "arguments": {"file_paths": files}}})
    wait_for_import(home, process)
    seconds = terminate(process)  # the client still holds the server's stdin open
    assert seconds < STOP_SECONDS, f"kb mcp (stdio) took {seconds:.1f} s to stop"
    assert process.returncode == 128 + signal.SIGTERM
    assert_clean(home)
