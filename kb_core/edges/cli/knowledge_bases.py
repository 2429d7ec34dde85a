"""CLI commands for knowledge bases: ``kb create``, ``kb list``, ``kb select``, ``kb delete``."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from kb_core.edges.cli.common import Commands, UsageError, t, table
from kb_core.edges.envelopes import Envelope

if TYPE_CHECKING:
    from kb_core.edges.envelopes import Enveloped

API_KEY_VARIABLE = "KB_EMBEDDING_API_KEY"


def _api_key(args: argparse.Namespace) -> str | None:
    """The endpoint key: --embedding-api-key-stdin (a prompt without echo on a terminal, else one line of
    stdin), --embedding-api-key, or $KB_EMBEDDING_API_KEY when an endpoint is given."""
    if args.embedding_api_key_stdin:
        if args.embedding_api_key is not None:
            raise UsageError(t("give the API key once: --embedding-api-key or --embedding-api-key-stdin, not both"))
        if sys.stdin.isatty():
            import getpass

            key = getpass.getpass(t("Embedding API key (not shown): "))
        else:
            key = sys.stdin.readline().rstrip("\r\n")
        if not key.strip():
            raise UsageError(t("--embedding-api-key-stdin read no API key from standard input"))
        return key
    if args.embedding_api_key is not None:
        print(
            t(
                "note: a key on the command line is visible to other users (ps) and kept in shell history; "
                "prefer ${variable} or --embedding-api-key-stdin.",
                variable=API_KEY_VARIABLE,
            ),
            file=sys.stderr,
        )
        return args.embedding_api_key
    if args.embedding_endpoint:
        return os.environ.get(API_KEY_VARIABLE) or None
    return None


def _create(session: Enveloped, args: argparse.Namespace) -> Envelope:
    return session.create_knowledge_base(
        args.name, args.chunk_size, args.embedding_model, args.embedding_endpoint, _api_key(args)
    )


def _render_list(envelope: Envelope) -> str:
    rows = [
        {**kb, "current": "*" if kb["is_current"] else "", "created_at": kb["created_at"][:19].replace("T", " ")}
        for kb in envelope["data"]["knowledge_bases"]
    ]
    return table(
        rows,
        [
            ("current", ""),
            ("name", t("name")),
            ("document_count", t("documents")),
            ("chunk_count", t("chunks")),
            ("chunk_size", t("chunk size")),
            ("embedding_model", t("model")),
            ("created_at", t("created (UTC)")),
        ],
    )


def register(commands: Commands) -> None:
    create = commands.add_parser("create", help="create a knowledge base")
    create.add_argument("name", help="unique name (1-64 characters, case-insensitive)")
    create.add_argument("--chunk-size", type=int, required=True, help="chunk size in tokens (32-8192)")
    create.add_argument(
        "--embedding-model",
        help="multilingual-e5-small (the default; Chinese, English and ~100 languages), all-MiniLM-L6-v2 (English "
        "only; about 2x faster to import on a CPU), a local sentence-transformers folder, or with "
        "--embedding-endpoint the model it serves (kb info lists the built-in ones)",
    )
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
