"""Token store, sliding-window limiter and the ``kb token`` / ``kb mcp`` CLI (in process, no server)."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from kb_core.base.rate_limits import SlidingWindowLimiter
from kb_core.edges.cli.main import main
from kb_core.store.tokens import TokenStore


def run_cli(capsys: pytest.CaptureFixture[str], home: Path, *args: str) -> tuple[int, dict]:
    code = main(["--home", str(home), "--json", *args])
    return code, json.loads(capsys.readouterr().out)


def test_token_create_list_revoke_through_the_cli(capsys: pytest.CaptureFixture[str], home: Path) -> None:
    assert run_cli(capsys, home, "create", "alpha", "--chunk-size", "64", "--embedding-model", "hashing")[0] == 0
    code, created = run_cli(capsys, home, "token", "create", "--scope", "alpha", "--capability", "read", "--rate", "5")
    assert code == 0
    token = created["data"]["token"]
    assert token.startswith("kbt_") and token in created["message"]  # shown once, at creation
    assert created["data"]["scope"] == "alpha" and created["data"]["rate_per_hour"] == 5

    stored = (home / "tokens.json").read_text(encoding="utf-8")
    assert token not in stored  # only the hash is kept
    assert stat.S_IMODE((home / "tokens.json").stat().st_mode) == 0o600

    record = TokenStore(home).verify(token)
    assert record is not None and record.capability == "read" and not record.can_write
    assert TokenStore(home).verify(token + "x") is None
    assert TokenStore(home).verify("not-a-token") is None

    code, listed = run_cli(capsys, home, "token", "list")
    assert code == 0 and listed["data"]["count"] == 1
    assert "token" not in listed["data"]["tokens"][0] and "token_hash" not in listed["data"]["tokens"][0]

    code, revoked = run_cli(capsys, home, "token", "revoke", created["data"]["id"])
    assert code == 0 and revoked["data"]["id"] == created["data"]["id"]
    assert TokenStore(home).verify(token) is None
    code, again = run_cli(capsys, home, "token", "revoke", created["data"]["id"])
    assert code == 1 and again["error"]["code"] == "TOKEN_NOT_FOUND"


def test_token_scope_must_name_existing_knowledge_bases(capsys: pytest.CaptureFixture[str], home: Path) -> None:
    code, envelope = run_cli(capsys, home, "token", "create", "--scope", "missing", "--capability", "write")
    assert code == 1 and envelope["error"]["code"] == "KB_NOT_FOUND"
    code, envelope = run_cli(capsys, home, "token", "create", "--scope", "all", "--capability", "write", "--rate", "0")
    assert code == 1 and envelope["error"]["code"] == "INVALID_ARGUMENT"
    code, envelope = run_cli(capsys, home, "token", "create", "--scope", "all", "--capability", "write")
    assert code == 0 and envelope["data"]["scope"] == "all" and envelope["data"]["rate_per_hour"] == 1000


def test_sliding_window_limiter_reports_when_the_next_call_is_allowed() -> None:
    now = [0.0]
    limiter = SlidingWindowLimiter(window_seconds=100, clock=lambda: now[0])
    assert limiter.acquire("t", 2) is None
    now[0] = 30
    assert limiter.acquire("t", 2) is None
    now[0] = 40
    assert limiter.acquire("t", 2) == 60  # the call at t=0 leaves the window at t=100
    assert limiter.acquire("other", 2) is None  # per key
    now[0] = 100.5
    assert limiter.acquire("t", 2) is None
    assert limiter.acquire("t", 2) == 30  # window now holds t=30 and t=100.5


def test_http_refuses_a_non_loopback_address_without_allow_remote(
    capsys: pytest.CaptureFixture[str], home: Path
) -> None:
    code = main(["--home", str(home), "mcp", "--http", "--host", "0.0.0.0", "--port", "1"])
    assert code == 2
    assert "--allow-remote" in capsys.readouterr().err
