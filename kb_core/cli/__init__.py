"""The ``kb`` command line (entry point :func:`main`); one module per command group, listed in :mod:`.main`."""

from kb_core.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
