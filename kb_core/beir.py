"""BEIR-format dataset folders: ``corpus.jsonl`` (``{"_id", "title", "text"}``), ``queries.jsonl``
(``{"_id", "text"}``) and ``qrels.tsv`` (header ``query-id  corpus-id  score``; ``qrels/test.tsv`` in the original
BEIR layout), read with clear errors for what is missing or malformed. Used by :mod:`kb_core.evaluation`.
"""

from __future__ import annotations

import csv
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kb_core.errors import InvalidArgument

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


def _require_folder(folder: str | Path) -> Path:
    path = Path(folder).expanduser()
    if not path.is_dir():
        raise InvalidArgument(
            f"{str(folder)!r} is not a folder; give a BEIR dataset folder holding corpus.jsonl, queries.jsonl "
            "and qrels.tsv (or qrels/test.tsv).",
            details={"field": "folder", "folder": str(folder)},
        )
    return path


def _qrels_path(folder: Path, split: str | None) -> Path:
    names = [f"qrels.{split}.tsv", f"qrels/{split}.tsv"] if split else ["qrels.tsv", "qrels/test.tsv"]
    for name in names:
        if (folder / name).is_file():
            return folder / name
    raise InvalidArgument(
        f"{folder} has no relevance judgments: looked for {' or '.join(names)}.",
        details={"field": "folder", "folder": str(folder)},
    )


def _queries_path(folder: Path, split: str | None, queries_file: str | Path | None) -> Path:
    if queries_file is not None:
        path = Path(queries_file)
        path = path if path.is_absolute() else folder / path
        if not path.is_file():
            raise InvalidArgument(f"Queries file {str(path)!r} does not exist.", details={"field": "queries_file"})
        return path
    names = ["queries.jsonl", f"queries.{split or 'test'}.jsonl"]
    for name in names:
        if (folder / name).is_file():
            return folder / name
    raise InvalidArgument(
        f"{folder} has no queries: looked for {' or '.join(names)}.",
        details={"field": "folder", "folder": str(folder)},
    )


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InvalidArgument(
                    f"{path}, line {number}: not valid JSON ({exc.msg}); BEIR files hold one JSON object per line.",
                    details={"file": str(path), "line": number},
                ) from exc
            if not isinstance(row, dict) or "_id" not in row:
                raise InvalidArgument(
                    f'{path}, line {number}: expected an object with an "_id" field.',
                    details={"file": str(path), "line": number},
                )
            rows.append(row)
    return rows


def _read_qrels(path: Path) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = {}
    with open(path, encoding="utf-8", newline="") as handle:
        reader = csv.reader(handle, delimiter="\t")
        for number, row in enumerate(reader, start=1):
            if not row or not "".join(row).strip():
                continue
            if number == 1 and row[0].strip().lower() in ("query-id", "query_id", "qid"):
                continue
            if len(row) == 4:  # TREC layout: qid 0 docid grade
                row = [row[0], row[2], row[3]]
            if len(row) != 3:
                raise InvalidArgument(
                    f"{path}, line {number}: expected 3 tab-separated columns (query-id, corpus-id, score), "
                    f"got {len(row)}.",
                    details={"file": str(path), "line": number},
                )
            try:
                grade = int(float(row[2]))
            except ValueError as exc:
                raise InvalidArgument(
                    f"{path}, line {number}: score {row[2]!r} is not a number.",
                    details={"file": str(path), "line": number},
                ) from exc
            qrels.setdefault(row[0].strip(), {})[row[1].strip()] = grade
    return qrels


def load_beir_queries_qrels(
    folder: str | Path, *, split: str | None = None, queries_file: str | Path | None = None
) -> tuple[dict[str, str], dict[str, dict[str, int]]]:
    """The judged queries ``{id: text}`` and their qrels ``{query_id: {doc_id: grade}}`` of a BEIR folder.

    Judgments come from ``qrels.tsv`` (else ``qrels/test.tsv``), or ``qrels.<split>.tsv`` / ``qrels/<split>.tsv``
    when ``split`` is given. Queries come from ``queries_file`` if given, else ``queries.jsonl`` (else
    ``queries.<split>.jsonl``), keeping only queries that have judgments, in file order. Qrels of queries that
    are not in the queries file are dropped too.
    """
    path = _require_folder(folder)
    qrels = _read_qrels(_qrels_path(path, split))
    queries: dict[str, str] = {}
    for row in _read_jsonl(_queries_path(path, split, queries_file)):
        query_id = str(row["_id"])
        if query_id in qrels and str(row.get("text", "")).strip():
            queries[query_id] = str(row["text"])
    if not queries:
        raise InvalidArgument(
            f"No query in {path} has a relevance judgment; check that the qrels and queries files belong together.",
            details={"folder": str(path)},
        )
    return queries, {qid: qrels[qid] for qid in queries}


def load_beir(folder: str | Path, *, split: str | None = None, queries_file: str | Path | None = None) -> BeirDataset:
    """Read a BEIR folder: ``corpus.jsonl`` plus the judged queries and qrels (see :func:`load_beir_queries_qrels`)."""
    path = _require_folder(folder)
    corpus_path = path / "corpus.jsonl"
    if not corpus_path.is_file():
        raise InvalidArgument(f"{path} has no corpus.jsonl.", details={"folder": str(path)})
    corpus: dict[str, dict[str, str]] = {}
    for row in _read_jsonl(corpus_path):
        corpus[str(row["_id"])] = {"title": str(row.get("title") or ""), "text": str(row.get("text") or "")}
    if not corpus:
        raise InvalidArgument(f"{corpus_path} holds no documents.", details={"file": str(corpus_path)})
    queries, qrels = load_beir_queries_qrels(path, split=split, queries_file=queries_file)
    return BeirDataset(
        name=path.resolve().name, folder=path, corpus=corpus, queries=queries, qrels=qrels, corpus_path=corpus_path
    )
