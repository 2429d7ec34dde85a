"""The ``kb`` commands load only what they need: the ones that need no model import neither torch nor transformers,
and ``kb search`` embeds its query without them. Each check runs the commands in a fresh process, as a person does
(the test process itself has long imported everything)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kb_core import KnowledgeBaseService
from kb_core.edges.envelopes import Enveloped
from kb_core.engines.embedding.device import cpu_only_build, torch_build_is_cpu_only
from kb_core.features.results import SearchRequest
from tests.conftest import REPO_ROOT

HEAVY = ("torch", "transformers", "sentence_transformers")

# Runs ``kb ARGV`` for each ARGV given as JSON, in order, in one process; after each, which heavy modules are loaded.
RUNNER = """
import contextlib, io, json, sys
from kb_core.edges.cli.main import main
report = []
for argv in json.loads(sys.argv[1]):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
    report.append({"argv": argv, "code": code, "out": out.getvalue(),
                   "loaded": [m for m in HEAVY if m in sys.modules]})
print(json.dumps(report))
""".replace("HEAVY", repr(HEAVY))


def run_commands(*commands: list[str]) -> list[dict]:
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, json.dumps(list(commands))],
        capture_output=True, text=True, encoding="utf-8", timeout=300, cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def test_commands_that_need_no_model_import_neither_torch_nor_transformers(tmp_path: Path) -> None:
    home = tmp_path / "home"
    session = Enveloped(KnowledgeBaseService(home).session())
    session.create_knowledge_base("notes", 64, embedding_model="hashing")
    session.select_knowledge_base("notes")
    note = tmp_path / "note.txt"
    note.write_text("Hybrid search mixes BM25 and vectors. 混合检索。", encoding="utf-8")
    assert session.import_document([str(note)])["success"]
    session.create_knowledge_base("spare", 64, embedding_model="hashing")
    h = ["--home", str(home)]
    commands = [
        ["--help"], [*h, "list"], [*h, "select", "notes"], [*h, "docs"], [*h, "verify"], [*h, "token", "list"],
        [*h, "export", str(tmp_path / "backup.kbx")], [*h, "delete", "spare"],
    ]
    if torch_build_is_cpu_only():  # elsewhere `kb info` asks torch which accelerators there are, and says so
        commands.append([*h, "info"])
    report = run_commands(*commands)
    for entry in report:
        assert entry["code"] == 0, entry
        assert entry["loaded"] == [], f"kb {' '.join(entry['argv'][2:] or entry['argv'])} loaded {entry['loaded']}"
    listed = next(e for e in report if e["argv"][-1] == "list")["out"]
    assert "notes" in listed and "spare" in listed
    assert (tmp_path / "backup.kbx").stat().st_size > 0
    assert [kb.name for kb in KnowledgeBaseService(home).store.knowledge_bases()] == ["notes"]


@pytest.mark.model
def test_a_cold_kb_search_embeds_its_query_without_torch_and_ranks_as_the_service_does(tmp_path: Path) -> None:
    home = tmp_path / "home"
    session = Enveloped(KnowledgeBaseService(home).session("cli"))
    session.create_knowledge_base("minilm", 64, "all-MiniLM-L6-v2")
    session.select_knowledge_base("minilm")
    texts = {
        "fusion.txt": "Hybrid search adds a weighted BM25 keyword score to the cosine similarity of the vectors.",
        "chunks.txt": "Documents are cut into chunks of at most a few hundred tokens before they are embedded.",
        "cats.txt": "The cat sat on the mat and watched the birds in the garden all afternoon.",
        "检索.txt": "混合检索把关键词得分和向量相似度加权相加。",
    }
    for name, text in texts.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    assert session.import_document([str(tmp_path / n) for n in texts])["success"]
    queries = ["how are keyword and vector scores combined", "猫在垫子上"]
    runs = run_commands(*([["--home", str(home), "--json", "search", q, "--top-k", "4"] for q in queries]))
    for query, entry in zip(queries, runs, strict=True):
        assert entry["code"] == 0 and entry["loaded"] == [], entry
        shown = json.loads(entry["out"])["data"]["chunks"]
        expected = session.search(SearchRequest(query, top_k=4))["data"]["chunks"]
        assert [c["id"] for c in shown] == [c["id"] for c in expected]
        assert [c["score"] for c in shown] == pytest.approx([c["score"] for c in expected], abs=1e-6)


def test_torch_builds_are_told_apart_by_their_version_file() -> None:
    cpu = "__version__ = '2.13.0+cpu'\ndebug = False\ncuda: Optional[str] = None\nhip: Optional[str] = None\n" \
        "xpu: Optional[str] = None\n"
    assert cpu_only_build(cpu)
    assert not cpu_only_build(cpu.replace("cuda: Optional[str] = None", "cuda: Optional[str] = '12.6'"))
    assert not cpu_only_build(cpu.replace("hip: Optional[str] = None", "hip = '6.2.41133'"))
    assert not cpu_only_build("__version__ = '2.13.0'\n")  # unknown: torch is asked
