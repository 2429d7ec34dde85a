"""The MCP server: the knowledge-base tools of :mod:`kb_core.edges.mcp.tools` over stdio and streamable HTTP.

Built on the official MCP Python SDK v1 (``mcp.server.fastmcp.FastMCP``; v2 renamed it, so pyproject pins
``mcp<2``; the private parts it needs are reached only through :mod:`kb_core.edges.mcp.sdk`). Every tool calls one
:class:`kb_core.session.operations.Operations` method and returns its envelope ``{success, message, data[, error]}``
as structured content, with an output schema (:mod:`kb_core.edges.mcp.models`).

Errors follow one rule for every tool (:mod:`kb_core.edges.mcp.results`); in addition unknown tools answer −32602
and a token over its rate −32605 with ``data.retry_after_sec``. The SDK turns every exception raised inside a
tool into an ``isError`` result, so ``tools/call`` is dispatched by :meth:`KBMCPServer.dispatch_call_tool`,
which raises ``McpError`` for the JSON-RPC cases.

HTTP security: bearer tokens from :mod:`kb_core.store.tokens` (401 without a valid one, via the SDK's
``TokenVerifier`` and ``RequireAuthMiddleware``); the SDK binds each HTTP session to the token that created
it. A token's scope becomes the session's KB scope (out-of-scope KBs answer like nonexistent ones); the rules
per tool (read tokens cannot call write tools; scoped tokens cannot add knowledge bases; which arguments are
paths) are the one table of :mod:`kb_core.edges.mcp.access`. Paths must resolve (symlinks followed) inside the
``--allow-dir`` folders (:mod:`kb_core.edges.mcp.paths`), checked again by the session on the file it opens
(:mod:`kb_core.base.safe_files`), so a folder swapped for a symlink after the check cannot redirect a read, a write
or the bundle file's delete. A path with a NUL byte is invalid (−32602), and so is any argument holding a NaN or
infinite number or a lone surrogate (:mod:`kb_core.edges.mcp.screening`). The Host and Origin headers must name
this server (:mod:`kb_core.edges.mcp.http_security`). stdio is local and trusted: no tokens, no path limits.

Knowledge bundles (the format is described in docs/ and the README): ``get_knowledge_schema`` returns the
current KB's ``{full_bundle_schema, example_yaml}`` (its text content is that JSON); ``import_knowledge_bundle``
is a write tool whose ``temp_file_path`` is confined like the import paths. A refused bundle is a tool error
``BUNDLE_INVALID: ...`` listing every problem at its exact place and the file is kept for a retry; after a
successful import the file is deleted. ``search`` and ``search_knowledge_base`` take ``expand_graph``
(default false): hits on bundle documents are followed by the documents related to them by edges.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
import weakref
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.fastmcp import Context, FastMCP
from mcp.server.fastmcp.exceptions import ToolError
from mcp.shared.exceptions import McpError
from mcp.types import INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, CallToolRequest, ErrorData, ServerResult
from pydantic import ConfigDict, ValidationError
from starlette.applications import Starlette

from kb_core.base.config import DEFAULT_HTTP_PORT
from kb_core.base.errors import KBError
from kb_core.base.rate_limits import SlidingWindowLimiter
from kb_core.edges.envelopes import failure
from kb_core.edges.mcp import sdk
from kb_core.edges.mcp.access import ACCESS, check_token
from kb_core.edges.mcp.http_security import transport_security, url_host
from kb_core.edges.mcp.paths import confine_arguments
from kb_core.edges.mcp.results import tool_result
from kb_core.edges.mcp.screening import screen_request
from kb_core.edges.mcp.tools import build_tools
from kb_core.store.tokens import TokenRecord

if TYPE_CHECKING:
    from kb_core.session.operations import Operations
    from kb_core.session.service import KnowledgeBaseService

logger = logging.getLogger(__name__)

RATE_LIMITED = -32605


class ServiceHolder:
    """Opens the KnowledgeBaseService once per process, at server start."""

    def __init__(self, home: str | Path | None, service: KnowledgeBaseService | None = None) -> None:
        self.home = home
        self._service = service
        self._lock = threading.Lock()

    def open(self, *, warm_up_first: bool = False) -> KnowledgeBaseService:
        """The service. ``warm_up_first`` (the entry points, before serving) loads what searches need before
        returning; otherwise that happens in the background."""
        with self._lock:
            if self._service is None:
                from kb_core.session.service import KnowledgeBaseService

                self._service = KnowledgeBaseService(self.home)
                logger.info("Opened knowledge bases in %s", self._service.home.root)
                if warm_up_first:
                    self._warm_up(self._service)
                else:
                    threading.Thread(
                        target=self._warm_up, args=(self._service,), name="kb-mcp-warm-up", daemon=True
                    ).start()
            return self._service

    def cancel_imports(self) -> None:
        """Cancel the running imports at once, without waiting (the server was told to stop)."""
        if self._service is not None:
            self._service.jobs.cancel_all()

    def close(self, timeout: float = 8.0) -> None:
        """Cancel the running imports and wait for them (``timeout`` seconds at most), then close the service."""
        if self._service is not None:
            self._service.close(timeout)

    @staticmethod
    def _warm_up(service: KnowledgeBaseService) -> None:
        # A first query embedding loads torch and the local model (about 10 s on two cores): done before the
        # first call, rag_search's timeout does not run out on it. Endpoints are not called (one that is down
        # would only delay the start); the analyzer (jieba) and each KB's indexes are loaded too.
        started = time.monotonic()
        try:
            service.analyzer.tokens("warm up 预热")
            records = service.store.knowledge_bases()
        except Exception:
            logger.warning("Could not preload the search models; they load on first use.", exc_info=True)
            return
        for record in records:
            try:
                service.store.kb(record).preload()  # the folder store's indexes (a database KB has none)
                if not record.embedding_endpoint:
                    service.embedder(record).embed_query("warm up")
                    for query in ("warm up", "预热"):  # the model's semantic floors, measured once (kept in the home)
                        service.semantic_scale(record, query)
            except Exception:
                logger.warning("Could not preload knowledge base %r; it loads on first use", record.name, exc_info=True)
        elapsed = time.monotonic() - started
        logger.info("Loaded the models and indexes of %d knowledge base(s) in %.1f s", len(records), elapsed)


@dataclasses.dataclass
class _Caller:
    token: TokenRecord | None  # None: stdio, trusted


class _ServiceTokens:
    """The tokens of the service's store, read per request: the home's ``tokens.json``, or on PostgreSQL the
    database's table, which every host on that URL shares."""

    def __init__(self, holder: ServiceHolder) -> None:
        self.holder = holder

    def verify(self, token: str) -> TokenRecord | None:
        return self.holder.open().token_store.verify(token)


class _VerifiedToken(AccessToken):
    """The SDK's access token, carrying the record this request's verification read (so a tool call reads the
    token store once per request, off the event loop, and never a second time)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    record: TokenRecord


class _TokenVerifier:
    """The SDK's TokenVerifier protocol over :class:`TokenStore` (client_id = token id, never the token)."""

    def __init__(self, store: _ServiceTokens) -> None:
        self.store = store

    async def verify_token(self, token: str) -> AccessToken | None:
        record = await anyio.to_thread.run_sync(self.store.verify, token)  # a database query on PostgreSQL
        if record is None:
            return None
        return _VerifiedToken(token=record.id, client_id=record.id, scopes=[record.capability], record=record)


class KBMCPServer:
    """Builds the FastMCP server. ``http`` switches on tokens, rate limits and path confinement."""

    def __init__(
        self,
        home: str | Path | None = None,
        *,
        http: bool = False,
        host: str = "127.0.0.1",
        port: int = DEFAULT_HTTP_PORT,
        allowed_dirs: Sequence[str | Path] = (),
        allowed_hosts: Sequence[str] = (),
        service: KnowledgeBaseService | None = None,
    ) -> None:
        self.holder = ServiceHolder(home, service)
        self.http = http
        self.allowed_dirs = tuple(Path(d).expanduser().resolve() for d in allowed_dirs)
        self.limiter = SlidingWindowLimiter()
        self._sessions: weakref.WeakKeyDictionary[Any, dict[str | None, Operations]] = weakref.WeakKeyDictionary()
        self._sessions_lock = threading.Lock()
        auth: dict[str, Any] = {}
        if http:
            auth = {
                "token_verifier": _TokenVerifier(_ServiceTokens(self.holder)),
                "auth": AuthSettings(issuer_url=f"http://{url_host(host)}:{port}", resource_server_url=None),
                "transport_security": transport_security(host, port, allowed_hosts),
            }
        self.tools = {tool.name: tool for tool in build_tools()}
        self.mcp = FastMCP(
            name="kb-workbench",
            instructions=(
                "Local knowledge bases for retrieval. Select a knowledge base (select_knowledge_base) before "
                "import/search/list_documents; search_knowledge_base searches every visible knowledge base."
            ),
            tools=list(self.tools.values()),
            lifespan=self._lifespan,
            host=host,
            port=port,
            log_level="WARNING",
            **auth,
        )
        sdk.handle_call_tool(self.mcp, self.dispatch_call_tool)
        sdk.screen_requests(self.mcp, screen_request)

    @asynccontextmanager
    async def _lifespan(self, _: FastMCP) -> AsyncIterator[KBMCPServer]:
        # Over HTTP this runs per session; the holder opens the service only the first time. The tools reach
        # this server (and through it their session) as the request's lifespan context.
        await anyio.to_thread.run_sync(self.holder.open)
        yield self

    # -- per-request state ---------------------------------------------------------------------
    def _caller(self, ctx: Context) -> _Caller:
        request = ctx.request_context.request if ctx.request_context else None
        if not self.http:
            return _Caller(None)
        user = request.scope.get("user") if request is not None else None
        record = None
        if isinstance(user, AuthenticatedUser) and isinstance(user.access_token, _VerifiedToken):
            record = user.access_token.record  # verified for this very request (a revoked token gets 401 first)
        if record is None:
            raise McpError(ErrorData(code=INVALID_REQUEST, message="A valid bearer token is required."))
        return _Caller(record)

    def session_for(self, ctx: Context) -> Operations:
        """The session of this MCP session and token (created on its first call)."""
        caller = self._caller(ctx)
        key = ctx.session
        token_id = caller.token.id if caller.token else None
        with self._sessions_lock:
            by_token = self._sessions.setdefault(key, {})
            session = by_token.get(token_id)
            if session is None:
                scope = caller.token.scope if caller.token else None
                allowed_dirs = self.allowed_dirs if self.http else None
                session = self.holder.open().session(
                    scope=scope, allowed_dirs=allowed_dirs, absolute_paths_only=True
                )
                by_token[token_id] = session
            return session

    async def dispatch_call_tool(self, request: CallToolRequest) -> ServerResult:
        name = request.params.name
        arguments = request.params.arguments or {}
        tool = self.tools.get(name)
        if tool is None:
            raise McpError(
                ErrorData(code=INVALID_PARAMS, message=f"Unknown tool {name!r}; tools: {', '.join(self.tools)}.")
            )
        ctx = self.mcp.get_context()
        caller = self._caller(ctx)
        if caller.token is not None:
            retry_after = self.limiter.acquire(caller.token.id, caller.token.rate_per_hour)
            if retry_after is not None:
                raise McpError(
                    ErrorData(
                        code=RATE_LIMITED,
                        message=f"Rate limit of {caller.token.rate_per_hour} calls per hour reached for this token; "
                        f"retry in {retry_after} s.",
                        data={"retry_after_sec": retry_after, "limit_per_hour": caller.token.rate_per_hour},
                    )
                )
            try:
                check_token(name, caller.token, after_validation=False)
            except KBError as exc:
                return ServerResult(tool_result(failure(exc)))
        try:
            # Strict, as the service is: no true -> 1.0, "0.5" -> 0.5 or "[...]" -> a list (FastMCP's own
            # validation, run again by tool.run, coerces all three; over strict values it changes nothing).
            validated = tool.fn_metadata.arg_model.model_validate(arguments, strict=True)
        except ValidationError as exc:
            problems = [
                {"field": ".".join(str(p) for p in e["loc"]) or "(arguments)", "problem": e["msg"]}
                for e in exc.errors(include_url=False, include_input=False)
            ]
            text = "; ".join(f"{p['field']}: {p['problem']}" for p in problems)
            raise McpError(
                ErrorData(
                    code=INVALID_PARAMS,
                    message=f"Invalid arguments for {name}: {text}",
                    data={"code": "INVALID_ARGUMENT", "details": {"errors": problems}},
                )
            ) from None
        if self.http:
            try:
                if caller.token is not None:
                    check_token(name, caller.token, after_validation=True)
                paths = ACCESS[name].paths
                if paths:
                    given = {field: getattr(validated, field) for field in paths}
                    arguments = {**arguments, **confine_arguments(given, paths, self.allowed_dirs)}
            except KBError as exc:
                return ServerResult(tool_result(failure(exc)))
        try:
            result = await tool.run(arguments, context=ctx, convert_result=True)
        except ToolError as exc:
            if isinstance(exc.__cause__, McpError):
                raise exc.__cause__ from None
            logger.error("Tool %s failed unexpectedly", name, exc_info=exc.__cause__ or exc)
            raise McpError(
                ErrorData(code=INTERNAL_ERROR, message=f"{name} failed because of an internal error; see the log.")
            ) from None
        return ServerResult(result)

    # -- transports ----------------------------------------------------------------------------
    async def run_stdio(self, protocol_out: Any = None) -> None:
        """Serve on stdin and ``protocol_out`` (default: stdout)."""
        from mcp.server.stdio import stdio_server

        lowlevel = sdk.lowlevel_server(self.mcp)
        async with stdio_server(stdout=protocol_out) as (read_stream, write_stream):
            await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())

    def http_app(self) -> Starlette:
        """The Starlette app of the streamable HTTP transport (endpoint /mcp)."""
        return self.mcp.streamable_http_app()
