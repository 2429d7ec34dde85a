"""The tools that prove a refactor changed no behaviour (#28): the import-graph report finds each kind of problem in a
small package written for the test, and the snapshot's normaliser makes two runs' answers equal while keeping what
differs in substance. (Running the whole capture takes minutes: it is run by hand, see the script's docstring.)"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from tests.conftest import REPO_ROOT


def load(script: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(script, REPO_ROOT / "benchmarks" / f"{script}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[script] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def write(root: Path, files: dict[str, str]) -> None:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_the_import_graph_report_finds_type_only_cycles_upward_and_private_imports_and_store_branches(
    tmp_path: Path,
) -> None:
    graph = load("import_graph")
    write(
        tmp_path,
        {
            "kb_core/__init__.py": "",
            "kb_core/base/errors.py": "class KBError(Exception): ...\n",
            "kb_core/store/__init__.py": "",
            "kb_core/store/reader.py": (
                "from __future__ import annotations\n"
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n"
                "    from kb_core.session.operations import Operations\n"  # type-only, upward, and closes a cycle
                "def _hidden() -> None: ...\n"
            ),
            "kb_core/session/operations.py": (
                "from kb_core.store.reader import _hidden\n"  # a private name from another module
                "from kb_core.edges.envelopes import ok\n"
                "class Operations:\n"
                "    def find(self, service) -> dict:\n"
                "        if service.postgres is not None:\n"
                "            return ok('m', 1)\n"
                "        return {'success': True, 'message': 'm', 'data': None}\n"
            ),
            "kb_core/edges/envelopes.py": "def ok(message, data):\n    return {'success': True, 'message': message}\n",
            "kb_core/brand_new.py": "import kb_core.base.errors\n",
            # a second session API: envelopes answered below the edges (Session before #38)
            "kb_core/session/mirror.py": "class Session:\n    def search(self, query) -> Envelope: ...\n",
        },
    )
    report = graph.analyse(tmp_path)
    assert report["cycles_runtime"] == []
    assert [c["modules"] for c in report["cycles_with_type_only"]] == [["session.operations", "store.reader"]]
    upward = {(u["from"], u["to"], u["type_only"]) for u in report["upward_imports"]}
    assert ("store.reader", "session.operations", True) in upward  # store → session
    assert ("session.operations", "edges.envelopes", False) in upward  # after #38 only the edges build envelopes
    assert report["private_imports"] == [
        {"module": "session.operations", "line": 1, "from": "store.reader", "name": "_hidden"}
    ]
    assert report["store_branch_count"] == 1 and list(report["store_branches"]) == ["session.operations"]
    assert report["envelope_sites"]["session.operations"] == 2  # the ok(...) call and the dict literal
    assert report["unassigned_modules"] == ["brand_new"]
    assert report["session_mirror"]
    assert graph.problems(report)  # --check fails


def test_the_import_graph_report_passes_a_package_whose_layers_point_down(tmp_path: Path) -> None:
    graph = load("import_graph")
    write(
        tmp_path,
        {
            "kb_core/__init__.py": "",
            "kb_core/base/errors.py": "",
            "kb_core/store/__init__.py": "from kb_core.base.errors import *\n",
            "kb_core/features/retrieval/search.py": "from kb_core.store import *\n",
            "kb_core/session/operations.py": "from kb_core.features.retrieval import search\n",
            "kb_core/edges/cli/main.py": "def main():\n    from kb_core.session.operations import Operations\n",
        },
    )
    report = graph.analyse(tmp_path)
    assert graph.problems(report) == []
    assert report["edges"] == 4


def test_the_snapshot_normaliser_names_ids_by_first_appearance_and_hides_times_paths_and_secrets(
    tmp_path: Path,
) -> None:
    snapshot = load("behaviour_snapshot")
    work = tmp_path / "kb-snapshot-abcdefgh"

    def run(kb: str, chunk: str, token: str, when: str) -> object:
        normaliser = snapshot.Normaliser()
        normaliser.add_path(work, "<work>")
        return normaliser.value(
            {
                "message": f"Created {kb} at {when}; token {token}",
                "data": {
                    "chunks": [{"id": chunk, "kb_id": kb, "path": str(work / "files" / "a.txt")}, {"id": chunk}],
                    "seconds": 1.25,
                    "score": 0.8312,
                    "name": "report_20261121-153000.docx",
                },
            }
        )

    first = run("kb_0123456789abcdef", "chk_aaaaaaaaaaaaaaaa", "kbt_" + "A" * 43, "2026-11-26T04:11:36.123Z")
    second = run("kb_fedcba9876543210", "chk_bbbbbbbbbbbbbbbb", "kbt_" + "b" * 43, "2026-12-01T23:59:59.999Z")
    assert first == second
    assert first == {
        "message": "Created <kb-1> at <time>; token <token-1>",
        "data": {
            "chunks": [{"id": "<chk-1>", "kb_id": "<kb-1>", "path": "<work>/files/a.txt"}, {"id": "<chk-1>"}],
            "seconds": "<seconds>",
            "score": 0.8312,  # scores are kept: a changed score is a changed behaviour
            "name": "report_<stamp>.docx",
        },
    }
    exported = "to <work>/all.kbx (328795 bytes). Size: 18.0 KB (18432 bytes)"
    assert snapshot.Normaliser().text(exported) == "to <work>/all.kbx (<size> bytes). Size: 18.0 KB (18432 bytes)"
    # two different ids in one run stay apart
    normaliser = snapshot.Normaliser()
    assert normaliser.text("doc_0000000000000001 doc_0000000000000002 doc_0000000000000001") == (
        "<doc-1> <doc-2> <doc-1>"
    )


def test_the_snapshot_normaliser_hides_the_seconds_column_of_an_evaluation_table_only() -> None:
    snapshot = load("behaviour_snapshot")
    table = (
        "setting     nDCG@10    queries    seconds\n"
        "--------  ---------  ---------  ---------\n"
        "keyword      0.9786        225        {}\n"
        "kept as run 7 (compare runs with: kb eval-compare RUN_A RUN_B)\n"
        "queries 12"
    )
    fast, slow = (snapshot.Normaliser().lines(table.format(t)) for t in ("4.7", "12.25"))
    assert fast == slow
    assert fast[2] == "keyword      0.9786        225 <seconds>"  # the other figures are kept
    assert fast[3:] == ["kept as run 7 (compare runs with: kb eval-compare RUN_A RUN_B)", "queries 12"]


def test_on_postgresql_documents_created_in_the_same_millisecond_are_put_in_name_order_and_only_there() -> None:
    snapshot = load("behaviour_snapshot")
    same, later = "2026-11-26T04:11:36.123Z", "2026-11-26T04:11:36.124Z"
    listed = {"documents": [{"name": "b.doc", "created_at": same}, {"name": "c.txt", "created_at": later},
                            {"name": "a.docx", "created_at": same}]}
    on_postgres = snapshot.Normaliser(document_ties=True).value(listed)["documents"]
    assert [d["name"] for d in on_postgres] == ["a.docx", "b.doc", "c.txt"]  # ties by name, created_at first
    folder = snapshot.Normaliser().value(listed)["documents"]
    assert [d["name"] for d in folder] == ["b.doc", "c.txt", "a.docx"]  # the folder store's order is kept
    message = "Document 'x' is not in knowledge base 'K'. Documents: 'zeta.txt', 'alpha.doc'."
    assert snapshot.Normaliser(document_ties=True).text(message).endswith("Documents: 'alpha.doc', 'zeta.txt'.")
    eleven = "Documents: " + ", ".join(f"'{n}.txt'" for n in range(10)) + " …."
    shown = snapshot.Normaliser(document_ties=True).text(eleven)
    assert shown == "Documents: <the first ten in the database's order> …."
    assert snapshot.Normaliser().text(eleven) == eleven
    table = [
        "name      status    updated (UTC)",
        "--------  --------  -------------------",
        "z.doc     failed    2026-11-26 04:13:45",
        "a.doc     failed    2026-11-26 04:13:45",
        "m.doc     ready     2026-11-26 04:13:44",
    ]
    assert snapshot.Normaliser(document_ties=True).lines("\n".join(table))[2:] == [
        "a.doc     failed    <time>",
        "z.doc     failed    <time>",
        "m.doc     ready     <time>",
    ]
