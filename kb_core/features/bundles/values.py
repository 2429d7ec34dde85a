"""Walking a parsed bundle's values: their paths as the messages write them, and the values no bundle may hold.

Used by the validator (each item) and the ontology parser (the whole ontology), which the validator builds on.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


def format_path(parts: Iterable[Any]) -> str:
    """``[4, "source", "doc_uri"]`` → ``[4].source.doc_uri``; list positions are bracketed."""
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out or "root"


@dataclass(frozen=True)
class ValueProblem:
    """A value a bundle cannot hold, wherever it stands: a string (or key) over the length limit, or a number that
    is not finite (YAML's ``.nan`` / ``.inf`` pass ``{type: number}`` but no JSON store or export can hold them)."""

    path: list[Any]
    kind: str  # "long-text" | "long-key" | "not-finite"
    length: int = 0
    value: float = 0.0


def value_problems(item: Any, max_chars: int | None) -> list[ValueProblem]:
    """Every :class:`ValueProblem` in ``item`` (keys included), sorted by path; ``max_chars`` None: no length check."""
    found: list[ValueProblem] = []
    stack: list[tuple[Any, list[Any]]] = [(item, [])]
    while stack:
        value, path = stack.pop()
        if isinstance(value, str):
            if max_chars is not None and len(value) > max_chars:
                found.append(ValueProblem(path, "long-text", len(value)))
        elif isinstance(value, float):
            if not math.isfinite(value):
                found.append(ValueProblem(path, "not-finite", value=value))
        elif isinstance(value, dict):
            for key, child in value.items():
                if isinstance(key, str) and max_chars is not None and len(key) > max_chars:
                    found.append(ValueProblem(path, "long-key", len(key)))
                    continue
                if isinstance(key, float) and not math.isfinite(key):
                    found.append(ValueProblem(path, "not-finite", value=key))
                    continue
                stack.append((child, [*path, key]))
        elif isinstance(value, list):
            stack.extend((child, [*path, i]) for i, child in enumerate(value))
    return sorted(found, key=lambda f: [str(p) for p in f.path])
