"""What a user and an agent see, captured as one JSON file, so a refactor can show it changed nothing (#28).

    python benchmarks/behaviour_snapshot.py capture --out before.json                   # folder store
    python benchmarks/behaviour_snapshot.py capture --out before-pg.json --store postgres
    python benchmarks/behaviour_snapshot.py compare before.json after.json              # exit 1 and a diff if not equal

``capture`` runs the code of ``--repo`` (default: this script's checkout) with ``--python`` (default: this
interpreter), always as separate processes, as a person and an agent run it:

* ``help``: ``kb --help`` and the help of every sub-command (found by walking ``build_parser()``);
* ``mcp_tools``: the MCP ``initialize`` answer and ``tools/list`` (names, descriptions, input and output schemas,
  annotations), read by the MCP SDK's own stdio client from ``kb mcp``;
* ``cli_session``: a scripted ``kb`` session in a fresh home: KBs created (the ``hashing`` embedder where the model
  does not matter, all-MiniLM-L6-v2 where it does), selected and deleted; English and Chinese TXT/DOCX/DOC from
  ``data/demo`` and files of ``../shared/fixtures/docs`` (good, broken, encrypted, empty) imported; docs, search in
  every mode with ``--explain`` and ``--json`` (fixed, auto, RRF, Jaccard, filters, several KBs), save-settings,
  doc-update, doc-delete, bundles and ontologies, compact, verify, export, import-db, tokens, eval, eval-runs,
  eval-compare, info, and the errors (unknown KB, document, token, run; bad arguments; usage errors): for each
  command its exit status, stdout (parsed when ``--json``) and stderr;
* ``mcp_session``: every MCP tool over stdio in a fresh home, the error cases included (tool errors, JSON-RPC
  errors −32602 and −32603): for each call ``isError``, the text content and the structured content.

With ``--store postgres`` the same sessions run against a throwaway PostgreSQL (``python -m
kb_core.store.postgres.embedded``, started and stopped here); with ``--store URL`` against that (empty) database.
What the PostgreSQL store does not do answers ``NOT_ON_POSTGRES``, which is captured like any other answer.

Normalised (so two runs of the same code give the same file): ids (``kb_``, ``doc_``, ``chk_``, ``tok_``, ``imp_``,
``seg_``, ``run_``) become ``<kb-1>``, ``<doc-2>``… in order of first appearance; token secrets ``<token-1>``;
timestamps ``<time>``, time stamps in names ``<stamp>``; the work folder ``<work>``, the repository ``<repo>``,
other temporary paths ``<tmp>``, the database URL ``<postgres-url>``; durations (``seconds`` and ``*_ms`` values,
"N s" in messages, the ``seconds`` column of ``kb eval``'s table) ``<seconds>``; an export file's size in bytes
(its ZIP holds random chunk ids) ``<size>``. Scores, counts, other sizes, hashes, messages and key order are kept.
On PostgreSQL, documents created in the same millisecond are listed in the order of their random ids (the database
sorts by ``created_at, doc_id``), so there such ties are put in name order (see ``Normaliser.document_ties``).
Table widths follow the length of the work folder's path: leave ``--home`` out (a temporary folder of constant
length) or give paths of the same length before and after. ``--keep`` keeps the work folder (homes, MCP server logs).
``--raw FILE`` also writes the capture before normalisation; ``normalise FILE --out OUT`` applies the (changed)
rules to it again without running anything.

Search results over the evaluation sets (thousands of searches, both stores) are compared by
``benchmarks/check_search_equality.py``; this script covers what the front ends print and return.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Generator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FORMAT = 1
# Environment variables of the project that would change what a command does; removed for every run.
PROJECT_VARIABLES = ("KB_HOME", "KB_STORE", "KB_STORE_READ_URL", "KB_DEVICE", "KB_EMBEDDING_API_KEY")
COMMAND_TIMEOUT = 600.0


# -- normalisation ---------------------------------------------------------------------------------------------------
ID_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("run", re.compile(r"\brun_\d{8}-\d{6}_[0-9a-f]{6}\b")),
    ("seg", re.compile(r"\bseg_\d{14}_[0-9a-f]{10}\b")),
    ("token", re.compile(r"\bkbt_[A-Za-z0-9_-]{43}")),
    ("kb", re.compile(r"\bkb_[0-9a-f]{16}\b")),
    ("doc", re.compile(r"\bdoc_[0-9a-f]{16}\b")),
    ("chk", re.compile(r"\bchk_[0-9a-f]{16}\b")),
    ("tok", re.compile(r"\btok_[0-9a-f]{16}\b")),
    ("imp", re.compile(r"\bimp_[0-9a-f]{16}\b")),
)
TIME_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?"), "<time>"),
    (re.compile(r"(?<!\d)\d{8}-\d{6}(?!\d)"), "<stamp>"),  # timestamped names: report_20261121-153000.docx
    (re.compile(r"(?<![\w.])\d+-import-[0-9a-f]{8}\b"), "<staging>"),
    (re.compile(r"\.transfer-\d+-[0-9a-f]{8}\b"), ".transfer-<staging>"),
    (re.compile(r"\.tmp-\d+-[0-9a-f]{8}\b"), ".tmp-<temporary>"),
    (re.compile(r"\bpostgres(?:ql)?://[^\s'\"),]+"), "<postgres-url>"),
    (re.compile(r"\b127\.0\.0\.1:\d{2,5}\b"), "127.0.0.1:<port>"),
    # an export file's size: its ZIP holds random chunk ids and times, so it varies by a few bytes
    (re.compile(r"(\.kbx) \(\d+ bytes\)"), r"\1 (<size> bytes)"),
    # durations in messages and logs: "in 1.2 s", "took 0.31 s", "cost 0.52 seconds"
    (re.compile(r"\b\d+(?:\.\d+)? ?(?:s|ms|seconds)\b(?= |\.|,|\)|;|$)"), "<seconds>"),
)
DURATION_KEYS = re.compile(r"^(seconds|elapsed|elapsed_seconds|duration|duration_seconds|.*_ms|.*_seconds)$")


@dataclass
class Normaliser:
    """Replaces what changes from run to run; one instance per capture, so an id keeps its name everywhere.

    ``document_ties`` (PostgreSQL captures): the database lists documents by ``created_at, doc_id``, so documents
    created in the same millisecond (one import's failed files, typically) come back in the order of their random
    ids; such ties are put in name order, in document lists, in ``kb docs`` tables (rows with the same "updated"
    second) and in the "Documents: …" of DOCUMENT_NOT_FOUND messages (which, past ten documents, names only the
    first ten: then the list is replaced). The folder store keeps commit order, so a folder capture keeps every
    order as it is."""

    paths: list[tuple[str, str]] = field(default_factory=list)  # (path, placeholder), longest first
    names: dict[str, str] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)
    document_ties: bool = False

    def add_path(self, path: str | Path, placeholder: str) -> None:
        for form in {str(path), str(Path(path).resolve())}:
            self.paths.append((form, placeholder))
        self.paths.sort(key=lambda item: -len(item[0]))

    def _id(self, kind: str, match: re.Match[str]) -> str:
        value = match.group(0)
        name = self.names.get(value)
        if name is None:
            self.counters[kind] = self.counters.get(kind, 0) + 1
            name = self.names[value] = f"<{kind}-{self.counters[kind]}>"
        return name

    def text(self, value: str) -> str:
        if self.document_ties:
            value = DOCUMENT_NAMES.sub(_sorted_names, value)
        for path, placeholder in self.paths:
            value = value.replace(path, placeholder)
        temporary = tempfile.gettempdir()
        value = re.sub(re.escape(temporary) + r"/[^\s'\"/,)\]]+", "<tmp>", value)
        for kind, pattern in ID_PATTERNS:
            value = pattern.sub(lambda m, k=kind: self._id(k, m), value)  # type: ignore[misc]
        for pattern, placeholder in TIME_PATTERNS:
            value = pattern.sub(placeholder, value)
        return value

    def value(self, value: Any, key: str = "") -> Any:
        if isinstance(value, dict):
            return {self.text(str(k)): self.value(v, str(k)) for k, v in value.items()}
        if isinstance(value, list | tuple):
            if self.document_ties and key == "documents" and all(isinstance(v, dict) for v in value):
                value = sorted(value, key=lambda d: (str(d.get("created_at")), str(d.get("name"))))
            return [self.value(v, key) for v in value]
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, int | float) and not isinstance(value, bool) and DURATION_KEYS.match(key):
            return "<seconds>"
        return value

    def lines(self, text: str) -> list[Any]:
        """Each line normalised; in a table whose last column is ``seconds`` (``kb eval``), that column too. A line
        that is a JSON object (an MCP tool's text content after its message) is normalised as data."""
        out: list[Any] = []
        timed = False
        raw_lines = text.splitlines()
        if self.document_ties:
            raw_lines = _sort_document_table(raw_lines)
        for line in raw_lines:
            if line.startswith("{") and line.endswith("}"):
                try:
                    out.append(self.value(json.loads(line)))
                    continue
                except json.JSONDecodeError:
                    pass
            if timed:
                head, _, last = line.rstrip().rpartition(" ")
                if head.strip() and _is_number(last):
                    out.append(self.text(head.rstrip() + " <seconds>"))
                    continue
                if not (line.strip() and set(line.strip()) <= {"-", " "}):  # the rule under the header stays
                    timed = False
            timed = timed or line.rstrip().endswith(" seconds")
            out.append(self.text(line))
        return out


DOCUMENT_NAMES = re.compile(r"(Documents: )((?:'[^']*'(?:, )?)+)( …)?(?=\.)")


def _sorted_names(match: re.Match[str]) -> str:
    if match.group(3):  # only the first ten are named: which ten depends on the ties' order
        return match.group(1) + "<the first ten in the database's order> …"
    return match.group(1) + ", ".join(sorted(re.findall(r"'[^']*'", match.group(2))))


def _sort_document_table(lines: list[str]) -> list[str]:
    """``kb docs``'s table with rows of the same "updated (UTC)" second in name order (see ``document_ties``)."""
    if not lines or not any(line.startswith("name ") and line.rstrip().endswith("updated (UTC)") for line in lines):
        return lines
    start = next(i for i, line in enumerate(lines) if line.startswith("name ")) + 2
    rows, rest = lines[start:], []
    stamped = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\s*$")
    end = next((i for i, row in enumerate(rows) if not stamped.search(row)), None)
    if end is not None:
        rows, rest = rows[:end], rows[end:]
    ordered: list[str] = []
    for row in rows:
        if ordered and ordered[-1][-19:] == row[-19:]:
            group = [row]
            while ordered and ordered[-1][-19:] == row[-19:]:
                group.append(ordered.pop())
            ordered.extend(sorted(group))
        else:
            ordered.append(row)
    return lines[:start] + ordered + rest


def normalise(raw: dict[str, Any]) -> dict[str, Any]:
    """The comparable form of a raw capture: one pass, in the order of the capture, so ids are numbered by their
    first appearance."""
    normaliser = Normaliser(document_ties=raw.get("store") == "postgresql")
    for placeholder, path in raw.get("paths", {}).items():
        normaliser.add_path(path, placeholder)
    snapshot: dict[str, Any] = {"format": raw["format"], "store": raw["store"]}
    if "help" in raw:
        snapshot["help"] = {
            command: {
                "exit": r["exit"],
                "stdout": normaliser.lines(r["stdout"]),
                "stderr": normaliser.lines(r["stderr"]),
            }
            for command, r in raw["help"].items()
        }
    if "mcp_tools" in raw:
        snapshot["mcp_tools"] = normaliser.value(raw["mcp_tools"])
    if "cli_session" in raw:
        snapshot["cli_session"] = [
            {
                "command": normaliser.text(r["command"]),
                "exit": r["exit"],
                "stdout": normaliser.value(r["stdout"]) if r["json"] else normaliser.lines(r["stdout"]),
                "stderr": normaliser.lines(r["stderr"]),
            }
            for r in raw["cli_session"]
        ]
    if "mcp_session" in raw:
        calls = []
        for r in raw["mcp_session"]:
            call: dict[str, Any] = {"tool": r["tool"], "arguments": normaliser.value(r["arguments"])}
            if "error" in r:
                call["error"] = normaliser.value(r["error"])
            else:
                result = r["result"]
                call["result"] = {
                    "isError": result["isError"],
                    "text": [normaliser.lines(text) for text in result["text"]],
                    "structured": normaliser.value(result["structured"]),
                }
            calls.append(call)
        snapshot["mcp_session"] = calls
    return snapshot


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


# -- running the code under test -------------------------------------------------------------------------------------
@dataclass
class Target:
    """The checkout and interpreter under test, the work folder and the store."""

    repo: Path
    python: str
    work: Path
    store: str | None  # a PostgreSQL URL, or None for the folder store

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in PROJECT_VARIABLES}
        env.update(
            PYTHONPATH=str(self.repo),
            HF_HUB_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
            PYTHONHASHSEED="0",
            PYTHONUNBUFFERED="1",
            COLUMNS="100",  # argparse wraps help to the terminal's width
            LINES="50",
            TZ="UTC",
            LC_ALL="C.UTF-8",
            LANG="C.UTF-8",
        )
        return env

    def kb(self, home: Path, arguments: list[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        store = ["--store", self.store] if self.store else []
        return subprocess.run(
            [self.python, "-m", "kb_core.edges.cli", "--home", str(home), *store, *arguments],
            cwd=self.work,
            env=self.environment(),
            input=stdin,
            stdin=None if stdin is not None else subprocess.DEVNULL,
            capture_output=True,
            text=True,
            encoding="utf-8",
            timeout=COMMAND_TIMEOUT,
            check=False,
        )


DISCOVER = """
import argparse, json
from kb_core.edges.cli.main import build_parser

def walk(parser, path):
    yield path
    for action in parser._actions:  # argparse keeps its sub-parsers only here
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from walk(child, path + [name])

print(json.dumps(list(walk(build_parser(), []))))
"""


def capture_help(target: Target) -> dict[str, Any]:
    found = subprocess.run(
        [target.python, "-c", DISCOVER],
        cwd=target.repo,
        env=target.environment(),
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=COMMAND_TIMEOUT,
        check=True,
    )
    paths: list[list[str]] = json.loads(found.stdout)
    home = target.work / "help-home"

    def one(path: list[str]) -> tuple[str, dict[str, Any]]:
        done = target.kb(home, [*path, "--help"])
        outcome = {"exit": done.returncode, "stdout": done.stdout, "stderr": done.stderr}
        return " ".join(["kb", *path, "--help"]), outcome

    with ThreadPoolExecutor(max_workers=3) as pool:  # each a process of its own; the order is kept below
        return dict(pool.map(one, paths))


@dataclass
class CliResult:
    """One ``kb`` command's answer, raw: the parsed JSON of ``--json`` commands (None otherwise or on bad JSON)."""

    exit: int
    stdout: str
    stderr: str
    json: Any = None

    def data(self, *keys: str | int, default: Any = None) -> Any:
        value = self.json
        for key in keys:
            try:
                value = value[key]  # type: ignore[index]
            except (KeyError, IndexError, TypeError):
                return default
        return value


def run_cli_session(
    target: Target,
    home: Path,
    session: Generator[list[str] | tuple[list[str], str], CliResult, None],
    log: Callable[[str], None],
) -> list[dict[str, Any]]:
    """Run each command the generator yields (an argument list, or (arguments, stdin)) and send back its result."""
    records: list[dict[str, Any]] = []
    result: CliResult | None = None
    while True:
        try:
            step = session.send(result) if result is not None else next(session)
        except StopIteration:
            return records
        arguments, stdin = (step if isinstance(step, tuple) else (step, None))
        started = time.perf_counter()
        done = target.kb(home, arguments, stdin)
        parsed = None
        if "--json" in arguments[:1]:
            try:
                parsed = json.loads(done.stdout)
            except json.JSONDecodeError:
                parsed = None
        result = CliResult(done.returncode, done.stdout, done.stderr, parsed)
        log(f"  kb {' '.join(arguments)[:110]} → {done.returncode} ({time.perf_counter() - started:.1f} s)")
        records.append(
            {
                "command": " ".join(["kb", *arguments]),
                "exit": done.returncode,
                "stdout": parsed if parsed is not None else done.stdout,
                "json": parsed is not None,
                "stderr": done.stderr,
            }
        )


# -- the scripted CLI session ----------------------------------------------------------------------------------------
FIXTURES = (  # ../shared/fixtures/docs: good, Chinese, broken, encrypted and text-less Word files
    "docx-rs/unicode.docx",
    "node-word-extractor/test11.doc",
    "apache-poi/52420.doc",
    "apache-poi/truncated62886.docx",
    "apache-poi/PasswordProtected.doc",
    "node-word-extractor/badfile-01-bad-header.doc",
    "python-docx/sty-having-no-styles-part.docx",
)
BUNDLE = """\
- type: Document
  doc_uri: "doc-001"
  title: "Lighthouses"
  content: "A lighthouse keeper trims the wick and winds the clockwork every evening."
- type: Document
  doc_uri: "doc-002"
  content: "长城是中国古代的军事防御工程，东起山海关，西至嘉峪关。"
- type: REFERENCES
  source: { doc_uri: "doc-001" }
  target: { doc_uri: "doc-002" }
  ref_type: "citation"
"""
BROKEN_BUNDLE = """\
- type: Document
  doc_uri: "doc-009"
- type: REFERENCES
  source: { doc_uri: "doc-001" }
  target: { doc_uri: "nowhere" }
"""


@dataclass
class Inputs:
    """The files the sessions import, copied into the work folder (so paths print the same in every run)."""

    english: list[Path]
    chinese: list[Path]
    fixtures: list[Path]
    empty: Path
    unsupported: Path
    binary: Path
    bundle: Path
    broken_bundle: Path
    not_an_export: Path
    judgments: Path
    beir: Path


def prepare_inputs(repo: Path, shared: Path, work: Path) -> Inputs:
    files = work / "files"
    (files / "en").mkdir(parents=True)
    (files / "zh").mkdir()
    (files / "fixtures").mkdir()
    demo = repo / "data" / "demo"
    english = [demo / n for n in ("kb_workbench_overview.txt", "hybrid_search.docx", "score_breakdown.doc")]
    chinese = [demo / n for n in ("知识库工作台概述.txt", "混合检索.docx", "知识库管理.doc")]
    copied_en = [Path(shutil.copy2(p, files / "en" / p.name)) for p in english]
    copied_zh = [Path(shutil.copy2(p, files / "zh" / p.name)) for p in chinese]
    fixtures = []
    for relative in FIXTURES:
        source = shared / "fixtures" / "docs" / relative
        if not source.is_file():
            raise SystemExit(f"{source} is missing: the shared fixtures live in ../shared beside the repository")
        fixtures.append(Path(shutil.copy2(source, files / "fixtures" / source.name)))
    empty = files / "empty.txt"
    empty.write_text("", encoding="utf-8")
    unsupported = files / "slides.pdf"
    unsupported.write_bytes(b"%PDF-1.4\n% not imported\n")
    binary = files / "noise.txt"
    binary.write_bytes(bytes(range(256)) * 8)
    bundle = files / "bundle.yaml"
    bundle.write_text(BUNDLE, encoding="utf-8")
    broken_bundle = files / "broken.yaml"
    broken_bundle.write_text(BROKEN_BUNDLE, encoding="utf-8")
    not_an_export = files / "not-an-export.kbx"
    not_an_export.write_bytes(b"PK\x03\x04 this is no zip file")
    judgments = work / "files" / "judgments"  # the demo KB's judgments: queries and qrels naming documents
    shutil.copytree(demo / "eval", judgments)
    beir = small_beir(shared / "eval" / "xquad-retrieval-zh", work / "files" / "beir")
    return Inputs(
        copied_en,
        copied_zh,
        fixtures,
        empty,
        unsupported,
        binary,
        bundle,
        broken_bundle,
        not_an_export,
        judgments,
        beir,
    )


def small_beir(source: Path, target: Path, documents: int = 40) -> Path:
    """A BEIR folder of the first ``documents`` corpus documents of ``source`` and the queries judged on them (a
    Chinese corpus: evaluation of both languages is covered by the suite; here the commands' answers are)."""
    target.mkdir(parents=True)
    lines = (source / "corpus.jsonl").read_text(encoding="utf-8").splitlines()[:documents]
    (target / "corpus.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    kept = {json.loads(line)["_id"] for line in lines}
    header, *rows = (source / "qrels.tsv").read_text(encoding="utf-8").splitlines()
    judged = [row for row in rows if row.split("\t")[1] in kept]
    (target / "qrels.tsv").write_text("\n".join([header, *judged]) + "\n", encoding="utf-8")
    queries = {row.split("\t")[0] for row in judged}
    chosen = [q for q in (source / "queries.jsonl").read_text(encoding="utf-8").splitlines() if q.strip()]
    chosen = [q for q in chosen if json.loads(q)["_id"] in queries]
    (target / "queries.jsonl").write_text("\n".join(chosen) + "\n", encoding="utf-8")
    return target


SEARCH_OPTIONS: tuple[list[str], ...] = (
    [],
    ["--mode", "semantic"],
    ["--mode", "keyword"],
    ["--weighting", "auto"],
    ["--fusion", "rrf"],
    ["--jaccard-weight", "0.2"],
    ["--vector-weight", "0.2"],
    ["--top-k", "2", "--no-language-guard"],
)


def cli_session(i: Inputs, work: Path) -> Generator[list[str] | tuple[list[str], str], CliResult, None]:
    en, zh = [str(p) for p in i.english], [str(p) for p in i.chinese]
    fixtures = [str(p) for p in i.fixtures]
    # knowledge bases
    yield ["list"]
    yield ["--json", "list"]
    yield ["search", "anything"]  # no current KB
    yield ["create", "English", "--chunk-size", "64", "--embedding-model", "hashing"]
    yield ["--json", "create", "中文库", "--chunk-size", "64", "--embedding-model", "hashing"]
    yield ["--json", "create", "bundles", "--chunk-size", "128", "--embedding-model", "hashing"]
    yield ["--json", "create", "MiniLM", "--chunk-size", "128", "--embedding-model", "all-MiniLM-L6-v2"]
    yield ["create", "english", "--chunk-size", "64"]  # names ignore case
    yield ["--json", "create", "tiny", "--chunk-size", "5"]
    yield ["--json", "create", "keyless", "--chunk-size", "64", "--embedding-api-key", "secret-key"]
    yield ["create", "stdin-key", "--chunk-size", "64", "--embedding-api-key-stdin"], "\n"
    yield ["create", "no-size"]  # usage error
    yield ["select", "nowhere"]
    yield ["--json", "select", "nowhere"]
    yield ["select", "english"]
    yield ["list"]
    # documents
    yield ["import", *en, *fixtures[:3]]
    yield ["--json", "import", *fixtures[3:], str(i.empty), str(i.unsupported), str(i.binary), str(work / "gone.txt")]
    yield ["--json", "import", en[0]]  # the same name again: a timestamped name
    yield ["import", "--chunk-size", "1"]  # usage: no file
    yield ["--json", "import", "--chunk-size", "1", en[0]]
    yield ["--json", "import", "--executor", "local", "--address", "10.0.0.1:6379", en[0]]
    yield ["docs"]
    yield ["--json", "docs"]
    yield ["docs", "--kb", "nowhere"]
    yield ["select", "中文库"]
    yield ["import", *zh]
    yield ["--json", "docs", "--kb", "中文库"]
    # search: hashing KBs
    for query in ("hybrid search score breakdown", "混合检索 得分"):
        for options in SEARCH_OPTIONS:
            yield ["search", query, "--explain", *options, "--kb", "English", "--kb", "中文库"]
    yield ["--json", "search", "how are DOC files imported", "--kb", "English"]
    yield ["--json", "search", "文档 导入", "--mode", "keyword", "--doc", "知识库管理.doc", "--top-k", "3"]
    yield ["--json", "search", "chunk", "--kb", "English", "--file-type", "docx", "--mode", "semantic"]
    yield ["search", "the", "--kb", "English"]  # a stop word
    yield ["--json", "search", "   "]
    yield ["--json", "search", "x", "--top-k", "0"]
    yield ["--json", "search", "x", "--top-k", "1001"]
    yield ["--json", "search", "x", "--vector-weight", "2"]
    yield ["--json", "search", "x", "--vector-weight", "0", "--keyword-weight", "0"]
    yield ["search", "x", "--mode", "fuzzy"]  # usage error
    yield ["search", "x", "--kb", "nowhere"]
    # saved settings
    yield ["save-settings", "--mode", "keyword", "--top-k", "3"]
    yield ["--json", "search", "知识库"]
    yield ["--json", "save-settings", "--kb", "English", "--vector-weight", "0.4", "--weighting", "auto"]
    yield ["--json", "search", "keyword scoring", "--kb", "English"]
    yield ["--json", "save-settings", "--top-k", "0"]
    # update and delete documents
    yield ["select", "English"]
    doc = Path(en[1]).name
    yield ["doc-update", doc, "--chunk-size", "32"]
    yield ["--json", "doc-update", Path(en[2]).name, "--chunk-size", "4096"]
    yield ["--json", "doc-update", "nowhere.txt", "--chunk-size", "64"]
    yield ["--json", "doc-update", Path(fixtures[3]).name, "--chunk-size", "64"]  # a failed import
    yield ["--json", "doc-update", doc, "--chunk-size", "9"]
    yield ["doc-delete", Path(fixtures[0]).name]
    yield ["--json", "doc-delete", Path(fixtures[0]).name]
    yield ["--json", "docs"]
    # the real model: every mode, English and Chinese (the language guard)
    yield ["select", "MiniLM"]
    yield ["--json", "import", *en, *zh]
    for query in ("how does hybrid search explain a score", "混合检索如何解释得分"):
        for options in ([], ["--mode", "semantic"], ["--mode", "keyword"], ["--no-language-guard"]):
            yield ["search", query, "--explain", *options]
        yield ["--json", "search", query, "--weighting", "auto", "--top-k", "3"]
    # knowledge bundles
    yield ["--json", "schema", "--kb", "bundles"]
    yield ["schema", "--kb", "bundles"]
    yield ["bundle", "import", str(i.bundle), "--kb", "bundles"]
    yield ["--json", "bundle", "import", str(i.broken_bundle), "--kb", "bundles"]
    yield ["--json", "bundle", "import", str(work / "gone.yaml"), "--kb", "bundles"]
    yield ["ontology", "show", "--kb", "bundles"]
    shown = yield ["--json", "ontology", "show", "--kb", "bundles"]
    ontology = work / "files" / "ontology.json"
    ontology.write_text(json.dumps(shown.data("data", "ontology", default={}), ensure_ascii=False), encoding="utf-8")
    yield ["--json", "ontology", "set", str(ontology), "--kb", "bundles"]
    yield ["--json", "ontology", "set", str(i.broken_bundle), "--kb", "bundles"]
    yield ["--json", "search", "lighthouse keeper", "--kb", "bundles", "--mode", "keyword"]
    # maintenance
    yield ["compact"]
    yield ["--json", "compact", "--kb", "中文库"]
    yield ["verify"]
    yield ["--json", "verify", "--repair"]
    # export and import-db
    everything, one = work / "all.kbx", work / "english.kbx"
    yield ["--json", "export", str(everything)]
    yield ["export", str(one), "--kb", "English"]
    yield ["--json", "export", str(work / "x.kbx"), "--kb", "nowhere"]
    yield ["--json", "import-db", str(one)]  # English exists: renamed with a time stamp
    yield ["import-db", str(i.not_an_export)]
    yield ["--json", "import-db", str(work / "gone.kbx")]
    yield ["list"]
    # MCP bearer tokens
    created = yield ["--json", "token", "create", "--scope", "all", "--capability", "read"]
    token_id = created.data("data", "id", default="tok_0000000000000000")
    yield ["token", "create", "--scope", "English,中文库", "--capability", "write", "--rate", "10"]
    yield ["--json", "token", "create", "--scope", "nowhere", "--capability", "read"]
    yield ["token", "create", "--scope", "all", "--capability", "admin"]  # usage error
    yield ["token", "list"]
    yield ["--json", "token", "list"]
    yield ["token", "revoke", token_id]
    yield ["--json", "token", "revoke", token_id]
    yield ["--json", "token", "revoke", "tok_ffffffffffffffff"]
    # evaluation (the hashing embedder: the figures stay the same from run to run)
    beir, judgments = str(i.beir), str(i.judgments)
    ran = yield ["--json", "eval", beir, "--model", "hashing", "--chunk-size", "128", "--max-queries", "8"]
    run_id = ran.data("data", "run_id", default="run_00000000-000000_000000")
    yield ["eval", beir, "--model", "hashing", "--chunk-size", "128", "--mode", "keyword", "--depth", "10"]
    swept = ["--compare-fusion", "--sweep", "--max-queries", "4"]
    yield ["eval", beir, "--model", "hashing", "--chunk-size", "128", *swept]
    yield ["--json", "eval", judgments, "--kb", "English", "--mode", "hybrid", "--max-queries", "3"]
    yield ["--json", "eval", judgments, "--kb", "English", "--save-best", "--max-queries", "3"]
    yield ["--json", "eval", beir, "--model", "hashing", "--vector-weight", "1.5"]
    yield ["--json", "eval", judgments, "--save-best"]
    yield ["--json", "eval", judgments, "--model", "hashing"]  # judgments without a corpus
    yield ["--json", "eval", str(work / "no-such-folder"), "--model", "hashing"]
    yield ["eval-runs"]
    yield ["--json", "eval-runs"]
    yield ["eval-compare", run_id, run_id, "--setting-a", "keyword", "--setting-b", "semantic", "--top", "3"]
    yield ["--json", "eval-compare", run_id, run_id, "--metric", "mrr@10"]
    yield ["--json", "eval-compare", run_id, "run_20000101-000000_abcdef"]
    # the rest
    yield ["info"]
    yield ["--json", "delete", "English"]  # the current KB
    yield ["delete", "MiniLM"]
    yield ["--json", "delete", "nowhere"]
    yield ["--json", "list"]
    yield ["--store", "mysql://example/kb", "list"]
    yield ["--device", "tpu", "list"]
    yield ["frobnicate"]
    yield []


# -- MCP -------------------------------------------------------------------------------------------------------------
async def mcp_client(target: Target, home: Path, log_file: Path, body: Callable[[Any], Awaitable[None]]) -> None:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    store = ["--store", target.store] if target.store else []
    parameters = StdioServerParameters(
        command=target.python,
        args=["-m", "kb_core.edges.cli", "--home", str(home), *store, "mcp"],
        cwd=str(target.work),
        env=target.environment(),
    )
    with open(log_file, "w", encoding="utf-8") as log:
        async with stdio_client(parameters, errlog=log) as (read, write), ClientSession(read, write) as session:
            await body(session)


def tool_record(result: Any) -> dict[str, Any]:
    return {
        "isError": bool(result.isError),
        "text": [c.text if getattr(c, "text", None) is not None else f"<{c.type}>" for c in result.content],
        "structured": result.structuredContent,
    }


def capture_tools(target: Target) -> dict[str, Any]:
    import anyio

    captured: dict[str, Any] = {}

    async def body(session: Any) -> None:
        initialized = await session.initialize()
        captured["initialize"] = initialized.model_dump(mode="json", exclude_none=True)
        listed = await session.list_tools()
        captured["tools"] = [tool.model_dump(mode="json", exclude_none=True, by_alias=True) for tool in listed.tools]

    anyio.run(mcp_client, target, target.work / "mcp-list-home", target.work / "mcp-list.log", body)
    return captured


class McpRecorder:
    """Calls tools and keeps each answer: a tool result, or the JSON-RPC error the call raised."""

    def __init__(self, session: Any, log: Callable[[str], None]) -> None:
        self.session, self.log = session, log
        self.records: list[dict[str, Any]] = []

    async def __call__(self, tool: str, **arguments: Any) -> Any:
        from mcp.shared.exceptions import McpError

        started = time.perf_counter()
        record: dict[str, Any] = {"tool": tool, "arguments": arguments}
        result = None
        try:
            result = await self.session.call_tool(tool, arguments)
        except McpError as exc:
            error = exc.error
            record["error"] = {"code": error.code, "message": error.message, "data": error.data}
        else:
            record["result"] = tool_record(result)
        self.log(f"  {tool}({', '.join(arguments)}) ({time.perf_counter() - started:.1f} s)")
        self.records.append(record)
        return result


def structured(result: Any, *keys: str | int, default: Any = None) -> Any:
    value = None if result is None else result.structuredContent
    for key in keys:
        try:
            value = value[key]  # type: ignore[index]
        except (KeyError, IndexError, TypeError):
            return default
    return value


async def mcp_session(call: McpRecorder, i: Inputs, work: Path) -> None:
    en, zh = [str(p) for p in i.english], [str(p) for p in i.chinese]
    await call("list_knowledge_bases")
    await call("search", query="anything")  # no current KB
    await call("create_knowledge_base", kb_name="agents", chunk_size=64, embedding_model="hashing")
    await call("create_knowledge_base", kb_name="图书馆", chunk_size=128, embedding_model="hashing")
    await call("create_knowledge_base", kb_name="MiniLM", chunk_size=128)
    await call("create_knowledge_base", kb_name="AGENTS", chunk_size=64)
    await call("create_knowledge_base", kb_name="tiny", chunk_size=5)
    await call("create_knowledge_base", kb_name="", chunk_size=64)
    await call("select_knowledge_base", kb_name="nowhere")
    await call("select_knowledge_base", kb_name="agents")
    await call("import_document", file_paths=[*en, str(i.fixtures[3]), str(work / "gone.txt")])
    await call("import_document", file_paths=[str(i.empty), str(i.unsupported)])
    await call("import_document", file_paths=[])
    await call("import_document", file_paths=[en[0]], chunk_size=1)
    listed = await call("list_documents")
    await call("select_knowledge_base", kb_name="图书馆")
    await call("import_document", file_paths=zh)
    await call("list_documents")
    # search
    for mode in ("hybrid", "semantic", "keyword"):
        await call("search", query="知识库 检索", mode=mode, top_k=3)
    await call("search", query="检索", weighting="auto", fusion="rrf", language_guard=False)
    await call("search", query="检索", vector_weight=0.2)
    await call("search", query="  ")
    await call("search", query="x", top_k="many")
    await call("search", query="x", vector_weight=1.5)
    await call("search", query="x", mode="fuzzy")
    for mode in ("hybrid", "semantic", "keyword"):
        await call("search_knowledge_base", query="hybrid search 混合检索", mode=mode, limit=4)
    await call("search_knowledge_base", query="x", limit=50)
    # rag_search degrades after its timeout: the longest one keeps a busy machine from changing the answer
    await call("rag_search", keywords=["知识库", "删除"], top_k=3, timeout=10)
    await call("rag_search", keywords=[])
    await call("rag_search", keywords=["x"], timeout=60)
    hits = await call("search", query="知识库 删除", mode="keyword", top_k=2)
    chunk_id = structured(hits, "data", "chunks", 0, "id", default="chk_0000000000000000")
    doc_id = structured(hits, "data", "chunks", 0, "doc_id", default="doc_0000000000000000")
    await call("explain_search", query="知识库 删除", chunk_id=chunk_id)
    await call("explain_search", query="知识库 删除", chunk_id=chunk_id, mode="semantic", fusion="rrf")
    await call("explain_search", query="知识库", chunk_id="chk_ffffffffffffffff")
    await call("explain_search", query="", chunk_id=chunk_id)
    await call("get_item", id=chunk_id)
    await call("get_item", id=chunk_id, neighbours=0)
    await call("get_item", id=doc_id)
    await call("get_item", id="chk_ffffffffffffffff")
    await call("get_item", id="")
    listed_documents = structured(listed, "data", "documents", default=[]) or []
    english_doc = next(
        (d["id"] for d in listed_documents if d.get("name") == i.english[0].name), "doc_0000000000000000"
    )
    await call("get_document_info", knowledge_ids=[doc_id, english_doc, "doc_ffffffffffffffff"])
    await call("get_document_info", knowledge_ids=[doc_id], kb_names=["agents"])
    await call("get_document_info", knowledge_ids=["doc_ffffffffffffffff"])
    await call("get_document_info", knowledge_ids=[])
    await call("get_document_info", knowledge_ids=[f"doc_{n:016x}" for n in range(11)])
    # update and delete
    await call("update_document", doc_name=i.chinese[1].name, chunk_size=64)
    await call("update_document", doc_name="nowhere.txt", chunk_size=64)
    await call("update_document", doc_name=i.chinese[1].name, chunk_size=3)
    await call("delete_document", doc_name=i.chinese[2].name)
    await call("delete_document", doc_name=i.chinese[2].name)
    # the real model
    await call("select_knowledge_base", kb_name="MiniLM")
    await call("import_document", file_paths=[*en, *zh])
    for query in ("how does hybrid search explain a score", "混合检索如何解释得分"):
        for mode in ("hybrid", "semantic", "keyword"):
            await call("search", query=query, mode=mode, top_k=3)
    await call("search_knowledge_base", query="score breakdown", limit=5)
    await call("rag_search", keywords=["hybrid", "score"], top_k=3, timeout=10)
    # bundles
    await call("create_knowledge_base", kb_name="graph", chunk_size=64, embedding_model="hashing")
    await call("select_knowledge_base", kb_name="graph")
    await call("get_knowledge_schema")
    bundle_copy = work / "files" / "mcp-bundle.yaml"
    shutil.copy2(i.bundle, bundle_copy)
    await call("import_knowledge_bundle", temp_file_path=str(bundle_copy))
    await call("import_knowledge_bundle", temp_file_path=str(i.broken_bundle), delete_file=False)
    await call("import_knowledge_bundle", temp_file_path=str(work / "gone.yaml"))
    found = await call("search", query="lighthouse keeper", mode="keyword", expand_graph=True)
    await call("search_knowledge_base", query="lighthouse keeper", mode="keyword", expand_graph=True)
    chunks = structured(found, "data", "chunks", default=[]) or []
    node = next((n for n in chunks if str(n.get("doc_id", "")).startswith("doc")), None)
    await call("get_item", id="node_ffffffffffffffffffffffff")
    if node is not None:
        await call("get_item", id=node["doc_id"])
    # export and import
    export = work / "mcp-export.kbx"
    await call("export_database", export_path=str(export), kb_names=["agents", "graph"])
    await call("export_database", export_path=str(work / "x.kbx"), kb_names=["nowhere"])
    await call("import_database", source_db_path=str(export))
    await call("import_database", source_db_path=str(i.not_an_export))
    await call("import_database", source_db_path=str(work / "gone.kbx"))
    await call("list_knowledge_bases")
    # delete
    await call("delete_knowledge_base", kb_name="graph")  # the current KB
    await call("delete_knowledge_base", kb_name="MiniLM")
    await call("delete_knowledge_base", kb_name="nowhere")
    await call("no_such_tool")
    await call("list_knowledge_bases")


def capture_mcp_session(target: Target, inputs: Inputs, log: Callable[[str], None]) -> Any:
    import anyio

    records: list[dict[str, Any]] = []

    async def body(session: Any) -> None:
        await session.initialize()
        recorder = McpRecorder(session, log)
        try:
            await mcp_session(recorder, inputs, target.work)
        finally:
            records.extend(recorder.records)

    anyio.run(mcp_client, target, target.work / "mcp-home", target.work / "mcp-session.log", body)
    return records


# -- PostgreSQL ------------------------------------------------------------------------------------------------------
class EmbeddedPostgres:
    """``python -m kb_core.store.postgres.embedded`` of the code under test: a throwaway server, stopped on exit."""

    def __init__(self, target: Target) -> None:
        self.process = subprocess.Popen(
            [target.python, "-m", "kb_core.store.postgres.embedded"],
            cwd=target.repo,
            env=target.environment(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline().strip()
        if not line.startswith("KB_STORE="):
            self.close()
            raise SystemExit(f"the embedded PostgreSQL did not start: {line} {self.process.stderr.read()[-2000:]}")  # type: ignore[union-attr]
        self.url = line.removeprefix("KB_STORE=")

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


# -- capture and compare ---------------------------------------------------------------------------------------------
def capture(args: argparse.Namespace) -> int:
    repo = Path(args.repo).resolve()
    if args.home:
        work = Path(args.home).resolve()
        if work.exists() and any(work.iterdir()):
            raise SystemExit(f"--home {work} is not empty: give a new or empty folder")
        work.mkdir(parents=True, exist_ok=True)
    else:
        work = Path(tempfile.mkdtemp(prefix="kb-snapshot-"))
    started = time.perf_counter()

    def log(message: str) -> None:
        if not args.quiet:
            print(message, file=sys.stderr, flush=True)

    postgres: EmbeddedPostgres | None = None
    log(f"work folder {work}")
    try:
        store = None
        if args.store == "postgres":
            postgres = EmbeddedPostgres(Target(repo, args.python, work, None))
            store = postgres.url
            log(f"PostgreSQL at {store}")
        elif args.store not in (None, "folder"):
            store = args.store
        target = Target(repo, args.python, work, store)
        shared = Path(args.shared).resolve() if args.shared else repo.parent / "shared"
        inputs = prepare_inputs(repo, shared, work)
        raw: dict[str, Any] = {
            "format": FORMAT,
            "store": "folder" if store is None else "postgresql",
            "paths": {"<work>": str(work), "<repo>": str(repo)},
        }
        sections = args.sections.split(",")
        if "help" in sections:
            log("help texts")
            raw["help"] = capture_help(target)
        if "mcp_tools" in sections:
            log("MCP tools/list")
            raw["mcp_tools"] = capture_tools(target)
        if "cli" in sections:
            log("CLI session")
            raw["cli_session"] = run_cli_session(target, work / "cli-home", cli_session(inputs, work), log)
        if "mcp" in sections:
            log("MCP session")
            raw["mcp_session"] = capture_mcp_session(target, inputs, log)
    finally:
        if postgres is not None:
            postgres.close()
        if not args.home and not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    if args.raw:
        Path(args.raw).write_text(json.dumps(raw, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    snapshot = normalise(raw)
    Path(args.out).write_text(json.dumps(snapshot, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    counts = {k: len(v) for k, v in snapshot.items() if isinstance(v, dict | list)}
    print(f"wrote {args.out} {counts} in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return 0


def compare(args: argparse.Namespace) -> int:
    old = json.loads(Path(args.reference).read_text(encoding="utf-8"))
    new = json.loads(Path(args.candidate).read_text(encoding="utf-8"))
    differing = 0
    for section in sorted(old.keys() | new.keys()):
        a, b = old.get(section), new.get(section)
        if a == b and json.dumps(a, ensure_ascii=False) == json.dumps(b, ensure_ascii=False):
            print(f"{section}: equal")
            continue
        differing += 1
        count = f"{len(a) if isinstance(a, list | dict) else a} → {len(b) if isinstance(b, list | dict) else b}"
        print(f"{section}: DIFFERENT ({count} entries)")
        before = json.dumps(a, ensure_ascii=False, indent=1).splitlines()
        after = json.dumps(b, ensure_ascii=False, indent=1).splitlines()
        diff = list(difflib.unified_diff(before, after, args.reference, args.candidate, n=4, lineterm=""))
        for line in diff[: args.lines]:
            print(line)
        if len(diff) > args.lines:
            print(f"... {len(diff) - args.lines} more diff lines")
    return 1 if differing else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("capture", help="run the scripted sessions and write the normalised capture")
    run.add_argument("--out", required=True, help="the JSON file to write")
    run.add_argument("--home", help="a new or empty folder to work in (default: a temporary folder, then removed)")
    run.add_argument("--keep", action="store_true", help="keep the temporary work folder (its path is logged)")
    run.add_argument("--repo", default=str(ROOT), help="the checkout whose code runs (default: this script's)")
    run.add_argument("--python", default=sys.executable, help="the interpreter with its dependencies")
    run.add_argument("--shared", help="the shared folder with fixtures/docs and eval/ (default: REPO/../shared)")
    run.add_argument(
        "--store", help="folder (default), postgres (a throwaway embedded server) or a postgresql:// URL"
    )
    run.add_argument(
        "--sections", default="help,mcp_tools,cli,mcp", help="comma-separated: help, mcp_tools, cli, mcp (default all)"
    )
    run.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    run.add_argument("--raw", help="also write the capture before normalisation (for `normalise`)")
    again = commands.add_parser("normalise", help="normalise a --raw capture again (after a change of the rules)")
    again.add_argument("raw")
    again.add_argument("--out", required=True)
    diff = commands.add_parser("compare", help="compare two captures: exit 0 when equal, else 1 with a diff")
    diff.add_argument("reference")
    diff.add_argument("candidate")
    diff.add_argument("--lines", type=int, default=300, help="diff lines shown per section (default 300)")
    args = parser.parse_args()
    try:
        if args.command == "normalise":
            raw = json.loads(Path(args.raw).read_text(encoding="utf-8"))
            Path(args.out).write_text(json.dumps(normalise(raw), ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
            return 0
        return capture(args) if args.command == "capture" else compare(args)
    except BrokenPipeError:  # compare … | head
        sys.stderr.close()
        return 1


if __name__ == "__main__":
    sys.exit(main())
