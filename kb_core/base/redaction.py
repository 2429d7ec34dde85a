"""Secrets in URLs: the one redaction every URL a person or a log may see goes through.

A URL may carry a password: a PostgreSQL store's (``postgresql://user:PASSWORD@host/db``) and an embedding
endpoint's (``https://user:PASSWORD@proxy/v1``, basic authentication in front of an OpenAI-compatible server).
:func:`redact_url` hides it whatever the URL's shape, erring on hiding too much; :func:`url_passwords` lists every
form of it so that text quoting part of it (libpq's messages) can be scrubbed with :func:`scrub_passwords`;
:func:`split_credentials` takes the user information out of a URL, so requests carry it as an ``Authorization``
header and no logged request line holds it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import unquote, urlsplit, urlunsplit

__all__ = ["REDACTED", "redact_url", "scrub_passwords", "shown_endpoint", "split_credentials", "url_passwords"]

# A password option and everything after it: an unescaped "&" in the password makes the rest look like options.
_QUERY_PASSWORD = re.compile(r"(?i)([?&]password=)(.*)$")
_MIN_PIECE = 3  # shorter pieces of an option's tail are not scrubbed from libpq's text (they would garble it)
REDACTED = "***"


def url_passwords(url: str) -> tuple[str, ...]:
    """Every string in ``url`` that may be (part of) its password, longest first: the text between the first ``:``
    of the user information and the last ``@`` (generous when the password holds unescaped ``@ / ? #``), the
    password as the URL standard reads it, and what follows ``password=`` (to the end, and each piece of it
    between ``&``), raw and percent-decoded."""
    found: set[str] = set()
    rest = url.split("://", 1)[1] if "://" in url else url
    at = rest.rfind("@")
    colon = rest.find(":")
    if at > 0 and 0 <= colon < at:
        found.add(rest[colon + 1 : at])
    try:
        password = urlsplit(url).password
    except ValueError:
        password = None
    if password:
        found.add(password)
    for match in _QUERY_PASSWORD.finditer(url):
        found.add(match.group(2))
        found.update(piece for piece in re.split(r"[&#]", match.group(2)) if len(piece) >= _MIN_PIECE)
    found |= {unquote(f) for f in found}
    return tuple(sorted((f for f in found if f), key=len, reverse=True))


def scrub_passwords(text: str, passwords: Iterable[str]) -> str:
    """``text`` with each of ``passwords`` replaced by ``***`` (libpq quotes the bad part of a URL it refuses)."""
    for password in passwords:
        text = text.replace(password, REDACTED)
    return text


def redact_url(url: str) -> str:
    """``url`` as it may be shown, whatever its shape: the password (everything between the first ``:`` of the user
    information and its last ``@``) and everything after a ``password=`` option replaced by ``***``. Errs on hiding
    too much: a URL that cannot be parsed may hide more than its password, never less."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    at = rest.rfind("@")
    colon = rest.find(":")
    if at > 0 and 0 <= colon < at:
        rest = f"{rest[:colon]}:{REDACTED}{rest[at:]}"
    shown = _QUERY_PASSWORD.sub(lambda m: m.group(1) + REDACTED, f"{scheme}{sep}{rest}")
    return scrub_passwords(shown, url_passwords(url))


def split_credentials(url: str) -> tuple[str, tuple[str, str] | None]:
    """``url`` without its user information, and the (user, password) it held, percent-decoded (None: none)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url, None
    userinfo, _, host = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    return urlunsplit(parts._replace(netloc=host)), (unquote(user), unquote(password))


def shown_endpoint(url: str | None) -> str | None:
    """An embedding endpoint's URL as listings, messages, logs and exports show it: through :func:`redact_url`."""
    return None if url is None else redact_url(url)
