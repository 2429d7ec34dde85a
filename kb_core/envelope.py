"""The result envelope every service operation returns: ``{success, message, data}``.

A failure also carries ``error: {code, details}`` with a stable code from :mod:`kb_core.errors`.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, ParamSpec

from kb_core.errors import KBError

logger = logging.getLogger(__name__)

Envelope = dict[str, Any]
P = ParamSpec("P")


def envelope(
    message: str, data: Any, *, success: bool = True, error: KBError | None = None, **top_level: Any
) -> Envelope:
    """The one envelope builder: ``{success, message, data}``, and ``error: {code, details}`` when ``error`` is
    given (a failure that still reports its data, e.g. an import where every file failed). ``top_level``
    repeats fields beside ``data`` where a tool contract asks for that (rag_search)."""
    built: Envelope = {"success": success and error is None, "message": message, "data": data}
    if error is not None:
        built["error"] = {"code": error.code, "details": error.details}
    built.update(top_level)
    return built


def ok(message: str, data: Any) -> Envelope:
    return envelope(message, data)


def failure(error: KBError) -> Envelope:
    return envelope(error.message, None, error=error)


def enveloped(method: Callable[P, Envelope]) -> Callable[P, Envelope]:
    """Turn KBError into a failure envelope, and anything unexpected into INTERNAL_ERROR (logged, not shown)."""

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> Envelope:
        try:
            return method(*args, **kwargs)
        except KBError as exc:
            logger.info("%s failed: %s %s", method.__name__, exc.code, exc.message)
            return failure(exc)
        except Exception:
            logger.exception("%s failed unexpectedly", method.__name__)
            return failure(
                KBError(f"{method.__name__} failed because of an internal error; see the log.", code="INTERNAL_ERROR")
            )

    return wrapper
