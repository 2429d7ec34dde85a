"""Writing and reading JSON: strict JSON out, and JSON from files a stranger wrote read within budgets.

Writing: Python's ``json`` writes NaN and infinities as the bare words ``NaN`` and ``Infinity``, which strict
readers refuse (PostgreSQL's ``jsonb``, an import that reads the file back, other languages): a backup holding one
could not be restored. Values are checked where they enter (bundles, search weights); :func:`json_text` is the
last line.

Reading (:func:`parse_json_within`): a JSON text is measured before it is parsed, token by token, so a file that is
wide rather than deep (3 MB of ``[{},{},…]`` is a million dicts, about 100 bytes of memory each) or deep is refused
with the reason before any value is built; ``NaN`` and ``Infinity`` are refused too.
"""

from __future__ import annotations

import json
import re
from typing import Any

from kb_core.base.errors import KBError

__all__ = ["JSONLimitExceeded", "json_text", "parse_json_within"]


def json_text(
    value: Any, *, indent: int | None = None, sort_keys: bool = False, separators: tuple[str, str] | None = None
) -> str:
    """``value`` as strict JSON text (non-ASCII kept as is); KBError ``NOT_JSON`` for NaN or an infinity."""
    try:
        return json.dumps(
            value, ensure_ascii=False, allow_nan=False, indent=indent, sort_keys=sort_keys, separators=separators
        )
    except ValueError as exc:  # "Out of range float values are not JSON compliant"
        raise KBError(
            "A value to be stored is NaN or infinite, which JSON cannot hold; nothing was written.", code="NOT_JSON"
        ) from exc


class JSONLimitExceeded(ValueError):
    """A JSON text holds more values, or nests deeper, than its reader accepts."""


# One token of JSON: a string (possibly unterminated), a bracket, or a bare scalar (number, literal, junk).
_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}]|[^\s\[\]{},:"]+')


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def parse_json_within(text: str, *, max_values: int, max_depth: int) -> Any:
    """Parse ``text`` as strict JSON holding at most ``max_values`` values (every string, number, literal, list
    and object counts, keys included) nested at most ``max_depth`` deep. Raises :class:`JSONLimitExceeded` before
    parsing when a limit is passed, ValueError when the text is not JSON."""
    values = depth = 0
    for match in _TOKEN.finditer(text):
        first = text[match.start()]
        if first in "]}":
            depth -= 1
            continue
        values += 1
        if values > max_values:
            raise JSONLimitExceeded(f"it holds more than {max_values:,} values")
        if first in "[{":
            depth += 1
            if depth > max_depth:
                raise JSONLimitExceeded(f"it nests deeper than {max_depth} levels")
    return json.loads(text, parse_constant=_refuse_constant)
