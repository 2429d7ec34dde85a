"""Scrubbing a secret (an API key) from text, in the forms a careless server echoes it back.

Servers echo credentials raw, JSON-escaped (``sk-a\\/b``), URL- or form-encoded, base64-encoded (an echoed
``Authorization`` header), masked to a prefix (``sk-abcd1234****``) or cut off by a length limit. Replacing only
the exact key misses all of these, so :class:`SecretScrubber` replaces every run of at least ``MIN_FRAGMENT``
characters that occurs in any of those forms, wherever it stands; shorter keys are replaced whole.
"""

from __future__ import annotations

import base64
import json
import re
from urllib.parse import quote, quote_plus

MIN_FRAGMENT = 8
REDACTED = "***"


def _encodings(secret: str) -> set[str]:
    forms = {secret, json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1]}
    forms |= {form.replace("/", "\\/") for form in forms}
    for encoded in (quote(secret, safe=""), quote(secret), quote_plus(secret)):
        forms |= {encoded, re.sub(r"%[0-9A-F]{2}", lambda m: m.group().lower(), encoded)}
    raw = secret.encode("utf-8")
    forms |= {raw.hex(), raw.hex().upper()}
    for offset in range(3):  # base64 of the key at each alignment inside a longer value (e.g. "Bearer KEY")
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            text = encode(b"\0" * offset + raw).decode("ascii").rstrip("=")
            skip = (offset * 8 + 5) // 6  # characters that carry bits of the padding
            forms.add(text[skip:-1])  # the last one carries bits of what follows the key
    return {form for form in forms if form}


class SecretScrubber:
    """Replaces ``secret`` in any of its echoed forms, and any fragment of them of ``MIN_FRAGMENT`` or more
    characters (a prefix cut by a length limit, a masked echo), with ``***``."""

    def __init__(self, secret: str | None) -> None:
        self._forms = sorted(_encodings(secret), key=len, reverse=True) if secret else []
        self._grams = {
            form[i : i + MIN_FRAGMENT]
            for form in self._forms
            if len(form) >= MIN_FRAGMENT
            for i in range(len(form) - MIN_FRAGMENT + 1)
        }

    def __call__(self, text: str) -> str:
        if not self._forms or not text:
            return text
        for form in self._forms:
            text = text.replace(form, REDACTED)
        if not self._grams:
            return text
        pieces: list[str] = []
        start = index = 0
        while index <= len(text) - MIN_FRAGMENT:
            if text[index : index + MIN_FRAGMENT] not in self._grams:
                index += 1
                continue
            end = index + MIN_FRAGMENT
            while end < len(text) and any(text[index : end + 1] in form for form in self._forms):
                end += 1
            pieces += [text[start:index], REDACTED]
            start = index = end
        pieces.append(text[start:])
        return "".join(pieces)
