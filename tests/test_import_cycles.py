"""kb_core has no import cycles, counting imports inside functions (only ``if TYPE_CHECKING:`` blocks are left out:
they never run). A cycle through a function-level import is a run-time dependency the module headers hide."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

PACKAGE = Path(__file__).resolve().parents[1] / "kb_core"


def _load_import_graph() -> ModuleType:
    """benchmarks/import_graph.py: its cycle finder and its layer report (one copy of each)."""
    spec = importlib.util.spec_from_file_location("import_graph", PACKAGE.parent / "benchmarks" / "import_graph.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["import_graph"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


GRAPH = _load_import_graph()


def module_names() -> dict[str, Path]:
    names = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def imported_modules(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The kb_core modules ``name`` imports when it runs, anywhere in its code."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and GRAPH.is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: up from the module's package
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            for alias in node.names:
                if f"{base}.{alias.name}" in known:
                    found.add(f"{base}.{alias.name}")
                elif base in known:
                    found.add(base)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    found.discard(name)
    return found


def test_kb_core_has_no_import_cycles_even_through_function_level_imports() -> None:
    known = module_names()
    graph = {name: imported_modules(name, path, known) for name, path in known.items()}
    assert "kb_core.session.operations" in graph["kb_core.session.service"]  # function-level imports are counted
    assert graph["kb_core.edges.cli.main"], "the walk finds imports"
    assert GRAPH.cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert GRAPH.cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert GRAPH.cycles({"a": {"b"}, "b": set()}) == []


def test_layers_point_down_and_what_is_left_of_28_does_not_grow() -> None:
    """The layer order of #28 (benchmarks/import_graph.py: base → engines → store → features → session → edges),
    type-only imports counted: no cycle, no module without a layer, no private name imported across modules, and
    no upward import. No store-choosing branch is left: the store, chosen once by ``open_store``, answers which half
    of a feature runs (``Store.choose``) and which sink an import commits through (``KBStorage.sink``); no module
    beyond those four imports store/postgres. Features and the session return typed results and raise KBError:
    envelopes are built only at the edges, by ``kb_core.edges.envelopes`` (#38), nothing below the edges reads one, and
    there is one session API (no envelope mirror of it)."""
    report = GRAPH.analyse(PACKAGE.parent)
    assert report["unassigned_modules"] == []
    assert report["cycles_with_type_only"] == []
    assert report["private_imports"] == []
    upward = sorted((u["from"], u["to"]) for u in report["upward_imports"])
    assert upward == [], upward
    builders = set(report["envelope_sites"])
    assert "edges.envelopes" in builders and all(GRAPH.layer_of(f"kb_core.{m}") == "edges" for m in builders), builders
    assert report["enveloped_functions"] == {}, report["enveloped_functions"]
    assert report["operations_api"]["public_methods"] > 30 and report["operations_api"]["returning_envelope"] == 0
    assert report["envelope_reads_below_edges"] == {}, report["envelope_reads_below_edges"]
    assert not report["session_mirror"]
    assert report["store_branch_count"] == 0, report["store_branches"]
    # PostgreSQL code is imported only by the store's protocol and factory and the features' PostgreSQL halves (the
    # service reaches the database through its store).
    outside = sorted(report["postgres_imported_outside_store_postgres"])
    expected = ["features.bundles.postgres", "features.transfer.postgres", "store.base", "store.factory"]
    assert outside == expected, outside


def test_the_layers_are_folders() -> None:
    """#38: a module's layer is the folder it lives in. The layer map names one folder of kb_core per layer (the app's
    files beside the edges), kb_core's top holds only the facade, and every module lives in one layer's folder."""
    in_kb_core = [prefix for _, prefixes in GRAPH.LAYERS for prefix in prefixes if prefix.startswith("kb_core")]
    assert [prefix.count(".") for prefix in in_kb_core] == [1] * len(GRAPH.LAYERS), GRAPH.LAYERS
    for prefix in in_kb_core:
        assert (PACKAGE / prefix.split(".")[1] / "__init__.py").is_file(), prefix
    top = sorted(p.name for p in PACKAGE.iterdir() if p.suffix == ".py" or (p.is_dir() and p.name != "__pycache__"))
    assert top == sorted(["__init__.py", *(prefix.split(".")[1] for prefix in in_kb_core)]), top
    layers = {name: GRAPH.layer_of(name) for name in module_names()}
    assert None not in layers.values(), [name for name, layer in layers.items() if layer is None]
    for name, layer in layers.items():
        if name != "kb_core":
            assert name.split(".")[1] == dict((n, p[0].split(".")[1]) for n, p in GRAPH.LAYERS)[layer], name
