"""The one place that reaches into the MCP SDK's private parts, checked against the SDK version.

FastMCP (SDK v1) reports every exception inside a tool as an ``isError`` result, but this server promises
JSON-RPC errors for invalid parameters, internal failures and rate limits, so it handles ``tools/call``
itself on the low-level server; and stdio is served on the low-level server to pass a private stdout. v1 has
no public accessor for that server (``FastMCP._mcp_server``); v2 renamed FastMCP, so pyproject pins ``mcp<2``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from importlib.metadata import version
from typing import Any

from mcp.server.fastmcp import FastMCP
from mcp.server.lowlevel import Server
from mcp.types import CallToolRequest, ServerResult

SUPPORTED_MAJOR = 1


def lowlevel_server(mcp: FastMCP) -> Server[Any, Any]:
    """The low-level server under ``mcp``; a clear error on an SDK this code was not written for."""
    installed = version("mcp")
    server = getattr(mcp, "_mcp_server", None)
    if not installed.startswith(f"{SUPPORTED_MAJOR}.") or not isinstance(server, Server):
        raise RuntimeError(
            f"kb_core.mcp needs the MCP Python SDK {SUPPORTED_MAJOR}.x with FastMCP._mcp_server; found mcp "
            f"{installed}. Install mcp>={SUPPORTED_MAJOR}.20,<{SUPPORTED_MAJOR + 1}."
        )
    return server


def handle_call_tool(mcp: FastMCP, handler: Callable[[CallToolRequest], Awaitable[ServerResult]]) -> None:
    """Route ``tools/call`` requests of ``mcp`` to ``handler`` instead of FastMCP's own."""
    lowlevel_server(mcp).request_handlers[CallToolRequest] = handler
