"""Sliding-window rate limits: the MCP server's per-token calls (tokens: :mod:`kb_core.store.tokens`) and a public
demo's per-visitor imports and searches (:mod:`kb_core.session.public_demo`)."""

from __future__ import annotations

import collections
import math
import threading
import time
from collections.abc import Callable


class SlidingWindowLimiter:
    """At most ``limit`` events per key in any window of ``window_seconds`` (an exact sliding log)."""

    def __init__(self, window_seconds: float = 3600.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.window = window_seconds
        self.clock = clock
        self._events: dict[str, collections.deque[float]] = {}
        self._lock = threading.Lock()

    def acquire(self, key: str, limit: int) -> int | None:
        """Record an event and return None, or refuse it and return the seconds until one is allowed."""
        now = self.clock()
        with self._lock:
            events = self._events.setdefault(key, collections.deque())
            while events and events[0] <= now - self.window:
                events.popleft()
            if len(events) >= limit:
                return max(1, math.ceil(events[len(events) - limit] + self.window - now))
            events.append(now)
            if len(self._events) > 4096:  # keys seen once (visitors who left) do not pile up
                self._forget_idle(now)
            return None

    def _forget_idle(self, now: float) -> None:
        for key in [k for k, v in self._events.items() if not v or v[-1] <= now - self.window]:
            del self._events[key]
