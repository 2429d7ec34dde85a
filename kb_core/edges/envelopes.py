"""The result envelope the front ends show, ``{success, message, data}``, made in one place at the edges.

The session's operations (:class:`kb_core.session.operations.Operations`) return typed results
(:mod:`kb_core.features.results`) and raise :class:`KBError`; :func:`envelope_of` turns one call into an envelope (a
failure also carries ``error: {code, details}`` with a stable code from :mod:`kb_core.base.errors`), and :func:`failure`
is its refusal form. The CLI and the MCP server call operations through it; :class:`Enveloped` answers every operation
of a session as an envelope, for front ends and tests that read envelopes, without declaring any operation again.

Imports stay light (the operations load on the first session): ``kb --help`` imports this module.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from functools import cache, partial
from typing import TYPE_CHECKING, Any, ParamSpec

from kb_core.base.errors import KBError

if TYPE_CHECKING:
    from kb_core.features.results import Result
    from kb_core.session.operations import Operations

logger = logging.getLogger("kb_core.envelope")  # the name the failures were always logged under

Envelope = dict[str, Any]
P = ParamSpec("P")


def envelope_of(operation: Callable[P, Result], /, *args: P.args, **kwargs: P.kwargs) -> Envelope:
    """The envelope of ``operation(*args, **kwargs)``: its result as ``{success, message, data}`` (a partial failure,
    such as an import where every file failed, with ``error`` beside its data); a KBError as a failure envelope;
    anything unexpected as INTERNAL_ERROR (logged with its trace, never shown), named after the operation."""
    name = getattr(operation, "__name__", "operation")
    try:
        result = operation(*args, **kwargs)
    except KBError as exc:
        logger.info("%s failed: %s %s", name, exc.code, exc.message)
        return failure(exc)
    except Exception:
        logger.exception("%s failed unexpectedly", name)
        return failure(KBError(f"{name} failed because of an internal error; see the log.", code="INTERNAL_ERROR"))
    error = result.failure()
    built: Envelope = {
        "success": error is None and result.succeeded(),
        "message": result.message,
        "data": result.to_json(),
    }
    if error is not None:
        built["error"] = {"code": error.code, "details": error.details}
    built.update(result.top_level())
    return built


def failure(error: KBError) -> Envelope:
    """The envelope of a refusal: what :func:`envelope_of` answers for a KBError, also for the edges that refuse a
    call before any operation runs (an MCP token's or path's refusal, a home that cannot be opened)."""
    return {
        "success": False,
        "message": error.message,
        "data": None,
        "error": {"code": error.code, "details": error.details},
    }


@cache
def answers_a_result(operations_type: type, name: str) -> bool:
    """Whether ``operations_type.name`` is a public operation: a method whose declared return type is a result of
    :mod:`kb_core.features.results` (the session's state and helpers, such as ``visible_kbs``, are not)."""
    from kb_core.features import results

    if name.startswith("_"):
        return False
    method = inspect.getattr_static(operations_type, name, None)
    if not inspect.isfunction(method):
        return False
    returned = inspect.signature(method).return_annotation  # a string: the module has postponed annotations
    kind = getattr(results, returned, None) if isinstance(returned, str) else returned
    return isinstance(kind, type) and issubclass(kind, results.Result)


class Enveloped:
    """A session whose every operation answers its envelope: ``Enveloped(ops).search(request)`` is
    ``envelope_of(ops.search, request)``. Only public operations (methods returning a result) are offered; the
    session's state and typed helpers are read on :attr:`operations`."""

    def __init__(self, operations: Operations) -> None:
        self.operations = operations

    def __getattr__(self, name: str) -> Callable[..., Envelope]:
        if name == "operations":  # not set yet (a copy being made): no session to ask
            raise AttributeError(name)
        if not answers_a_result(type(self.operations), name):
            raise AttributeError(
                f"{name!r} is not an operation answering an envelope; read it on the session itself "
                f"(Enveloped(...).operations.{name})"
            )
        return partial(envelope_of, getattr(self.operations, name))

    def __repr__(self) -> str:
        return f"Enveloped({self.operations!r})"
