"""The one place a page shows a failure: a :class:`kb_core.KBError` as its readable message in the session's
language, with its code, never a stack trace (the page edge, as the CLI's and MCP's own)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

import streamlit as st

from kb_core import KBError
from kb_core.base.i18n import msg
from kb_core.features.results import Result
from pages._i18n import say, t

logger = logging.getLogger(__name__)
T = TypeVar("T")


def error_text(error: KBError, prefix: str = "", with_code: bool = True, multiline: bool = False) -> str:
    """The error as a page says it: ``prefix``, the message in the session's language (its lines kept as lines when
    ``multiline``), and its code."""
    said = say(error.message) or t("The operation failed.")
    if multiline:
        said = said.replace("\n", "  \n")
    text = f"{prefix}{said}"
    return f"{text}  \n`{error.code}`" if with_code and error.code else text


def show_error(error: KBError, prefix: str = "", with_code: bool = True, multiline: bool = False) -> None:
    """The error's readable message (never a stack trace), in the session's language, with its error code."""
    st.error(error_text(error, prefix, with_code, multiline), icon=":material/error:")


def attempt(run: Callable[[], T], prefix: str = "") -> T | None:
    """``run()``'s result (a session operation), or None after showing why it failed: its KBError, or for anything
    unexpected a generic error (the trace goes to the log, never to the page). A result that is a partial failure
    (an import where every file failed) is shown as its error and still returned, for its data."""
    try:
        result = run()
    except KBError as error:
        show_error(error, prefix)
        return None
    except Exception:
        logger.exception("a page's operation failed unexpectedly")
        show_error(KBError(msg("The operation failed because of an internal error; see the log."),
                           code="INTERNAL_ERROR"), prefix)
        return None
    failure = result.failure() if isinstance(result, Result) else None
    if failure is not None:
        show_error(failure, prefix)
    return result
