"""Build small Word 97-2003 (.doc) files from scratch for hostile-input tests, so no binary is committed.

``compound_file`` writes an OLE2 compound file (version 3, 512-byte sectors, [MS-CFB]) holding the given
streams; every stream is padded to the 4,096-byte mini-stream cutoff so all live in regular sectors.
``word97`` writes the part of [MS-DOC] the parser reads: a FIB with the story lengths and the piece
table's place, the text, and a CLX in the 1Table stream. Its ``pieces`` argument lays out the piece table
freely, which is how the hostile files are made (overlapping pieces, a negative Prc size).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

SECTOR = 512
ENDOFCHAIN, FREESECT, FATSECT, NOSTREAM = 0xFFFFFFFE, 0xFFFFFFFF, 0xFFFFFFFD, 0xFFFFFFFF
MINI_CUTOFF = 4096
TEXT_FC = 0x800  # where word97() puts the text in the WordDocument stream


def _dir_entry(name: str, kind: int, start: int, size: int, child: int = NOSTREAM, right: int = NOSTREAM) -> bytes:
    raw_name = name.encode("utf-16-le") + b"\x00\x00"
    entry = raw_name.ljust(64, b"\x00")
    entry += struct.pack("<HBB", len(raw_name), kind, 1)  # name length, type, colour black
    entry += struct.pack("<III", NOSTREAM, right, child)
    entry += b"\x00" * 16 + b"\x00" * 4 + b"\x00" * 16  # CLSID, state bits, times
    entry += struct.pack("<IQ", start, size)
    assert len(entry) == 128
    return entry


def compound_file(streams: dict[str, bytes]) -> bytes:
    """An OLE2 file whose root storage holds ``streams`` (each padded to at least 4,096 bytes)."""
    padded = {name: data.ljust(MINI_CUTOFF, b"\x00") for name, data in streams.items()}
    chains: list[tuple[str, int, int]] = []  # name, first sector, size
    body = b""
    fat: list[int] = []
    for name, data in padded.items():
        first = len(fat)
        count = -(-len(data) // SECTOR)
        fat += [first + i + 1 for i in range(count - 1)] + [ENDOFCHAIN]
        body += data.ljust(count * SECTOR, b"\x00")
        chains.append((name, first, len(data)))
    entries = [_dir_entry("Root Entry", 5, ENDOFCHAIN, 0, child=1 if chains else NOSTREAM)]
    for i, (name, first, size) in enumerate(chains):
        right = i + 2 if i + 1 < len(chains) else NOSTREAM  # a right-leaning sibling chain is a valid tree
        entries.append(_dir_entry(name, 2, first, size, right=right))
    while len(entries) % (SECTOR // 128):
        entries.append(_dir_entry("", 0, 0, 0))
    directory = b"".join(entries)
    dir_first, dir_count = len(fat), len(directory) // SECTOR
    fat += [dir_first + i + 1 for i in range(dir_count - 1)] + [ENDOFCHAIN]
    body += directory
    fat_count = 1
    while (len(fat) + fat_count) > fat_count * (SECTOR // 4):
        fat_count += 1
    if fat_count > 109:
        raise ValueError("file too large for a FAT without DIFAT sectors (about 7 MB)")
    fat_first = len(fat)
    fat += [FATSECT] * fat_count
    fat += [FREESECT] * (fat_count * (SECTOR // 4) - len(fat))
    body += struct.pack(f"<{len(fat)}I", *fat)
    difat = [fat_first + i for i in range(fat_count)] + [FREESECT] * (109 - fat_count)
    header = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 16
    header += struct.pack("<HHHHH", 0x3E, 3, 0xFFFE, 9, 6) + b"\x00" * 6
    header += struct.pack("<IIIIIIIII", 0, fat_count, dir_first, 0, MINI_CUTOFF, ENDOFCHAIN, 0, ENDOFCHAIN, 0)
    header += struct.pack("<109I", *difat)
    assert len(header) == SECTOR
    return header + body


def piece(cp_start: int, cp_end: int, fc: int, compressed: bool = False) -> tuple[int, int, int, bool]:
    return cp_start, cp_end, fc, compressed


def clx(pieces: Sequence[tuple[int, int, int, bool]], prc: bytes = b"") -> bytes:
    """A CLX: optional Prc entries, then the Pcdt with the PlcPcd (CPs, then one 8-byte PCD per piece)."""
    cps = [pieces[0][0], *(p[1] for p in pieces)]
    pcds = b"".join(
        struct.pack("<HIH", 0, (fc * 2 | 0x40000000) if compressed else fc, 0) for _, _, fc, compressed in pieces
    )
    plc = struct.pack(f"<{len(cps)}I", *cps) + pcds
    return prc + b"\x02" + struct.pack("<I", len(plc)) + plc


def word97(
    text: str,
    *,
    pieces: Sequence[tuple[int, int, int, bool]] | None = None,
    ccp_text: int | None = None,
    footnotes: str = "",
    prc: bytes = b"",
    stream_size: int = 0,
) -> bytes:
    """A Word 97 file whose main text is ``text`` (UTF-16 at TEXT_FC), read through ``pieces``.

    By default one piece covers the whole text and the ``footnotes`` story after it. ``ccp_text`` overrides
    the main story's length in the FIB (lengths count UTF-16 units, as Word does); ``stream_size`` pads the
    WordDocument stream (to give overlapping pieces room to point far).
    """
    body = (text + footnotes).encode("utf-16-le")
    units = len(text.encode("utf-16-le")) // 2
    pieces = list(pieces) if pieces is not None else [piece(0, len(body) // 2, TEXT_FC)]
    table = clx(pieces, prc)
    fib = bytearray(0x9A + 93 * 8)
    struct.pack_into("<HHH", fib, 0, 0xA5EC, 0x00C1, 0)  # wIdent, nFib (Word 97), unused
    struct.pack_into("<H", fib, 0x0A, 0x0200)  # fWhichTblStm: the 1Table stream
    struct.pack_into("<H", fib, 0x20, 14)  # csw
    struct.pack_into("<H", fib, 0x3E, 22)  # cslw; rglw starts at 0x40
    struct.pack_into("<I", fib, 0x40 + 4 * 3, units if ccp_text is None else ccp_text)  # ccpText
    struct.pack_into("<I", fib, 0x40 + 4 * 4, len(footnotes.encode("utf-16-le")) // 2)  # ccpFtn
    struct.pack_into("<H", fib, 0x98, 93)  # cbRgFcLcb; rgFcLcb starts at 0x9A
    struct.pack_into("<II", fib, 0x9A + 33 * 8, 0, len(table))  # fcClx, lcbClx
    word = bytes(fib).ljust(TEXT_FC, b"\x00") + body
    word = word.ljust(stream_size, b"\x00")
    return compound_file({"WordDocument": word, "1Table": table})
