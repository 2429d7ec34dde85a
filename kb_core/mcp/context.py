"""What a tool function needs from the request: the caller's session, a way to run it, progress reports."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

import anyio
from mcp.server.fastmcp import Context
from mcp.types import CallToolResult

from kb_core.envelope import Envelope
from kb_core.mcp.results import tool_result

if TYPE_CHECKING:
    from kb_core.ingest.pipeline import ImportProgress
    from kb_core.session import Session

logger = logging.getLogger(__name__)


class SessionSource(Protocol):
    """The server, as the tools see it (the lifespan context of every request)."""

    def session_for(self, ctx: Context) -> Session: ...


async def call(
    ctx: Context, operation: Callable[[Session], Envelope], text: Callable[[Envelope], str] | None = None
) -> CallToolResult:
    """Run one session operation off the event loop and return its envelope as the tool result."""
    source: SessionSource = ctx.request_context.lifespan_context
    session = source.session_for(ctx)
    envelope = await anyio.to_thread.run_sync(operation, session)
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
