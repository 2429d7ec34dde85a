"""What a few idle sockets may cost ``kb mcp --http``: header and idle timeouts, a connection cap, a per-client cap.

Before #37 a connection that never finished its request headers was held open for ever (uvicorn times out only the
idle time after a response), with no cap and no token needed: ~1,100 half-open connections used up a server's 1,024
open files, every real client then timed out, and each refused accept logged a traceback (52 MB in 2 minutes).

uvicorn serves with its own h11 protocol, given here as a subclass (its ``http`` setting takes a protocol class):

* a request's headers must arrive within :data:`HEADER_TIMEOUT_S` of the connection's opening or of the previous
  response (bytes trickling in do not extend it); between requests a connection may idle :data:`IDLE_TIMEOUT_S`
  (uvicorn's ``timeout_keep_alive``); headers are at most :data:`MAX_HEADER_BYTES` (h11's incomplete-event limit);
* at most :func:`connection_limit` connections at once and :data:`MAX_CONNECTIONS_PER_CLIENT` per client address
  (not on loopback, where every local program shares one address):
  one over a cap closes an *idle* connection (of that client, or of any), one with no request in progress: the
  oldest of those that never completed a request first, then the oldest of those waiting between requests for at
  least :data:`IDLE_GRACE_S`. So a flood of idle sockets can never lock a real client out: its
  connection is spared while its first request is read, busy while it is served, and once served it goes after
  every socket that never completed a request; when no connection may go, the new one is closed;
* what is refused or closed is logged once, then counted in one line a minute at most, and a failed ``accept()``
  (out of file descriptors) is logged the same way instead of a traceback per attempt.

The soft limit on open files is raised to the hard one (at most :data:`OPEN_FILES_WANTED`) when the server starts,
and the connection cap stays under it.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import resource
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

logger = logging.getLogger(__name__)

HEADER_TIMEOUT_S = 10.0
IDLE_TIMEOUT_S = 5
MAX_HEADER_BYTES = 16 * 1024
MAX_CONNECTIONS = 1024
MAX_CONNECTIONS_PER_CLIENT = 128
OPEN_FILES_WANTED = 8192
OPEN_FILES_RESERVED = 256  # for the process's own files: models, indexes, the store, parser pipes
# Connections asyncio accepts in one go (it accepts up to the listen backlog before any of them is seen, so the cap
# acts between batches): the cap leaves room for one batch under the open-files limit.
ACCEPT_BACKLOG = 256
# A connection answered this recently is not closed to make room: its client's next request may be sent and not yet
# read (a busy server reads a connection only between the batches it accepts). A new connection that finds only
# such connections, and busy ones, is refused instead.
IDLE_GRACE_S = 1.0
REPORT_EVERY_S = 60.0


def raise_open_files_limit() -> int:
    """Raise the soft limit on open files towards the hard limit (servers do: nginx's worker_rlimit_nofile);
    returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = OPEN_FILES_WANTED if hard == resource.RLIM_INFINITY else min(hard, OPEN_FILES_WANTED)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError):
            pass
    return int(soft)


def connection_limit(open_files: int) -> int:
    """The connection cap for a process allowed ``open_files`` descriptors: room too for a batch of accepts, which
    are open before the cap sees them, and for a new connection to be read before a batch could push it out."""
    return max(16, min(MAX_CONNECTIONS, open_files - OPEN_FILES_RESERVED - ACCEPT_BACKLOG))


class _Reporter:
    """One log line for the first event of a kind, then at most one summary a :data:`REPORT_EVERY_S`."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.first: set[str] = set()
        self.last_summary = time.monotonic()

    def event(self, kind: str, message: str, *args: Any) -> None:
        if kind not in self.first:
            self.first.add(kind)
            logger.warning(message + " (further ones are counted, one line a minute at most)", *args)
            return
        self.counts[kind] += 1
        now = time.monotonic()
        if now - self.last_summary >= REPORT_EVERY_S:
            summary = ", ".join(f"{count} {kind}" for kind, count in sorted(self.counts.items()))
            logger.warning("In the last %.0f s: %s", now - self.last_summary, summary)
            self.counts.clear()
            self.last_summary = now


class ConnectionGuard:
    """The open connections of one server, oldest first, with their client addresses."""

    def __init__(self, max_connections: int, per_client: int = MAX_CONNECTIONS_PER_CLIENT) -> None:
        self.max_connections = max_connections
        self.per_client = per_client
        self.open: dict[GuardedH11Protocol, str] = {}  # insertion order: oldest first
        self.per_address: Counter[str] = Counter()
        self.report = _Reporter()

    def admit(self, protocol: GuardedH11Protocol) -> bool:
        """Whether ``protocol``'s new connection may stay; to make room, the oldest idle connection goes."""
        address = protocol.client[0] if protocol.client else "?"
        # Every process of this machine comes from a loopback address: a cap per address there would let one local
        # program lock out the others, so on loopback the server's cap alone applies.
        capped = not _is_loopback(address)
        if capped and self.per_address[address] >= self.per_client and not self._evict(address):
            self.report.event(
                "connections refused (busy client)",
                "Refusing a connection from %s: it has %d open (the per-client limit), none idle for %.0f s",
                address,
                self.per_address[address],
                IDLE_GRACE_S,
            )
            return False
        if len(self.open) >= self.max_connections and not self._evict(None):
            self.report.event(
                "connections refused (server full)",
                "Refusing a connection from %s: %d connections are open (the server's limit), none idle for %.0f s",
                address,
                len(self.open),
                IDLE_GRACE_S,
            )
            return False
        self.open[protocol] = address
        self.per_address[address] += 1
        return True

    def _evict(self, address: str | None) -> bool:
        """Close one idle connection (of ``address``, or of any client): the oldest that never completed a request,
        else the oldest waiting between requests. Whether one was closed."""
        victim: GuardedH11Protocol | None = None
        settled = time.monotonic() - IDLE_GRACE_S
        for protocol, owner in self.open.items():  # oldest first
            if (address is None or owner == address) and protocol.idle:
                if not protocol.served:
                    victim = protocol
                    break
                if protocol.idle_since <= settled:
                    victim = victim or protocol
        if victim is None:
            return False
        owner = self.open[victim]
        self.report.event(
            "idle connections closed for newer ones",
            "Closing idle connections to make room: %s (those that never sent a request first, oldest first; a "
            "connection with a request in progress is never closed)",
            f"{owner} has {self.per_address[owner]} open (the per-client limit is {self.per_client})"
            if address is not None
            else f"{len(self.open)} are open (the limit is {self.max_connections})",
        )
        self.release(victim)
        victim.close_idle()
        return True

    def release(self, protocol: GuardedH11Protocol) -> None:
        address = self.open.pop(protocol, None)
        if address is not None:
            self.per_address[address] -= 1
            if self.per_address[address] <= 0:
                del self.per_address[address]

    def accept_failed(self, context: dict[str, Any]) -> None:
        error = context.get("exception")
        reason = getattr(error, "strerror", None) or str(error or context.get("message"))
        self.report.event(
            "accepts failed",
            "Cannot accept connections: %s (%d connections open); accepting resumes in a second",
            reason,
            len(self.open),
        )


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a header deadline, under a :class:`ConnectionGuard` (see :func:`protocol_for`)."""

    guard: ConnectionGuard

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_deadline: asyncio.TimerHandle | None = None
        self._admitted = False
        self.served = False  # a response was completed on this connection
        self.idle_since = time.monotonic()  # opened, or its last response completed

    @property
    def idle(self) -> bool:
        """No request in progress: waiting for headers (perhaps for ever), or idle after a response."""
        return self.cycle is None or self.cycle.response_complete

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if not self.guard.admit(self):
            transport.abort()
            return
        self._admitted = True
        self._arm_header_deadline()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if not self.idle:  # a request's headers arrived: the app has it now
            self._disarm_header_deadline()

    def on_response_complete(self) -> None:
        self.served = True
        self.idle_since = time.monotonic()
        super().on_response_complete()
        if self.idle and not self.transport.is_closing():  # the next request's headers are due
            self._arm_header_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_deadline()
        if self._admitted:
            self.guard.release(self)
        super().connection_lost(exc)

    def close_idle(self) -> None:
        self._disarm_header_deadline()
        if not self.transport.is_closing():
            self.transport.abort()

    def _arm_header_deadline(self) -> None:
        self._disarm_header_deadline()
        self._header_deadline = self.loop.call_later(HEADER_TIMEOUT_S, self._header_deadline_passed)

    def _disarm_header_deadline(self) -> None:
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None

    def _header_deadline_passed(self) -> None:
        self._header_deadline = None
        if self.idle and not self.transport.is_closing():
            self.guard.report.event(
                "connections closed without a request",
                "Closed a connection from %s: no request headers within %.0f s",
                self.client[0] if self.client else "?",
                HEADER_TIMEOUT_S,
            )
            self.transport.abort()


def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def protocol_for(guard: ConnectionGuard) -> type[GuardedH11Protocol]:
    """The protocol class uvicorn is given (``Config(http=...)``): :class:`GuardedH11Protocol` bound to ``guard``."""
    return type("KBGuardedH11Protocol", (GuardedH11Protocol,), {"guard": guard})


def quiet_accept_failures(loop: asyncio.AbstractEventLoop, guard: ConnectionGuard) -> None:
    """Report a failed ``accept()`` (asyncio retries it a second later) through ``guard``'s reporter: once, then
    counted, instead of a traceback per attempt; every other loop error goes to the default handler."""

    def handle(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if str(context.get("message", "")).startswith("socket.accept() out of system resource"):
            guard.accept_failed(context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handle)


def serve(
    app: Any,
    sock: Any,
    *,
    stopping: Callable[[], None] | None = None,
    stopped: Callable[[], None] | None = None,
) -> None:
    """Serve the ASGI ``app`` on the bound socket ``sock`` with uvicorn under these limits, until stopped.
    ``stopping`` is called as soon as the server is told to stop (SIGTERM, Ctrl-C), ``stopped`` (on a thread) once
    its connections are closed, before uvicorn ends the process with the signal it got."""
    import uvicorn

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            if stopping is not None:
                stopping()
            super().handle_exit(sig, frame)

        async def shutdown(self, sockets: Any = None) -> None:
            await super().shutdown(sockets)
            if stopped is not None:
                await asyncio.to_thread(stopped)

    guard = ConnectionGuard(connection_limit(raise_open_files_limit()))
    config = uvicorn.Config(
        app,
        log_level="warning",
        loop="asyncio",  # the accept-failure handling above is asyncio's
        http=protocol_for(guard),
        timeout_keep_alive=IDLE_TIMEOUT_S,
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
        backlog=ACCEPT_BACKLOG,
    )
    server = Server(config)

    async def run() -> None:
        quiet_accept_failures(asyncio.get_running_loop(), guard)
        await server.serve(sockets=[sock])

    asyncio.run(run())
