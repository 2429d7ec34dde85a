"""CLI commands to move knowledge bases between homes: ``kb export PATH [--kb NAME]`` and ``kb import-db PATH``."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from kb_core.edges.cli.common import Commands
from kb_core.edges.envelopes import Envelope

if TYPE_CHECKING:
    from kb_core.edges.envelopes import Enveloped


def _export(session: Enveloped, args: argparse.Namespace) -> Envelope:
    return session.export_database(args.path, args.kb or None, overwrite=args.overwrite)


def _import_db(session: Enveloped, args: argparse.Namespace) -> Envelope:
    return session.import_database(args.path)


def register(commands: Commands) -> None:
    export = commands.add_parser(
        "export",
        help="export every knowledge base (or those named with --kb) to one portable file",
        description="Write knowledge bases with their documents, original files, chunks and vectors to one ZIP "
        "file that `kb import-db` reads. API keys are never exported.",
    )
    export.add_argument("path", help="the file to write, e.g. backup.kbx (an existing file is refused)")
    export.add_argument("--overwrite", action="store_true", help="replace the file if it exists")
    export.add_argument(
        "--kb", action="append", metavar="NAME", help="export only this knowledge base (repeat for several)"
    )
    export.set_defaults(handler=_export, renderer=None)

    import_db = commands.add_parser(
        "import-db",
        help="merge the knowledge bases of an export file into this home",
        description="Validate an export file completely, then add its knowledge bases; existing names get a "
        "timestamp suffix. Nothing changes if the file is refused.",
    )
    import_db.add_argument("path", help="an export file written by `kb export`")
    import_db.set_defaults(handler=_import_db, renderer=None)
