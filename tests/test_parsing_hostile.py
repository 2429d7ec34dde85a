"""Hostile .doc files built from scratch (tests/word_files.py): text amplification through the piece table,
a property-modifier size that loops, and limits on the text a file may produce.

The large reproducers run in a child interpreter under an address-space cap (tests/bounded.py), or through the
real worker pool with its time limit, so a regression fails instead of eating the machine.
"""

from __future__ import annotations

import struct
import time
from pathlib import Path

import pytest

from kb_core.base.errors import InvalidArgument, ParseError
from kb_core.engines.parsing import ParseLimits, parse_file, parse_file_inprocess
from tests.bounded import peak_mb, run_bounded
from tests.word_files import TEXT_FC, compound_file, piece, word97

TEXT = "Piece tables map characters to bytes.\r第二段：中文也一样。\r"


def write(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def refusal(path: Path, limits: ParseLimits | None = None) -> ParseError:
    with pytest.raises(ParseError) as info:
        parse_file_inprocess(path, limits or ParseLimits())
    assert path.name in info.value.message
    return info.value


def test_the_builder_makes_a_file_the_parser_reads(tmp_path: Path) -> None:
    doc = parse_file_inprocess(write(tmp_path, "plain.doc", word97(TEXT)))
    assert [b.text for b in doc.blocks] == ["Piece tables map characters to bytes.", "第二段：中文也一样。"]


def test_pieces_in_any_byte_order_and_8bit_pieces_read_exactly(tmp_path: Path) -> None:
    """A fast-saved file's pieces are not in byte order and may mix UTF-16 and 8-bit text: all legitimate."""
    first, second = "Fast saved ", "documents work."
    body = (second + first).encode("utf-16-le")
    latin = b"\rCaf\xe9 au lait\r"  # cp1252, one byte per character
    n1, n2 = len(first), len(second)
    fc_latin = TEXT_FC + len(body)
    pieces = [
        piece(0, n1, TEXT_FC + 2 * n2),  # stored after the second piece
        piece(n1, n1 + n2, TEXT_FC),
        piece(n1 + n2, n1 + n2 + len(latin), fc_latin, compressed=True),
    ]
    data = word97("", pieces=pieces, ccp_text=n1 + n2 + len(latin))
    # word97 wrote no text: put the bytes where the pieces point (TEXT_FC onwards is the stream's tail).
    data = _patch_word_stream(data, TEXT_FC, body + latin)
    doc = parse_file_inprocess(write(tmp_path, "fastsaved.doc", data))
    assert [b.text for b in doc.blocks] == ["Fast saved documents work.", "Café au lait"]


def _patch_word_stream(data: bytes, offset: int, payload: bytes) -> bytes:
    """Overwrite bytes of the WordDocument stream (its sectors come first and are contiguous in our files)."""
    start = 512 + offset
    return data[:start] + payload + data[start + len(payload) :]


def test_single_character_paragraphs_cells_and_field_results_are_kept(tmp_path: Path) -> None:
    """A one-character run between Word's control marks ("A" alone, a cell holding "1") was taken for a mark."""
    text = "A\rHello\r1\x072\x07\x07\rPage \x13 PAGE \x145\x15\r中\r"
    doc = parse_file_inprocess(write(tmp_path, "single.doc", word97(text)))
    assert [b.text for b in doc.blocks] == ["A", "Hello", "1 | 2", "Page 5", "中"]


def test_characters_outside_the_bmp_keep_story_boundaries(tmp_path: Path) -> None:
    """Word counts UTF-16 units; an emoji (two units) used to shift every later story boundary by one."""
    doc = parse_file_inprocess(write(tmp_path, "emoji.doc", word97("😀 main 𠀀\r", footnotes="note\r")))
    assert [b.text for b in doc.blocks] == ["😀 main 𠀀", "note"]


@pytest.mark.parametrize(
    "layout",
    ["same bytes twice", "partly overlapping", "8-bit piece inside a UTF-16 piece"],
)
def test_overlapping_pieces_are_refused_as_corrupt(tmp_path: Path, layout: str) -> None:
    n = len(TEXT)
    if layout == "same bytes twice":
        pieces = [piece(0, n, TEXT_FC), piece(n, 2 * n, TEXT_FC)]
    elif layout == "partly overlapping":
        pieces = [piece(0, 10, TEXT_FC), piece(10, 20, TEXT_FC + 2 * 9)]
    else:
        pieces = [piece(0, n, TEXT_FC), piece(n, n + 4, TEXT_FC + 6, compressed=True)]
    data = word97(TEXT, pieces=pieces, ccp_text=pieces[-1][1])
    error = refusal(write(tmp_path, "overlap.doc", data))
    assert error.code == "CORRUPT_DOCUMENT"
    assert "more than once" in error.message


def test_amplifying_piece_table_is_refused_in_bounded_time_and_memory(tmp_path: Path) -> None:
    """A 0.5 MB file whose 400 pieces all point at the same 250,000 characters: 100 million characters before."""
    unit = "Overlapping pieces repeat this sentence. 重复的文字。\r"
    text = unit * (250_000 // len(unit))
    n = len(text)
    data = word97(text, pieces=[piece(i * n, (i + 1) * n, TEXT_FC) for i in range(400)], ccp_text=400 * n)
    path = write(tmp_path, "amplify.doc", data)
    out = run_bounded(
        f"""
        import time
        from kb_core.base.errors import InvalidArgument, ParseError
        from kb_core.engines.parsing import parse_file_inprocess
        started = time.perf_counter()
        try:
            doc = parse_file_inprocess({str(path)!r})
            print("parsed", len(doc.text))
        except ParseError as exc:
            print("refused", exc.code, exc.message)
        print("seconds", time.perf_counter() - started)
        """,
        memory_mb=768,
        timeout_s=60,
    )
    assert "refused CORRUPT_DOCUMENT" in out and "more than once" in out, out
    assert float(out.split("seconds")[1].split()[0]) < 10
    assert peak_mb(out) < 400


def test_text_over_the_absolute_limit_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "long.doc", word97("word " * 2000 + "\r"))
    assert len(parse_file_inprocess(path).text) == 9999
    error = refusal(path, ParseLimits(max_text_chars=5000))
    assert error.code == "FILE_TOO_LARGE" and "10,001 characters" in error.message and "5,000" in error.message
    txt = write(tmp_path, "long.txt", ("字" * 3000).encode("utf-8"))
    error = refusal(txt, ParseLimits(max_text_chars=2000))
    assert error.code == "FILE_TOO_LARGE" and "3,000 characters" in error.message


def test_bad_text_limit_is_rejected() -> None:
    with pytest.raises(InvalidArgument, match="max_text_chars must be a positive integer"):
        ParseLimits(max_text_chars=0)


@pytest.mark.parametrize("size", [-3, -4, -32768])
def test_negative_property_modifier_size_fails_fast_in_the_worker(tmp_path: Path, size: int) -> None:
    """A Prc (property modifier before the piece table) with cbGrpprl < 0 used to loop until the time limit."""
    prc = b"\x01" + struct.pack("<h", size)
    path = write(tmp_path, "negative-prc.doc", word97(TEXT, prc=prc))
    started = time.monotonic()
    with pytest.raises(ParseError) as info:
        parse_file(path, ParseLimits(timeout_seconds=20))
    assert time.monotonic() - started < 10
    assert info.value.code == "CORRUPT_DOCUMENT"
    assert "property modifier" in info.value.message


def test_prc_entries_with_valid_sizes_are_skipped(tmp_path: Path) -> None:
    prc = b"\x01" + struct.pack("<h", 2) + b"\x00\x00" + b"\x01" + struct.pack("<h", 0)
    doc = parse_file_inprocess(write(tmp_path, "prc.doc", word97(TEXT, prc=prc)))
    assert doc.blocks[0].text == "Piece tables map characters to bytes."


def _word6(text: bytes, pieces: list[tuple[int, int, int, bool]]) -> bytes:
    """A fast-saved (complex) Word 6 file: 8-bit text, the piece table inside the WordDocument stream."""
    from tests.word_files import clx

    table = clx(pieces)
    fc_text, fc_clx = 0x400, 0x400 + len(text)
    word = bytearray(fc_clx + len(table))
    struct.pack_into("<HHH", word, 0, 0xA5DC, 0x0065, 0x0409)  # wIdent, nFib (Word 6), lid en-US
    struct.pack_into("<H", word, 0x0A, 0x0004)  # fComplex
    struct.pack_into("<II", word, 0x18, fc_text, fc_text + len(text))  # fcMin, fcMac
    struct.pack_into("<II", word, 0x34, pieces[-1][1], 0)  # ccpText, ccpFtn
    struct.pack_into("<II", word, 0x160, fc_clx, len(table))  # fcClx, lcbClx
    word[fc_text : fc_text + len(text)] = text
    word[fc_clx:] = table
    return compound_file({"WordDocument": bytes(word)})


def test_word6_fast_saved_pieces_are_read_and_overlaps_refused(tmp_path: Path) -> None:
    text = b"Word six text.\rSecond line.\r"
    n = len(text)
    ok = _word6(text, [piece(0, 13, 0x400 + 15), piece(13, n, 0x400)])
    doc = parse_file_inprocess(write(tmp_path, "word6.doc", ok))
    assert [b.text for b in doc.blocks] == ["Second line.", "Word six text."]
    assert doc.metadata["format"] == "word6/95"
    repeated = _word6(text, [piece(i * n, (i + 1) * n, 0x400) for i in range(50)])
    error = refusal(write(tmp_path, "word6-repeat.doc", repeated))
    assert error.code == "CORRUPT_DOCUMENT" and "more than once" in error.message


def test_a_formatting_page_named_many_times_is_read_once(tmp_path: Path) -> None:
    """Tracked deletions come from character-formatting pages; a page list naming one page 40,000 times made
    1.8 million deletion ranges, each compared with each of 1,000 pieces. Each page now counts once."""
    text = "abcdefghij" * 100
    n = len(text)
    crun = 90
    fkp = bytearray(512)
    struct.pack_into(f"<{crun + 1}I", fkp, 0, *(TEXT_FC + 2 * i for i in range(crun + 1)))  # one character each
    grpprl_at = 456  # a CHPX: cb, then sprmCFRMarkDel (0x0800) with operand 1
    fkp[grpprl_at : grpprl_at + 4] = bytes([3, 0x00, 0x08, 0x01])
    for i in range(crun):
        fkp[4 * (crun + 1) + i] = grpprl_at // 2 if i % 2 == 0 else 0  # even characters deleted
    fkp[511] = crun
    pieces = [piece(i, i + 1, TEXT_FC + 2 * i) for i in range(n)]
    page = (TEXT_FC + 2 * n) // 512 + 1
    word = _stream(word97(text, pieces=pieces, stream_size=(page + 1) * 512), "WordDocument")
    word = word[: page * 512] + bytes(fkp) + word[(page + 1) * 512 :]
    table = _stream(word97(text, pieces=pieces), "1Table")
    count = 40_000
    plcf = struct.pack(f"<{count + 1}I", *([0] * (count + 1))) + struct.pack(f"<{count}I", *([page] * count))
    fib = bytearray(word)
    struct.pack_into("<II", fib, 0x9A + 12 * 8, len(table), len(plcf))  # fcPlcfBteChpx, lcbPlcfBteChpx
    path = write(tmp_path, "pages.doc", compound_file({"WordDocument": bytes(fib), "1Table": table + plcf}))
    started = time.monotonic()
    doc = parse_file(path, ParseLimits(timeout_seconds=30))
    assert time.monotonic() - started < 10
    kept = "".join(ch for i, ch in enumerate(text) if not (i < crun and i % 2 == 0))
    assert doc.text == kept


def _stream(data: bytes, name: str) -> bytes:
    import io

    import olefile

    with olefile.OleFileIO(io.BytesIO(data)) as ole:
        return ole.openstream(name).read()


def test_a_parse_over_the_memory_limit_fails_clearly_and_the_pool_recovers(tmp_path: Path) -> None:
    """The worker's address space is capped per file; parsing 60 MB of text needs about 440 MB over the
    worker's own start-up size, so a 410 MB cap stops it with FILE_TOO_LARGE, and the next file parses normally."""
    small = write(tmp_path, "small.doc", word97(TEXT))
    assert parse_file(small).blocks[0].text == "Piece tables map characters to bytes."
    big = write(tmp_path, "big.txt", b"plain words in a line of text\n" * 2_000_000)
    with pytest.raises(ParseError) as info:
        parse_file(big, ParseLimits(max_memory_bytes=410 * 2**20))
    assert info.value.code == "FILE_TOO_LARGE" and "more memory than a parser may use (0.4 GiB)" in info.value.message
    assert parse_file(small).blocks[0].text == "Piece tables map characters to bytes."
    with pytest.raises(InvalidArgument, match="max_memory_bytes"):
        ParseLimits(max_memory_bytes=-1)


def test_a_tight_memory_cap_counts_from_the_workers_start_up_size(tmp_path: Path) -> None:
    """The cap is what a file may use beyond the worker's own start-up mapping, which differs by machine (thread
    stacks and BLAS buffers per core): with 64 MiB a worker still parses every kind of file, its parsers' native
    libraries mapped before the cap (CI once read a DOCX as malformed: lxml's etree failed to map under the cap)."""
    tight = ParseLimits(max_memory_bytes=64 * 2**20)
    docx = tmp_path / "small.docx"
    docx.write_bytes(_small_docx())
    files = {
        write(tmp_path, "small.doc", word97(TEXT)): "Piece tables map characters to bytes.",
        docx: "压缩的正文 deflated body text",
        write(tmp_path, "small.txt", "纯文本 plain text\n".encode()): "纯文本 plain text",
        # codecs load lazily: a CI worker once answered "unknown encoding: gb18030" under its cap
        write(tmp_path, "gbk.txt", "国标编码的中文文本，用于测试编码检测。\n".encode("gb18030")): "国标编码的中文文本",
        write(tmp_path, "latin.txt", "Détecté à Zürich, naïve café.\n".encode("cp1252")): "Détecté à Zürich",
    }
    for path, first in files.items():
        assert parse_file(path, tight).blocks[0].text.startswith(first), path


def test_a_worker_without_an_optional_package_still_loads_everything_else_at_start_up() -> None:
    """charset_normalizer is optional; where it was missing (the GPU machine), the worker's start-up stopped at it
    and every segment writer imported FAISS and the keyword index inside its first timed write (46 % of them)."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['charset_normalizer'] = None\n"
        "from kb_core.engines.parsing.isolation import _preload\n"
        "_preload()\n"
        "wanted = ['kb_core.engines.vector_index', 'kb_core.engines.keyword_index', 'kb_core.store.segments',\n"
        "          'kb_core.engines.parsing.docx_parser', 'encodings.gb18030']\n"
        "print([m for m in wanted if m not in sys.modules])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


# -- damaged zips found by tests/test_fuzz.py -----------------------------------------------------------------
def _small_docx() -> bytes:
    import io
    import zipfile

    paragraph = "<w:p><w:r><w:t>压缩的正文 deflated body text</w:t></w:r></w:p>"
    body = (
        '<?xml version="1.0" encoding="UTF-8"?><w:document xmlns:w="http://schemas.openxmlformats.org/'
        f'wordprocessingml/2006/main"><w:body>{paragraph * 4}</w:body></w:document>'
    )
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        archive.writestr("word/document.xml", body)
    return out.getvalue()


def test_the_docx_builder_parses() -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = write(Path(folder), "ok.docx", _small_docx())
        assert parse_file_inprocess(path).blocks[0].text.startswith("压缩的正文 deflated body text")


def test_zip_needing_an_unknown_version_is_a_clear_error(tmp_path: Path) -> None:
    """zipfile raises NotImplementedError for "version needed to extract" 25.3; it escaped type detection."""
    data = bytearray(_small_docx())
    central = data.index(b"PK\x01\x02")
    struct.pack_into("<H", data, central + 6, 253)
    error = refusal(write(tmp_path, "version.docx", bytes(data)))
    assert error.code == "CORRUPT_DOCUMENT" and "damaged" in error.message
    assert "NotImplementedError" not in error.message


def test_damaged_deflate_stream_is_a_clear_error(tmp_path: Path) -> None:
    """A member whose compressed bytes are not deflate data raised zlib.error (reported as 'malformed (error: ...')."""
    data = bytearray(_small_docx())
    header = data.index(b"PK\x03\x04word/document.xml"[:4], data.index(b"word/document.xml") - 30)
    name_len, extra_len = struct.unpack_from("<HH", data, header + 26)
    start = header + 30 + name_len + extra_len
    data[start : start + 16] = b"\xff" * 16  # BTYPE 11: an invalid deflate block
    error = refusal(write(tmp_path, "deflate.docx", bytes(data)))
    assert error.code == "CORRUPT_DOCUMENT"
    assert "word/document.xml cannot be unpacked" in error.message and "malformed" not in error.message


def test_a_docx_listing_too_many_parts_is_refused_before_its_directory_is_parsed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """#37: a zip's member checks come after zipfile parsed its whole directory, work that grows with the count;
    the count is now read from the end record first."""
    import zipfile

    from kb_core.engines.parsing import docx_parser

    path = tmp_path / "many.docx"
    with zipfile.ZipFile(path, "w") as out:
        for number in range(101):
            out.writestr(f"word/media/p{number}.bin", b"")
    monkeypatch.setattr(docx_parser, "MAX_PARTS", 100)

    def parsed(*args: object, **kwargs: object) -> None:
        raise AssertionError("the directory was parsed before the part limit was applied")

    monkeypatch.setattr(docx_parser.zipfile, "ZipFile", parsed)
    error = refusal(path)
    assert error.code == "CORRUPT_DOCUMENT" and "101 parts" in error.message and "at most 100" in error.message
