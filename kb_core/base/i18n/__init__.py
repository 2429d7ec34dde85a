"""Simplified Chinese and English for everything a person reads: one gettext catalogue per language.

Text is written in English, in the code, as a ``str.format`` template: front ends call :func:`translate` (the app's
``t()`` and the CLI's, for their own labels), and the library marks what it says to people with :func:`msg`, which
returns a :class:`Text` — a ``str`` holding the English sentence (so logs, JSON envelopes and MCP results read as
before) that also remembers its template and parameters, so an edge can say it in the user's language with
:func:`localize`. The English template is the key (gettext's msgid); ``locales/kb_workbench.pot`` lists every key the
code uses and ``locales/zh/LC_MESSAGES/kb_workbench.po`` gives each its Chinese. ``python -m kb_core.base.i18n.keys``
(:mod:`kb_core.base.i18n.keys`) reads the keys from the code (``t`` and ``msg`` calls) and updates both catalogues with
Babel; ``tests/test_i18n.py`` holds that both
catalogues have the same keys, every key is translated and keeps its placeholders, and every call passes a literal.

Babel reads the ``.po`` file directly (no compiled ``.mo`` to keep in step): it is the well-kept Python i18n library
the catalogues' tooling already needs.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

LANGUAGES: dict[str, str] = {"en": "English", "zh": "简体中文"}
"""The interface languages, by code, each named in itself."""
DEFAULT_LANGUAGE = "en"
DOMAIN = "kb_workbench"
LOCALES = Path(__file__).resolve().parent / "locales"


def language_of(tag: str | None) -> str:
    """The interface language for a browser language tag or a POSIX locale (``zh-CN``, ``zh_TW.UTF-8``,
    ``zh-Hans``, ``en-US``, ``C``): Chinese for any Chinese, otherwise English."""
    if not tag:
        return DEFAULT_LANGUAGE
    primary = tag.strip().replace("_", "-").split(".")[0].split("@")[0].split("-")[0].lower()
    return primary if primary in LANGUAGES else DEFAULT_LANGUAGE


def language_from_environment(environ: Mapping[str, str] | None = None) -> str:
    """The language the POSIX locale asks for, in gettext's order (LANGUAGE, LC_ALL, LC_MESSAGES, LANG); English
    when none is set."""
    environ = os.environ if environ is None else environ
    for name in ("LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG"):
        value = environ.get(name, "")
        if value:
            # LANGUAGE is a priority list (zh_CN:en); the first entry decides.
            return language_of(value.split(":")[0])
    return DEFAULT_LANGUAGE


@cache
def catalogue(language: str) -> dict[str, str]:
    """The translations of ``language`` (English template → its text), read once per process; English has none."""
    if language == DEFAULT_LANGUAGE or language not in LANGUAGES:
        return {}
    from babel.messages.pofile import read_po

    path = LOCALES / language / "LC_MESSAGES" / f"{DOMAIN}.po"
    with path.open("rb") as handle:
        parsed = read_po(handle, locale=language)
    return {
        str(message.id): str(message.string)
        for message in parsed
        if message.id and isinstance(message.id, str) and message.string and not message.fuzzy
    }


def translate(language: str, template: str, /, **params: Any) -> str:
    """``template`` said in ``language`` with ``params`` filled in (the English template where no translation
    exists yet). Parameters that are :class:`Text` are said in ``language`` too."""
    said = catalogue(language).get(template, template)
    if not params:
        return said
    values = {key: localize(value, language) for key, value in params.items()}
    try:
        return said.format(**values)
    except (KeyError, IndexError, ValueError):  # a broken translation must not hide the message
        logger.warning("translation of %r into %s does not fit its parameters", template, language)
        return template.format(**values)


class Text(str):
    """An English sentence for people that remembers its template and parameters (see :func:`msg`)."""

    template: str
    params: dict[str, Any]

    def __new__(cls, template: str, params: Mapping[str, Any] | None = None) -> Text:
        values = dict(params or {})
        made = super().__new__(cls, template.format(**values) if values else template)
        made.template = template
        made.params = values
        return made

    def __reduce__(self) -> tuple[Any, ...]:  # crosses process pools and pickled job states intact
        return (Text, (self.template, self.params))

    def __add__(self, other: str) -> str:
        # Joined text is no longer one template: it stays English (a caller that joins should use one template).
        return str(self) + other


def msg(template: str, /, **params: Any) -> Text:
    """Mark ``template`` (a literal, for extraction) as text for people, filled with ``params``."""
    return Text(template, params)


def localize(text: Any, language: str) -> Any:
    """``text`` in ``language`` when it is a :class:`Text` (other values are returned as they are)."""
    if isinstance(text, Text) and language != DEFAULT_LANGUAGE:
        return translate(language, text.template, **text.params)
    return text


__all__ = [
    "DEFAULT_LANGUAGE",
    "LANGUAGES",
    "Text",
    "catalogue",
    "language_from_environment",
    "language_of",
    "localize",
    "msg",
    "translate",
]
