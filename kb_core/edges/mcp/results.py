"""From envelopes to MCP tool results, and the texts that clients show.

Errors (one rule for every tool):

- invalid parameters (schema violations, and service failures with code ``INVALID_ARGUMENT``)
  → JSON-RPC error −32602 ``InvalidParams``; ``data`` carries ``code`` and ``details``;
- internal failures (``INTERNAL_ERROR`` envelopes, unexpected exceptions) → −32603 with a generic message,
  never a stack trace (the trace goes to the server log);
- every other service failure (KB_NOT_FOUND, NO_CURRENT_KB, DOCUMENT_NOT_FOUND, ITEM_NOT_FOUND, KB_EXISTS,
  KB_IS_CURRENT, IMPORT_FAILED, PERMISSION_DENIED, ...) → a tool error: ``isError: true``, text
  ``"<CODE>: <message>"`` and the failure envelope as ``structuredContent``, so the model can read it and recover.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from typing import Any

from mcp.shared.exceptions import McpError
from mcp.types import INTERNAL_ERROR, INVALID_PARAMS, CallToolResult, ErrorData, TextContent

from kb_core.edges.envelopes import Envelope
from kb_core.features.retrieval.narrative import hit_list_notes


def tool_result(envelope: Envelope, text: Callable[[Envelope], str] | None = None) -> CallToolResult:
    """The CallToolResult of an envelope, or a JSON-RPC error for INVALID_ARGUMENT / INTERNAL_ERROR."""
    envelope = plain(envelope)
    if envelope.get("success"):
        body = text(envelope) if text else _default_text(envelope)
        return CallToolResult(content=[TextContent(type="text", text=body)], structuredContent=envelope, isError=False)
    error = envelope.get("error") or {"code": "INTERNAL_ERROR", "details": {}}
    envelope["error"] = error
    if error["code"] == "INVALID_ARGUMENT":
        raise McpError(ErrorData(code=INVALID_PARAMS, message=envelope["message"], data=error))
    if error["code"] == "INTERNAL_ERROR":
        data = {"code": "INTERNAL_ERROR", **({"details": error["details"]} if error.get("details") else {})}
        raise McpError(ErrorData(code=INTERNAL_ERROR, message=envelope["message"], data=data))
    body = f"{error['code']}: {envelope['message']}"
    return CallToolResult(content=[TextContent(type="text", text=body)], structuredContent=envelope, isError=True)


def _default_text(envelope: Envelope) -> str:
    data = envelope.get("data")
    if data is None:
        return envelope["message"]
    return envelope["message"] + "\n" + json.dumps(data, ensure_ascii=False, default=str)


def hits_text(envelope: Envelope) -> str:
    hits = envelope["data"]["hits"]
    if not hits:
        return envelope["message"]
    data = envelope["data"]
    warnings = data.get("warnings") or []
    notes = hit_list_notes(
        int(data.get("duplicates_dropped") or 0), int(data.get("below_min_score") or 0),
        float(data.get("min_score") or 0),
    )
    return (
        format_hits(hits) + "".join(f"\n\n{n.text}" for n in notes) + "".join(f"\n\nWarning: {w}" for w in warnings)
    )


def schema_text(envelope: Envelope) -> str:
    """The spec's tool returns the schema as JSON text; so does ours (structured content has it too)."""
    return json.dumps(envelope["data"], ensure_ascii=False, indent=2)



def plain(value: Any) -> Any:
    """JSON-safe copy: numpy scalars to Python, NaN to null (the catalog is pandas/arrow)."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, float):
        return None if math.isnan(value) or math.isinf(value) else value
    if value is None or isinstance(value, str | int | bool):
        return value
    if hasattr(value, "item"):
        return plain(value.item())
    return str(value)


def format_hits(hits: Sequence[dict[str, Any]]) -> str:
    """The numbered list of search_knowledge_base: ``1. (0.84) <title>`` then the indented quoted snippet."""
    lines = []
    for hit in hits:
        via = f" [via {hit['via']}]" if hit.get("expanded") and hit.get("via") else ""
        lines.append(f"{hit['rank']}. ({hit['score']:.2f}) {hit['title']}{via}")
        lines.append(f'   "{hit["snippet"]}"')
    return "\n".join(lines)

