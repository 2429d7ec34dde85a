"""Plain-text files: encoding detection, binary refusal, paragraphs split on blank lines.

Detection order: byte-order marks, strict UTF-8, UTF-16 without a BOM (NUL pattern), then the CJK
legacy codecs (GB18030, Big5/CP950) judged by how many of the decoded characters are common ones.
charset_normalizer is a good general detector but guesses UTF-16 or Big5 for short Chinese texts
("中文" in GB18030 comes back as Big5 "笢恅"), so it is only the last resort for other languages.
"""

from __future__ import annotations

import codecs
import logging
import re
from pathlib import Path

from kb_core.base.i18n import msg
from kb_core.engines.parsing.base import BINARY_FILE, ParsedDocument, TextBlock, make_document, parse_error

logger = logging.getLogger(__name__)

_BOMS: tuple[tuple[bytes, str], ...] = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
# Bytes that never occur in text: C0 controls except \t \n \v \f \r and ESC.
_CONTROL_BYTES = bytes([*range(0x00, 0x09), *range(0x0E, 0x1B), *range(0x1C, 0x20)])
_NON_CONTROL_BYTES = bytes(b for b in range(256) if b not in _CONTROL_BYTES)
_MAX_CONTROL_RATIO = 0.01
_STRAY_CONTROLS = 4
_SCORE_SAMPLE_CHARS = 200_000
_MIN_CJK_SCORE = 0.5
_CJK_PUNCT = frozenset("，。、；：？！“”‘’（）《》【】…—·「」『』〈〉～　﹏・")
_STRIP_CONTROLS = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\x7f\ufeff]")
_PARAGRAPH_SPLIT = re.compile(r"\n[ \t\u3000]*(?:\n[ \t\u3000]*)+")


def _control_ratio(data: bytes) -> float:
    """Share of control bytes; a handful of stray NULs in a short file do not make it binary."""
    count = len(data.translate(None, _NON_CONTROL_BYTES))
    if count <= _STRAY_CONTROLS:
        return 0.0
    return count / len(data)


def _utf16_without_bom(data: bytes) -> str | None:
    """Mostly-ASCII UTF-16 shows NULs on every other byte."""
    if len(data) < 4 or len(data) % 2:
        return None
    even, odd = data[0::2], data[1::2]
    even_nul, odd_nul = even.count(0) / len(even), odd.count(0) / len(odd)
    if odd_nul > 0.3 and even_nul < 0.02:
        return "utf-16-le"
    if even_nul > 0.3 and odd_nul < 0.02:
        return "utf-16-be"
    return None


def _is_common(ch: str, codec: str) -> bool:
    if ch in _CJK_PUNCT or 0xFF01 <= ord(ch) <= 0xFF5E:
        return True
    try:
        if codec == "gb18030":
            # GB2312 level 1 holds the 3,755 most frequent simplified characters.
            return 0xB0 <= ch.encode("gb2312")[0] <= 0xD7
        # Big5 0xA440-0xC67E holds the 5,401 frequent traditional characters.
        return 0xA440 <= int.from_bytes(ch.encode("big5"), "big") <= 0xC67E
    except UnicodeError:
        return False


def _in_latin_word(text: str, i: int) -> bool:
    """``text[i]`` is an accented Latin letter beside an ASCII letter (the é of détecté): a word, not a misread pair
    of bytes, which would decode to CJK characters or to letters between them."""
    if not ("\u00c0" <= text[i] <= "\u024f" and text[i].isalpha()):
        return False
    return any(0 <= j < len(text) and text[j].isascii() and text[j].isalpha() for j in (i - 1, i + 1))


def _cjk_score(text: str, codec: str) -> float:
    """Share of non-ASCII characters that are common for that codec's script (or accented letters inside Latin
    words), minus replacements."""
    total = common = replaced = 0
    sample = text[:_SCORE_SAMPLE_CHARS]
    for i, ch in enumerate(sample):
        if ord(ch) < 0x80:
            continue
        total += 1
        if ch == "\ufffd":
            replaced += 1
        elif _is_common(ch, codec) or _in_latin_word(sample, i):
            common += 1
    if total == 0:
        return 0.0
    return (common - 10 * replaced) / total


def decode_text(data: bytes) -> tuple[str, str]:
    """Decode bytes of a text file; returns (text, encoding). Raises ValueError for binary data."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return data[len(bom) :].decode(encoding, errors="replace"), encoding.removesuffix("-sig")
    utf16 = _utf16_without_bom(data)
    if utf16:
        text = data.decode(utf16, errors="replace")
        if _control_ratio(text.encode("utf-8", errors="replace")) <= _MAX_CONTROL_RATIO:
            return text, utf16
    ratio = _control_ratio(data)
    if ratio > _MAX_CONTROL_RATIO:
        raise ValueError(f"{ratio:.1%} of its bytes are control characters or NUL")
    try:
        return data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError as exc:
        if exc.start >= len(data) - 3 and exc.reason == "unexpected end of data":
            return data.decode("utf-8", errors="replace"), "utf-8"  # a file cut inside its last character
    best: tuple[float, str, str] | None = None
    for codec, family in (("gb18030", "gb18030"), ("cp950", "big5"), ("big5hkscs", "big5")):
        text = data.decode(codec, errors="replace")
        score = _cjk_score(text, family)
        logger.debug("encoding candidate %s scored %.3f", codec, score)
        if best is None or score > best[0]:
            best = (score, text, codec)
    if best is not None and best[0] >= _MIN_CJK_SCORE:
        return best[1], best[2]
    try:
        from charset_normalizer import from_bytes
    except ImportError:  # optional: only used for non-CJK legacy encodings
        from_bytes = None
    if from_bytes is not None:
        matches = from_bytes(data[:1_000_000])
        best_match = matches.best()
        if best_match is not None and best_match.encoding:
            # Equally plausible single-byte codepages: prefer the Western default (short texts tie often).
            ties = {m.encoding for m in matches if m.chaos <= best_match.chaos + 0.01}
            encoding = "cp1252" if "cp1252" in ties else best_match.encoding
            return data.decode(encoding, errors="replace"), encoding
    return data.decode("cp1252", errors="replace"), "cp1252"


def split_paragraphs(text: str) -> list[TextBlock]:
    """Blank lines separate paragraphs; form feeds (\\f) separate pages."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = text.replace("\x00", "")
    pages = text.split("\f")
    paged = len(pages) > 1
    blocks: list[TextBlock] = []
    for number, page_text in enumerate(pages, start=1):
        page_text = _STRIP_CONTROLS.sub("", page_text)
        for para in _PARAGRAPH_SPLIT.split(page_text):
            lines = [line.rstrip() for line in para.split("\n")]
            cleaned = "\n".join(lines).strip("\n")
            if cleaned.strip():
                blocks.append(TextBlock(text=cleaned, chapter=None, page=number if paged else None))
    return blocks


def parse_txt(path: Path, data: bytes) -> ParsedDocument:
    try:
        text, encoding = decode_text(data)
    except ValueError as exc:
        raise parse_error(
            BINARY_FILE,
            path,
            msg("it looks like a binary file, not text ({problem})", problem=str(exc)),
        ) from None
    return make_document(path, "txt", split_paragraphs(text), {"encoding": encoding})
