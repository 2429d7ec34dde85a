"""File type detection from content (magic bytes) first, then the suffix."""

from __future__ import annotations

import zipfile
from pathlib import Path

from kb_core.base.i18n import msg

OLE2_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")
TEXT_SUFFIXES = frozenset({"", ".txt", ".text", ".md", ".markdown", ".rst", ".log", ".csv", ".tsv"})
WORD_SUFFIXES = {".doc": "doc", ".docx": "docx", ".dot": "doc", ".dotx": "docx", ".docm": "docx"}
# Formats recognised only to name them in the error message.
_OTHER_MAGICS: tuple[tuple[bytes, str], ...] = (
    (b"%PDF", "PDF"),
    (b"{\\rtf", "RTF"),
    (b"\x89PNG", "PNG image"),
    (b"\xff\xd8\xff", "JPEG image"),
    (b"GIF8", "GIF image"),
    (b"\x1f\x8b", "gzip archive"),
    (b"7z\xbc\xaf", "7-Zip archive"),
    (b"Rar!", "RAR archive"),
    (b"\x7fELF", "executable"),
    (b"MZ", "Windows executable"),
)
UNKNOWN = "unknown"


def sniff(path: Path, head: bytes) -> tuple[str, str]:
    """(file type, reason). The type is one of "txt", "docx", "doc" or "unknown" with a reason."""
    suffix = path.suffix.lower()
    if head.startswith(OLE2_MAGIC):
        return "doc", "OLE2 compound file"
    if head.startswith(ZIP_MAGICS):
        try:
            with zipfile.ZipFile(path) as zf:
                names = set(zf.namelist())
        except Exception:  # zipfile raises BadZipFile, NotImplementedError (odd versions), ValueError, EOFError ...
            # A damaged zip named like a Word file is reported as a damaged Word file.
            if suffix in WORD_SUFFIXES:
                return "docx", "damaged zip"
            return UNKNOWN, msg("a damaged zip archive")
        if "word/document.xml" in names or any(n.startswith("word/") and n.endswith(".xml") for n in names):
            return "docx", "zip with word/document.xml"
        return UNKNOWN, msg("a zip archive that is not a Word document (no word/document.xml)")
    for magic, name in _OTHER_MAGICS:
        if head.startswith(magic) and suffix not in TEXT_SUFFIXES:
            return UNKNOWN, msg("a {name} file", name=name)
    if suffix in WORD_SUFFIXES:
        return WORD_SUFFIXES[suffix], "suffix only"
    if suffix in TEXT_SUFFIXES:
        return "txt", "text suffix"
    return UNKNOWN, msg("a file ending in '{suffix}'", suffix=suffix)


def detect_file_type(path: Path, head: bytes) -> str:
    """Return "txt", "docx", "doc" or "unknown" from the first bytes (≥ 8) and, for zips, the member list.

    Content wins over the suffix: a .docx renamed .txt is "docx", a .doc renamed .docx is "doc".
    Word-suffixed files that match no magic are returned by suffix so parsing reports them as damaged.
    """
    return sniff(Path(path), head)[0]
