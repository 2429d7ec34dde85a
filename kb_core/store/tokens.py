"""Bearer tokens for the MCP server's HTTP transport: records, ``new_token`` and the folder store's TokenStore.

Tokens live in ``<home>/tokens.json`` (mode 0600, written atomically). Only a SHA-256 hash of each
token is stored: a token is 256 random bits, so a fast hash is enough (a slow password KDF would
only matter for guessable secrets). The token itself is shown once, when it is created.

A token has a scope (every knowledge base, or a fixed set of KB ids resolved from names at creation),
a capability (``read`` or ``write``) and a rate limit per hour (enforced by :mod:`kb_core.base.rate_limits`).
The PostgreSQL store keeps the same records in its database (:mod:`kb_core.store.postgres.store`).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from kb_core.base.atomic import read_json, write_json_atomically
from kb_core.base.config import DEFAULT_RATE_PER_HOUR
from kb_core.base.errors import InvalidArgument, KBError
from kb_core.base.locking import writer_lock
from kb_core.store.registry import new_id, utc_now

logger = logging.getLogger(__name__)

TOKEN_FILE = "tokens.json"
TOKEN_PREFIX = "kbt_"
CAPABILITIES = ("read", "write")
Capability = Literal["read", "write"]


@dataclass(frozen=True)
class TokenRecord:
    """One stored token (never the token itself)."""

    id: str
    token_hash: str
    scope: frozenset[str] | None  # KB ids; None means every knowledge base
    capability: Capability
    rate_per_hour: int
    created_at: str

    @property
    def can_write(self) -> bool:
        return self.capability == "write"

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "token_hash": self.token_hash,
            "scope": None if self.scope is None else sorted(self.scope),
            "capability": self.capability,
            "rate_per_hour": self.rate_per_hour,
            "created_at": self.created_at,
        }

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> TokenRecord:
        scope = value.get("scope")
        return cls(
            id=str(value["id"]),
            token_hash=str(value["token_hash"]),
            scope=None if scope is None else frozenset(str(s) for s in scope),
            capability="write" if value.get("capability") == "write" else "read",
            rate_per_hour=int(value.get("rate_per_hour", DEFAULT_RATE_PER_HOUR)),
            created_at=str(value.get("created_at", "")),
        )


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_token(
    scope: Sequence[str] | None, capability: str, rate_per_hour: int = DEFAULT_RATE_PER_HOUR
) -> tuple[str, TokenRecord]:
    """A validated new token and its record (only the token's SHA-256 is kept), for any store to save."""
    if capability not in CAPABILITIES:
        raise InvalidArgument(f"capability {capability!r} is not one of: read, write.")
    if isinstance(rate_per_hour, bool) or not isinstance(rate_per_hour, int) or rate_per_hour < 1:
        raise InvalidArgument(f"rate {rate_per_hour!r} must be a whole number of calls per hour, at least 1.")
    if scope is not None and not scope:
        raise InvalidArgument("scope must name at least one knowledge base, or be 'all'.")
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    record = TokenRecord(
        id=new_id("tok"),
        token_hash=hash_token(token),
        scope=None if scope is None else frozenset(scope),
        capability=capability,  # type: ignore[arg-type]
        rate_per_hour=rate_per_hour,
        created_at=utc_now(),
    )
    return token, record


class TokenStore:
    """The tokens of one home. Reads are cached until the file changes, so a running server sees
    tokens created or revoked by ``kb token`` in another process on the next request."""

    def __init__(self, home_root: str | Path) -> None:
        self.root = Path(home_root)
        self.path = self.root / TOKEN_FILE
        self._cache_key: tuple[int, int] | None = None
        self._records: list[TokenRecord] = []
        self._guard = threading.Lock()

    def _lock(self) -> Any:
        self.root.mkdir(parents=True, exist_ok=True)
        return writer_lock(self.root / "tokens.lock")

    def _read(self) -> list[TokenRecord]:
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            return []
        key = (stat.st_mtime_ns, stat.st_size)
        with self._guard:
            if key != self._cache_key:
                try:
                    raw = read_json(self.path)
                    self._records = [TokenRecord.from_json(t) for t in raw.get("tokens", [])]
                except (OSError, ValueError, KeyError, TypeError) as exc:
                    # An unreadable token file must not open the server: no token is valid then.
                    logger.error("Token file %s is unreadable (%s); every token is refused.", self.path, exc)
                    self._records = []
                self._cache_key = key
            return list(self._records)

    def _write(self, records: Sequence[TokenRecord]) -> None:
        write_json_atomically(self.path, {"version": 1, "tokens": [r.to_json() for r in records]}, mode=0o600)

    def list(self) -> list[TokenRecord]:
        return self._read()

    def get(self, token_id: str) -> TokenRecord | None:
        return next((r for r in self._read() if r.id == token_id), None)

    def create(
        self, scope: Sequence[str] | None, capability: str, rate_per_hour: int = DEFAULT_RATE_PER_HOUR
    ) -> tuple[str, TokenRecord]:
        """A new token: returns (the token, to show once; its record). ``scope`` is KB ids or None for all."""
        token, record = new_token(scope, capability, rate_per_hour)
        with self._lock():
            self._write([*self._read(), record])
        logger.info("Created token %s (%s, %s)", record.id, record.capability, "all" if scope is None else "scoped")
        return token, record

    def revoke(self, token_id: str) -> TokenRecord:
        with self._lock():
            records = self._read()
            found = next((r for r in records if r.id == token_id), None)
            if found is None:
                known = ", ".join(r.id for r in records) or "none"
                raise KBError(f"No token with id {token_id!r}. Tokens: {known}.", code="TOKEN_NOT_FOUND")
            self._write([r for r in records if r.id != token_id])
        logger.info("Revoked token %s", token_id)
        return found

    def verify(self, token: str) -> TokenRecord | None:
        """The record of a presented token, or None when it is unknown or revoked."""
        if not isinstance(token, str) or not token.startswith(TOKEN_PREFIX):
            return None
        digest = hash_token(token)
        for record in self._read():
            if hmac.compare_digest(record.token_hash, digest):
                return record
        return None

