"""The catalogues' keys, read from the code: every ``t("…")`` and ``msg("…")`` call's literal template.

An AST walk rather than Babel's token-based extractor, which also takes subscripts such as ``t["doc_id"]`` for
calls. Used by ``python -m kb_core.base.i18n.keys`` (refresh the catalogues after changing text) and by
``tests/test_i18n.py`` (the catalogues hold exactly these keys, each translated).
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from babel.messages.catalog import Catalog
from babel.messages.pofile import read_po, write_po

from kb_core.base.i18n import DOMAIN, LANGUAGES, LOCALES

KEYWORDS = ("t", "msg")
ROOT = Path(__file__).resolve().parents[3]
SOURCES = ("kb_core", "pages", "app.py", "serve.py")


@dataclass(frozen=True)
class Call:
    """One call of a catalogue keyword: where, and its template (None when it is not a literal string)."""

    path: Path
    line: int
    template: str | None


def calls(root: Path = ROOT) -> Iterator[Call]:
    for source in SOURCES:
        top = root / source
        for path in sorted([top] if top.is_file() else top.rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in KEYWORDS:
                    first = node.args[0] if node.args else None
                    literal = isinstance(first, ast.Constant) and isinstance(first.value, str)
                    yield Call(path, node.lineno, first.value if literal else None)  # type: ignore[union-attr]


def keys(root: Path = ROOT) -> set[str]:
    return {call.template for call in calls(root) if call.template is not None}


def template_path() -> Path:
    return LOCALES / f"{DOMAIN}.pot"


def catalogue_path(language: str) -> Path:
    return LOCALES / language / "LC_MESSAGES" / f"{DOMAIN}.po"


def read(path: Path) -> Catalog:
    with path.open("rb") as handle:
        return read_po(handle)


def write(path: Path, catalogue: Catalog) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as handle:
        write_po(handle, catalogue, width=0, sort_output=True, omit_header=True, ignore_obsolete=True)


def refresh(root: Path = ROOT) -> dict[str, int]:
    """Write the template (the English catalogue: every key) and give each other language's catalogue exactly these
    keys, keeping the translations it has. Returns the untranslated count per language."""
    found = sorted(keys(root))
    template = Catalog(domain=DOMAIN, project="KB Workbench", charset="utf-8")
    for key in found:
        template.add(key, flags=("python-brace-format",) if "{" in key else ())
    write(template_path(), template)
    missing: dict[str, int] = {}
    for language in LANGUAGES:
        if language == "en":
            continue
        path = catalogue_path(language)
        old = read(path) if path.exists() else Catalog(locale=language, domain=DOMAIN)
        new = Catalog(locale=language, domain=DOMAIN, project="KB Workbench", charset="utf-8")
        for key in found:
            kept = old.get(key)
            new.add(key, kept.string if kept is not None else "", flags=template[key].flags)
        write(path, new)
        missing[language] = sum(1 for key in found if not new[key].string)
    return missing


if __name__ == "__main__":
    counts = refresh()
    sys.stdout.write(f"{len(keys())} keys; untranslated: {counts}\n")
