"""The ``kb`` command line: a thin front end over the session API of :mod:`kb_core.session.service`.

With ``--json`` it prints exactly the service envelope (English, for programs). Otherwise it speaks ``--lang``
(``en`` or ``zh``), else the language of the locale (LANGUAGE, LC_ALL, LC_MESSAGES, LANG): its own lines and the
library's messages; argparse's help stays English. Exit status: 0 on success, 1 on a
reported failure, 2 on a usage error, 3 when some items failed (files of an import), 141 when the reader of the
output went away (a closed pipe, quietly). Each command group lives in its own module of this package
and is listed once in :data:`COMMAND_GROUPS`.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence

from kb_core.base.i18n import LANGUAGES, language_from_environment
from kb_core.edges.cli import bundles, documents, evaluation, info, knowledge_bases, mcp, transfer
from kb_core.edges.cli.common import EXIT_CLOSED_PIPE, Commands, UsageError, exit_status, say, set_language, t
from kb_core.edges.envelopes import Envelope, Enveloped, failure

HTTP_CLIENT_LOGGERS = ("httpx", "httpcore", "urllib3", "h11", "hpack")

# The command groups in the order ``kb --help`` lists them.
COMMAND_GROUPS: tuple[Callable[[Commands], None], ...] = (
    knowledge_bases.register,
    documents.register,
    transfer.register,
    mcp.register,
    bundles.register,
    evaluation.register,
    info.register,
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
    parser.add_argument("--json", action="store_true", help="print the result envelope as JSON (English)")
    parser.add_argument(
        "--lang",
        choices=sorted(LANGUAGES),
        help="language of the output: en (English) or zh (简体中文) (default: the locale's, e.g. LANG=zh_CN.UTF-8)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    parser.add_argument(
        "--device",
        help="where local models embed documents: auto (CUDA, else MPS, else CPU), cpu, cuda, cuda:N or mps "
        "(default: $KB_DEVICE, else auto)",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for register in COMMAND_GROUPS:
        register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        status = _run(argv)
        sys.stdout.flush()  # here, where a closed pipe can still be answered quietly (not at interpreter exit)
    except BrokenPipeError:
        _discard_stdout()
        return EXIT_CLOSED_PIPE
    return status


def _discard_stdout() -> None:
    """Point standard output at /dev/null: Python flushes it again at exit, which would fail on the closed pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):  # not a real file (a test's capture)
        pass


def _run(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    set_language(args.lang or language_from_environment())
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        stream=sys.stderr,
        format="%(levelname)s %(name)s: %(message)s",
    )
    # HTTP client libraries log each request and response line (status, and text the server chose) at INFO and
    # DEBUG; -v is about this program's progress, so they report warnings only.
    for name in HTTP_CLIENT_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    # The one-time build of a built-in model's folder takes seconds: always say so.
    logging.getLogger("kb_core.engines.embedding.builtin").setLevel(logging.INFO)
    if args.store:  # through the environment it also reaches the service a direct command (kb mcp) opens
        from kb_core.base.config import STORE_ENVIRONMENT_VARIABLE

        os.environ[STORE_ENVIRONMENT_VARIABLE] = args.store
    if getattr(args, "direct", None) is not None:
        return int(args.direct(args))
    from kb_core.base.errors import KBError
    from kb_core.engines.embedding.device import device_request
    from kb_core.session.service import CLI_SESSION, KnowledgeBaseService

    try:
        device = device_request(args.device, source="--device") if args.device is not None else None
        service = KnowledgeBaseService(args.home, device=device)
    except KBError as exc:
        envelope: Envelope = failure(exc)
    else:
        try:
            session = Enveloped(service.session(CLI_SESSION, select_hint="`kb select NAME`"))
            envelope = args.handler(session, args)
        except UsageError as exc:
            parser.error(say(exc.args[0]) if exc.args else str(exc))
    if args.json:
        print(json.dumps(envelope, ensure_ascii=False, indent=2, default=str))
    else:
        stream = sys.stdout if envelope["success"] else sys.stderr
        message = say(envelope["message"])
        print(message if envelope["success"] else t("error: {message}", message=message), file=stream)
        # A failure with data (an import where every file failed, kb verify's problems) shows it too.
        if args.renderer is not None and (envelope["success"] or envelope.get("data") is not None):
            print(args.renderer(envelope), file=stream)
    return exit_status(envelope)
