"""Writing JSON: one function, so everything the program stores or exports as JSON is strict JSON.

Python's ``json`` writes NaN and infinities as the bare words ``NaN`` and ``Infinity``, which strict readers
refuse (PostgreSQL's ``jsonb``, an import that reads the file back, other languages): a backup holding one
could not be restored. Values are checked where they enter (bundles, search weights); this is the last line.
"""

from __future__ import annotations

import json
from typing import Any

from kb_core.errors import KBError

__all__ = ["json_text"]


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
