"""Arguments no JSON-RPC request may carry, refused with −32602 before the SDK parses the request.

A NaN or infinite number (``NaN``, ``Infinity``, ``1e999``: Python's JSON reader accepts them) is not a number
any tool takes; the SDK would turn it into null and drop it, so the tool would silently use its default. A
string with a lone surrogate (``"\\ud800"``) is not Unicode text: no path, name or query holds one, and the SDK
cannot even answer a request carrying one. Each refusal names the tool and the field.
"""

from __future__ import annotations

import math
from typing import Any

from mcp.types import INVALID_PARAMS, ErrorData, JSONRPCRequest

from kb_core.base.validation import has_lone_surrogate


def _problem(value: Any) -> str | None:
    if isinstance(value, float) and not math.isfinite(value):
        shown = "NaN" if math.isnan(value) else ("-" if value < 0 else "") + "Infinity"
        return f"{shown} is not a finite number; give a finite number (JSON has no NaN or Infinity)"
    if isinstance(value, str) and has_lone_surrogate(value):
        return "the text holds a lone surrogate (\\ud800-\\udfff), which is not valid Unicode; send UTF-8 text"
    return None


def _problems(params: dict[str, Any]) -> list[dict[str, str]]:
    found: list[dict[str, str]] = []
    stack: list[tuple[Any, list[str]]] = [(params, [])]
    while stack and len(found) < 10:
        value, path = stack.pop()
        if isinstance(value, dict):
            for key, child in value.items():
                key_text = str(key)
                problem = _problem(key_text)
                if problem is not None:
                    found.append({"field": ".".join([*path, "(a key)"]), "problem": problem})
                    continue
                stack.append((child, [*path, key_text]))
        elif isinstance(value, list):
            stack.extend((child, [*path, str(i)]) for i, child in enumerate(value))
        else:
            problem = _problem(value)
            if problem is not None:
                found.append({"field": ".".join(path) or "(params)", "problem": problem})
    return found


def screen_request(request: JSONRPCRequest) -> ErrorData | None:
    """The −32602 error for a request whose parameters hold a NaN or infinite number or a lone surrogate."""
    params = request.params or {}
    problems = _problems(params)
    if not problems:
        return None
    what = request.method
    if request.method == "tools/call":
        name = params.get("name")
        what = name.encode("utf-8", "backslashreplace").decode("utf-8") if isinstance(name, str) else "tools/call"
        for problem in problems:
            problem["field"] = problem["field"].removeprefix("arguments.")
    text = "; ".join(f"{p['field']}: {p['problem']}" for p in problems)
    return ErrorData(
        code=INVALID_PARAMS,
        message=f"Invalid arguments for {what}: {text}",
        data={"code": "INVALID_ARGUMENT", "details": {"errors": problems}},
    )
