"""Callables that tests hand to parser processes (importable there as ``tests.parser_hooks``)."""

from __future__ import annotations

import functools
import os
from pathlib import Path


def copy_then_change_the_source(stage: functools.partial) -> None:
    """A file's staging copy, then a change to the file it copied."""
    stage()
    Path(stage.args[0]).write_text("CHANGED after the copy", encoding="utf-8")


def copy_then_swap_the_folder(stage: functools.partial, folder: str, target: str) -> None:
    """A file's staging copy (the file opened and read), then its folder swapped for a symlink to ``target``."""
    stage()
    os.rename(folder, folder + "-moved")
    os.symlink(target, folder, target_is_directory=True)


def fifo_after_the_type_check(stage: functools.partial) -> None:
    """The file passes the type check (``os.stat``), then becomes a FIFO before it is opened: the open must not
    wait. The patch lives in this parser process for this one staging copy only."""
    path = str(stage.args[0])
    real_stat = os.stat

    def stat_then_swap(target: object, *args: object, **kwargs: object) -> os.stat_result:
        result = real_stat(target, *args, **kwargs)  # type: ignore[arg-type]
        if str(target) == path:
            os.stat = real_stat
            os.unlink(path)
            os.mkfifo(path)
        return result

    os.stat = stat_then_swap
    try:
        stage()
    finally:
        os.stat = real_stat
