"""Callables that tests hand to parser processes (importable there as ``tests.parser_hooks``)."""

from __future__ import annotations

import functools
from pathlib import Path


def copy_then_change_the_source(stage: functools.partial) -> None:
    """A file's staging copy, then a change to the file it copied."""
    stage()
    Path(stage.args[0]).write_text("CHANGED after the copy", encoding="utf-8")
