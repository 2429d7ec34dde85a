"""An embedding endpoint that echoes the API key in its error bodies and reason phrases, altered, must not leak it.

A real HTTP server on loopback plays a careless OpenAI-compatible endpoint: it embeds ordinary texts, and for
inputs starting with ``fail-`` answers an error whose body and HTTP reason phrase echo the bearer key raw,
JSON-escaped (``\\/``), URL-encoded, base64-encoded, masked to a prefix, padded so that a 300-character cut keeps
only part of it, upper-cased, spaced out, base32-encoded, fully ``\\u``-escaped or as colon-separated hex. No
scrubber can list every transformation, so no text the server chose reaches any message or log line. The key
must appear in no form in CLI output (errors and WARNING logs, printed without ``-v``; with ``-v`` httpx's own
request lines too), in log records at any level, or in what an MCP client with a read token scoped to that KB
gets from ``search`` and ``search_knowledge_base``. The key can also be given without the command line:
``KB_EMBEDDING_API_KEY`` and ``--embedding-api-key-stdin``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar
from urllib.parse import quote, quote_plus

import numpy as np
import pytest
from mcp import ClientSession

from kb_core import KnowledgeBaseService
from kb_core.edges.envelopes import Enveloped
from kb_core.features.results import SearchRequest
from tests.conftest import REPO_ROOT

KEY = "sk-RT/9f+Qz=Lk&x%2F-4c1d8e7f0a9b2c3d4e5f6a7b8c9d0e1f"
DIMENSION = 8


def echoes(key: str) -> dict[str, str]:
    """Error bodies of careless servers, each echoing the key in one form."""
    return {
        "raw": json.dumps({"error": {"message": f"Incorrect API key provided: {key}"}}),
        "json-escaped": '{"error":{"message":"Incorrect API key provided: ' + key.replace("/", "\\/") + '"}}',
        "url-encoded": f"invalid credentials for https://api.example/v1?api_key={quote(key, safe='')}&x=1",
        "form-encoded": f"key={quote_plus(key)}",
        "base64": "auth header was " + base64.b64encode(f"Bearer {key}".encode()).decode(),
        "masked": f"Incorrect API key provided: {key[:12]}****************{key[-4:]}",
        "cut-at-300": "x" * 280 + key,
        "upper-cased": f"INCORRECT API KEY: {key.upper()}",
        "spaced": " ".join(key),
        "base32": base64.b32encode(key.encode()).decode(),
        "u-escaped": "".join(f"\\u{ord(c):04x}" for c in key),
        "colon-hex": ":".join(f"{b:02x}" for b in key.encode()),
    }


def forms(key: str) -> list[str]:
    """Every form the tests look for: the encodings above and the key itself."""
    raw = key.encode()
    return [
        key,
        key.replace("/", "\\/"),
        quote(key, safe=""),
        quote_plus(key),
        base64.b64encode(raw).decode(),
        base64.b64encode(f"Bearer {key}".encode()).decode()[12:],
        key.upper(),
        " ".join(key),
        base64.b32encode(raw).decode(),
        "".join(f"\\u{ord(c):04x}" for c in key),
        ":".join(f"{b:02x}" for b in raw),
    ]


def leaks(text: str, key: str = KEY) -> list[str]:
    """The pieces of ``text`` of 8 or more characters taken from the key in any of its forms."""
    found = []
    for form in forms(key):
        for start in range(len(form) - 7):
            piece = form[start : start + 8]
            if piece in text:
                found.append(piece)
    return found


class CarelessEndpoint(BaseHTTPRequestHandler):
    """POST /v1/embeddings. ``fail-<status>-<echo>`` answers that status with that echo as body and reason phrase;
    ``fail-retry-<echo> N`` answers 503 the first time that exact text comes and 400 after, so a retry (and its
    WARNING) happens quickly."""

    seen: ClassVar[dict[str, int]] = {}
    authorizations: ClassVar[list[str]] = []

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        inputs = json.loads(self.rfile.read(length))["input"]
        authorization = self.headers.get("Authorization") or ""
        CarelessEndpoint.authorizations.append(authorization)
        key = authorization.removeprefix("Bearer ")
        failing = next((text for text in inputs if text.startswith("fail-")), None)
        if failing is None:
            vectors = [self.vector(text) for text in inputs]
            body = {"object": "list", "data": [{"index": i, "embedding": v} for i, v in enumerate(vectors)]}
            self.answer(200, json.dumps(body))
            return
        _, status, echo = failing.split()[0].split("-", 2)
        if status == "retry":
            count = CarelessEndpoint.seen[failing] = CarelessEndpoint.seen.get(failing, 0) + 1
            status = "503" if count == 1 else "400"
        self.answer(int(status), echoes(key)[echo], reason=echoes(key)[echo])

    @staticmethod
    def vector(text: str) -> list[float]:
        digest = hashlib.sha256(text.encode("utf-8")).digest()
        return (np.frombuffer(digest[:DIMENSION], dtype=np.uint8).astype(float) + 1.0).tolist()

    def answer(self, status: int, body: str, reason: str | None = None) -> None:
        data = body.encode("utf-8")
        self.send_response(status, reason)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), CarelessEndpoint)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def keyed_home(tmp_path: Path, endpoint: str) -> Path:
    """A home with the endpoint KB "remote" (key KEY, one imported document) and a hashing KB "other"."""
    home = tmp_path / "home"
    session = Enveloped(KnowledgeBaseService(home).session())
    created = session.create_knowledge_base("remote", 64, "e", endpoint, KEY)
    assert created["success"], created
    (tmp_path / "notes.txt").write_text("ordinary notes about apples and pears", encoding="utf-8")
    assert session.import_document([str(tmp_path / "notes.txt")], kb_name="remote")["success"]
    assert session.create_knowledge_base("other", 64, "hashing")["success"]
    return home


def run_cli(home: Path, *args: str, env: dict[str, str] | None = None, stdin: str = "") -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k != "KB_EMBEDDING_API_KEY"}
    environment.update({"HF_HUB_OFFLINE": "1", **(env or {})})
    return subprocess.run(
        [sys.executable, "-m", "kb_core.edges.cli", "--home", str(home), *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env=environment,
        timeout=120,
    )


ECHOES = list(echoes(KEY))


@pytest.mark.parametrize("echo", ECHOES)
def test_service_errors_and_logs_never_carry_the_key(
    keyed_home: Path, echo: str, caplog: pytest.LogCaptureFixture
) -> None:
    session = Enveloped(KnowledgeBaseService(keyed_home).session())
    assert session.select_knowledge_base("remote")["success"]
    # httpx's own logger at INFO whatever an earlier in-process `kb` set it to: its request lines are checked too
    with caplog.at_level(logging.DEBUG), caplog.at_level(logging.INFO, logger="httpx"):
        for status in ("400", "401", "retry"):
            result = session.search(SearchRequest(f"fail-{status}-{echo} service", mode="semantic"))
            assert not result["success"] and result["error"]["code"].startswith("EMBEDDING")
            assert "HTTP" in result["message"]  # the status is reported
            assert leaks(json.dumps(result, ensure_ascii=False)) == [], result
    # httpcore's DEBUG trace prints the raw wire (reason phrase included): a library user who turns it on asks for
    # exactly that, and the front ends keep it at WARNING (kb_core.edges.cli.main.HTTP_CLIENT_LOGGERS). httpx's INFO
    # request line is checked: the reason phrase is dropped before httpx sees the response.
    records = [r for r in caplog.records if not r.name.startswith("httpcore")]
    logged = "\n".join(record.getMessage() for record in records)
    assert "503" in logged and "HTTP Request" in logged  # the retry and httpx's own request lines were logged
    assert leaks(logged) == [], logged


@pytest.mark.parametrize("echo", ["cut-at-300", "upper-cased"])
def test_cli_output_never_carries_the_key(keyed_home: Path, echo: str) -> None:
    assert run_cli(keyed_home, "select", "remote").returncode == 0
    for status in ("400", "retry"):
        done = run_cli(keyed_home, "search", f"fail-{status}-{echo} cli", "--mode", "semantic")
        assert done.returncode == 1 and "error:" in done.stderr
        assert leaks(done.stdout + done.stderr) == [], done.stderr
    assert "WARNING" in done.stderr  # the retry is logged without -v
    verbose = run_cli(keyed_home, "-v", "search", f"fail-retry-{echo} cli -v", "--mode", "semantic")
    assert "WARNING" in verbose.stderr and leaks(verbose.stdout + verbose.stderr) == [], verbose.stderr


def test_mcp_read_token_scoped_to_the_kb_never_sees_the_key(keyed_home: Path, tmp_path: Path) -> None:
    from tests.test_mcp_server import HttpServer

    server = HttpServer(tmp_path)  # its home is tmp_path / "home": keyed_home
    service = KnowledgeBaseService(keyed_home)
    reader = server.token(sorted([service.find_kb("remote").id]), "read")
    process = server.start()

    async def scenario(s: ClientSession) -> list[str]:
        seen = []
        assert not (await s.call_tool("select_knowledge_base", {"kb_name": "remote"})).isError
        for echo in ECHOES:
            for name, arguments in (
                ("search", {"query": f"fail-400-{echo}"}),
                ("search", {"query": f"fail-401-{echo}"}),
                ("search_knowledge_base", {"query": f"fail-400-{echo}", "mode": "semantic"}),
                ("search_knowledge_base", {"query": f"fail-401-{echo}"}),
            ):
                try:
                    result = await s.call_tool(name, arguments)
                    seen.append(result.model_dump_json())
                except Exception as exc:  # a JSON-RPC error is a fine answer too, if it hides the key
                    seen.append(repr(exc))
        return seen

    try:
        answers = server.run(reader, scenario)
    finally:
        process.kill()
        process.wait()
        server.log.close()
    assert answers and all(leaks(answer) == [] for answer in answers), [a for a in answers if leaks(a)][:1]
    assert leaks((server.root / "server.log").read_text(encoding="utf-8")) == []


# -- giving the key without the command line ----------------------------------------------------------------------
def test_key_from_the_environment(tmp_path: Path, endpoint: str) -> None:
    home = tmp_path / "home"
    other = "sk-env-0123456789abcdef"
    created = run_cli(
        home, "create", "env", "--chunk-size", "64", "--embedding-endpoint", endpoint, "--embedding-model", "e",
        env={"KB_EMBEDDING_API_KEY": other},
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    assert other not in created.stdout + created.stderr
    record = KnowledgeBaseService(home).find_kb("env")
    assert record.has_api_key and KnowledgeBaseService(home).home.api_key(record.id) == other
    # without an endpoint the variable is not a key for this KB (and not an error)
    plain = run_cli(home, "create", "plain", "--chunk-size", "64", "--embedding-model", "hashing",
                    env={"KB_EMBEDDING_API_KEY": other})  # fmt: skip
    assert plain.returncode == 0, plain.stderr
    assert not KnowledgeBaseService(home).find_kb("plain").has_api_key


def test_key_from_stdin(tmp_path: Path, endpoint: str) -> None:
    home = tmp_path / "home"
    secret = "sk-stdin-0123456789abcdef"
    created = run_cli(
        home, "create", "piped", "--chunk-size", "64", "--embedding-endpoint", endpoint, "--embedding-model", "e",
        "--embedding-api-key-stdin", stdin=secret + "\n",
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    assert secret not in created.stdout + created.stderr
    service = KnowledgeBaseService(home)
    record = service.find_kb("piped")
    assert service.home.api_key(record.id) == secret
    session = Enveloped(service.session())
    assert session.select_knowledge_base("piped")["success"]
    CarelessEndpoint.authorizations.clear()
    (tmp_path / "a.txt").write_text("pears and apples", encoding="utf-8")
    assert session.import_document([str(tmp_path / "a.txt")])["success"]
    assert CarelessEndpoint.authorizations and set(CarelessEndpoint.authorizations) == {f"Bearer {secret}"}
    empty = run_cli(
        home, "create", "nothing", "--chunk-size", "64", "--embedding-endpoint", endpoint, "--embedding-model", "e",
        "--embedding-api-key-stdin", stdin="",
    )  # fmt: skip
    assert empty.returncode == 2 and "no API key" in empty.stderr


def test_a_key_on_the_command_line_works_with_a_note(tmp_path: Path, endpoint: str) -> None:
    home = tmp_path / "home"
    done = run_cli(home, "create", "argv", "--chunk-size", "64", "--embedding-endpoint", endpoint,
                   "--embedding-model", "e", "--embedding-api-key", "sk-argv-0123456789")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "KB_EMBEDDING_API_KEY" in done.stderr and "sk-argv-0123456789" not in done.stdout + done.stderr


# -- a password in the endpoint's URL (#37 row 11) -----------------------------------------------------------------
PASSWORD = "pw-9f+Qz=Lk-5e6d7c8b"


def test_a_password_in_the_endpoint_url_is_never_shown(
    tmp_path: Path, endpoint: str, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """``https://user:PASSWORD@proxy/v1`` (basic authentication in front of the server) goes through the same
    redaction as a PostgreSQL URL: listings, errors, logs, the analysts' table and exports show ``***``; the
    requests still carry it."""
    import zipfile

    from kb_core.edges.cli.main import main

    caplog.set_level(logging.DEBUG)
    secret_url = endpoint.replace("http://", f"http://proxy-user:{quote(PASSWORD, safe='')}@")
    home = tmp_path / "home"
    session = Enveloped(KnowledgeBaseService(home).session())
    shown: list[str] = []
    shown.append(json.dumps(session.create_knowledge_base("remote", 64, "e", secret_url)))
    (tmp_path / "notes.txt").write_text("ordinary notes about apples and pears", encoding="utf-8")
    CarelessEndpoint.authorizations.clear()
    shown.append(json.dumps(session.import_document([str(tmp_path / "notes.txt")], kb_name="remote")))
    basic = [a for a in CarelessEndpoint.authorizations if a.startswith("Basic ")]
    assert basic and base64.b64decode(basic[0][6:]).decode() == f"proxy-user:{PASSWORD}"  # still sent, in a header

    listed = session.list_knowledge_bases()
    shown.append(json.dumps(listed))
    assert listed["data"]["knowledge_bases"][0]["embedding_endpoint"].startswith("http://proxy-user:***@")
    session.select_knowledge_base("remote")
    # an endpoint error names the endpoint
    shown.append(json.dumps(session.search(SearchRequest("fail-401-raw apples"))))
    shown.append(json.dumps(session.search(SearchRequest("fail-400-raw apples"))))
    assert main(["--home", str(home), "--json", "list"]) == 0
    assert main(["--home", str(home), "-v", "info"]) in (0, 1)
    export = tmp_path / "backup.kbx"
    assert session.export_database(str(export))["success"]
    with zipfile.ZipFile(export) as archive:
        shown.append(archive.read("manifest.json").decode("utf-8"))
    shown.append((home / "knowledge_bases.parquet").read_bytes().decode("latin-1"))
    captured = capsys.readouterr()
    shown += [captured.out, captured.err, *(r.getMessage() for r in caplog.records)]
    everything = "\n".join(shown)
    for form in (PASSWORD, quote(PASSWORD, safe="")):
        assert form not in everything
    assert "proxy-user:***@" in everything
