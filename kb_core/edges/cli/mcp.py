"""CLI: ``kb mcp`` (the MCP server) and ``kb token create|list|revoke`` (its HTTP bearer tokens)."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import TYPE_CHECKING

from kb_core.base.config import DEFAULT_HTTP_PORT, DEFAULT_RATE_PER_HOUR
from kb_core.base.i18n import msg
from kb_core.edges.cli.common import Commands, say, t, table
from kb_core.edges.envelopes import Envelope

if TYPE_CHECKING:
    from kb_core.edges.envelopes import Enveloped

logger = logging.getLogger(__name__)


def _serve(args: argparse.Namespace) -> int:
    from kb_core.base.errors import KBError
    from kb_core.edges.mcp.transports import serve_http, serve_stdio

    try:
        if args.http:
            serve_http(
                args.home,
                host=args.host,
                port=args.port,
                allowed_dirs=args.allow_dir or (),
                allow_remote=args.allow_remote,
                allowed_hosts=args.allowed_host or (),
            )
        else:
            if args.allow_dir or args.allow_remote or args.allowed_host:
                raise KBError(
                    msg("--allow-dir, --allow-remote and --allowed-host apply to --http only."),
                    code="INVALID_ARGUMENT",
                )
            serve_stdio(args.home)
    except KBError as exc:
        print(t("error: {message}", message=say(exc.message)), file=sys.stderr)
        return 2 if exc.code in ("INVALID_ARGUMENT", "PERMISSION_DENIED") else 1
    except KeyboardInterrupt:
        return 0
    return 0


def create_token(session: Enveloped, args: argparse.Namespace) -> Envelope:
    return session.create_token(args.scope, args.capability, args.rate)


def list_tokens(session: Enveloped, args: argparse.Namespace) -> Envelope:
    return session.list_tokens()


def revoke_token(session: Enveloped, args: argparse.Namespace) -> Envelope:
    return session.revoke_token(args.id)


def _render_tokens(envelope: Envelope) -> str:

    return table(
        envelope["data"]["tokens"],
        [
            ("id", "id"),
            ("capability", t("capability")),
            ("scope", t("scope")),
            ("rate_per_hour", t("per hour")),
            ("created_at", t("created (UTC)")),
        ],
    )


def register(commands: Commands) -> None:
    mcp = commands.add_parser(
        "mcp",
        help="serve the knowledge-base tools over MCP (stdio, or streamable HTTP with --http)",
        description="Serve the MCP tools. stdio by default (stdout carries protocol messages only; logs go to "
        "stderr). With --http: streamable HTTP at http://HOST:PORT/mcp, bearer tokens from 'kb token create'.",
    )
    mcp.add_argument("--http", action="store_true", help="serve streamable HTTP instead of stdio")
    mcp.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on: IPv4, IPv6 (::1 or [::1]) or a name (default 127.0.0.1)",
    )
    mcp.add_argument("--port", type=int, default=DEFAULT_HTTP_PORT, help=f"port (default {DEFAULT_HTTP_PORT})")
    mcp.add_argument(
        "--allow-dir",
        action="append",
        metavar="DIR",
        help="folder that import_document, export_database and import_database may use over HTTP "
        "(repeatable; without it those tools refuse paths over HTTP)",
    )
    mcp.add_argument("--allow-remote", action="store_true", help="allow listening on a non-loopback address")
    mcp.add_argument(
        "--allowed-host",
        action="append",
        metavar="NAME",
        help="another name clients may reach the server by (Host header), e.g. kb.example.lan; the bind address "
        "and the loopback names are always allowed (repeatable; requests naming other hosts are refused)",
    )
    mcp.set_defaults(direct=_serve)

    token = commands.add_parser("token", help="manage bearer tokens of the MCP HTTP server")
    actions = token.add_subparsers(dest="token_command", metavar="ACTION", required=True)
    create = actions.add_parser("create", help="create a token (printed once; only its hash is stored)")
    create.add_argument("--scope", required=True, help="'all' or knowledge base names separated by commas")
    create.add_argument("--capability", choices=["read", "write"], required=True, help="read: no write tools")
    create.add_argument(
        "--rate", type=int, default=DEFAULT_RATE_PER_HOUR, help=f"calls per hour (default {DEFAULT_RATE_PER_HOUR})"
    )
    create.set_defaults(handler=create_token, renderer=None)
    listing = actions.add_parser("list", help="list tokens (never the tokens themselves)")
    listing.set_defaults(handler=list_tokens, renderer=_render_tokens)
    revoke = actions.add_parser("revoke", help="revoke a token by id")
    revoke.add_argument("id", help="token id (tok_...), from 'kb token list'")
    revoke.set_defaults(handler=revoke_token, renderer=None)
