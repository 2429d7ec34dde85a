"""Fuzzing: damaged and generated .txt, .docx and .doc files, and bundle YAML, end in a result or a clear error.

Inputs are real fixtures from ../shared/fixtures/docs mutated by hypothesis (bytes flipped, integers set to
extremes, parts cut or inserted; for .doc the mutations go into the WordDocument and table streams and the
compound file is rebuilt so they reach the Word structures; for .docx into the XML parts), plus files
generated from scratch (tests/word_files.py). Files are parsed through the real isolation path: a worker
process with a time limit and a capped address space. The bundle loader runs in a child interpreter under
an address-space cap. Examples are derandomized (tests/conftest.py) and bounded to about a minute in all.

A clear error is a ParseError (ImportFormatError for bundles) with a known code whose message names the file
and its reason; the catch-all for exceptions a parser did not anticipate ("the file is malformed
(IndexError: ...)") counts as a failure here, so each finding becomes a specific check in a parser.
"""

from __future__ import annotations

import io
import re
import struct
import time
import zipfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kb_core.base.errors import ParseError
from kb_core.engines.parsing import ParsedDocument, ParseLimits, parse_file
from tests.bounded import run_bounded
from tests.word_files import TEXT_FC, compound_file, piece, word97

pytestmark = pytest.mark.slow  # about 30 s in all

FIXTURES = Path(__file__).resolve().parents[1].parent / "shared" / "fixtures" / "docs"
LIMITS = ParseLimits(timeout_seconds=15, max_memory_bytes=1024 * 2**20)
CLEAR_CODES = {
    "UNSUPPORTED_FORMAT",
    "ENCRYPTED_DOCUMENT",
    "CORRUPT_DOCUMENT",
    "EMPTY_DOCUMENT",
    "FILE_TOO_LARGE",
    "BINARY_FILE",
}
UNANTICIPATED = re.compile(r"the file is malformed \(|Cannot import '[^']*': [A-Za-z]+(Error|Exception)\b")
FUZZ = settings(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)
EXTREMES = [0, 1, 2, 0x7F, 0x200, 0x1000, 0x3FFF, 0x7FFF, 0x8000, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF]


def fixtures(suffix: str, readable: bool) -> list[Path]:
    """Small fixtures of one type; ``readable`` keeps those whose container opens (for structural mutation)."""
    if not FIXTURES.is_dir():
        return []
    found = sorted(p for p in FIXTURES.rglob(f"*{suffix}") if p.suffix == suffix and p.stat().st_size < 120_000)
    if not readable:
        return found
    keep = []
    for path in found:
        try:
            (_doc_streams if suffix == ".doc" else _docx_parts)(path.read_bytes())
            keep.append(path)
        except Exception:  # a damaged fixture: still fuzzed byte-wise
            continue
    return keep


def _doc_streams(data: bytes) -> dict[str, bytes]:
    import olefile

    with olefile.OleFileIO(io.BytesIO(data)) as ole:
        names = [e[0] for e in ole.listdir() if len(e) == 1 and e[0] in ("WordDocument", "0Table", "1Table")]
        if "WordDocument" not in names:
            raise ValueError("no WordDocument stream")
        return {name: ole.openstream(name).read() for name in names}


def _docx_parts(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return {info.filename: archive.read(info) for info in archive.infolist()}


def needs(paths: list[Path]) -> None:
    if not paths:
        pytest.skip(f"no fixtures under {FIXTURES}: the shared fixtures live in ../shared beside the repository")


# A byte-level edit: (kind, position as a fraction of the length, value).
EDITS = st.lists(
    st.tuples(
        st.sampled_from(["byte", "u16", "u32", "cut", "insert", "delete", "copy"]),
        st.floats(min_value=0, max_value=1, exclude_max=True),
        st.integers(min_value=0, max_value=len(EXTREMES) - 1),
        st.binary(min_size=1, max_size=24),
    ),
    min_size=1,
    max_size=6,
)


def edit(data: bytes, edits: list[tuple[str, float, int, bytes]], head: int = 0) -> bytes:
    """Apply ``edits``; with ``head`` half the positions fall in the first ``head`` bytes (headers live there)."""
    out = bytearray(data)
    for i, (kind, where, value, blob) in enumerate(edits):
        span = min(head, len(out)) if head and i % 2 == 0 else len(out)
        pos = int(where * span) if span else 0
        extreme = EXTREMES[value]
        if kind == "byte" and pos < len(out):
            out[pos] = extreme & 0xFF if value % 2 else blob[0]
        elif kind == "u16" and pos + 2 <= len(out):
            out[pos : pos + 2] = struct.pack("<H", extreme & 0xFFFF)
        elif kind == "u32" and pos + 4 <= len(out):
            out[pos : pos + 4] = struct.pack("<I", extreme)
        elif kind == "cut":
            del out[pos:]
        elif kind == "insert":
            out[pos:pos] = blob
        elif kind == "delete":
            del out[pos : pos + len(blob)]
        elif kind == "copy" and out:
            source = int(blob[0] / 256 * len(out))
            out[pos : pos + len(blob) * 8] = out[source : source + len(blob) * 8]
    return bytes(out)


def check_parse(path: Path) -> None:
    """The file parses to non-empty text within the limits, or fails with a clear, anticipated error."""
    started = time.monotonic()
    try:
        doc = parse_file(path, LIMITS)
    except ParseError as exc:
        assert exc.code in CLEAR_CODES, (exc.code, exc.message)
        assert exc.message.startswith(f"Cannot import '{path.name}': "), exc.message
        assert not UNANTICIPATED.search(exc.message), exc.message
    else:
        assert isinstance(doc, ParsedDocument) and doc.blocks
        assert all(block.text.strip() for block in doc.blocks)
        assert len(doc.text) <= LIMITS.max_text_chars
    assert time.monotonic() - started < LIMITS.timeout_seconds


DOC_SOURCES = fixtures(".doc", readable=True)
DOCX_SOURCES = fixtures(".docx", readable=True)
ALL_WORD = fixtures(".doc", readable=False) + fixtures(".docx", readable=False)


@settings(FUZZ, max_examples=300)
@given(index=st.integers(min_value=0), stream=st.integers(min_value=0, max_value=2), edits=EDITS)
def test_doc_with_damaged_word_structures(tmp_path_factory: pytest.TempPathFactory, index, stream, edits) -> None:
    needs(DOC_SOURCES)
    source = DOC_SOURCES[index % len(DOC_SOURCES)]
    streams = _doc_streams(source.read_bytes())
    name = sorted(streams)[stream % len(streams)]
    streams[name] = edit(streams[name], edits, head=0x200 if name == "WordDocument" else 0)
    path = tmp_path_factory.mktemp("doc") / f"damaged-{source.stem}.doc"
    path.write_bytes(compound_file(streams))
    check_parse(path)


@settings(FUZZ, max_examples=150)
@given(index=st.integers(min_value=0), edits=EDITS)
def test_word_files_with_damaged_bytes(tmp_path_factory: pytest.TempPathFactory, index, edits) -> None:
    """Raw byte damage to .doc and .docx fixtures (containers included: OLE2 sectors, zip directories)."""
    needs(ALL_WORD)
    source = ALL_WORD[index % len(ALL_WORD)]
    path = tmp_path_factory.mktemp("raw") / f"raw-{source.name}"
    path.write_bytes(edit(source.read_bytes(), edits, head=1024))
    check_parse(path)


XML_SNIPPETS = [
    b"<w:p>",
    b"</w:p>",
    b"<w:t>",
    b"<w:t>x</w:t>",
    b"<w:tbl><w:tr><w:tc><w:p><w:r><w:t>cell",
    b"&amp;",
    b"&undefined;",
    b"<!DOCTYPE d [<!ENTITY e SYSTEM 'file:///etc/passwd'>]>",
    b"<![CDATA[",
    b'w:val="-1"',
    b'w:val="99999999999999999999"',
    b"\xff\xfe",
    "中文".encode(),
    b"<w:br w:type=\"page\"/>",
    b"<w:pStyle w:val=\"Heading1\"/>",
]


@settings(FUZZ, max_examples=200)
@given(
    index=st.integers(min_value=0),
    part=st.integers(min_value=0),
    edits=st.lists(
        st.tuples(st.floats(min_value=0, max_value=1, exclude_max=True), st.sampled_from(XML_SNIPPETS), st.booleans()),
        min_size=1,
        max_size=5,
    ),
)
def test_docx_with_damaged_xml(tmp_path_factory: pytest.TempPathFactory, index, part, edits) -> None:
    needs(DOCX_SOURCES)
    source = DOCX_SOURCES[index % len(DOCX_SOURCES)]
    parts = _docx_parts(source.read_bytes())
    xml_names = sorted(n for n in parts if n.endswith((".xml", ".rels")))
    name = xml_names[part % len(xml_names)]
    data = bytearray(parts[name])
    for where, snippet, replace in edits:
        pos = int(where * len(data))
        data[pos : pos + (len(snippet) if replace else 0)] = snippet
    parts[name] = bytes(data)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for member, content in parts.items():
            archive.writestr(member, content)
    path = tmp_path_factory.mktemp("docx") / f"damaged-{source.stem}.docx"
    path.write_bytes(out.getvalue())
    check_parse(path)


WORD_TEXT = st.text(
    st.one_of(
        st.sampled_from(list("\r\x07\x0b\x0c\x13\x14\x15\x01\x08\t\x1e\x1f\x00")),
        st.characters(exclude_categories=("Cs",)),
    ),
    max_size=300,
)


@settings(FUZZ, max_examples=250)
@given(
    text=WORD_TEXT,
    pieces=st.one_of(
        st.none(),
        st.lists(
            st.tuples(
                st.integers(min_value=0, max_value=400),
                st.integers(min_value=0, max_value=0x1400),
                st.booleans(),
            ),
            min_size=1,
            max_size=12,
        ),
    ),
    ccp_text=st.one_of(st.none(), st.sampled_from([0, 1, 7, 600, 0x7FFFFFFF, 0xFFFFFFFF])),
    prc=st.one_of(st.just(b""), st.binary(max_size=8).map(lambda b: b"\x01" + b)),
)
def test_generated_doc_files(tmp_path_factory: pytest.TempPathFactory, text, pieces, ccp_text, prc) -> None:
    """Word 97 files from scratch with any text, Word's control marks, and arbitrary piece tables."""
    table = None
    if pieces is not None:
        table, cp = [], 0
        for length, offset, compressed in pieces:
            table.append(piece(cp, cp + length, TEXT_FC + offset, compressed))
            cp += length
    data = word97(text, pieces=table, ccp_text=ccp_text, prc=prc, stream_size=TEXT_FC + 0x1400)
    path = tmp_path_factory.mktemp("gen") / "generated.doc"
    path.write_bytes(data)
    check_parse(path)


ENCODINGS = ["utf-8", "utf-8-sig", "utf-16", "utf-16-le", "utf-32", "gb18030", "big5", "cp1252", "shift_jis", "koi8-r"]


@settings(FUZZ, max_examples=150)
@given(
    content=st.one_of(
        st.binary(max_size=4000),
        st.tuples(st.text(max_size=400), st.sampled_from(ENCODINGS)).map(
            lambda t: t[0].encode(t[1], errors="replace")
        ),
    ),
    edits=st.one_of(st.just([]), EDITS),
)
def test_text_files(tmp_path_factory: pytest.TempPathFactory, content: bytes, edits) -> None:
    path = tmp_path_factory.mktemp("txt") / "fuzz.txt"
    path.write_bytes(edit(content, edits) if edits else content)
    check_parse(path)


BUNDLE_FUZZ = r'''
import sys, time
from hypothesis import HealthCheck, given, settings, strategies as st
from kb_core.features.bundles import default_ontology, example_yaml
from kb_core.features.bundles.loading import load_bundle_text
from kb_core.features.bundles.validation import BundleValidator
from kb_core.base.errors import ImportFormatError

validator = BundleValidator(default_ontology())
example = example_yaml(default_ontology())
fragments = [
    "- ", "  ", "\n", "&a ", "*a", "&b ", "*b", "[", "]", "{", "}", ", ", ": ", "? ", "<<: ", "!!str ", "!!int ",
    "!!float ", "!!binary ", "!!set ", "!!omap ", "!!python/tuple ", "%YAML 1.1\n---\n", "---\n", "...\n", "'", '"',
    "|\n  ", ">\n  ", "type", "Document", "doc_uri", "content", "REFERENCES", "source", "target", "action",
    "delete", "0x1F", "~", "yes", "2024-01-01", "中文", "#", "\t", ".inf", "1" * 5000, "x" * 3000, "@", "`",
]
text = st.one_of(
    st.lists(st.sampled_from(fragments), max_size=60).map("".join),
    st.lists(
        st.tuples(st.floats(0, 1, exclude_max=True), st.sampled_from(["", *fragments]), st.booleans()), max_size=6
    ).map(lambda edits: apply(example, edits)),
    st.text(max_size=300),
)


def apply(source, edits):
    out = source
    for where, fragment, replace in edits:
        pos = int(where * len(out))
        out = out[:pos] + fragment + out[pos + (len(fragment) or 1 if replace else 0):]
    return out


@settings(max_examples=int(sys.argv[1]), deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(text)
def fuzz(source):
    started = time.perf_counter()
    try:
        validator.structural(load_bundle_text(source))
    except ImportFormatError as exc:
        assert exc.message and "Traceback" not in exc.message
    assert time.perf_counter() - started < 5


fuzz()
print("bundle fuzz passed")
'''


def test_bundle_loader_and_validator_on_generated_yaml(tmp_path: Path) -> None:
    """Anchors, aliases (cycles included), tags, merge keys and mutated example bundles, under a memory cap."""
    script = tmp_path / "bundle_fuzz.py"
    script.write_text(BUNDLE_FUZZ, encoding="utf-8")
    out = run_bounded(
        f"import runpy, sys; sys.argv = ['bundle_fuzz', '800']; runpy.run_path({str(script)!r}, run_name='__main__')",
        memory_mb=1024,
        timeout_s=180,
    )
    assert "bundle fuzz passed" in out


# -- exports whose headers lie, manifests that are wide, bundles that are flat ---------------------------------------
EXPORT_FUZZ = r'''
import hashlib, json, sys, time, zipfile
from pathlib import Path
from hypothesis import HealthCheck, given, settings, strategies as st
from kb_core import KnowledgeBaseService
from kb_core.edges.envelopes import Enveloped
from kb_core.features.transfer.format import MANIFEST_MEMBER, TransferLimits
from tests.lying_zip import claim_compressed_size, set_sizes

root = Path(sys.argv[2])
session = Enveloped(KnowledgeBaseService(root / "source").session())
session.create_knowledge_base("small", 64, "hashing")
(root / "a.txt").write_text("alpha beta gamma. 数据 导入。 " * 40, encoding="utf-8")
session.import_document([str(root / "a.txt")], kb_name="small")
session.export_database(str(root / "small.kbx"))
original = (root / "small.kbx").read_bytes()
with zipfile.ZipFile(root / "small.kbx") as archive:
    names = archive.namelist()
    manifest = json.loads(archive.read(MANIFEST_MEMBER))
head = json.dumps(manifest)[:-1]
CLEAR = {"INVALID_IMPORT_FILE", "INSUFFICIENT_SPACE"}
LIMITS = TransferLimits(max_manifest_values=5_000, ratio_floor_bytes=64 << 10)
sizes = st.one_of(st.sampled_from([0, 1, 100, 1 << 20, 1 << 30, 0xFFFFFFFF]), st.integers(0, 0xFFFFFFFF))
lie = st.tuples(st.sampled_from(names), st.one_of(st.none(), sizes), st.one_of(st.none(), sizes))
# a member of zeros, and the compression ratio its headers claim
bomb = st.tuples(st.one_of(st.integers(1, 1 << 16), st.integers(1 << 20, 8 << 20)), st.floats(1.5, 199))
wide = st.tuples(st.sampled_from(["{}", "[]", "0", '""', "null", '{"a": []}']), st.integers(4_000, 6_000))


def build(case):
    kind, value = case
    if kind == "lie":
        return set_sizes(original, value[0], value[1], value[2])
    with zipfile.ZipFile(root / "small.kbx") as archive:
        members = {n: archive.read(n) for n in names if n != MANIFEST_MEMBER}
    if kind == "bomb":
        size, ratio = value
        data = bytes(size)
        name = "kb/0000/seg/0000/files/doc_bomb.txt"
        entry = {"sha256": hashlib.sha256(data).hexdigest(), "size": size}
        listed = dict(manifest, files=dict(manifest["files"], **{name: entry}))
        members[MANIFEST_MEMBER] = json.dumps(listed).encode()
        members[name] = data
    else:
        filler, count = value
        members[MANIFEST_MEMBER] = (head + ', "x": [' + ",".join([filler] * count) + "]}").encode()
        name = MANIFEST_MEMBER
    out = root / "case.kbx"
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for member, data in members.items():
            archive.writestr(member, data, compress_type=zipfile.ZIP_STORED if kind == "wide" else None)
    data = out.read_bytes()
    return claim_compressed_size(data, name, value[1]) if kind == "bomb" else data


@settings(max_examples=int(sys.argv[1]), deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.one_of(st.tuples(st.just("lie"), lie), st.tuples(st.just("bomb"), bomb), st.tuples(st.just("wide"), wide)))
def fuzz(case):
    (root / "case.kbx").write_bytes(build(case))
    started = time.perf_counter()
    target = Enveloped(KnowledgeBaseService(root / "victim").session())
    result = target.import_database(str(root / "case.kbx"), limits=LIMITS)
    if result["success"]:
        for name in result["data"]["knowledge_bases"]:
            target.delete_knowledge_base(name)
    else:
        assert result["error"]["code"] in CLEAR, (case, result["error"]["code"], result["message"])
        assert "Traceback" not in result["message"]
    assert time.perf_counter() - started < 20, case


fuzz()
print("export fuzz passed")
'''


def test_exports_with_lying_headers_and_wide_manifests(tmp_path: Path) -> None:
    """Member sizes that lie in the central directory (any value), bombs claiming a harmless ratio, and manifests
    around the value budget: each import ends in a result or INVALID_IMPORT_FILE / INSUFFICIENT_SPACE, under a
    1 GB address-space cap and a 64 MB file-size cap."""
    script = tmp_path / "export_fuzz.py"
    script.write_text(EXPORT_FUZZ, encoding="utf-8")
    out = run_bounded(
        f"import runpy, sys; sys.argv = ['export_fuzz', '40', {str(tmp_path)!r}]; "
        f"runpy.run_path({str(script)!r}, run_name='__main__')",
        memory_mb=1024,
        file_mb=64,
        timeout_s=240,
    )
    assert "export fuzz passed" in out


FLAT_YAML_FUZZ = r'''
import sys, time
from hypothesis import HealthCheck, given, settings, strategies as st
from kb_core.features.bundles import default_ontology
from kb_core.features.bundles.loading import BundleLimits, load_bundle_text
from kb_core.features.bundles.validation import BundleValidator
from kb_core.base.errors import ImportFormatError

LIMITS = BundleLimits(max_values=20_000, max_text_chars=200_000)
validator = BundleValidator(default_ontology())
item = st.sampled_from([
    "- x\n", "- {}\n", "- []\n", "- 1\n", "- .nan\n", "- {type: Document, doc_uri: d, content: c}\n",
    "- [1, 2, 3]\n", "- {a: 1, 0x1: 2}\n", "- &a [1]\n", "- *a\n", "- {<<: {a: 1}}\n", "- '数据'\n",
])
flat = st.tuples(st.lists(item, min_size=1, max_size=4), st.integers(1, 12_000), st.booleans()).map(
    lambda t: ("[" + ", ".join([line[2:].strip() for line in t[0]] * t[1]) + "]") if t[2] else "".join(t[0] * t[1])
)


@settings(max_examples=int(sys.argv[1]), deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(flat)
def fuzz(source):
    started = time.perf_counter()
    try:
        validator.structural(load_bundle_text(source, LIMITS))
    except ImportFormatError as exc:
        assert exc.message and "Traceback" not in exc.message
    assert time.perf_counter() - started < 10


fuzz()
print("flat yaml fuzz passed")
'''


def test_flat_bundles_around_the_value_budget(tmp_path: Path) -> None:
    """Wide, alias-free (and some aliased) bundles up to ~50,000 values under a 20,000-value budget: each ends in a
    result or a clear ImportFormatError, under a 512 MB address-space cap."""
    script = tmp_path / "flat_fuzz.py"
    script.write_text(FLAT_YAML_FUZZ, encoding="utf-8")
    out = run_bounded(
        f"import runpy, sys; sys.argv = ['flat_fuzz', '60']; runpy.run_path({str(script)!r}, run_name='__main__')",
        memory_mb=512,
        timeout_s=180,
    )
    assert "flat yaml fuzz passed" in out
