"""Results remembered for every browser session of the process (a search moved back to a setting it had costs
nothing): the newest of them under a key that holds all they depend on."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import streamlit as st

from kb_core.base.config import resolve_home

T = TypeVar("T")


@dataclass(frozen=True)
class Remembered(Generic[T]):
    """A result from :func:`remembered`: how long computing it took, and whether this call computed it."""

    value: T
    seconds: float
    fresh: bool


class Memo:
    """Results under a key, the newest ``size`` of them; a failure (a raised KBError) is never remembered."""

    def __init__(self, size: int = 256) -> None:
        self.size = size
        self._items: OrderedDict[str, tuple[object, float]] = OrderedDict()
        self._lock = threading.Lock()

    def get_or_run(self, key: str, run: Callable[[], T]) -> Remembered[T]:
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
                return Remembered(found[0], found[1], False)  # type: ignore[arg-type]
        start = time.perf_counter()
        value = run()  # raises: nothing is remembered
        seconds = time.perf_counter() - start
        with self._lock:
            self._items[key] = (value, seconds)
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return Remembered(value, seconds, True)


@st.cache_resource
def _memo_for(home: str) -> Memo:
    return Memo()


def remembered(key: str, run: Callable[[], T]) -> Remembered[T]:
    """``run()``'s result, remembered under ``key`` for every browser session of this process. The key must hold
    all the call depends on (for a search: the KB id and version, the query, every setting); pages treat the
    result as read-only. A KBError ``run`` raises goes to the caller."""
    return _memo_for(str(resolve_home())).get_or_run(key, run)
