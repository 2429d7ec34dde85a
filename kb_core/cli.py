"""The ``kb`` command line: a thin front end over :mod:`kb_core.service`.

With ``--json`` it prints exactly the service envelope. Exit status: 0 on success, 1 on a
reported failure, 2 on a usage error.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from tabulate import tabulate

from kb_core.envelope import Envelope

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2

Handler = Callable[[Any, argparse.Namespace], Envelope]
Renderer = Callable[[Envelope], str]


def _table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str]]) -> str:
    if not rows:
        return "(none)"
    return tabulate([[row.get(key, "") for key, _ in columns] for row in rows], headers=[h for _, h in columns])


# -- handlers: each calls one service operation ---------------------------------------------------
API_KEY_VARIABLE = "KB_EMBEDDING_API_KEY"


class UsageError(Exception):
    """A command line that cannot be run as given (exit status 2)."""


def _api_key(args: argparse.Namespace) -> str | None:
    """The endpoint key: --embedding-api-key-stdin (a prompt without echo on a terminal, else one line of
    stdin), --embedding-api-key, or $KB_EMBEDDING_API_KEY when an endpoint is given."""
    if args.embedding_api_key_stdin:
        if args.embedding_api_key is not None:
            raise UsageError("give the API key once: --embedding-api-key or --embedding-api-key-stdin, not both")
        if sys.stdin.isatty():
            import getpass

            key = getpass.getpass("Embedding API key (not shown): ")
        else:
            key = sys.stdin.readline().rstrip("\r\n")
        if not key.strip():
            raise UsageError("--embedding-api-key-stdin read no API key from standard input")
        return key
    if args.embedding_api_key is not None:
        print(
            f"note: a key on the command line is visible to other users (ps) and kept in shell history; "
            f"prefer ${API_KEY_VARIABLE} or --embedding-api-key-stdin.",
            file=sys.stderr,
        )
        return args.embedding_api_key
    if args.embedding_endpoint:
        return os.environ.get(API_KEY_VARIABLE) or None
    return None


def _create(session: Any, args: argparse.Namespace) -> Envelope:
    return session.create_knowledge_base(
        args.name, args.chunk_size, args.embedding_model, args.embedding_endpoint, _api_key(args)
    )


def _render_list(envelope: Envelope) -> str:
    rows = [
        {**kb, "current": "*" if kb["is_current"] else "", "created_at": kb["created_at"][:19].replace("T", " ")}
        for kb in envelope["data"]["knowledge_bases"]
    ]
    return _table(
        rows,
        [
            ("current", ""),
            ("name", "name"),
            ("document_count", "documents"),
            ("chunk_count", "chunks"),
            ("chunk_size", "chunk size"),
            ("embedding_model", "model"),
            ("created_at", "created (UTC)"),
        ],
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kb", description="KB Workbench: local knowledge bases for RAG.")
    parser.add_argument("--home", help="home folder of the knowledge bases (default: $KB_HOME, else data/home)")
    parser.add_argument(
        "--store",
        metavar="URL",
        help="a postgresql://USER@HOST:PORT/DATABASE store shared by several hosts, or 'folder' (default: "
        "$KB_STORE, else the folder store in the home)",
    )
    parser.add_argument("--json", action="store_true", help="print the result envelope as JSON")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    create = commands.add_parser("create", help="create a knowledge base")
    create.add_argument("name", help="unique name (1-64 characters, case-insensitive)")
    create.add_argument("--chunk-size", type=int, required=True, help="chunk size in tokens (32-8192)")
    create.add_argument("--embedding-model", help="sentence-transformers model name or path (default all-MiniLM-L6-v2)")
    create.add_argument("--embedding-endpoint", help="OpenAI-compatible endpoint URL, e.g. http://127.0.0.1:8000/v1")
    create.add_argument(
        "--embedding-api-key",
        metavar="KEY",
        help=f"API key for the endpoint (stored readable by you only); visible in ps and shell history, so prefer "
        f"${API_KEY_VARIABLE} (used when an endpoint is given) or --embedding-api-key-stdin",
    )
    create.add_argument(
        "--embedding-api-key-stdin",
        action="store_true",
        help="read the API key from standard input (a prompt without echo on a terminal)",
    )
    create.set_defaults(handler=_create, renderer=None)

    listing = commands.add_parser("list", help="list knowledge bases")
    listing.set_defaults(handler=lambda s, a: s.list_knowledge_bases(), renderer=_render_list)

    select = commands.add_parser("select", help="make a knowledge base the current one")
    select.add_argument("name")
    select.set_defaults(handler=lambda s, a: s.select_knowledge_base(a.name), renderer=None)

    delete = commands.add_parser("delete", help="delete a knowledge base with all its documents")
    delete.add_argument("name")
    delete.set_defaults(handler=lambda s, a: s.delete_knowledge_base(a.name), renderer=None)

    import kb_core.cli as canonical  # the same list even when this file runs as __main__
    from kb_core import cli_commands  # noqa: F401  (registers the other commands)

    for register in canonical.EXTRA_COMMANDS:
        register(commands)
    return parser


# Later modules (import, search, eval, export, mcp, ...) append their registration functions here.
EXTRA_COMMANDS: list[Callable[[Any], None]] = []


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        stream=sys.stderr,
        format="%(levelname)s %(name)s: %(message)s",
    )
    if args.store:  # through the environment it also reaches the service a direct command (kb mcp) opens
        from kb_core.config import STORE_ENVIRONMENT_VARIABLE

        os.environ[STORE_ENVIRONMENT_VARIABLE] = args.store
    if getattr(args, "direct", None) is not None:
        return int(args.direct(args))
    from kb_core.errors import KBError
    from kb_core.service import CLI_SESSION, KnowledgeBaseService

    try:
        service = KnowledgeBaseService(args.home)
    except KBError as exc:
        envelope: Envelope = {"success": False, "message": exc.message, "data": None, "error": {"code": exc.code}}
    else:
        try:
            envelope = args.handler(service.session(CLI_SESSION), args)
        except UsageError as exc:
            parser.error(str(exc))
    if args.json:
        print(json.dumps(envelope, ensure_ascii=False, indent=2, default=str))
    else:
        stream = sys.stdout if envelope["success"] else sys.stderr
        print(envelope["message"] if envelope["success"] else f"error: {envelope['message']}", file=stream)
        # A failure with data (an import where every file failed, kb verify's problems) shows it too.
        if args.renderer is not None and (envelope["success"] or envelope.get("data") is not None):
            print(args.renderer(envelope), file=stream)
    return EXIT_OK if envelope["success"] else EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())
