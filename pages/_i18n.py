"""The app's language: English or Simplified Chinese, from the browser's language unless the visitor switched in the
sidebar (remembered for the browser session). ``t()`` says a template in that language; ``say()`` says a message of
the service (a :class:`kb_core.base.i18n.Text`) in it. The catalogues are :mod:`kb_core.base.i18n`'s."""

from __future__ import annotations

from typing import Any

import streamlit as st

from kb_core.base.i18n import LANGUAGES, language_of, localize, translate

LANGUAGE_KEY = "kb_language"


def language() -> str:
    """This browser session's interface language: the visitor's choice, else the browser's language."""
    chosen = st.session_state.get(LANGUAGE_KEY)
    if chosen in LANGUAGES:
        return str(chosen)
    try:
        return language_of(st.context.locale)
    except Exception:  # no browser behind this run (AppTest, bare mode)
        return language_of(None)


def t(template: str, /, **params: Any) -> str:
    """``template`` (a literal English template: the catalogue's key) in this session's language."""
    return translate(language(), template, **params)


def say(text: Any) -> str:
    """A message of the service (a result's ``message``, an error's) in this session's language."""
    return str(localize(text, language()))


def language_switch() -> None:
    """The sidebar's language choice; the browser's language until the visitor picks one."""
    codes = list(LANGUAGES)
    current = language()
    picked = st.sidebar.selectbox(
        "Language · 语言", codes, index=codes.index(current), format_func=LANGUAGES.__getitem__, key="kb_language_pick"
    )
    if picked != current:
        st.session_state[LANGUAGE_KEY] = picked
        st.rerun()


def mode_labels() -> dict[str, str]:
    """The search modes (the option values of kb_core.base.config.SEARCH_MODES) as a person reads them; made as the
    page runs, so that a widget's format_func called outside the script run (AppTest does) needs no language."""
    return {"hybrid": t("hybrid"), "semantic": t("semantic"), "keyword": t("keyword")}


def mode_label(mode: str) -> str:
    return mode_labels().get(mode, mode)
