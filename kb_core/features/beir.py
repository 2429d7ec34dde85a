"""BEIR-format dataset folders: ``corpus.jsonl`` (``{"_id", "title", "text"}``), ``queries.jsonl``
(``{"_id", "text"}``) and ``qrels.tsv`` (header ``query-id  corpus-id  score``; ``qrels/test.tsv`` in the original
BEIR layout), read with clear errors for what is missing or malformed. Used by :mod:`kb_core.session.evaluation`.

Every malformed line is refused naming its file and line: bytes that are not UTF-8 (a binary file), NUL bytes, a
line over 16 MB, a JSON line nested deeper than 32 levels or holding more than 100,000 values, text with a lone
surrogate (``"\\ud800"`` is valid JSON but not Unicode), a score that is not a whole number of at most ten digits.
A byte order mark before the first line is read past.
"""

from __future__ import annotations

import codecs
import contextlib
import csv
import logging
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from kb_core.base.errors import InvalidArgument, PermissionDenied
from kb_core.base.i18n import msg
from kb_core.base.json_text import JSONLimitExceeded, parse_json_within
from kb_core.base.safe_files import UnusablePath, open_input_file
from kb_core.base.validation import has_lone_surrogate

logger = logging.getLogger(__name__)


# -- datasets -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BeirDataset:
    """A BEIR dataset in memory: corpus ``{id: {title, text}}``, queries ``{id: text}`` (judged ones only) and
    qrels ``{query_id: {doc_id: grade}}``."""

    name: str
    folder: Path
    corpus: dict[str, dict[str, str]]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    corpus_path: Path


def confine_folder(folder: str | Path, allowed_dirs: Sequence[Path] | None) -> Path:
    """``folder``, checked to lie inside ``allowed_dirs`` (symbolic links resolved; never inside the home, see
    :class:`~kb_core.base.safe_files.AllowedFolders`) before anything looks at it: the refusal is the same whether the
    path exists or not, so a visitor learns nothing of the server's files. ``None``: not confined (the CLI)."""
    path = Path(folder).expanduser()
    if allowed_dirs is None:
        return path
    resolved = path.resolve()
    inside = any(resolved == d or resolved.is_relative_to(d) for d in allowed_dirs)
    if not inside or any(resolved == d or resolved.is_relative_to(d) for d in getattr(allowed_dirs, "denied", ())):
        shown = ", ".join(str(d) for d in allowed_dirs) or "none"
        raise PermissionDenied(
            msg(
                "{folder!r} is not inside the folders this server may read ({allowed}); refused.",
                folder=str(folder), allowed=shown,
            ),
            details={"field": "folder"},
        )
    return path


def _require_folder(folder: str | Path, allowed_dirs: Sequence[Path] | None = None) -> Path:
    path = confine_folder(folder, allowed_dirs)
    if not path.is_dir():
        raise InvalidArgument(
            msg(
                "{folder!r} is not a folder; give a BEIR dataset folder holding corpus.jsonl, queries.jsonl and "
                "qrels.tsv (or qrels/test.tsv).",
                folder=str(folder),
            ),
            details={"field": "folder", "folder": str(folder)},
        )
    return path


def _qrels_path(folder: Path, split: str | None) -> Path:
    names = [f"qrels.{split}.tsv", f"qrels/{split}.tsv"] if split else ["qrels.tsv", "qrels/test.tsv"]
    for name in names:
        if (folder / name).is_file():
            return folder / name
    raise InvalidArgument(
        msg("{folder} has no relevance judgments: looked for {names}.", folder=str(folder), names=" or ".join(names)),
        details={"field": "folder", "folder": str(folder)},
    )


def _queries_path(folder: Path, split: str | None, queries_file: str | Path | None) -> Path:
    if queries_file is not None:
        path = Path(queries_file)
        path = path if path.is_absolute() else folder / path
        if not path.is_file():
            raise InvalidArgument(
                msg("Queries file {path!r} does not exist.", path=str(path)), details={"field": "queries_file"}
            )
        return path
    names = ["queries.jsonl", f"queries.{split or 'test'}.jsonl"]
    for name in names:
        if (folder / name).is_file():
            return folder / name
    raise InvalidArgument(
        msg("{folder} has no queries: looked for {names}.", folder=str(folder), names=" or ".join(names)),
        details={"field": "folder", "folder": str(folder)},
    )


_MAX_LINE_BYTES = 16 << 20  # one corpus document; BEIR's longest are well under 1 MB
_MAX_LINE_DEPTH = 32
_MAX_LINE_VALUES = 100_000
_MAX_GRADE = 2**31 - 1  # the graded relevance of TREC tools is a C int


def _bad_line(path: Path, number: int, problem: str) -> InvalidArgument:
    return InvalidArgument(f"{path}, line {number}: {problem}.", details={"file": str(path), "line": number})


@contextlib.contextmanager
def _opened(path: Path, allowed_dirs: Sequence[Path] | None) -> Iterator[IO[bytes]]:
    """``path`` open for reading; confined, the file as opened must lie inside ``allowed_dirs`` (a link inside an
    allowed folder to a file outside is refused, and so is a folder swapped for a link after a check)."""
    if allowed_dirs is None:
        with open(path, "rb") as handle:
            yield handle
        return
    try:
        with open_input_file(path, allowed_dirs) as opened:
            handle = opened.reader()
    except UnusablePath as exc:
        raise InvalidArgument(
            msg("{path} {reason}.", path=str(path), reason=exc.reason), details={"file": str(path)}
        ) from None
    with handle:
        yield handle


def _lines(path: Path, allowed_dirs: Sequence[Path] | None = None) -> Iterator[tuple[int, str]]:
    """(line number, text) of a UTF-8 text file; a BOM before the first line is skipped."""
    with _opened(path, allowed_dirs) as handle:
        number = 0
        while True:
            raw = handle.readline(_MAX_LINE_BYTES + 1)
            if not raw:
                return
            number += 1
            if len(raw) > _MAX_LINE_BYTES:
                raise _bad_line(path, number, f"longer than {_MAX_LINE_BYTES >> 20} MB (is this a text file?)")
            if number == 1 and raw.startswith(codecs.BOM_UTF8):
                raw = raw[len(codecs.BOM_UTF8) :]
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise _bad_line(path, number, f"not UTF-8 text (byte {exc.start + 1} of the line)") from None
            if "\x00" in text:
                raise _bad_line(path, number, "holds a NUL byte (is this a text file?)")
            yield number, text


def _text(value: Any, path: Path, number: int, field: str) -> str:
    text = str(value)
    if has_lone_surrogate(text):
        raise _bad_line(path, number, f'"{field}" holds a lone surrogate (\\ud800-\\udfff), which is not Unicode text')
    return text


def _read_jsonl(path: Path, allowed_dirs: Sequence[Path] | None = None) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for number, line in _lines(path, allowed_dirs):
        if not line.strip():
            continue
        try:
            row = parse_json_within(line, max_values=_MAX_LINE_VALUES, max_depth=_MAX_LINE_DEPTH)
        except JSONLimitExceeded as exc:
            raise _bad_line(path, number, f"refused: {exc}") from None
        except ValueError as exc:
            reason = getattr(exc, "msg", str(exc))
            problem = f"not valid JSON ({reason}); BEIR files hold one JSON object per line"
            raise _bad_line(path, number, problem) from None
        if not isinstance(row, dict) or "_id" not in row:
            raise _bad_line(path, number, 'expected an object with an "_id" field')
        for field in ("_id", "title", "text"):
            if field in row and row[field] is not None:
                row[field] = _text(row[field], path, number, field)
        rows.append(row)
    return rows


def _read_qrels(path: Path, allowed_dirs: Sequence[Path] | None = None) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = {}
    for number, line in _lines(path, allowed_dirs):
        try:
            row = next(csv.reader([line.rstrip("\r\n")], delimiter="\t"), [])
        except csv.Error as exc:  # a field over csv's limit (131,072 characters), a stray quote
            raise _bad_line(path, number, f"not a tab-separated line ({exc})") from None
        if not row or not "".join(row).strip():
            continue
        if number == 1 and row[0].strip().lower() in ("query-id", "query_id", "qid"):
            continue
        if len(row) == 4:  # TREC layout: qid 0 docid grade
            row = [row[0], row[2], row[3]]
        if len(row) != 3:
            raise _bad_line(
                path, number, f"expected 3 tab-separated columns (query-id, corpus-id, score), got {len(row)}"
            )
        try:
            value = float(row[2])
        except ValueError:
            raise _bad_line(path, number, f"score {row[2][:40]!r} is not a number") from None
        if not math.isfinite(value) or abs(value) > _MAX_GRADE:
            raise _bad_line(path, number, f"score {row[2][:40]!r} is not a whole number of at most ten digits")
        query_id = _text(row[0].strip(), path, number, "query-id")
        doc_id = _text(row[1].strip(), path, number, "corpus-id")
        qrels.setdefault(query_id, {})[doc_id] = int(value)
    return qrels


def load_beir_queries_qrels(
    folder: str | Path,
    *,
    split: str | None = None,
    queries_file: str | Path | None = None,
    allowed_dirs: Sequence[Path] | None = None,
) -> tuple[dict[str, str], dict[str, dict[str, int]]]:
    """The judged queries ``{id: text}`` and their qrels ``{query_id: {doc_id: grade}}`` of a BEIR folder.

    Judgments come from ``qrels.tsv`` (else ``qrels/test.tsv``), or ``qrels.<split>.tsv`` / ``qrels/<split>.tsv``
    when ``split`` is given. Queries come from ``queries_file`` if given, else ``queries.jsonl`` (else
    ``queries.<split>.jsonl``), keeping only queries that have judgments, in file order. Qrels of queries that
    are not in the queries file are dropped too. ``allowed_dirs``: read only inside these folders (the app's
    ``KB_ALLOW_DIRS``), see :func:`confine_folder`.
    """
    path = _require_folder(folder, allowed_dirs)
    qrels = _read_qrels(_qrels_path(path, split), allowed_dirs)
    queries: dict[str, str] = {}
    for row in _read_jsonl(_queries_path(path, split, queries_file), allowed_dirs):
        query_id = str(row["_id"])
        if query_id in qrels and str(row.get("text", "")).strip():
            queries[query_id] = str(row["text"])
    if not queries:
        raise InvalidArgument(
            f"No query in {path} has a relevance judgment; check that the qrels and queries files belong together.",
            details={"folder": str(path)},
        )
    return queries, {qid: qrels[qid] for qid in queries}


def load_beir(
    folder: str | Path,
    *,
    split: str | None = None,
    queries_file: str | Path | None = None,
    allowed_dirs: Sequence[Path] | None = None,
) -> BeirDataset:
    """Read a BEIR folder: ``corpus.jsonl`` plus the judged queries and qrels (see :func:`load_beir_queries_qrels`)."""
    path = _require_folder(folder, allowed_dirs)
    corpus_path = path / "corpus.jsonl"
    if not corpus_path.is_file():
        raise InvalidArgument(f"{path} has no corpus.jsonl.", details={"folder": str(path)})
    corpus: dict[str, dict[str, str]] = {}
    for row in _read_jsonl(corpus_path, allowed_dirs):
        corpus[str(row["_id"])] = {"title": str(row.get("title") or ""), "text": str(row.get("text") or "")}
    if not corpus:
        raise InvalidArgument(f"{corpus_path} holds no documents.", details={"file": str(corpus_path)})
    queries, qrels = load_beir_queries_qrels(path, split=split, queries_file=queries_file, allowed_dirs=allowed_dirs)
    return BeirDataset(
        name=path.resolve().name, folder=path, corpus=corpus, queries=queries, qrels=qrels, corpus_path=corpus_path
    )
