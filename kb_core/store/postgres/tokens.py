"""The MCP bearer tokens of a PostgreSQL store, with the interface of the folder store's
:class:`kb_core.store.tokens.TokenStore` (``list``, ``get``, ``create``, ``revoke``, ``verify``).

The records live in the database's ``tokens`` table (only each token's SHA-256, its scope of KB ids, capability
and rate), so a token made by ``kb --store URL token create`` on one host is accepted at once by ``kb mcp --http``
on every host pointed at the same URL, and a revocation on one host refuses it on all of them on the next request.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from kb_core.store.postgres.store import PostgresStore
from kb_core.store.tokens import DEFAULT_RATE_PER_HOUR, TokenRecord

logger = logging.getLogger(__name__)

__all__ = ["PostgresTokenStore"]


class PostgresTokenStore:
    """The tokens of every host sharing one PostgreSQL store (no caching: each call reads the database)."""

    def __init__(self, store: PostgresStore) -> None:
        self.store = store

    def list(self) -> list[TokenRecord]:
        return self.store.tokens()

    def get(self, token_id: str) -> TokenRecord | None:
        return self.store.token(token_id)

    def create(
        self, scope: Sequence[str] | None, capability: str, rate_per_hour: int = DEFAULT_RATE_PER_HOUR
    ) -> tuple[str, TokenRecord]:
        """A new token: returns (the token, to show once; its record). ``scope`` is KB ids or None for all."""
        token, record = self.store.create_token(scope, capability, rate_per_hour)
        logger.info("Created token %s (%s, %s)", record.id, record.capability, "all" if scope is None else "scoped")
        return token, record

    def revoke(self, token_id: str) -> TokenRecord:
        record = self.store.revoke_token(token_id)
        logger.info("Revoked token %s", token_id)
        return record

    def verify(self, token: str) -> TokenRecord | None:
        """The record of a presented token, or None when it is unknown or revoked."""
        return self.store.verify_token(token)
