"""Checks on user input. Each failure names the bad value and says what is accepted."""

from __future__ import annotations

import math
import unicodedata
from urllib.parse import urlparse

from kb_core.errors import InvalidArgument

KB_NAME_MAX_LENGTH = 64
CHUNK_SIZE_MIN = 32
CHUNK_SIZE_MAX = 8192
FORBIDDEN_NAME_CHARACTERS = frozenset("/\\")


def normalize_name(name: str) -> str:
    return unicodedata.normalize("NFC", name).strip()


def name_key(name: str) -> str:
    """Names compare case-insensitively after NFC normalisation."""
    return unicodedata.normalize("NFC", normalize_name(name).casefold())


def validate_kb_name(name: object) -> str:
    if not isinstance(name, str):
        raise InvalidArgument(f"kb_name must be a string, got {type(name).__name__}.", details={"field": "kb_name"})
    value = normalize_name(name)
    if not value:
        raise InvalidArgument("kb_name must not be empty: give 1 to 64 characters.", details={"field": "kb_name"})
    if len(value) > KB_NAME_MAX_LENGTH:
        raise InvalidArgument(
            f"kb_name '{value[:20]}…' has {len(value)} characters; at most {KB_NAME_MAX_LENGTH} are allowed.",
            details={"field": "kb_name"},
        )
    bad = sorted({c for c in value if c in FORBIDDEN_NAME_CHARACTERS or unicodedata.category(c) in ("Cc", "Cf")})
    if bad:
        shown = ", ".join(repr(c) for c in bad)
        raise InvalidArgument(
            f"kb_name {value!r} contains {shown}; path separators and control characters are not allowed.",
            details={"field": "kb_name"},
        )
    if value in (".", ".."):
        raise InvalidArgument(f"kb_name {value!r} is reserved; choose another name.", details={"field": "kb_name"})
    return value


def validate_chunk_size(chunk_size: object, field: str = "chunk_size") -> int:
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int | float | str):
        raise InvalidArgument(
            f"{field} must be a whole number of tokens from {CHUNK_SIZE_MIN} to {CHUNK_SIZE_MAX}, got {chunk_size!r}.",
            details={"field": field},
        )
    try:
        value = float(chunk_size)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value != int(value) or not CHUNK_SIZE_MIN <= value <= CHUNK_SIZE_MAX:
        raise InvalidArgument(
            f"{field} must be a whole number of tokens from {CHUNK_SIZE_MIN} to {CHUNK_SIZE_MAX}, got {chunk_size!r}.",
            details={"field": field},
        )
    return int(value)


def validate_endpoint(endpoint: object) -> str | None:
    if endpoint is None or endpoint == "":
        return None
    if not isinstance(endpoint, str):
        raise InvalidArgument("embedding_endpoint must be a URL string.", details={"field": "embedding_endpoint"})
    parsed = urlparse(endpoint.strip())
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise InvalidArgument(
            f"embedding_endpoint {endpoint!r} is not an http(s) URL; give e.g. http://127.0.0.1:8000/v1.",
            details={"field": "embedding_endpoint"},
        )
    return endpoint.strip().rstrip("/")


def validate_nonempty_text(value: object, field: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidArgument(f"{field} must be a non-empty string.", details={"field": field})
    return value


def validate_int_range(value: object, field: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(
            f"{field} must be an integer from {low} to {high}, got {value!r}.", details={"field": field}
        )
    if not low <= value <= high:
        raise InvalidArgument(f"{field} must be from {low} to {high}, got {value}.", details={"field": field})
    return value


def validate_float_range(value: object, field: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(float(value)):
        raise InvalidArgument(
            f"{field} must be a number from {low} to {high}, got {value!r}.", details={"field": field}
        )
    if not low <= float(value) <= high:
        raise InvalidArgument(f"{field} must be from {low} to {high}, got {value}.", details={"field": field})
    return float(value)
