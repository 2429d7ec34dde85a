"""Document parsers: every shared fixture, TXT encodings, content sniffing, limits, isolation."""

from __future__ import annotations

import csv
import re
import shutil
import time
import zipfile
from pathlib import Path

import docx
import pytest
from docx.enum.text import WD_BREAK
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kb_core.base.errors import ParseError
from kb_core.engines.parsing import (
    SUPPORTED_TYPES,
    ParsedDocument,
    ParseLimits,
    TextBlock,
    detect_file_type,
    parse_file,
    parse_file_inprocess,
)
from tests.bounded import run_bounded
from tests.lying_zip import claim_compressed_size

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
FIXTURES = SHARED / "fixtures" / "docs"
needs_fixtures = pytest.mark.skipif(
    not (FIXTURES / "MANIFEST.tsv").exists(), reason=f"shared fixtures not found at {FIXTURES}"
)


def _manifest() -> list[dict[str, str]]:
    if not (FIXTURES / "MANIFEST.tsv").exists():
        return []
    with (FIXTURES / "MANIFEST.tsv").open(encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh, delimiter="\t"))


# Files that must fail, and how. Every other manifest file must parse to non-empty text.
EXPECTED_ERRORS = {
    "apache-poi/51921-Word-Crash067.doc": "EMPTY_DOCUMENT",
    "apache-poi/51921-Word-Crash067.docx": "EMPTY_DOCUMENT",
    "apache-poi/EmptyDocumentWithHeaderFooter.docx": "EMPTY_DOCUMENT",  # text only in header/footer
    "apache-poi/empty.doc": "EMPTY_DOCUMENT",
    "python-docx/doc-default.docx": "EMPTY_DOCUMENT",
    "python-docx/sty-having-no-styles-part.docx": "EMPTY_DOCUMENT",
    "python-docx/tbl-having-tables.docx": "EMPTY_DOCUMENT",  # tables with empty cells only
    "apache-poi/PasswordProtected.doc": "ENCRYPTED_DOCUMENT",
    "apache-poi/password_password_cryptoapi.doc": "ENCRYPTED_DOCUMENT",
    "apache-poi/password_tika_binaryrc4.doc": "ENCRYPTED_DOCUMENT",
    "apache-poi/bug53475-password-is-pass.docx": "ENCRYPTED_DOCUMENT",  # OLE2 EncryptedPackage
    "apache-poi/clusterfuzz-testcase-POIHWPFFuzzer-5696094627495936.doc": "CORRUPT_DOCUMENT",  # text is garbage
    "apache-poi/clusterfuzz-testcase-minimized-POIFuzzer-6709287337197568.docx": "CORRUPT_DOCUMENT",
    "apache-poi/clusterfuzz-testcase-minimized-POIXWPFFuzzer-5313273089884160.docx": "CORRUPT_DOCUMENT",
    "apache-poi/clusterfuzz-testcase-minimized-POIXWPFFuzzer-6442791109263360.docx": "CORRUPT_DOCUMENT",
    "apache-poi/crash-517626e815e0afa9decd0ebb6d1dee63fb9907dd.docx": "CORRUPT_DOCUMENT",
    "apache-poi/truncated62886.docx": "CORRUPT_DOCUMENT",
    "node-word-extractor/badfile-01-bad-header.doc": "CORRUPT_DOCUMENT",
}

TEST11_ZH = "这是一个用来测试nodejs解析Word文档.doccccc"
# Exact text (whole blocks) that must come out, including Chinese, Japanese and Cyrillic.
EXPECTED_BLOCKS = {
    "node-word-extractor/test11.doc": [
        "这是一个用来测试nodejs解析Word文档.doccccc",
        "This is a test for parsing the Word file in node.",
    ],
    "node-word-extractor/test11.docx": [
        "这是一个用来测试nodejs解析Word文档.doccccc",
        "This is a test for parsing the Word file in node.",
    ],
    "apache-poi/61490.doc": [
        "居中的大标题",
        "章节1",
        "章节1的内容，一段话",
        "章节1.1",
        "下面是表格3x3",
        "11 | 12 | 13",
    ],
    "docx-rs/aa.docx": ["今天是一个好日子。", "明天是一个好日子。", "权利人 | 地方 | 补充", "2 | 发放 | 公告"],
    "apache-poi/61470.docx": ["とうきょう東京"],
    "apache-poi/simple-table.doc": ["Cell 1,1 | Cell 1,2 | Cell 1,3", "Cell 2,1 | Cell 2,2 | Cell 2,3"],
    "apache-poi/Word6.doc": ["The quick brown fox jumps over the lazy dog"],
    "apache-poi/word95err.doc": ["Компания Аскат М"],
    "apache-poi/ExternalEntityInText.docx": ['Here should not be the POI web site: ""'],
}
EXPECTED_SUBSTRINGS = {
    "apache-poi/Bug52032_2.doc": ["测试测试测试测试测试"],
    "apache-poi/52420.doc": ["Министерство образования Республики Беларусь"],
    "node-word-extractor/test01.docx": ["😀 ∀", "This text has been inserted, ✻and should be included"],
    "node-word-extractor/test16.docx": ["First text box, regular"],
    "node-word-extractor/test16.doc": ["First text box, regular"],
    "apache-poi/footnotes.docx": [],
    # One-character runs between Word's marks (a cell holding "9", a field result "1") are text, not marks.
    "node-word-extractor/test07.doc": ["Number of Copies: | 9", "Proposal Type: |"],
    "node-word-extractor/test17.doc": ["1 | In eleifend velit vitae libero"],
}
# Text that must NOT come out: tracked deletions, external entities, field instructions.
FORBIDDEN = {
    "node-word-extractor/test01.docx": ["should not be included"],
    "node-word-extractor/test14.docx": ["should not be included"],
    "node-word-extractor/test01.doc": ["should not be included"],
    "node-word-extractor/test14.doc": ["should not be included"],
    "node-word-extractor/bad-xml.docx": ["should not be included"],
    "apache-poi/ExternalEntityInText.docx": ["testent", "poi.apache.org"],
    "node-word-extractor/test17.doc": ["HYPERLINK", "PAGEREF", "MERGEFORMAT"],
}
# Pairs of the same document saved as .doc and .docx whose text must match (whitespace-normalised).
SAME_TEXT_PAIRS = ["test01", "test03", "test04", "test08", "test09", "test10", "test11", "test13", "test14", "test15"]


@needs_fixtures
@pytest.mark.parametrize("row", _manifest(), ids=lambda r: r["file"])
def test_every_fixture_parses_or_fails_clearly(row: dict[str, str]) -> None:
    name = row["file"]
    path = FIXTURES / name
    expected_error = EXPECTED_ERRORS.get(name)
    if expected_error:
        with pytest.raises(ParseError) as info:
            parse_file_inprocess(path)
        assert info.value.code == expected_error
        assert path.name in info.value.message
        return
    doc = parse_file_inprocess(path)
    assert doc.file_type == ("doc" if row["container"] == "OLE2" else "docx")
    assert doc.text.strip()
    assert all(b.text.strip() for b in doc.blocks)
    assert "\x00" not in doc.text and "\x07" not in doc.text and "\x13" not in doc.text
    texts = [b.text for b in doc.blocks]
    for block in EXPECTED_BLOCKS.get(name, []):
        assert block in texts
    for sub in EXPECTED_SUBSTRINGS.get(name, []):
        assert sub in doc.text
    for bad in FORBIDDEN.get(name, []):
        assert bad not in doc.text


def test_manifest_expectations_cover_only_real_files() -> None:
    names = {r["file"] for r in _manifest()}
    if not names:
        pytest.skip(f"shared fixtures not found at {FIXTURES}")
    for table in (EXPECTED_ERRORS, EXPECTED_BLOCKS, EXPECTED_SUBSTRINGS, FORBIDDEN):
        assert set(table) <= names


@needs_fixtures
@pytest.mark.parametrize("stem", SAME_TEXT_PAIRS)
def test_doc_and_docx_of_the_same_document_agree(stem: str) -> None:
    def norm(text: str) -> str:
        return re.sub(r"\s+", " ", text).strip()

    a = parse_file_inprocess(FIXTURES / "node-word-extractor" / f"{stem}.doc")
    b = parse_file_inprocess(FIXTURES / "node-word-extractor" / f"{stem}.docx")
    assert norm(a.text) == norm(b.text)


@needs_fixtures
def test_docx_headings_footnotes_endnotes_and_deletions() -> None:
    heading = parse_file_inprocess(FIXTURES / "apache-poi/heading123.docx")
    chapters = [b.chapter for b in heading.blocks]
    assert "First paragraph > Second paragraph > Third paragraph" in chapters
    foot = parse_file_inprocess(FIXTURES / "apache-poi/footnotes.docx")
    assert len(foot.blocks) >= 2 and foot.blocks[-1].chapter is None  # the note is appended last
    end = parse_file_inprocess(FIXTURES / "apache-poi/endnotes.docx")
    assert len(end.blocks) > 1
    deletion = parse_file_inprocess(FIXTURES / "docx-rs/track_changes_deletion.docx")
    raw = zipfile.ZipFile(FIXTURES / "docx-rs/track_changes_deletion.docx").read("word/document.xml").decode()
    deleted = re.findall(r"<w:delText[^>]*>([^<]+)</w:delText>", raw)
    assert deleted and all(d.strip() not in deletion.text for d in deleted if d.strip())


@needs_fixtures
def test_doc_page_breaks_give_pages() -> None:
    doc = parse_file_inprocess(FIXTURES / "node-word-extractor/test15.doc")
    pages = [b.page for b in doc.blocks if b.page is not None]
    assert pages[0] == 1 and pages == sorted(pages) and pages[-1] > 1


# ---------------------------------------------------------------- TXT
EN_ZH = "Knowledge base workbench.\n这是一个测试文档，包含中文和English。\n\n第二段：检索增强生成。"
ZH_TW = "Knowledge base.\n這是一個測試文件，包含繁體中文。\n\n第二段：檢索增強生成。"


@pytest.mark.parametrize(
    ("encoding", "bom", "text", "reported"),
    [
        ("utf-8", b"", EN_ZH, "utf-8"),
        ("utf-8", b"\xef\xbb\xbf", EN_ZH, "utf-8"),
        ("utf-16-le", b"\xff\xfe", EN_ZH, "utf-16-le"),
        ("utf-16-be", b"\xfe\xff", EN_ZH, "utf-16-be"),
        ("gb18030", b"", EN_ZH, "gb18030"),
        ("gbk", b"", EN_ZH, "gb18030"),
        ("big5", b"", ZH_TW, "cp950"),
        ("gb18030", b"", "中文", "gb18030"),
        ("big5", b"", "中文", "cp950"),
        ("gb18030", b"", "第一章 总则\n本规定适用于所有员工。", "gb18030"),
        ("gb18030", b"", ZH_TW, "gb18030"),  # traditional characters in a GB18030 file
        ("gb18030", b"", "编码 détecté", "gb18030"),  # accented letters inside a Latin word (read as Big5 once)
        ("big5", b"", "編碼 Zurich 測試", "cp950"),
    ],
)
def test_txt_encodings(tmp_path: Path, encoding: str, bom: bytes, text: str, reported: str) -> None:
    path = tmp_path / "note.txt"
    path.write_bytes(bom + text.replace("\n", "\r\n").encode(encoding))
    doc = parse_file_inprocess(path)
    assert doc.file_type == "txt"
    assert doc.text == text
    assert doc.metadata["encoding"] == reported
    assert [b.page for b in doc.blocks] == [None] * len(doc.blocks)


@pytest.mark.parametrize(
    ("text", "encoding"),
    [("Café crème brûlée, naïve façade.", "cp1252"), ("Привет, как дела? Это тестовый документ.", "cp1251")],
)
def test_txt_single_byte_codepages(tmp_path: Path, text: str, encoding: str) -> None:
    path = tmp_path / "legacy.txt"
    path.write_bytes(text.encode(encoding))
    assert parse_file_inprocess(path).text == text


def test_txt_paragraphs_newlines_nuls_and_form_feeds(tmp_path: Path) -> None:
    path = tmp_path / "para.txt"
    path.write_bytes(b"one\r\nline two\r\n\r\n \r\nsecond\x00 para\rx\n\n\n\fpage two")
    doc = parse_file_inprocess(path)
    assert [b.text for b in doc.blocks] == ["one\nline two", "second para\nx", "page two"]
    assert [b.page for b in doc.blocks] == [1, 1, 2]
    for block, (start, end) in zip(doc.blocks, doc.block_offsets(), strict=True):
        assert doc.text[start:end] == block.text


def test_binary_named_txt_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "image.txt"
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 40)
    with pytest.raises(ParseError) as info:
        parse_file_inprocess(path)
    assert info.value.code == "BINARY_FILE"
    assert "image.txt" in info.value.message


def test_empty_and_whitespace_txt(tmp_path: Path) -> None:
    for content in (b"", b"  \r\n\t\n\xe3\x80\x80\n"):
        path = tmp_path / "blank.txt"
        path.write_bytes(content)
        with pytest.raises(ParseError) as info:
            parse_file_inprocess(path)
        assert info.value.code == "EMPTY_DOCUMENT"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.text(
            alphabet=st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp"), blacklist_characters="\ufeff\x85"),
            min_size=1,
            max_size=30,
        ).filter(lambda s: s.strip() == s and s.strip()),
        min_size=1,
        max_size=5,
    ),
    st.sampled_from(["utf-8", "utf-16"]),
)
def test_txt_round_trip(tmp_path: Path, paragraphs: list[str], encoding: str) -> None:
    path = tmp_path / "rt.txt"
    path.write_bytes("\n\n".join(paragraphs).encode(encoding))
    assert [b.text for b in parse_file_inprocess(path).blocks] == paragraphs


# ---------------------------------------------------------------- DOCX built here
def _build_docx(path: Path) -> None:
    d = docx.Document()
    d.add_paragraph("Preface text before any heading.")
    d.add_heading("Intro", level=1)
    d.add_paragraph("Intro body.")
    d.add_heading("Scope", level=2)
    run = d.add_paragraph("Scope body on page one.").add_run()
    run.add_break(WD_BREAK.PAGE)
    d.add_paragraph("Scope body on page two.")
    d.add_heading("第一章", level=1)
    d.add_heading("第一节", level=2)
    d.add_paragraph("中文正文。")
    table = d.add_table(rows=2, cols=2)
    table.cell(0, 0).text, table.cell(0, 1).text = "名称", "数量"
    table.cell(1, 0).text, table.cell(1, 1).text = "苹果", "3"
    d.add_page_break()
    d.add_heading("Appendix", level=1)
    d.save(str(path))


def test_docx_headings_give_chapters_and_page_breaks_give_pages(tmp_path: Path) -> None:
    path = tmp_path / "built.docx"
    _build_docx(path)
    doc = parse_file_inprocess(path)
    got = [(b.text, b.chapter, b.page) for b in doc.blocks]
    assert got == [
        ("Preface text before any heading.", None, 1),
        ("Intro", "Intro", 1),
        ("Intro body.", "Intro", 1),
        ("Scope", "Intro > Scope", 1),
        ("Scope body on page one.", "Intro > Scope", 1),
        ("Scope body on page two.", "Intro > Scope", 2),
        ("第一章", "第一章", 2),
        ("第一节", "第一章 > 第一节", 2),
        ("中文正文。", "第一章 > 第一节", 2),
        ("名称 | 数量", "第一章 > 第一节", 2),
        ("苹果 | 3", "第一章 > 第一节", 2),
        ("Appendix", "Appendix", 3),
    ]


def test_chinese_heading_style_names_and_outline_levels(tmp_path: Path) -> None:
    path = tmp_path / "zh.docx"
    d = docx.Document()
    d.add_paragraph("无标题")
    d.add_heading("总则", level=1)
    d.add_paragraph("正文")
    d.save(str(path))
    # Rename the built-in style as a Chinese Word does ("标题 1", style id "1") and add an outline level.
    with zipfile.ZipFile(path) as zin:
        members = {n: zin.read(n) for n in zin.namelist()}
    styles = members["word/styles.xml"].decode()
    styles = styles.replace('w:styleId="Heading1"', 'w:styleId="1"').replace('w:val="heading 1"', 'w:val="标题 1"')
    body = members["word/document.xml"].decode().replace('w:val="Heading1"', 'w:val="1"')
    body = body.replace(
        "<w:p><w:r><w:t>正文</w:t>",
        '<w:p><w:pPr><w:outlineLvl w:val="1"/></w:pPr><w:r><w:t>细则</w:t></w:r></w:p><w:p><w:r><w:t>正文</w:t>',
    )
    members["word/styles.xml"], members["word/document.xml"] = styles.encode(), body.encode()
    with zipfile.ZipFile(path, "w") as zout:
        for n, data in members.items():
            zout.writestr(n, data)
    doc = parse_file_inprocess(path)
    assert [(b.text, b.chapter) for b in doc.blocks] == [
        ("无标题", None),
        ("总则", "总则"),
        ("细则", "总则 > 细则"),
        ("正文", "总则 > 细则"),
    ]


# ---------------------------------------------------------------- detection
@needs_fixtures
def test_content_wins_over_suffix(tmp_path: Path) -> None:
    docx_as_txt = tmp_path / "report.txt"
    shutil.copy(FIXTURES / "node-word-extractor/test11.docx", docx_as_txt)
    doc_as_docx = tmp_path / "report.docx"
    shutil.copy(FIXTURES / "node-word-extractor/test11.doc", doc_as_docx)
    assert detect_file_type(docx_as_txt, docx_as_txt.read_bytes()[:8]) == "docx"
    assert detect_file_type(doc_as_docx, doc_as_docx.read_bytes()[:8]) == "doc"
    assert parse_file_inprocess(docx_as_txt).file_type == "docx"
    doc = parse_file_inprocess(doc_as_docx)
    assert doc.file_type == "doc" and doc.blocks[0].text == "这是一个用来测试nodejs解析Word文档.doccccc"


def test_unsupported_and_missing_files(tmp_path: Path) -> None:
    pdf = tmp_path / "paper.pdf"
    pdf.write_bytes(b"%PDF-1.7\n...")
    text_as_docx = tmp_path / "fake.docx"
    text_as_docx.write_text("just text", encoding="utf-8")
    plain_zip = tmp_path / "data.zip"
    with zipfile.ZipFile(plain_zip, "w") as zf:
        zf.writestr("a.txt", "hello")
    cases = {
        pdf: "UNSUPPORTED_FORMAT",
        text_as_docx: "CORRUPT_DOCUMENT",
        plain_zip: "UNSUPPORTED_FORMAT",
        tmp_path / "missing.txt": "FILE_NOT_FOUND",
        tmp_path: "FILE_NOT_FOUND",
    }
    for path, code in cases.items():
        with pytest.raises(ParseError) as info:
            parse_file_inprocess(path)
        assert info.value.code == code, path
        assert path.name in info.value.message
    assert detect_file_type(pdf, b"%PDF-1.7") == "unknown"
    assert set(SUPPORTED_TYPES) == {"txt", "docx", "doc"}


@pytest.mark.parametrize(
    ("name", "content", "reason"),
    [
        ("paper.pdf", b"not really a pdf", "it is a file ending in '.pdf';"),
        ("paper.pdf", b"%PDF-1.7\n", "it is a PDF file;"),
        ("sheet.xlsx", b"plain bytes", "it is a file ending in '.xlsx';"),
        ("图片.PNG", b"\x89PNG\r\n", "it is a PNG image file;"),
    ],
)
def test_unsupported_type_message_is_a_sentence(tmp_path: Path, name: str, content: bytes, reason: str) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(ParseError) as info:
        parse_file_inprocess(path)
    assert info.value.code == "UNSUPPORTED_FORMAT"
    assert info.value.message == (
        f"Cannot import '{name}': {reason} supported are text files (.txt, .md, .csv and the like), "
        ".docx and .doc (Word)"
    )


# ---------------------------------------------------------------- limits
def test_zip_bomb_docx_is_refused_before_decompression(tmp_path: Path) -> None:
    path = tmp_path / "bomb.docx"
    _build_docx(path)
    with zipfile.ZipFile(path, "a", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("word/media/pad.bin", b"\0" * (3 * 1024 * 1024))
    with pytest.raises(ParseError) as info:
        parse_file_inprocess(path, ParseLimits(max_decompressed_bytes=2 * 1024 * 1024))
    assert info.value.code == "FILE_TOO_LARGE" and "zip bomb" in info.value.message
    # A document part with an absurd compression ratio is refused even under the size limit.
    bomb = tmp_path / "ratio.docx"
    with zipfile.ZipFile(path) as zin, zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as zout:
        for item in zin.infolist():
            data = zin.read(item)
            if item.filename == "word/document.xml":
                data = data.replace(b"<w:body>", b"<w:body>" + b" " * (12 * 1024 * 1024), 1)
            zout.writestr(item.filename, data)
    with pytest.raises(ParseError) as info:
        parse_file_inprocess(bomb)
    assert info.value.code == "CORRUPT_DOCUMENT" and "compression ratio" in info.value.message


def test_a_docx_whose_headers_lie_is_refused_while_inflating(tmp_path: Path) -> None:
    """word/document.xml claims 50:1 compression (under the 100:1 check on headers) and inflates ~1000-fold: once the
    parser inflated 408 MB of it. It must stop within a small part of that, under a 256 MB address-space cap."""
    path = tmp_path / "plain.docx"
    _build_docx(path)
    bomb = tmp_path / "lying.docx"
    with zipfile.ZipFile(path) as zin, zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as zout:
        for item in zin.infolist():
            if item.filename != "word/document.xml":
                zout.writestr(item.filename, zin.read(item))
        body = zin.read("word/document.xml").replace(b"<w:body>", b"<w:body>" + b" " * (300 << 20), 1)
        zout.writestr("word/document.xml", body)  # last
    bomb.write_bytes(claim_compressed_size(bomb.read_bytes(), "word/document.xml", 50))
    out = run_bounded(
        f"""
        from pathlib import Path
        from kb_core.base.errors import ParseError
        from kb_core.engines.parsing import parse_file_inprocess
        try:
            parse_file_inprocess(Path({str(bomb)!r}))
        except ParseError as exc:
            print("refused:", exc.code, exc.message)
        """,
        memory_mb=256,
        timeout_s=60,
    )
    assert "refused: CORRUPT_DOCUMENT" in out and "zip bomb" in out, out


def test_oversized_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "big.txt"
    path.write_text("x" * 5000, encoding="utf-8")
    for parse in (parse_file_inprocess, parse_file):
        with pytest.raises(ParseError) as info:
            parse(path, ParseLimits(max_file_bytes=4096))
        assert info.value.code == "FILE_TOO_LARGE" and "big.txt" in info.value.message


def test_bad_limits_are_rejected() -> None:
    with pytest.raises(Exception, match="timeout_seconds"):
        ParseLimits(timeout_seconds=0)


# ---------------------------------------------------------------- isolation
@needs_fixtures
def test_parse_file_in_worker_matches_inprocess_and_carries_error_codes() -> None:
    path = FIXTURES / "node-word-extractor/test11.doc"
    assert parse_file(path) == parse_file_inprocess(path)
    with pytest.raises(ParseError) as info:
        parse_file(FIXTURES / "apache-poi/PasswordProtected.doc")
    assert info.value.code == "ENCRYPTED_DOCUMENT" and "PasswordProtected.doc" in info.value.message
    with pytest.raises(ParseError) as info:
        parse_file(FIXTURES / "no-such-file.docx")
    assert info.value.code == "FILE_NOT_FOUND"


def test_timeout_kills_the_worker_and_the_pool_recovers(tmp_path: Path) -> None:
    small = tmp_path / "small.txt"
    small.write_text("小文件 small file", encoding="utf-8")
    parse_file(small)  # warm the worker so the timeout below measures parsing only
    big = tmp_path / "big.txt"
    big.write_bytes(("检索增强生成 retrieval augmented generation 知识库。\n" * 400_000).encode("gb18030"))
    started = time.monotonic()
    with pytest.raises(ParseError) as info:
        parse_file(big, ParseLimits(timeout_seconds=0.05))
    assert info.value.code == "PARSE_TIMEOUT" and "big.txt" in info.value.message
    assert time.monotonic() - started < 5
    doc = parse_file(small)
    assert isinstance(doc, ParsedDocument) and doc.blocks == (TextBlock("小文件 small file", None, None),)
