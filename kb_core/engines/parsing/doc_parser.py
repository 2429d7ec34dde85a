"""Word 97-2003 binary (.doc) text extraction, following [MS-DOC].

olefile opens the compound file; the rest is the small part of [MS-DOC] needed for text: the FIB in
the WordDocument stream, the CLX piece table in the 0Table/1Table stream, and each piece decoded as
UTF-16LE or as 8-bit "compressed" cp1252 text (FcCompressed.fCompressed). There is no maintained
pure-Python .doc text extractor to lean on (textract/antiword wrap external binaries).

Paragraph styles are not read, so blocks from .doc files have ``chapter=None``. Tracked deletions
(sprmCFRMarkDel in the character formatting pages) are left out. Table rows are
recognised from the cell marks alone (a row ends with two consecutive 0x07 marks), so a row whose
last cell is empty may be split in two.
Word 6/95 files (nFib < 0xC0) are read from their 8-bit text (fcMin..fcMac, or their in-stream
piece table) in the codepage of the FIB language id, or one chosen by charset_normalizer among
the Windows codepages when the language says Western but the bytes do not look Western.

Hostile files: every piece must point at its own bytes of the WordDocument stream (pieces that overlap
or repeat would let a 1 MB file expand to billions of characters), so the text is never longer than the
stream, and the whole text is checked against ``ParseLimits.max_text_chars`` before anything is decoded.
Property modifiers (Prc) with an impossible size, and formatting pages named more than once, are
caught before they can loop or multiply work.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import re
import struct
from pathlib import Path

import numpy as np
import olefile

from kb_core.base.i18n import msg
from kb_core.engines.parsing.base import (
    CORRUPT_DOCUMENT,
    ENCRYPTED_DOCUMENT,
    UNSUPPORTED_FORMAT,
    ParsedDocument,
    ParseLimits,
    TextBlock,
    make_document,
    parse_error,
    too_much_text,
)

logger = logging.getLogger(__name__)

_WIDENT_97 = 0xA5EC
_WIDENT_6 = 0xA5DC
_NFIB_97 = 0xC0
_FC_CLX_INDEX = 33
_FC_CHPX_INDEX = 12
_SPRM_CF_RMARK_DEL = 0x0800
_SPRA_SIZES = (1, 1, 2, 4, 2, 2, -1, 3)
_MAX_PIECES = 1_000_000
_MAX_PRC_GRPPRL = 0x3FA2  # [MS-DOC] PrcData.cbGrpprl: 0 to 0x3FA2
_MAX_GARBAGE = 0.1
# Language id (FIB lid) -> Windows codepage, for Word 6/95 8-bit text. Full lids first, then primary ids.
_LID_CODEPAGES = {
    0x0404: "cp950", 0x0C04: "cp950", 0x1404: "cp950", 0x0804: "gbk", 0x1004: "gbk", 0x0411: "cp932",
    0x0412: "cp949", 0x19: "cp1251", 0x22: "cp1251", 0x23: "cp1251", 0x02: "cp1251", 0x05: "cp1250",
    0x0E: "cp1250", 0x15: "cp1250", 0x18: "cp1250", 0x1B: "cp1250", 0x24: "cp1250", 0x08: "cp1253",
    0x1F: "cp1254", 0x0D: "cp1255", 0x01: "cp1256", 0x25: "cp1257", 0x26: "cp1257", 0x27: "cp1257",
    0x1E: "cp874", 0x2A: "cp1258",
}  # fmt: skip
_ENCRYPTED = msg("the document is password-protected (encrypted); remove the password in Word and import it again")
# cp1252 leaves 0x81 0x8D 0x8F 0x90 0x9D undefined; [MS-DOC] keeps them as the same code points.
_CP1252 = {b: bytes([b]).decode("cp1252", errors="replace") for b in range(0x80, 0xA0)}
_CP1252_FIX = str.maketrans({chr(b): (ch if ch != "\ufffd" else chr(b)) for b, ch in _CP1252.items()})
_CONTROLS_TO_SPACE = bytes.maketrans(bytes(range(0x20)), b" " * 0x20)
_TOKENS = re.compile(r"[\x00-\x1f]|[^\x00-\x1f]+")
_SPACES = re.compile(r"[ \t\u00a0]+\n")


class _Corrupt(Exception):
    """Internal: a structural check failed; turned into CORRUPT_DOCUMENT with the reason."""


class _TooMuchText(Exception):
    """Internal: the pieces add up to more characters than ParseLimits.max_text_chars."""

    def __init__(self, chars: int) -> None:
        super().__init__(chars)
        self.chars = chars


def _u16(data: bytes, off: int) -> int:
    if off < 0 or off + 2 > len(data):
        raise _Corrupt(f"the file information block is truncated (offset {off})")
    return struct.unpack_from("<H", data, off)[0]


def _u32(data: bytes, off: int) -> int:
    if off < 0 or off + 4 > len(data):
        raise _Corrupt(f"the file information block is truncated (offset {off})")
    return struct.unpack_from("<I", data, off)[0]


def _decode_8bit(raw: bytes) -> str:
    return raw.decode("latin-1").translate(_CP1252_FIX)


def _read_plcpcd(clx: bytes) -> list[tuple[int, int, int, bool]]:
    """Pieces as (cp_start, cp_end, fc, compressed) from a CLX (skipping its Prc entries)."""
    pos = 0
    while pos < len(clx) and clx[pos] == 0x01:  # Prc: clxt, cbGrpprl, grpprl
        if pos + 3 > len(clx):
            raise _Corrupt("the piece table (CLX) is truncated")
        size = struct.unpack_from("<h", clx, pos + 1)[0]  # signed: a negative size would step back for ever
        if not 0 <= size <= _MAX_PRC_GRPPRL:
            raise _Corrupt(f"a property modifier before the piece table has an impossible size ({size})")
        pos += 3 + size
    if pos >= len(clx) or clx[pos] != 0x02:
        raise _Corrupt("the piece table (CLX) has no Pcdt entry")
    lcb = _u32(clx, pos + 1)
    plc = clx[pos + 5 : pos + 5 + lcb]
    if len(plc) != lcb or lcb < 4 or (lcb - 4) % 12:
        raise _Corrupt("the piece table (PlcPcd) has an impossible size")
    n = (lcb - 4) // 12
    if n > _MAX_PIECES:
        raise _Corrupt("the piece table lists too many pieces")
    cps = struct.unpack_from(f"<{n + 1}I", plc, 0)
    pieces: list[tuple[int, int, int, bool]] = []
    for i in range(n):
        fc_raw = struct.unpack_from("<I", plc, 4 * (n + 1) + 8 * i + 2)[0]
        if cps[i + 1] < cps[i]:
            raise _Corrupt("the piece table is not in character order")
        pieces.append((cps[i], cps[i + 1], fc_raw & 0x3FFFFFFF, bool(fc_raw & 0x40000000)))
    return pieces


def _deleted_ranges(wd: bytes, table: bytes, fc_plcf: int, lcb_plcf: int) -> list[tuple[int, int]]:
    """WordDocument byte ranges whose character formatting sets sprmCFRMarkDel (tracked deletions)."""
    if lcb_plcf < 8 or fc_plcf + lcb_plcf > len(table) or (lcb_plcf - 4) % 8:
        return []
    n = (lcb_plcf - 4) // 8
    # A page named twice adds nothing but work (a hostile list names one page thousands of times).
    pns = dict.fromkeys(pn & 0x3FFFFF for pn in struct.unpack_from(f"<{n}I", table, fc_plcf + 4 * (n + 1)))
    ranges: list[tuple[int, int]] = []
    for pn in pns:
        page = wd[pn * 512 : pn * 512 + 512]
        if len(page) != 512:
            raise _Corrupt("a character formatting page lies outside the WordDocument stream")
        crun = page[511]
        if 4 * (crun + 1) + crun > 511:
            raise _Corrupt("a character formatting page is malformed")
        fcs = struct.unpack_from(f"<{crun + 1}I", page, 0)
        for i in range(crun):
            offset = page[4 * (crun + 1) + i] * 2
            if offset and _grpprl_deletes(page[offset + 1 : offset + 1 + page[offset]]) and fcs[i] < fcs[i + 1]:
                ranges.append((fcs[i], fcs[i + 1]))
    return _merged(ranges)


def _merged(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted, disjoint ranges covering the same bytes."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _grpprl_deletes(grpprl: bytes) -> bool:
    pos = 0
    while pos + 2 <= len(grpprl):
        sprm = struct.unpack_from("<H", grpprl, pos)[0]
        pos += 2
        size = _SPRA_SIZES[sprm >> 13]
        if size < 0:  # variable length: the first operand byte is the size
            size = 1 + (grpprl[pos] if pos < len(grpprl) else 0)
        if sprm == _SPRM_CF_RMARK_DEL and pos < len(grpprl) and grpprl[pos] in (1, 0x81):
            return True
        pos += size
    return False


def _mask_deleted(chars: str, start: int, step: int, deleted: list[tuple[int, int]], ends: list[int]) -> str:
    """Replace the characters stored at deleted byte ranges with NUL (dropped later), keeping CPs aligned.

    ``deleted`` is sorted and disjoint (``ends`` its end offsets), so only the ranges that meet this piece
    are visited.
    """
    end = start + step * len(chars)
    parts: list[str] = []
    done = 0
    for d0, d1 in itertools.islice(deleted, bisect.bisect_right(ends, start), None):
        if d0 >= end:
            break
        i = (max(d0, start) - start + step - 1) // step
        j = (min(d1, end) - start + step - 1) // step
        if i < j:
            parts += [chars[done:i], "\x00" * (j - i)]
            done = j
    if not parts:
        return chars
    parts.append(chars[done:])
    return "".join(parts)


def _decode_utf16_units(raw: bytes) -> str:
    """One character per UTF-16 unit, as Word counts positions: a surrogate pair stays two characters.

    (Python's UTF-16 decoder joins a pair into one character, which would shift every later position by one;
    pairs are joined again per paragraph by :func:`_fix_surrogates`.)
    """
    chars = raw.decode("utf-16-le", errors="surrogatepass")
    if 2 * len(chars) == len(raw):
        return chars
    units = np.frombuffer(raw, dtype="<u2").astype("<u4")
    return units.tobytes().decode("utf-32-le", errors="surrogatepass")


def _piece_spans(
    pieces: list[tuple[int, int, int, bool]], limit_cp: int, wide: bool, stream_size: int, max_chars: int
) -> list[tuple[int, int, bool]]:
    """(byte offset, characters, 8-bit) of the part of each piece inside characters [0, limit_cp).

    Refuses pieces that point past the stream or at bytes another piece already maps (so the text is never
    longer than the stream), then text over ``max_chars``: all before a character is decoded.
    """
    spans: list[tuple[int, int, bool]] = []
    for cp_start, cp_end, fc, compressed in pieces:
        if cp_start >= limit_cp:
            break
        count = min(cp_end, limit_cp) - cp_start
        if count <= 0:
            continue
        narrow = compressed or not wide
        start = fc // 2 if (compressed and wide) else fc
        if start + (count if narrow else 2 * count) > stream_size:
            raise _Corrupt(f"a text piece points past the end of the WordDocument stream (offset {start})")
        spans.append((start, count, narrow))
    ordered = sorted((start, start + (count if narrow else 2 * count)) for start, count, narrow in spans)
    for (_, end), (start, _) in itertools.pairwise(ordered):
        if start < end:
            raise _Corrupt(
                f"its piece table maps the same bytes (offset {start}) to text more than once, which would repeat "
                "text without end"
            )
    total = sum(count for _, count, _ in spans)
    if total > max_chars:
        raise _TooMuchText(total)
    return spans


def _text_from_pieces(
    stream: bytes,
    pieces: list[tuple[int, int, int, bool]],
    limit_cp: int,
    wide: bool,
    max_chars: int,
    deleted: list[tuple[int, int]] | None = None,
) -> str:
    """Characters [0, limit_cp) of the document. UTF-16 surrogates stay separate so CPs line up."""
    ends = [d1 for _, d1 in deleted] if deleted else []
    out: list[str] = []
    for start, count, narrow in _piece_spans(pieces, limit_cp, wide, len(stream), max_chars):
        if narrow:
            chars = _decode_8bit(stream[start : start + count])
        else:
            chars = _decode_utf16_units(stream[start : start + 2 * count])
        out.append(_mask_deleted(chars, start, 1 if narrow else 2, deleted, ends) if deleted else chars)
    return "".join(out)


def _fix_surrogates(text: str) -> str:
    return text.encode("utf-16-le", errors="surrogatepass").decode("utf-16-le", errors="replace")


def text_to_blocks(text: str, track_pages: bool) -> list[TextBlock]:
    """Turn Word's special characters into paragraphs, table rows, line and page breaks; drop field codes."""
    blocks: list[TextBlock] = []
    page = 1
    buf: list[str] = []
    cells: list[str] = []
    last_was_cell_mark = False
    field_stack: list[bool] = []  # True once a field's separator (0x14) is passed: its result is visible
    hidden = 0  # number of fields whose instruction part we are inside

    def flush(into_cell: bool = False) -> None:
        para = _fix_surrogates("".join(buf))
        para = _SPACES.sub("\n", para).strip()
        buf.clear()
        if into_cell:
            cells.append(" ".join(para.split("\n")))
        elif para:
            blocks.append(TextBlock(text=para, chapter=None, page=page if track_pages else None))

    def flush_row() -> None:
        if any(cells):
            blocks.append(TextBlock(text=" | ".join(cells), chapter=None, page=page if track_pages else None))
        cells.clear()

    for match in _TOKENS.finditer(text):
        tok = match.group()
        code = ord(tok) if len(tok) == 1 and tok < "\x20" else -1  # a control mark; -1 for text
        if code == 0x13:
            field_stack.append(False)
            hidden += 1
            continue
        if code == 0x14:
            if field_stack and not field_stack[-1]:
                field_stack[-1] = True
                hidden -= 1
            continue
        if code == 0x15:
            if field_stack and not field_stack.pop():
                hidden -= 1
            continue
        if hidden:
            continue
        if code == 0x07:
            if last_was_cell_mark and not "".join(buf).strip():
                buf.clear()
                flush_row()
                last_was_cell_mark = False
            else:
                flush(into_cell=True)
                last_was_cell_mark = True
            continue
        if code in (0x0D, 0x0C):
            if cells and not last_was_cell_mark:
                flush(into_cell=True)
                flush_row()
            elif cells:
                flush_row()
            else:
                flush()
            if code == 0x0C:
                page += 1
            last_was_cell_mark = False
            continue
        if code >= 0 and tok.strip():
            last_was_cell_mark = False
        if code in (0x0B, 0x0E):
            buf.append("\n")
        elif code == 0x09:
            buf.append("\t")
        elif code == 0x1E:
            buf.append("-")
        elif code >= 0:
            continue  # 0x01 pictures, 0x02 note marks, 0x05 comment marks, 0x08 drawings, 0x1F soft hyphen
        else:
            buf.append(tok)
            last_was_cell_mark = False
    if cells:
        if buf:
            flush(into_cell=True)
        flush_row()
    flush()
    return blocks


def _fib_counts(wd: bytes) -> tuple[dict[str, int], int]:
    """Character counts of each story, and (fcClx, lcbClx) from a Word 97+ FIB."""
    off = 0x20
    csw = _u16(wd, off)
    off += 2 + 2 * csw
    cslw = _u16(wd, off)
    rglw = off + 2
    if cslw < 11:
        raise _Corrupt("the file information block is too short (cslw)")
    names = ("ccpText", "ccpFtn", "ccpHdd", "ccpMcr", "ccpAtn", "ccpEdn", "ccpTxbx", "ccpHdrTxbx")
    counts = {name: _u32(wd, rglw + 4 * (3 + i)) for i, name in enumerate(names)}
    off = rglw + 4 * cslw
    cb_fclcb = _u16(wd, off)
    if cb_fclcb <= _FC_CLX_INDEX:
        raise _Corrupt("the file information block has no piece table location")
    return counts, off + 2


def _read_word97(ole: olefile.OleFileIO, wd: bytes, flags: int, max_chars: int) -> tuple[str, str, str, str, str]:
    table_name = "1Table" if flags & 0x0200 else "0Table"
    if not ole.exists(table_name):
        raise _Corrupt(f"the {table_name} stream named by the FIB is missing")
    table = ole.openstream(table_name).read()
    counts, blob = _fib_counts(wd)
    fc_clx, lcb_clx = _u32(wd, blob + 8 * _FC_CLX_INDEX), _u32(wd, blob + 8 * _FC_CLX_INDEX + 4)
    if lcb_clx == 0 or fc_clx + lcb_clx > len(table):
        raise _Corrupt(f"the piece table lies outside the {table_name} stream")
    pieces = _read_plcpcd(table[fc_clx : fc_clx + lcb_clx])
    total = sum(counts.values())
    try:
        deleted = _deleted_ranges(
            wd, table, _u32(wd, blob + 8 * _FC_CHPX_INDEX), _u32(wd, blob + 8 * _FC_CHPX_INDEX + 4)
        )
    except (_Corrupt, struct.error) as exc:  # formatting is damaged: keep the text, lose revision marks
        logger.debug("character formatting unreadable, tracked deletions kept: %s", exc)
        deleted = []
    text = _text_from_pieces(wd, pieces, total, wide=True, max_chars=max_chars, deleted=deleted)
    main_end = counts["ccpText"]
    ftn_end = main_end + counts["ccpFtn"]
    edn_start = ftn_end + counts["ccpHdd"] + counts["ccpMcr"] + counts["ccpAtn"]
    edn_end = edn_start + counts["ccpEdn"]
    textboxes = text[edn_end : edn_end + counts["ccpTxbx"]]
    return text[:main_end], text[main_end:ftn_end], text[edn_start:edn_end], textboxes, "utf-16le/cp1252"


def _word6_codepage(lid: int, raw: bytes) -> str:
    """Word 6/95 stores 8-bit text in the codepage of its fonts; the FIB only gives the language."""
    codepage = _LID_CODEPAGES.get(lid) or _LID_CODEPAGES.get(lid & 0x3FF)
    if codepage:
        return codepage
    latin = raw.decode("cp1252", errors="replace")
    letters = [ch for ch in latin if ch.isalpha()]
    accented = sum(1 for ch in letters if ord(ch) >= 0xC0)
    if letters and accented / len(letters) > 0.4:  # not a Western language: Cyrillic, Greek ... saved as 8-bit
        try:
            from charset_normalizer import from_bytes
        except ImportError:  # optional dependency
            return "cp1252"
        match = from_bytes(
            raw.translate(_CONTROLS_TO_SPACE), cp_isolation=["cp1251", "cp1250", "cp1253", "cp1254", "cp1257", "koi8_r"]
        ).best()
        if match is not None:
            return match.encoding
    return "cp1252"


def _read_word6(wd: bytes, flags: int, max_chars: int) -> tuple[str, str, str, str, str]:
    fc_min, fc_mac = _u32(wd, 0x18), _u32(wd, 0x1C)
    ccp_text, ccp_ftn = _u32(wd, 0x34), _u32(wd, 0x38)
    if flags & 0x0004:  # complex (fast-saved): piece table inside the WordDocument stream
        fc_clx, lcb_clx = _u32(wd, 0x160), _u32(wd, 0x164)
        if lcb_clx == 0 or fc_clx + lcb_clx > len(wd):
            raise _Corrupt("the Word 6/95 piece table lies outside the WordDocument stream")
        pieces = _read_plcpcd(wd[fc_clx : fc_clx + lcb_clx])
        spans = _piece_spans(pieces, ccp_text + ccp_ftn, False, len(wd), max_chars)
        raw = b"".join(wd[start : start + count] for start, count, _ in spans)
    else:
        if not fc_min <= fc_mac <= len(wd):
            raise _Corrupt("the Word 6/95 text range lies outside the WordDocument stream")
        raw = wd[fc_min : min(fc_mac, fc_min + ccp_text + ccp_ftn)]
    codepage = _word6_codepage(_u16(wd, 0x06), raw[:ccp_text])
    main = raw[:ccp_text].decode(codepage, errors="replace")
    footnotes = raw[ccp_text : ccp_text + ccp_ftn].decode(codepage, errors="replace")
    return main, footnotes, "", "", codepage


def _garbage_ratio(text: str) -> float:
    """Share of visible characters that real text almost never has: what damaged pieces decode to."""
    visible = [ch for ch in text[:200_000] if not ch.isspace() and ord(ch) >= 0x20]
    if len(visible) < 20:
        return 0.0
    bad = sum(1 for ch in visible if 0x7F <= ord(ch) <= 0xBF or ch in "þÿ\ufffd" or 0xD800 <= ord(ch) <= 0xF8FF)
    return bad / len(visible)


def _note_blocks(text: str) -> list[TextBlock]:
    """Each footnote/endnote story paragraph becomes one block without chapter or page."""
    return [TextBlock(text=b.text, chapter=None, page=None) for b in text_to_blocks(text, track_pages=False)]


def parse_doc(path: Path, limits: ParseLimits | None = None) -> ParsedDocument:
    max_chars = (limits or ParseLimits()).max_text_chars
    try:
        ole = olefile.OleFileIO(str(path))
    except Exception as exc:  # olefile raises OSError, struct.error, IndexError ... on damaged files
        raise parse_error(
            CORRUPT_DOCUMENT,
            path,
            msg("the OLE2 compound file is damaged ({problem})", problem=str(exc)),
        ) from None
    try:
        if ole.exists("EncryptedPackage") or ole.exists("EncryptionInfo"):
            raise parse_error(ENCRYPTED_DOCUMENT, path, _ENCRYPTED)
        if not ole.exists("WordDocument"):
            streams = ", ".join("/".join(e) for e in ole.listdir()[:8])
            raise parse_error(
                UNSUPPORTED_FORMAT,
                path,
                msg("it is an OLE2 file but not a Word document (streams: {streams})", streams=streams),
            )
        try:
            wd = ole.openstream("WordDocument").read()
            ident, nfib, flags = _u16(wd, 0), _u16(wd, 2), _u16(wd, 0x0A)
            if ident not in (_WIDENT_97, _WIDENT_6):
                raise _Corrupt(f"the WordDocument stream has an unknown signature 0x{ident:04X}")
            if flags & 0x0100 or flags & 0x8000:  # fEncrypted / fObfuscated
                raise parse_error(ENCRYPTED_DOCUMENT, path, _ENCRYPTED)
            if nfib < _NFIB_97:
                main, footnotes, endnotes, textboxes, encoding = _read_word6(wd, flags, max_chars)
                version = "word6/95"
            else:
                main, footnotes, endnotes, textboxes, encoding = _read_word97(ole, wd, flags, max_chars)
                version = "word97-2003"
        except _Corrupt as exc:
            raise parse_error(
                CORRUPT_DOCUMENT,
                path,
                msg("it is a damaged Word 97-2003 file: {problem}", problem=str(exc)),
            ) from None
        except _TooMuchText as exc:
            raise too_much_text(path, exc.chars, max_chars) from None
        except OSError as exc:
            raise parse_error(
                CORRUPT_DOCUMENT,
                path,
                msg("a stream of the OLE2 file cannot be read ({problem})", problem=str(exc)),
            ) from None
        garbage = _garbage_ratio(main)
        if garbage > _MAX_GARBAGE:
            raise parse_error(
                CORRUPT_DOCUMENT,
                path,
                msg("it is damaged: {share:.0%} of its text is unreadable binary data", share=garbage),
            )
        track_pages = "\x0c" in main
        blocks = text_to_blocks(main, track_pages=track_pages)
        blocks += _note_blocks(textboxes) + _note_blocks(footnotes) + _note_blocks(endnotes)
        return make_document(path, "doc", blocks, {"format": version, "nfib": str(nfib), "encoding": encoding})
    finally:
        ole.close()
