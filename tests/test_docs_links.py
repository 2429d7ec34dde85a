"""Every relative link in the README, the CHANGELOG and docs/*.md leads somewhere: the file (or folder) exists and, for
a link with a ``#fragment``, the target Markdown file has a heading GitHub gives that anchor. A newcomer who follows a
link from the README must land on the text it promises."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README_MOST_LINES = 350

_FENCE = re.compile(r"^(```|~~~)")
_INLINE_CODE = re.compile(r"`+[^`\n]*`+")
# [text](target) and ![alt](target); the target ends at whitespace or the closing parenthesis
_MARKDOWN_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HTML_LINK = re.compile(r"""<(?:img|a)\b[^>]*?\b(?:src|href)\s*=\s*["']([^"']+)["']""", re.IGNORECASE)
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_NOT_IN_ANCHOR = re.compile(r"[^\w\- ]", re.UNICODE)


def documents(root: Path = ROOT) -> list[Path]:
    found = [root / "README.md", root / "CHANGELOG.md", *sorted((root / "docs").glob("*.md"))]
    return [path for path in found if path.is_file()]


def prose_lines(text: str) -> list[tuple[int, str]]:
    """The lines outside fenced code blocks, with their numbers."""
    lines: list[tuple[int, str]] = []
    fenced = False
    for number, line in enumerate(text.splitlines(), start=1):
        if _FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced:
            lines.append((number, line))
    return lines


def anchor_of(heading: str) -> str:
    """GitHub's anchor for a heading's text: rendered text (code marks, emphasis and link targets gone), lower case,
    punctuation other than ``-`` and ``_`` dropped, spaces as hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = text.replace("`", "").replace("*", "")
    return _NOT_IN_ANCHOR.sub("", text.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    for _, line in prose_lines(path.read_text(encoding="utf-8")):
        match = _HEADING.match(line)
        if not match:
            continue
        anchor = anchor_of(match.group(2))
        count = seen.get(anchor, 0)
        seen[anchor] = count + 1
        found.add(anchor if count == 0 else f"{anchor}-{count}")
    return found


def links(path: Path) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for number, line in prose_lines(path.read_text(encoding="utf-8")):
        line = _INLINE_CODE.sub("", line)
        for pattern in (_MARKDOWN_LINK, _HTML_LINK):
            found.extend((number, target) for target in pattern.findall(line))
    return found


def broken_links(paths: list[Path], root: Path = ROOT) -> list[str]:
    """Each relative link of ``paths`` that leads nowhere, as ``file:line: target (why)``."""
    broken: list[str] = []
    for path in paths:
        for number, target in links(path):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):  # http:, https:, mailto:
                continue
            place, _, fragment = target.partition("#")
            destination = (path.parent / place).resolve() if place else path
            where = f"{path.relative_to(root)}:{number}: {target}"
            if not destination.exists():
                broken.append(f"{where} (no such file)")
            elif fragment and destination.suffix == ".md" and fragment not in anchors(destination):
                broken.append(f"{where} (no heading with that anchor in {destination.name})")
    return broken


def test_every_relative_link_leads_to_a_file_and_heading() -> None:
    paths = documents()
    assert ROOT / "README.md" in paths and len(paths) > 2
    assert sum(len(links(path)) for path in paths) > 50  # the check reads the links it is meant to
    assert broken_links(paths) == []


def test_every_docs_file_is_linked_from_the_readme() -> None:
    targets = {target.partition("#")[0] for _, target in links(ROOT / "README.md")}
    unlinked = [path.name for path in sorted((ROOT / "docs").glob("*.md")) if f"docs/{path.name}" not in targets]
    assert unlinked == []


def test_the_readme_stays_short() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= README_MOST_LINES, f"README.md has {lines} lines; the rest belongs in docs/"


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("Search and scores", "search-and-scores"),
        ("For agents: MCP", "for-agents-mcp"),
        ("PostgreSQL + pgvector store", "postgresql--pgvector-store"),
        ("The app as `scripts/run.sh` serves it (#34)", "the-app-as-scriptsrunsh-serves-it-34"),
        ("Python 3.12 and 3.13: the smoke set", "python-312-and-313-the-smoke-set"),
        ("rag_search, get_item, get_document_info", "rag_search-get_item-get_document_info"),
        ("界面语言 Interface language", "界面语言-interface-language"),
    ],
)
def test_anchors_are_the_ones_github_makes(heading: str, anchor: str) -> None:
    assert anchor_of(heading) == anchor


def test_a_broken_file_link_and_a_broken_anchor_are_reported(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "guide.md").write_text("# Guide\n\n## Two words\n\n## Two words\n", encoding="utf-8")
    readme = tmp_path / "README.md"
    readme.write_text(
        "# Title\n\n"
        "[fine](docs/guide.md#two-words) [second](docs/guide.md#two-words-1) [here](#title)\n"
        "[gone](docs/missing.md) ![gone too](docs/missing.png)\n"
        "[bad anchor](docs/guide.md#three-words) [bad here](#nothing)\n"
        '<img src="docs/absent.png"> `[in code](nowhere.md)` [web](https://example.com/x.md)\n'
        "```\n[in a fence](nowhere.md)\n```\n",
        encoding="utf-8",
    )
    assert broken_links([readme], root=tmp_path) == [
        "README.md:4: docs/missing.md (no such file)",
        "README.md:4: docs/missing.png (no such file)",
        "README.md:5: docs/guide.md#three-words (no heading with that anchor in guide.md)",
        "README.md:5: #nothing (no heading with that anchor in README.md)",
        "README.md:6: docs/absent.png (no such file)",
    ]
