"""What a tool function needs from the request: the caller's session, a way to run one of its operations, progress
reports."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import anyio
from mcp.server.fastmcp import Context
from mcp.types import CallToolResult

from kb_core.edges.envelopes import Envelope, envelope_of
from kb_core.edges.mcp.results import tool_result

if TYPE_CHECKING:
    from kb_core.features.ingest.pipeline import ImportProgress
    from kb_core.features.results import Result
    from kb_core.session.operations import Operations

logger = logging.getLogger(__name__)


class SessionSource(Protocol):
    """The server, as the tools see it (the lifespan context of every request)."""

    def session_for(self, ctx: Context) -> Operations: ...


async def call(
    ctx: Context,
    operation: Callable[..., Result],
    *args: Any,
    text: Callable[[Envelope], str] | None = None,
    refusal: Envelope | None = None,
    **kwargs: Any,
) -> CallToolResult:
    """Run ``operation(operations, *args, **kwargs)`` on the caller's session (an
    :class:`kb_core.session.operations.Operations` method, or a function of one) off the event loop, and return its
    envelope as the tool result; ``refusal`` (an argument the tool refuses before anything runs) answers instead when
    given."""
    source: SessionSource = ctx.request_context.lifespan_context
    session = source.session_for(ctx)
    if refusal is not None:
        return tool_result(refusal, text)
    envelope = await anyio.to_thread.run_sync(lambda: envelope_of(operation, session, *args, **kwargs))
    return tool_result(envelope, text)


def progress_reporter(ctx: Context) -> Callable[[ImportProgress], None] | None:
    """Forward import progress as MCP progress notifications when the client asked for them."""
    meta = ctx.request_context.meta if ctx.request_context else None
    if meta is None or meta.progressToken is None:
        return None

    def report(progress: ImportProgress) -> None:
        try:
            message = f"{progress.files_done}/{progress.files_total} files, {progress.chunks_embedded} chunks embedded"
            anyio.from_thread.run(ctx.report_progress, float(progress.files_done), float(progress.files_total), message)
        except Exception:
            logger.debug("Could not send a progress notification", exc_info=True)

    return report
