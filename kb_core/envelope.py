"""The result envelope the front ends show, ``{success, message, data}``: where the CLI and the MCP server take it
from. It is built by one function, :func:`kb_core.session.envelope_of`, from a typed result (:mod:`kb_core.results`)
or a KBError; :func:`failure` is its refusal form.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ParamSpec

from kb_core.session import Envelope, envelope_of, failure

if TYPE_CHECKING:
    from kb_core.results import Result

__all__ = ["Envelope", "envelope_of", "enveloped", "failure", "ok"]

P = ParamSpec("P")


# -- left for ``kb eval``'s handler (cli/evaluation.py) until the evaluation package (#28) moves it to envelope_of:
# a function that returns ``ok(...)``, or an envelope of the session's envelope API.
def ok(message: str, data: dict[str, Any]) -> Result:
    from kb_core.results import JSONResult

    return JSONResult(message, data)


def enveloped(function: Callable[P, Result | Envelope]) -> Callable[P, Envelope]:
    """``function`` answering envelopes: :func:`envelope_of` of each call; an envelope it returns is passed on."""

    @functools.wraps(function)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> Envelope:
        from kb_core.results import JSONResult

        passed: Envelope = {}

        def operation() -> Result:
            answer = function(*args, **kwargs)
            if isinstance(answer, dict):
                passed.update(answer)
                return JSONResult("", {})
            return answer

        operation.__name__ = function.__name__
        built = envelope_of(operation)
        return passed or built

    return wrapper
