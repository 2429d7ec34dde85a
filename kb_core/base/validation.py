"""Checks on user input. Each failure names the bad value and says what is accepted."""

from __future__ import annotations

import ipaddress
import math
import re
import unicodedata
from collections.abc import Sequence
from urllib.parse import urlparse

from kb_core.base.errors import InvalidArgument
from kb_core.base.i18n import msg
from kb_core.base.redaction import redact_url

KB_NAME_MAX_LENGTH = 64
CHUNK_SIZE_MIN = 32
CHUNK_SIZE_MAX = 8192
FORBIDDEN_NAME_CHARACTERS = frozenset("/\\")
# A query's cost grows with its length: the local model embeds every 256-token window of it (a 1 MB Chinese query
# took 26-29 s of CPU). 4,000 characters is about two pages of English (or 16 windows of Chinese), more than any
# query people type or paste (long argument-style BEIR queries are about 1,000). rag_search joins its keywords into
# one query: 32 keywords of at most 100 characters stay under the query limit.
QUERY_MAX_CHARS = 4_000
RAG_MAX_KEYWORDS = 32
RAG_KEYWORD_MAX_CHARS = 100
# Every id this program makes (kb_, doc_, chk_, node_, edge_ ...) has this shape: anything else cannot exist, so it
# is not looked up at all (a NUL byte cannot even reach PostgreSQL).
ITEM_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def has_lone_surrogate(text: str) -> bool:
    """Whether ``text`` holds a lone surrogate: what a JSON ``\\ud800`` escape or a mis-decoded path gives, and no
    UTF-8 encoder can write."""
    return _LONE_SURROGATE.search(text) is not None


def normalize_name(name: str) -> str:
    return unicodedata.normalize("NFC", name).strip()


def name_key(name: str) -> str:
    """Names compare case-insensitively after NFC normalisation."""
    return unicodedata.normalize("NFC", normalize_name(name).casefold())


def validate_kb_name(name: object) -> str:
    if not isinstance(name, str):
        raise InvalidArgument(
            msg("kb_name must be a string, got {kind}.", kind=type(name).__name__), details={"field": "kb_name"}
        )
    value = normalize_name(name)
    if not value:
        raise InvalidArgument(msg("kb_name must not be empty: give 1 to 64 characters."), details={"field": "kb_name"})
    if len(value) > KB_NAME_MAX_LENGTH:
        raise InvalidArgument(
            msg(
                "kb_name '{start}…' has {length} characters; at most {most} are allowed.",
                start=value[:20], length=len(value), most=KB_NAME_MAX_LENGTH,
            ),
            details={"field": "kb_name"},
        )
    reject_undecodable(value, "kb_name")
    bad = sorted({c for c in value if c in FORBIDDEN_NAME_CHARACTERS or unicodedata.category(c) in ("Cc", "Cf")})
    if bad:
        shown = ", ".join(repr(c) for c in bad)
        raise InvalidArgument(
            msg(
                "kb_name {value!r} contains {shown}; path separators and control characters are not allowed.",
                value=value, shown=shown,
            ),
            details={"field": "kb_name"},
        )
    if value in (".", ".."):
        raise InvalidArgument(
            msg("kb_name {value!r} is reserved; choose another name.", value=value), details={"field": "kb_name"}
        )
    return value


def validate_chunk_size(chunk_size: object, field: str = "chunk_size") -> int:
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int | float | str):
        raise InvalidArgument(
            msg(
                "{field} must be a whole number of tokens from {low} to {high}, got {value!r}.",
                field=field, low=CHUNK_SIZE_MIN, high=CHUNK_SIZE_MAX, value=chunk_size,
            ),
            details={"field": field},
        )
    try:
        value = float(chunk_size)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value != int(value) or not CHUNK_SIZE_MIN <= value <= CHUNK_SIZE_MAX:
        raise InvalidArgument(
            msg(
                "{field} must be a whole number of tokens from {low} to {high}, got {value!r}.",
                field=field, low=CHUNK_SIZE_MIN, high=CHUNK_SIZE_MAX, value=chunk_size,
            ),
            details={"field": field},
        )
    return int(value)


def validate_endpoint(endpoint: object) -> str | None:
    if endpoint is None or endpoint == "":
        return None
    if not isinstance(endpoint, str):
        raise InvalidArgument(msg("embedding_endpoint must be a URL string."), details={"field": "embedding_endpoint"})
    parsed = urlparse(endpoint.strip())
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise InvalidArgument(
            msg(
                "embedding_endpoint {endpoint!r} is not an http(s) URL; give e.g. http://127.0.0.1:8000/v1.",
                endpoint=redact_url(endpoint),
            ),
            details={"field": "embedding_endpoint"},
        )
    return endpoint.strip().rstrip("/")


def _endpoint_parts(url: str) -> tuple[str, str, int | None, str] | None:
    """``(scheme, host, port, path)`` of an http(s) URL, the port filled in from the scheme; None if it is not one."""
    try:
        parsed = urlparse(url.strip())
        port = parsed.port
    except ValueError:
        return None
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        return None
    default = 443 if parsed.scheme == "https" else 80
    return parsed.scheme, parsed.hostname.lower().rstrip("."), port or default, parsed.path.rstrip("/")


def is_loopback_host(host: str) -> bool:
    """Whether ``host`` (a URL's host) is this machine's loopback: ``localhost`` or a loopback address written out
    (127.0.0.0/8, ::1, ::ffff:127.x). Other names are not resolved (a name can point anywhere, and again elsewhere
    when the request is made), so they are not loopback here."""
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return bool(address.is_loopback or (mapped is not None and mapped.is_loopback))


def parse_endpoint_allow_list(entries: Sequence[str], source: str = "KB_ALLOW_ENDPOINTS") -> tuple[str, ...]:
    """The allow-list entries (URL prefixes such as ``https://api.example.com/v1``), each checked."""
    kept = []
    for entry in entries:
        entry = entry.strip()
        if not entry:
            continue
        if _endpoint_parts(entry) is None:
            raise InvalidArgument(
                msg(
                    "{source} entry {entry!r} is not an http(s) URL; give URL prefixes separated by spaces or commas, "
                    "e.g. https://api.example.com/v1.",
                    source=source, entry=entry,
                )
            )
        kept.append(entry.rstrip("/"))
    return tuple(kept)


def endpoint_origin(endpoint: str) -> str:
    """``scheme://host:port/path`` of an endpoint, without user information (what an allow-list entry names)."""
    parts = _endpoint_parts(endpoint)
    if parts is None:
        return "(not an http(s) URL)"
    scheme, host, port, path = parts
    return f"{scheme}://{host}:{port}{path}"


def endpoint_refusal(endpoint: str, allowed: Sequence[str], *, loopback: bool) -> str | None:
    """Why the server must send no request to the embedding ``endpoint``; None when it may: it lies on this
    machine's loopback (only where ``loopback``), or at or under a URL prefix of ``allowed`` (same scheme, host and
    port; the path on a ``/`` boundary). Decided from the URL alone, before any connection or name look-up."""
    parts = _endpoint_parts(endpoint)
    if parts is None:
        return msg("embedding_endpoint {endpoint!r} is not an http(s) URL.", endpoint=endpoint)
    scheme, host, port, path = parts
    if loopback and is_loopback_host(host):
        return None
    for entry in allowed:
        listed = _endpoint_parts(entry)
        if listed is None or listed[:3] != (scheme, host, port):
            continue
        if path == listed[3] or path.startswith(listed[3] + "/"):
            return None
    if loopback:
        return msg(
            "The embedding endpoint {origin} is not on this machine (loopback) and not in the operator's list of "
            "allowed endpoints (KB_ALLOW_ENDPOINTS); no request was sent to it.",
            origin=f"{scheme}://{host}:{port}",
        )
    return msg(
        "The embedding endpoint {origin} is not in the operator's list of allowed endpoints (KB_ALLOW_ENDPOINTS); "
        "no request was sent to it.",
        origin=f"{scheme}://{host}:{port}",
    )


def validate_nonempty_text(value: object, field: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidArgument(msg("{field} must be a non-empty string.", field=field), details={"field": field})
    return value


def validate_int_range(value: object, field: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(
            msg("{field} must be an integer from {low} to {high}, got {value!r}.", field=field, low=low, high=high,
                value=value),
            details={"field": field},
        )
    if not low <= value <= high:
        raise InvalidArgument(
            msg("{field} must be from {low} to {high}, got {value}.", field=field, low=low, high=high, value=value),
            details={"field": field},
        )
    return value


def validate_float_range(value: object, field: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(float(value)):
        raise InvalidArgument(
            msg("{field} must be a number from {low} to {high}, got {value!r}.", field=field, low=low, high=high,
                value=value),
            details={"field": field},
        )
    if not low <= float(value) <= high:
        raise InvalidArgument(
            msg("{field} must be from {low} to {high}, got {value}.", field=field, low=low, high=high, value=value),
            details={"field": field},
        )
    return float(value)


def reject_undecodable(text: str, field: str) -> str:
    """``text``, unless it holds a lone surrogate: bytes that were not UTF-8 (a Latin-1 terminal, a script passing
    raw bytes: Python's argv keeps them as surrogates) or a broken escape. Refused as INVALID_ARGUMENT naming the
    byte, before any step that encodes the text (#37)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        code = ord(text[exc.start])
        # a byte Python's surrogateescape kept (U+DC80-U+DCFF), or a surrogate from elsewhere (a broken escape)
        what = (
            msg("the byte 0x{byte:02X}", byte=code - 0xDC00)
            if 0xDC80 <= code <= 0xDCFF
            else msg("a lone surrogate U+{code:04X}", code=code)
        )
        raise InvalidArgument(
            msg(
                "{field} is not valid UTF-8 text: {what} at character {position} (from a terminal or a script in "
                "another encoding, such as Latin-1?); send it as UTF-8.",
                field=field, what=what, position=exc.start + 1,
            ),
            details={"field": field},
        ) from None
    return text


def validate_query(query: object, field: str = "query") -> str:
    """A search query: a non-empty string of at most :data:`QUERY_MAX_CHARS` characters, valid UTF-8 text."""
    if not isinstance(query, str) or not query.strip():
        raise InvalidArgument(msg("{field} must be a non-empty string.", field=field), details={"field": field})
    reject_undecodable(query[: QUERY_MAX_CHARS + 1], field)
    if len(query) > QUERY_MAX_CHARS:
        raise InvalidArgument(
            msg(
                "{field} has {length:,} characters; at most {most:,} are accepted (about two pages). "
                "Shorten the query.",
                field=field, length=len(query), most=QUERY_MAX_CHARS,
            ),
            details={"field": field, "max_chars": QUERY_MAX_CHARS},
        )
    return query


def validate_keywords(keywords: object) -> list[str]:
    """rag_search keywords: 1 to :data:`RAG_MAX_KEYWORDS` non-empty strings of at most :data:`RAG_KEYWORD_MAX_CHARS`
    characters each; returns them stripped."""
    if isinstance(keywords, str) or not isinstance(keywords, Sequence) or not keywords:
        raise InvalidArgument(msg("keywords must be a list of at least one keyword."), details={"field": "keywords"})
    if len(keywords) > RAG_MAX_KEYWORDS:
        raise InvalidArgument(
            msg(
                "keywords has {count} keywords; at most {most} are accepted.",
                count=len(keywords), most=RAG_MAX_KEYWORDS,
            ),
            details={"field": "keywords", "max_keywords": RAG_MAX_KEYWORDS},
        )
    cleaned = [k.strip() for k in keywords if isinstance(k, str) and k.strip()]
    if len(cleaned) != len(keywords):
        raise InvalidArgument(msg("Every keyword must be a non-empty string."), details={"field": "keywords"})
    for keyword in cleaned:
        reject_undecodable(keyword[: RAG_KEYWORD_MAX_CHARS + 1], "keywords")
    longest = max(cleaned, key=len)
    if len(longest) > RAG_KEYWORD_MAX_CHARS:
        raise InvalidArgument(
            msg(
                "A keyword has {length:,} characters; at most {most} per keyword are accepted "
                "(a keyword is a word or a short phrase; search a longer text with search).",
                length=len(longest), most=RAG_KEYWORD_MAX_CHARS,
            ),
            details={"field": "keywords", "max_chars": RAG_KEYWORD_MAX_CHARS},
        )
    return cleaned
