"""The one place that reaches into the MCP SDK's private parts, checked against the SDK version.

FastMCP (SDK v1) reports every exception inside a tool as an ``isError`` result, but this server promises
JSON-RPC errors for invalid parameters, internal failures and rate limits, so it handles ``tools/call``
itself on the low-level server; and stdio is served on the low-level server to pass a private stdout. v1 has
no public accessor for that server (``FastMCP._mcp_server``); v2 renamed FastMCP, so pyproject pins ``mcp<2``.

Requests are screened before the SDK's session sees them (:func:`screen_requests`): the session re-validates
each request from ``model_dump(mode="json", exclude_none=True)``, which turns a NaN or infinite number into
null and then drops it (a ``vector_weight`` of NaN silently became the default), and a string holding a lone
surrogate breaks it (no answer at all, or an error with code 0).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from importlib.metadata import version
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.server.fastmcp import FastMCP
from mcp.server.lowlevel import Server
from mcp.shared.message import SessionMessage
from mcp.types import CallToolRequest, ErrorData, JSONRPCError, JSONRPCMessage, JSONRPCRequest, ServerResult
from pydantic import ValidationError

SUPPORTED_MAJOR = 1


def lowlevel_server(mcp: FastMCP) -> Server[Any, Any]:
    """The low-level server under ``mcp``; a clear error on an SDK this code was not written for."""
    installed = version("mcp")
    server = getattr(mcp, "_mcp_server", None)
    if not installed.startswith(f"{SUPPORTED_MAJOR}.") or not isinstance(server, Server):
        raise RuntimeError(
            f"kb_core.edges.mcp needs the MCP Python SDK {SUPPORTED_MAJOR}.x with FastMCP._mcp_server; found mcp "
            f"{installed}. Install mcp>={SUPPORTED_MAJOR}.20,<{SUPPORTED_MAJOR + 1}."
        )
    return server


def handle_call_tool(mcp: FastMCP, handler: Callable[[CallToolRequest], Awaitable[ServerResult]]) -> None:
    """Route ``tools/call`` requests of ``mcp`` to ``handler`` instead of FastMCP's own."""
    lowlevel_server(mcp).request_handlers[CallToolRequest] = handler


def screen_requests(mcp: FastMCP, screen: Callable[[JSONRPCRequest], ErrorData | None]) -> None:
    """Answer every request for which ``screen`` returns an error with that JSON-RPC error, before the SDK's
    session parses it; other messages pass unchanged. Applies to every transport: stdio and streamable HTTP
    both serve through the low-level server's ``run``."""
    server = lowlevel_server(mcp)
    run = server.run

    async def run_screened(
        read_stream: MemoryObjectReceiveStream[SessionMessage | Exception],
        write_stream: MemoryObjectSendStream[SessionMessage],
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        send, receive = anyio.create_memory_object_stream[SessionMessage | Exception](0)

        async def pump() -> None:
            async with send:
                try:
                    async for message in read_stream:
                        root = _unparsed_request(message) if isinstance(message, Exception) else message.message.root
                        error = screen(root) if isinstance(root, JSONRPCRequest) else None
                        if error is None:
                            await send.send(message)
                        else:
                            answer = JSONRPCError(jsonrpc="2.0", id=root.id, error=error)  # type: ignore[union-attr]
                            await write_stream.send(SessionMessage(message=JSONRPCMessage(answer)))
                except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                    return  # the transport or the session has ended (a client that went away)

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(pump)
            try:
                return await run(receive, write_stream, *args, **kwargs)
            finally:
                tasks.cancel_scope.cancel()

    server.run = run_screened  # type: ignore[method-assign]


def _unparsed_request(failure: Exception) -> JSONRPCRequest | None:
    """The request in a line the stdio transport could not parse, when Python's reader can: pydantic refuses a
    lone surrogate escape as invalid JSON, and the SDK then answers nothing (it has no request id)."""
    if not isinstance(failure, ValidationError):
        return None
    for error in failure.errors():
        line = error.get("input")
        if error["type"] != "json_invalid" or not isinstance(line, str):
            continue
        try:
            return JSONRPCRequest.model_validate(json.loads(line))
        except (ValueError, RecursionError):  # not JSON to Python either, or not a request: the SDK answers
            return None
    return None
