"""Cancelling work that runs on several threads and in other processes: one event per piece of work, seen by the
threads that do it.

The import pipeline runs its work on threads of its own (parser requests, embedding calls); the code deep inside
them (a parser process's answer being waited for, a model's forward pass) cannot take a cancel argument through
every interface in between (the :class:`~kb_core.engines.embedding.base.Embedder` protocol, a service's embedder
factory). So the thread that runs a piece of work enters :func:`cancel_scope` with the work's event, and that code asks
:func:`cancel_requested` or calls :func:`raise_if_cancelled`, which raises :class:`~kb_core.base.errors.Cancelled`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from typing import ParamSpec, TypeVar

from kb_core.base.errors import Cancelled

__all__ = ["Cancelled", "cancel_requested", "cancel_scope", "in_scope", "raise_if_cancelled"]

P = ParamSpec("P")
T = TypeVar("T")
_current = threading.local()


@contextmanager
def cancel_scope(event: threading.Event | None) -> Iterator[None]:
    """Work on this thread inside the block is cancelled once ``event`` is set (``None``: not cancellable)."""
    previous = getattr(_current, "event", None)
    _current.event = event
    try:
        yield
    finally:
        _current.event = previous


def in_scope(event: threading.Event | None, function: Callable[P, T]) -> Callable[P, T]:
    """``function`` run inside ``cancel_scope(event)`` on whichever thread calls it (a pool's)."""

    @wraps(function)
    def scoped(*args: P.args, **kwargs: P.kwargs) -> T:
        with cancel_scope(event):
            return function(*args, **kwargs)

    return scoped


def cancel_requested() -> bool:
    """Whether the work this thread does now was cancelled."""
    event = getattr(_current, "event", None)
    return event is not None and event.is_set()


def raise_if_cancelled(what: str = "the work") -> None:
    """Raise :class:`Cancelled` when the work this thread does now was cancelled."""
    if cancel_requested():
        raise Cancelled(f"cancelled: {what} was stopped")
