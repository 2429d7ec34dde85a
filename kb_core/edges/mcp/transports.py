"""Entry points of ``kb mcp``: serve the MCP server on stdio, or on streamable HTTP at a checked address."""

from __future__ import annotations

import errno
import ipaddress
import logging
import os
import signal
import socket
import sys
from collections.abc import Sequence
from io import TextIOWrapper
from pathlib import Path

import anyio

from kb_core.base.errors import InvalidArgument, KBError, PermissionDenied
from kb_core.base.safe_files import path_name_problem, shown_path
from kb_core.edges.mcp.http_security import url_host
from kb_core.edges.mcp.server import DEFAULT_HTTP_PORT, KBMCPServer

logger = logging.getLogger(__name__)


def serve_stdio(home: str | Path | None = None) -> None:
    """Serve on stdio. From here on, stray writes to stdout (ours, a library's, a C extension's) go to
    stderr: file descriptor 1 is pointed at stderr and the protocol keeps a private copy of the old one."""
    protocol_out = anyio.wrap_file(TextIOWrapper(os.fdopen(os.dup(1), "wb"), encoding="utf-8"))
    sys.stdout.flush()
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    server = KBMCPServer(home)
    server.holder.open(warm_up_first=True)

    def stop(signum: int, frame: object) -> None:
        # SIGTERM or Ctrl-C (#34): cancel the running imports and wait for them (nothing half-committed, no staging
        # copy or upload left), then end the process here. Unwinding the event loop instead would wait for the
        # protocol's reader thread, blocked on standard input for as long as the client keeps it open.
        logger.warning("stopping: cancelling the running imports")
        server.holder.close()
        logging.shutdown()
        os._exit(128 + signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, stop)
    try:
        anyio.run(server.run_stdio, protocol_out)
    finally:
        server.holder.close()  # the client closed the stream: imports still running are cancelled


def listening_socket(host: str, port: int, allow_remote: bool = False) -> socket.socket:
    """A TCP socket bound to ``host`` (an address, ``[v6]`` or a name) and ``port``, not yet listening.

    Raises InvalidArgument for a malformed port or host, PermissionDenied for an address other machines can
    reach without ``allow_remote`` (checked on what the name resolves to), and KBError ``CANNOT_LISTEN``
    when the address cannot be bound (in use, not this machine's, a privileged port)."""
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise InvalidArgument(f"--port must be between 1 and 65535, got {port!r}.")
    text = host.strip()
    if text.startswith("[") or text.endswith("]"):
        inner = text[1:-1] if text.startswith("[") and text.endswith("]") else ""
        try:
            text = ipaddress.IPv6Address(inner).compressed
        except ValueError:
            raise InvalidArgument(
                f"--host {host!r} is not a valid address; write an IPv6 address as ::1 or [::1]."
            ) from None
    if not text:
        raise InvalidArgument("--host must not be empty; the default is 127.0.0.1.")
    try:
        found = socket.getaddrinfo(text, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as exc:
        reason = exc.strerror if isinstance(exc, socket.gaierror) and exc.strerror else str(exc)
        raise InvalidArgument(f"Cannot listen on {host!r}: the name does not resolve ({reason}).") from None
    addresses = [info for info in found if info[0] in (socket.AF_INET, socket.AF_INET6)]
    if not addresses:
        raise InvalidArgument(f"Cannot listen on {host!r}: it resolves to no IPv4 or IPv6 address.")
    remote = [str(info[4][0]) for info in addresses if not ipaddress.ip_address(str(info[4][0])).is_loopback]
    if remote and not allow_remote:
        raise PermissionDenied(
            f"Refusing to listen on {host!r} ({remote[0]}), which is reachable from other machines; "
            "pass --allow-remote to do so."
        )
    family, kind, proto, _, address = addresses[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        where = f"{url_host(str(address[0]))}:{port}"
        if exc.errno == errno.EADDRINUSE:
            reason = f"port {port} is already in use (another server?); choose another with --port"
        elif exc.errno == errno.EACCES:
            reason = "permission denied (ports below 1024 need privileges); choose another with --port"
        elif exc.errno == errno.EADDRNOTAVAIL:
            reason = "the address does not belong to this machine"
        else:
            reason = exc.strerror or str(exc)
        raise KBError(f"Cannot listen on {where}: {reason}.", code="CANNOT_LISTEN") from None
    return sock


def serve_http(
    home: str | Path | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = DEFAULT_HTTP_PORT,
    allowed_dirs: Sequence[str | Path] = (),
    allow_remote: bool = False,
    allowed_hosts: Sequence[str] = (),
) -> None:
    """Serve streamable HTTP at http://HOST:PORT/mcp. A non-loopback host needs ``allow_remote``;
    ``allowed_hosts`` adds names clients may use in the Host header (see :func:`transport_security`)."""
    from kb_core.edges.mcp import http_limits  # uvicorn is imported only to serve HTTP

    for folder in allowed_dirs:
        problem = path_name_problem(str(folder))
        if problem is not None:
            raise KBError(f"--allow-dir {shown_path(str(folder))!r} {problem}.", code="INVALID_ARGUMENT")
        if not Path(folder).expanduser().is_dir():
            raise KBError(f"--allow-dir {folder!r} is not a folder.", code="INVALID_ARGUMENT")
    sock = listening_socket(host, port, allow_remote)
    server: KBMCPServer | None = None
    try:
        bound = url_host(str(sock.getsockname()[0]))
        names = [*allowed_hosts, host]  # the name given to --host is one clients use too
        server = KBMCPServer(home, http=True, host=bound, port=port, allowed_dirs=allowed_dirs, allowed_hosts=names)
        server.holder.open(warm_up_first=True)
        logger.warning("MCP server listening on http://%s:%d/mcp", bound, port)
        quiet_client_disconnects()
        # SIGTERM or Ctrl-C cancels the running imports at once (an import tool call in flight returns within
        # seconds instead of holding the graceful shutdown), and the shutdown waits for them to stop (#34).
        http_limits.serve(  # header and idle timeouts, connection caps (#37)
            server.http_app(), sock, stopping=server.holder.cancel_imports, stopped=server.holder.close
        )
    finally:
        sock.close()
        if server is not None:
            server.holder.close()  # running imports cancelled and waited for: nothing half-committed, no staging left


class _ClientGone(logging.Filter):
    """Drops the MCP SDK's "Error in standalone SSE writer" traceback when its stream was closed because the client
    went away (a session ended, a connection dropped): that is how a client disconnects, not an error (#34). Other
    errors of that writer are kept."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage() != "Error in standalone SSE writer" or record.exc_info is None:
            return True
        if isinstance(record.exc_info[1], anyio.ClosedResourceError | anyio.BrokenResourceError):
            logger.debug("an MCP client's event stream closed (the client disconnected)")
            return False
        return True


def quiet_client_disconnects() -> None:
    """Install :class:`_ClientGone` on the SDK's streamable HTTP logger (once)."""
    target = logging.getLogger("mcp.server.streamable_http")
    if not any(isinstance(f, _ClientGone) for f in target.filters):
        target.addFilter(_ClientGone())
