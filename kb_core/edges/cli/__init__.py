"""The ``kb`` command line: :func:`kb_core.edges.cli.main.main`, one module per command group (listed in
:data:`kb_core.edges.cli.main.COMMAND_GROUPS`), and what they share in :mod:`kb_core.edges.cli.common`."""
