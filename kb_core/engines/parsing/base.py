"""Data types shared by every parser: text blocks, parsed documents, limits."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kb_core.base.errors import InvalidArgument, ParseError
from kb_core.base.i18n import msg

SUPPORTED_TYPES: tuple[str, ...] = ("txt", "docx", "doc")

# Stable error codes of ParseError raised by this package.
FILE_NOT_FOUND = "FILE_NOT_FOUND"
UNSUPPORTED_FORMAT = "UNSUPPORTED_FORMAT"
ENCRYPTED_DOCUMENT = "ENCRYPTED_DOCUMENT"
CORRUPT_DOCUMENT = "CORRUPT_DOCUMENT"
EMPTY_DOCUMENT = "EMPTY_DOCUMENT"
FILE_TOO_LARGE = "FILE_TOO_LARGE"
PARSE_TIMEOUT = "PARSE_TIMEOUT"
BINARY_FILE = "BINARY_FILE"


@dataclass(frozen=True)
class TextBlock:
    """One paragraph, table row or note, in reading order.

    ``chapter`` is the heading path ("Intro > Scope"), None before any heading.
    ``page`` is 1-based where the file records page breaks, else None.
    ``heading``: the block is a heading or a title (DOCX Heading n, Title and Subtitle styles), context for the text
    that follows it rather than text of its own (the chunker keeps it with that text).
    """

    text: str
    chapter: str | None = None
    page: int | None = None
    heading: bool = False


@dataclass(frozen=True)
class ParsedDocument:
    file_type: str
    blocks: tuple[TextBlock, ...]
    metadata: dict[str, str] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return "\n\n".join(b.text for b in self.blocks)

    def block_offsets(self) -> list[tuple[int, int]]:
        """(start, end) character offsets of each block inside :attr:`text`."""
        offsets: list[tuple[int, int]] = []
        pos = 0
        for block in self.blocks:
            end = pos + len(block.text)
            offsets.append((pos, end))
            pos = end + 2
        return offsets


@dataclass(frozen=True)
class ParseLimits:
    max_file_bytes: int = 100 * 1024 * 1024
    # DOCX zip-bomb guard: the sum of the declared uncompressed member sizes.
    max_decompressed_bytes: int = 500 * 1024 * 1024
    # Characters of text one file may produce (a 100 MB text file gives at most 100 million).
    max_text_chars: int = 100_000_000
    # Address space a parser worker may map beyond its own start-up size (parse_file only; parse_file_inprocess
    # cannot cap its caller).
    max_memory_bytes: int = 4 * 1024**3
    timeout_seconds: float = 60.0

    def __post_init__(self) -> None:
        for name in ("max_file_bytes", "max_decompressed_bytes", "max_text_chars", "max_memory_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise InvalidArgument(f"ParseLimits.{name} must be a positive integer, got {value!r}")
        if not self.timeout_seconds > 0:
            raise InvalidArgument(
                f"ParseLimits.timeout_seconds must be a positive number, got {self.timeout_seconds!r}"
            )


def parse_error(code: str, path: Path, reason: str) -> ParseError:
    """A ParseError whose message names the file and the reason."""
    return ParseError(
        msg("Cannot import '{file}': {reason}", file=path.name, reason=reason), code=code, details={"path": str(path)}
    )


def too_much_text(path: Path, chars: int, limit: int) -> ParseError:
    return parse_error(
        FILE_TOO_LARGE,
        path,
        msg("its text is {chars:,} characters long, over the limit of {limit:,} characters", chars=chars, limit=limit),
    )


def make_document(path: Path, file_type: str, blocks: list[TextBlock], metadata: dict[str, str]) -> ParsedDocument:
    """Drop blank blocks and refuse documents without any text."""
    kept = tuple(b for b in blocks if b.text.strip())
    if not kept:
        raise parse_error(EMPTY_DOCUMENT, path, msg("the document contains no text"))
    return ParsedDocument(file_type=file_type, blocks=kept, metadata=dict(metadata))
