"""One exception hierarchy for the whole library.

Every failure a user can cause or meet is a :class:`KBError` with a stable
``code`` (for programs) and a message that names the bad value and what is
accepted (for people). Front ends turn these into envelopes, exit codes or
JSON-RPC errors; they never show stack traces.
"""

from __future__ import annotations

from typing import Any


class KBError(Exception):
    """Base class of every error kb_core raises on purpose."""

    code: str = "KB_ERROR"

    def __init__(self, message: str, *, code: str | None = None, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.details: dict[str, Any] = details or {}

    def __str__(self) -> str:
        return self.message


class InvalidArgument(KBError):
    code = "INVALID_ARGUMENT"


class KBNotFound(KBError):
    code = "KB_NOT_FOUND"


class KBExists(KBError):
    code = "KB_EXISTS"


class KBIsCurrent(KBError):
    code = "KB_IS_CURRENT"


class NoCurrentKB(KBError):
    code = "NO_CURRENT_KB"


class DocumentNotFound(KBError):
    code = "DOCUMENT_NOT_FOUND"


class ItemNotFound(KBError):
    code = "ITEM_NOT_FOUND"


class StoreError(KBError):
    """The on-disk store is unreadable or a write could not be completed."""

    code = "STORE_ERROR"


class LockTimeout(StoreError):
    code = "LOCK_TIMEOUT"


class ParseError(KBError):
    """A file could not be turned into text.

    ``code`` is one of: UNSUPPORTED_FORMAT, ENCRYPTED_DOCUMENT, CORRUPT_DOCUMENT,
    EMPTY_DOCUMENT, FILE_TOO_LARGE, PARSE_TIMEOUT, BINARY_FILE, FILE_NOT_FOUND.
    """

    code = "PARSE_ERROR"


class EmbeddingError(KBError):
    """The embedding model or endpoint failed or answered something unusable."""

    code = "EMBEDDING_ERROR"


class PermissionDenied(KBError):
    code = "PERMISSION_DENIED"


class QuotaExceeded(KBError):
    """A public demo's quota per visitor (files, chunks, knowledge bases) would be exceeded."""

    code = "QUOTA_EXCEEDED"


class RateLimited(KBError):
    """Too many calls of one kind in the last minute (a public demo's visitor)."""

    code = "RATE_LIMITED"


class ImportFormatError(KBError):
    """An export file or bundle is malformed, hostile or of an unknown version."""

    code = "INVALID_IMPORT_FILE"


class Cancelled(KBError):
    """Work stopped because someone cancelled it (an import's Cancel, a server shutting down)."""

    code = "IMPORT_CANCELLED"


class JobNotFound(KBError):
    """No import job has this id (or not one this session may see)."""

    code = "JOB_NOT_FOUND"
