"""DOCX (Office Open XML) text extraction with lxml straight from the zip.

python-docx is not used here: it hides tracked changes, footnotes, rendered page breaks and the
order of mixed body content, and gives no control over member sizes (zip bombs) or XML entity
handling. lxml with ``resolve_entities=False, no_network=True`` leaves external entities as
inert references, which we skip.
"""

from __future__ import annotations

import contextlib
import logging
import posixpath
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from lxml import etree

from kb_core.base.i18n import msg
from kb_core.base.safe_zip import InflateLimits, UnsafeMember, central_directory, iter_member
from kb_core.engines.parsing.base import (
    CORRUPT_DOCUMENT,
    FILE_TOO_LARGE,
    ParsedDocument,
    ParseLimits,
    TextBlock,
    make_document,
    parse_error,
)

logger = logging.getLogger(__name__)

W_NAMESPACES = frozenset(
    {
        "http://schemas.openxmlformats.org/wordprocessingml/2006/main",
        "http://purl.oclc.org/ooxml/wordprocessingml/main",  # ISO 29500 strict
    }
)
M_NS = "http://schemas.openxmlformats.org/officeDocument/2006/math"
MC_NS = "http://schemas.openxmlformats.org/markup-compatibility/2006"
REL_NS = "http://schemas.openxmlformats.org/package/2006/relationships"
_SUSPICIOUS_RATIO = 100
_SUSPICIOUS_MEMBER_BYTES = 10 * 1024 * 1024
# A document's parts (Word writes tens, a few thousand with many images), checked from the zip's end record before
# zipfile parses its directory (work that grows with the count): #37.
MAX_PARTS = 100_000
_MAX_DIRECTORY_BYTES = MAX_PARTS * 1024

# Subtrees that never hold visible text: properties, deleted or moved-away text, field instructions.
_SKIP = frozenset(
    {
        "pPr", "rPr", "sectPr", "sdtPr", "sdtEndPr", "tblPr", "tblGrid", "trPr", "tcPr", "del", "moveFrom",
        "delText", "instrText", "delInstrText", "commentReference", "footnoteReference", "endnoteReference",
        "annotationRef", "footnoteRef", "endnoteRef", "separator", "continuationSeparator", "sym", "object",
    }
)  # fmt: skip
_HEADING_NAME = re.compile(r"^\s*(?:heading|标题|標題)\s*([1-9])\s*$", re.IGNORECASE)
# Localized built-in style ids: Heading1 (en), berschrift1 (de, "Ü" dropped), Titre1 (fr), 1 (zh/ja) ...
_HEADING_ID = re.compile(
    r"^(?:heading|berschrift|titre|titolo|ttulo|encabezado|kop|nagwek|rubrik|otsikko|заголовок|标题|標題|見出し)?([1-9])$",
    re.IGNORECASE,
)
_WS = re.compile(r"\s+")
# The built-in Title and Subtitle styles (English names and ids; Word's Chinese names 标题 / 副标题, without a level)
_TITLE = re.compile(r"^\s*(?:title|subtitle|标题|副标题|標題|副標題)\s*$", re.IGNORECASE)


def _split_tag(el: etree._Element) -> tuple[str, str]:
    tag = el.tag
    if not isinstance(tag, str):
        return "", ""
    if tag.startswith("{"):
        ns, _, local = tag[1:].partition("}")
        return ns, local
    return "", tag


def _w_attr(el: etree._Element, name: str) -> str | None:
    for ns in W_NAMESPACES:
        value = el.get(f"{{{ns}}}{name}")
        if value is not None:
            return value
    return el.get(name)


def _w_child(el: etree._Element, name: str) -> etree._Element | None:
    for child in el:
        ns, local = _split_tag(child)
        if local == name and ns in W_NAMESPACES:
            return child
    return None


@dataclass
class _Styles:
    """Heading level (1-9) per paragraph style id, following basedOn for outline levels."""

    names: dict[str, str] = field(default_factory=dict)
    outline: dict[str, int] = field(default_factory=dict)
    based_on: dict[str, str] = field(default_factory=dict)
    paragraph_ids: set[str] = field(default_factory=set)
    default_style: str | None = None

    def level(self, style_id: str | None) -> int | None:
        if style_id is None:
            style_id = self.default_style
        seen: set[str] = set()
        current = style_id
        while current and current not in seen:
            seen.add(current)
            match = _HEADING_NAME.match(self.names.get(current, ""))
            if match:
                return int(match.group(1))
            if current in self.outline:
                lvl = self.outline[current]
                return lvl + 1 if 0 <= lvl <= 8 else None
            if current not in self.names:
                match = _HEADING_ID.match(current)
                if match:
                    return int(match.group(1))
            current = self.based_on.get(current)
        return None


def _parse_styles(root: etree._Element | None) -> _Styles:
    styles = _Styles()
    if root is None:
        return styles
    for style in root:
        _ns, local = _split_tag(style)
        if local != "style" or _w_attr(style, "type") not in (None, "paragraph"):
            continue
        sid = _w_attr(style, "styleId")
        if not sid:
            continue
        styles.paragraph_ids.add(sid)
        if _w_attr(style, "default") in ("1", "true", "on"):
            styles.default_style = sid
        name = _w_child(style, "name")
        if name is not None:
            styles.names[sid] = _w_attr(name, "val") or ""
        based = _w_child(style, "basedOn")
        if based is not None and _w_attr(based, "val"):
            styles.based_on[sid] = _w_attr(based, "val") or ""
        ppr = _w_child(style, "pPr")
        lvl = _w_child(ppr, "outlineLvl") if ppr is not None else None
        if lvl is not None:
            with contextlib.suppress(ValueError):
                styles.outline[sid] = int(_w_attr(lvl, "val") or "9")
    return styles


class _Walker:
    """Walks WordprocessingML block content and emits TextBlocks in reading order."""

    def __init__(self, styles: _Styles, track_pages: bool, use_rendered_breaks: bool, headings: bool) -> None:
        self.styles = styles
        self.track_pages = track_pages
        self.use_rendered = use_rendered_breaks
        self.headings = headings
        self.page = 1
        self.chapters: list[tuple[int, str]] = []
        self.blocks: list[TextBlock] = []
        self._first_page: int | None = None

    # ---- inline content -------------------------------------------------
    def _page_break(self) -> None:
        self.page += 1

    def _text(self, parts: list[str], text: str) -> None:
        if text:
            parts.append(text)
            if self._first_page is None and text.strip():
                self._first_page = self.page

    def _inline(self, el: etree._Element, parts: list[str]) -> None:
        for child in el:
            ns, local = _split_tag(child)
            if not local or local in _SKIP:
                continue
            if ns == MC_NS and local == "AlternateContent":
                self._alternate(child, parts)
                continue
            if local == "t" and (ns in W_NAMESPACES or ns == M_NS):
                # Tail text of child nodes only: unresolved entity references are left out.
                self._text(parts, (child.text or "") + "".join(c.tail or "" for c in child))
            elif local == "tab" and ns in W_NAMESPACES:
                self._text(parts, "\t")
            elif local == "br" and ns in W_NAMESPACES:
                if _w_attr(child, "type") == "page":
                    if not self.use_rendered:
                        self._page_break()
                else:
                    self._text(parts, "\n")
            elif local == "cr" and ns in W_NAMESPACES:
                self._text(parts, "\n")
            elif local == "lastRenderedPageBreak":
                if self.use_rendered:
                    self._page_break()
            elif local == "noBreakHyphen":
                self._text(parts, "-")
            elif local == "p" and ns in W_NAMESPACES:  # nested paragraph, e.g. inside a text box
                self._text(parts, "\n")
                self._paragraph_inline(child, parts)
                self._text(parts, "\n")
            elif local == "tc" and ns in W_NAMESPACES:  # nested table cell inside a text box
                self._inline(child, parts)
                self._text(parts, " | ")
            else:
                self._inline(child, parts)

    def _alternate(self, el: etree._Element, parts: list[str]) -> None:
        """Markup compatibility: the first Choice (text boxes as DrawingML), else the Fallback when the
        Choice carries no text (e.g. an emoji as w16se:symEx with the character in the Fallback)."""
        for branch in el:
            ns, local = _split_tag(branch)
            if ns != MC_NS:
                continue
            sub: list[str] = []
            self._inline(branch, sub)
            if "".join(sub).strip() or local == "Fallback":
                parts.extend(sub)
                return

    def _paragraph_inline(self, p: etree._Element, parts: list[str]) -> None:
        ppr = _w_child(p, "pPr")
        if ppr is not None and not self.use_rendered and _w_child(ppr, "pageBreakBefore") is not None:
            val = _w_attr(_w_child(ppr, "pageBreakBefore"), "val")  # type: ignore[arg-type]
            if val not in ("0", "false", "off"):
                self._page_break()
        self._inline(p, parts)

    # ---- block content --------------------------------------------------
    def _emit(self, text: str, chapter: str | None, heading: bool = False) -> None:
        text = _clean(text)
        if text:
            page = (self._first_page or self.page) if self.track_pages else None
            self.blocks.append(TextBlock(text=text, chapter=chapter, page=page, heading=heading))

    def _chapter(self) -> str | None:
        return " > ".join(title for _, title in self.chapters) or None

    def _heading_level(self, p: etree._Element) -> int | None:
        ppr = _w_child(p, "pPr")
        style_id = None
        if ppr is not None:
            lvl = _w_child(ppr, "outlineLvl")
            if lvl is not None:
                try:
                    value = int(_w_attr(lvl, "val") or "9")
                except ValueError:
                    value = 9
                return value + 1 if 0 <= value <= 8 else None
            pstyle = _w_child(ppr, "pStyle")
            if pstyle is not None:
                style_id = _w_attr(pstyle, "val")
        return self.styles.level(style_id)

    def paragraph(self, p: etree._Element) -> None:
        self._first_page = None
        parts: list[str] = []
        self._paragraph_inline(p, parts)
        text = "".join(parts)
        level = self._heading_level(p) if self.headings else None
        title = _WS.sub(" ", text).strip()
        if level is not None and title:
            while self.chapters and self.chapters[-1][0] >= level:
                self.chapters.pop()
            self.chapters.append((level, title))
        self._emit(text, self._chapter(), level is not None or (self.headings and self._is_title(p)))

    def _is_title(self, p: etree._Element) -> bool:
        """A paragraph in the document's Title or Subtitle style (by style name, or by the built-in style id)."""
        ppr = _w_child(p, "pPr")
        pstyle = _w_child(ppr, "pStyle") if ppr is not None else None
        style_id = _w_attr(pstyle, "val") if pstyle is not None else None
        if not style_id:
            return False
        name = self.styles.names.get(style_id, style_id)
        return _TITLE.match(name) is not None

    def _cell_text(self, tc: etree._Element) -> str:
        parts: list[str] = []
        for child in tc:
            _ns, local = _split_tag(child)
            if local in _SKIP:
                continue
            if local == "p":
                sub: list[str] = []
                self._paragraph_inline(child, sub)
                parts.append(_WS.sub(" ", "".join(sub)).strip())
            elif local == "tbl":
                parts.extend(self._row_texts(child))
            else:
                parts.append(self._cell_text(child))
        return " ".join(p for p in parts if p)

    def _row_texts(self, tbl: etree._Element) -> list[str]:
        rows: list[str] = []
        for tr in _descend(tbl, "tr", stop={"tbl"}):
            trpr = _w_child(tr, "trPr")
            if trpr is not None and _w_child(trpr, "del") is not None:
                continue  # tracked row deletion
            cells = [self._cell_text(tc) for tc in _descend(tr, "tc", stop={"tbl"})]
            if any(cells):
                rows.append(" | ".join(cells))
        return rows

    def table(self, tbl: etree._Element) -> None:
        chapter = self._chapter()
        for tr in _descend(tbl, "tr", stop={"tbl"}):
            trpr = _w_child(tr, "trPr")
            if trpr is not None and _w_child(trpr, "del") is not None:
                continue
            self._first_page = None
            cells = [self._cell_text(tc) for tc in _descend(tr, "tc", stop={"tbl"})]
            if any(cells):
                self._emit(" | ".join(cells), chapter)

    def container(self, el: etree._Element) -> None:
        for child in el:
            _ns, local = _split_tag(child)
            if not local or local in _SKIP:
                continue
            if local == "p":
                self.paragraph(child)
            elif local == "tbl":
                self.table(child)
            else:  # sdt, sdtContent, customXml, ins, moveTo, smartTag ...
                self.container(child)


def _descend(el: etree._Element, name: str, stop: set[str]) -> list[etree._Element]:
    """Children named ``name``, looking through wrappers (sdt, customXml, ins) but not into ``stop``."""
    found: list[etree._Element] = []
    for child in el:
        _ns, local = _split_tag(child)
        if not local or local in _SKIP or local in stop:
            continue
        if local == name:
            found.append(child)
        elif local in ("sdt", "sdtContent", "customXml", "ins", "moveTo", "smartTag"):
            found.extend(_descend(child, name, stop))
    return found


def _clean(text: str) -> str:
    lines = [line.rstrip() for line in text.replace("\r", "\n").split("\n")]
    return "\n".join(line for line in lines if line.strip()).strip()


class _Package:
    """Bounded, entity-safe reads of the members of one DOCX zip.

    Members are inflated counting the bytes they really produce (:mod:`kb_core.base.safe_zip`): all of them together
    stop at ``ParseLimits.max_decompressed_bytes`` and each at a 100:1 ratio past 10 MB, whatever the headers claim.
    """

    def __init__(self, path: Path, limits: ParseLimits) -> None:
        self.path = path
        try:
            self.handle = open(path, "rb")  # noqa: SIM115 - closed by close()
        except OSError as exc:
            raise parse_error(
                CORRUPT_DOCUMENT,
                path,
                msg("it cannot be read ({problem})", problem=exc.strerror or str(exc)),
            ) from None
        try:
            declared = central_directory(self.handle)
            if declared is not None and (declared.members > MAX_PARTS or declared.size > _MAX_DIRECTORY_BYTES):
                self.handle.close()
                raise parse_error(
                    CORRUPT_DOCUMENT,
                    path,
                    f"its zip lists {declared.members:,} parts in {declared.size:,} bytes; a DOCX has at most "
                    f"{MAX_PARTS:,}",
                )
            self.handle.seek(0)
            self.zip = zipfile.ZipFile(self.handle)
            infos = self.zip.infolist()
        except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError, NotImplementedError) as exc:
            self.handle.close()
            raise parse_error(
                CORRUPT_DOCUMENT,
                path,
                msg("it is not a valid DOCX (damaged or truncated zip: {problem})", problem=str(exc)),
            ) from None
        self.budget = limits.max_decompressed_bytes  # bytes all members may still inflate to
        total = sum(i.file_size for i in infos)
        if total > self.budget:
            self.close()
            raise parse_error(
                FILE_TOO_LARGE,
                path,
                msg(
                    "it would expand to {size:.1f} MB when unpacked, over the limit of {limit:.1f} MB (possible zip "
                    "bomb)",
                    size=total / 1e6, limit=limits.max_decompressed_bytes / 1e6,
                ),
            )
        self.members = {i.filename: i for i in infos}
        self.parser = etree.XMLParser(
            resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False, remove_comments=True,
            remove_pis=True,
        )  # fmt: skip

    def close(self) -> None:
        self.zip.close()
        self.handle.close()

    def read(self, name: str) -> bytes:
        """The inflated bytes of member ``name``, counted against the package's budget as they are inflated."""
        info = self.members[name]
        if info.file_size > _SUSPICIOUS_MEMBER_BYTES and info.file_size > _SUSPICIOUS_RATIO * max(
            info.compress_size, 1
        ):  # what the headers claim: refused before inflating anything (what they hide is caught below)
            raise parse_error(
                CORRUPT_DOCUMENT,
                self.path,
                f"member {name} claims a {info.file_size // max(info.compress_size, 1)}:1 compression ratio"
                " (possible zip bomb)",
            )
        limits = InflateLimits(max_bytes=self.budget, max_ratio=_SUSPICIOUS_RATIO, ratio_floor=_SUSPICIOUS_MEMBER_BYTES)
        blocks: list[bytes] = []
        try:
            for block in iter_member(self.handle, info, limits):
                blocks.append(block)
        except UnsafeMember as exc:
            if exc.kind == "too_large":
                raise parse_error(
                    FILE_TOO_LARGE, self.path, f"member {name}: {exc.reason} when unpacked (possible zip bomb)"
                ) from None
            suffix = " (possible zip bomb)" if exc.kind == "bomb" else ""
            raise parse_error(
                CORRUPT_DOCUMENT, self.path, f"member {name} cannot be unpacked: {exc.reason}{suffix}"
            ) from None
        except OSError as exc:
            raise parse_error(CORRUPT_DOCUMENT, self.path, f"{name} cannot be read ({exc})") from None
        data = b"".join(blocks)
        self.budget -= len(data)
        return data

    def xml(self, name: str) -> etree._Element | None:
        if name not in self.members:
            return None
        data = self.read(name)
        try:
            return etree.fromstring(data, self.parser)
        except etree.XMLSyntaxError as exc:
            raise parse_error(CORRUPT_DOCUMENT, self.path, f"{name} is not well-formed XML ({exc})") from None
        except ValueError as exc:  # lxml refuses some byte strings outright
            raise parse_error(CORRUPT_DOCUMENT, self.path, f"{name} cannot be parsed ({exc})") from None

    def relationships(self, part: str) -> list[tuple[str, str]]:
        """(type, target part name) of the internal relationships of ``part``."""
        folder, base = posixpath.split(part)
        root = self.xml(posixpath.join(folder, "_rels", base + ".rels"))
        rels: list[tuple[str, str]] = []
        if root is None:
            return rels
        for rel in root:
            if rel.get("TargetMode") == "External" or not rel.get("Target"):
                continue
            target = rel.get("Target", "")
            name = target.lstrip("/") if target.startswith("/") else posixpath.normpath(posixpath.join(folder, target))
            rels.append((rel.get("Type", ""), name))
        return rels


def _find_rel(rels: list[tuple[str, str]], suffix: str) -> str | None:
    for rel_type, target in rels:
        if rel_type.endswith("/" + suffix):
            return target
    return None


def main_part_name(pkg_members: set[str], rels: list[tuple[str, str]]) -> str | None:
    target = _find_rel(rels, "officeDocument")
    if target and target in pkg_members:
        return target
    return "word/document.xml" if "word/document.xml" in pkg_members else None


def _notes(pkg: _Package, name: str | None, styles: _Styles) -> list[TextBlock]:
    if not name:
        return []
    root = pkg.xml(name)
    if root is None:
        return []
    blocks: list[TextBlock] = []
    for note in root:
        _ns, local = _split_tag(note)
        if local not in ("footnote", "endnote") or _w_attr(note, "type") not in (None, "normal"):
            continue
        walker = _Walker(styles, track_pages=False, use_rendered_breaks=False, headings=False)
        walker.container(note)
        text = "\n".join(b.text for b in walker.blocks)
        if text.strip():
            blocks.append(TextBlock(text=text, chapter=None, page=None))
    return blocks


def parse_docx(path: Path, limits: ParseLimits) -> ParsedDocument:
    pkg = _Package(path, limits)
    try:
        members = set(pkg.members)
        main = main_part_name(members, pkg.relationships("_rels/.rels") if "_rels/.rels" in members else [])
        if main is None:
            raise parse_error(
                CORRUPT_DOCUMENT,
                path,
                msg("the zip has no word/document.xml, so it is not a Word document"),
            )
        root = pkg.xml(main)
        if root is None:
            raise parse_error(CORRUPT_DOCUMENT, path, f"{main} is missing")
        doc_rels = pkg.relationships(main)
        styles_name = _find_rel(doc_rels, "styles") or ("word/styles.xml" if "word/styles.xml" in members else None)
        styles = _parse_styles(pkg.xml(styles_name) if styles_name else None)
        body = _w_child(root, "body")
        if body is None:
            raise parse_error(CORRUPT_DOCUMENT, path, f"{main} has no w:body element")
        has_rendered = any(_split_tag(e)[1] == "lastRenderedPageBreak" for e in body.iter())
        has_explicit = has_rendered or any(
            (_split_tag(e)[1] == "br" and _w_attr(e, "type") == "page") or _split_tag(e)[1] == "pageBreakBefore"
            for e in body.iter()
        )
        walker = _Walker(styles, track_pages=has_explicit, use_rendered_breaks=has_rendered, headings=True)
        walker.container(body)
        blocks = walker.blocks
        blocks += _notes(pkg, _find_rel(doc_rels, "footnotes"), styles)
        blocks += _notes(pkg, _find_rel(doc_rels, "endnotes"), styles)
        metadata = {"page_breaks": "rendered" if has_rendered else ("explicit" if has_explicit else "none")}
        return make_document(path, "docx", blocks, metadata)
    finally:
        pkg.close()
