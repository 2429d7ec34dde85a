"""What every ``kb`` command group shares: the handler and renderer types, the usage error, the table helper, and
the language the command speaks (``--lang``, else the locale): :func:`t` for the CLI's own text, :func:`say` for the
library's messages."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

from kb_core.base.i18n import DEFAULT_LANGUAGE, localize, translate
from kb_core.edges.envelopes import Envelope

if TYPE_CHECKING:
    from kb_core.edges.envelopes import Enveloped

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2
EXIT_SOME_FAILED = 3  # the command ran, but some of its items (files of an import) failed: each says why
EXIT_CLOSED_PIPE = 141  # the reader of the output went away (kb docs | head): 128 + SIGPIPE, as other tools


def exit_status(envelope: Envelope) -> int:
    """The exit status of a command that answered ``envelope``: 1 on a reported failure, 3 when it succeeded
    only in part (``data.failed_count`` > 0), else 0."""
    if not envelope["success"]:
        return EXIT_FAILURE
    data = envelope.get("data")
    if isinstance(data, dict) and isinstance(data.get("failed_count"), int) and data["failed_count"] > 0:
        return EXIT_SOME_FAILED
    return EXIT_OK

# A handler runs one session operation for the parsed command line (the session answers envelopes); a renderer turns
# its envelope into text.
Handler = Callable[["Enveloped", argparse.Namespace], Envelope]
Renderer = Callable[[Envelope], str]
# The top-level parser's sub-commands: each group's ``register`` adds its commands to it.
Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


_language = DEFAULT_LANGUAGE


def set_language(language: str) -> None:
    """Speak ``language`` (``en`` or ``zh``) from now on: what ``--lang`` or the locale chose."""
    global _language
    _language = language


def language() -> str:
    return _language


def t(template: str, /, **params: Any) -> str:
    """The CLI's own text (headers, summary and progress lines) in the command's language; ``template`` is a literal
    English template, the catalogue's key."""
    return translate(_language, template, **params)


def say(text: Any) -> str:
    """A message of the library (a :class:`kb_core.base.i18n.Text`, or a plain string kept as it is) in the command's
    language."""
    return str(localize(text, _language))


class UsageError(Exception):
    """A command line that cannot be run as given (exit status 2)."""


def table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str]]) -> str:
    """Rows as a plain-text table: ``columns`` are (key, header) pairs, the headers already in the command's
    language; ``(none)`` when there are no rows."""
    if not rows:
        return t("(none)")
    from tabulate import tabulate  # imported when a table is printed: 30 ms that `kb --help` need not pay

    return tabulate([[row.get(key, "") for key, _ in columns] for row in rows], headers=[h for _, h in columns])
