"""Parse one file in the current process: size check, type detection, dispatch to a parser."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from kb_core.base.errors import ParseError
from kb_core.base.i18n import msg
from kb_core.engines.parsing.base import (
    CORRUPT_DOCUMENT,
    FILE_NOT_FOUND,
    FILE_TOO_LARGE,
    SUPPORTED_TYPES,
    UNSUPPORTED_FORMAT,
    ParsedDocument,
    ParseLimits,
    parse_error,
    too_much_text,
)
from kb_core.engines.parsing.detect import sniff

logger = logging.getLogger(__name__)
_HEAD_BYTES = 4096


def check_file(path: Path, limits: ParseLimits) -> int:
    """Existence and size checks done before any byte is read; returns the size."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        raise parse_error(FILE_NOT_FOUND, path, msg("the file {path} does not exist", path=str(path))) from None
    except OSError as exc:
        raise parse_error(
            FILE_NOT_FOUND,
            path,
            msg("the file {path} cannot be accessed ({problem})", path=str(path), problem=exc.strerror),
        ) from None
    if not path.is_file():
        raise parse_error(FILE_NOT_FOUND, path, msg("{path} is not a regular file", path=str(path)))
    if stat.st_size > limits.max_file_bytes:
        raise parse_error(
            FILE_TOO_LARGE,
            path,
            msg(
                "it is {size:.1f} MB, over the limit of {limit:.1f} MB",
                size=stat.st_size / 1e6, limit=limits.max_file_bytes / 1e6,
            ),
        )
    return stat.st_size


def _read(path: Path, limit: int) -> bytes:
    try:
        with path.open("rb") as fh:
            # read(n) reserves n bytes up front: ask for the file's size, not the limit (a memory-capped worker)
            data = fh.read(min(os.fstat(fh.fileno()).st_size, limit) + 1)
            while len(data) <= limit and (more := fh.read(min(2**20, limit + 1 - len(data)))):  # it grew
                data += more
    except OSError as exc:
        raise parse_error(
            FILE_NOT_FOUND,
            path,
            msg("the file cannot be read ({problem})", problem=exc.strerror),
        ) from None
    if len(data) > limit:  # grew after the stat
        raise parse_error(FILE_TOO_LARGE, path, msg("it is over the limit of {limit:.1f} MB", limit=limit / 1e6))
    return data


def parse_file_inprocess(path: Path, limits: ParseLimits = ParseLimits()) -> ParsedDocument:  # noqa: B008
    """Parse ``path`` in this process, without a timeout. For callers that isolate parsing themselves."""
    path = Path(path)
    check_file(path, limits)
    try:
        with path.open("rb") as fh:
            head = fh.read(_HEAD_BYTES)
    except OSError as exc:
        raise parse_error(
            FILE_NOT_FOUND,
            path,
            msg("the file cannot be read ({problem})", problem=exc.strerror),
        ) from None
    file_type, reason = sniff(path, head)
    if file_type not in SUPPORTED_TYPES:
        raise parse_error(
            UNSUPPORTED_FORMAT,
            path,
            msg(
                "it is {what}; supported are text files (.txt, .md, .csv and the like), .docx and .doc (Word)",
                what=reason,
            ),
        )
    logger.debug("parsing %s as %s (%s)", path, file_type, reason)
    document = _parse(path, file_type, head, limits)
    chars = sum(len(block.text) for block in document.blocks)
    if chars > limits.max_text_chars:
        raise too_much_text(path, chars, limits.max_text_chars)
    return document


def _parse(path: Path, file_type: str, head: bytes, limits: ParseLimits) -> ParsedDocument:
    try:
        if file_type == "txt":
            from kb_core.engines.parsing.txt_parser import parse_txt

            return parse_txt(path, _read(path, limits.max_file_bytes))
        if file_type == "docx":
            from kb_core.engines.parsing.docx_parser import parse_docx

            return parse_docx(path, limits)
        from kb_core.engines.parsing.doc_parser import parse_doc

        if not head.startswith(b"\xd0\xcf\x11\xe0"):
            raise parse_error(
                CORRUPT_DOCUMENT,
                path,
                msg("it is named like a Word file but is not one (no OLE2 header)"),
            )
        return parse_doc(path, limits)
    except ParseError:
        raise
    except MemoryError:
        raise parse_error(
            FILE_TOO_LARGE,
            path,
            msg(
                "parsing it needs more memory than a parser may use ({limit:.1f} GiB)",
                limit=limits.max_memory_bytes / 2**30,
            ),
        ) from None
    except RecursionError:
        raise parse_error(CORRUPT_DOCUMENT, path, msg("the document is nested too deeply to parse")) from None
    except Exception as exc:  # a parser bug or a malformed file we did not foresee: never leak other exception types
        logger.warning("unexpected %s while parsing %s", type(exc).__name__, path, exc_info=True)
        raise parse_error(
            CORRUPT_DOCUMENT,
            path,
            msg("the file is malformed ({problem})", problem=f"{type(exc).__name__}: {exc}"),
        ) from None
