"""The import graph of kb_core and its front ends, measured against the layer order of #28.

    python benchmarks/import_graph.py                 # the report, as text
    python benchmarks/import_graph.py --json          # the same figures as JSON (for before/after tables)
    python benchmarks/import_graph.py --check         # exit 1 on a cycle, an upward import or a private import

Modules: every ``.py`` under ``kb_core/`` and ``pages/``, and ``app.py``. An edge is an import of another of these
modules anywhere in a module's code: at the top, inside functions, and inside ``if TYPE_CHECKING:`` blocks (type-only
edges, which ``tests/test_import_cycles.py`` leaves out; here they count, and are reported apart). ``from
kb_core.store import Home`` is an edge to ``kb_core.store``; ``from kb_core import store`` one to
``kb_core.store``. The parent packages a module import loads implicitly are not edges.

Reported:

* **cycles**: strongly connected components (Tarjan) of the runtime graph and of the graph with type-only edges;
* **upward imports**: edges from a module to a module of a higher layer (:data:`LAYERS`, lowest first:
  base → engines → store → features → session → edges); sideways edges inside a layer are allowed (the cycles
  catch their loops);
* **PostgreSQL outside the store**: modules outside ``kb_core/store/postgres`` that import from it (the store's
  protocol and factory, and the PostgreSQL halves of bundles and transfer);
* **private names across modules**: ``from M import _name`` (and ``import M`` then ``M._name``) where ``M`` is another
  module; also ``x._name`` on an object other than ``self``/``cls`` (reported apart: it may be the module's own type);
* **store-choosing branches**: comparisons of ``…postgres`` with ``None`` (``if service.postgres is not None``,
  ``… if self.postgres is None else …``, ``assert service.postgres is not None``) and ``isinstance(…, Postgres…)``;
* **envelopes**: the places that build one (calls of ``envelope``, ``ok``, ``failure``; ``{"success": …}`` dict
  literals), ``@enveloped`` functions, and reads of ``["success"]`` below the edges (an envelope turned back into
  data or an exception);
* **the session API**: ``Operations``' public methods, how many return an ``Envelope`` (none: envelopes are made at
  the edges, by ``kb_core.edges.envelopes``), and the operations it takes from a feature by name (bundles); whether a
  second session API is back (functions below the edges that return ``Envelope``, as ``Session``'s did);
* **one of each idea**: literal lists of the search modes, and ``0.7``/``0.3`` weight literals.

The layer of a module is the folder it lives in (:data:`LAYERS`: one line per folder, #38); what each folder holds
is in the comment above it.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


# (layer, folders), lowest layer first: a module's layer is the folder it lives in (#38).
#   base      kb_core/base: errors, configuration, argument checks, safe reading of user files and ZIPs, redaction,
#             JSON, rate limits, the message catalogues, and the file primitives (atomic writes, locks, removal,
#             segment file names, versioned files) the store is built on
#   engines   kb_core/engines: algorithms that hold no KB: parsing (and its sandboxed processes), chunking, text
#             analysis, embedding models, BM25 and FAISS indexes, fusion, weights, near-duplicates
#   store     kb_core/store: the folder store and PostgreSQL, their protocol and the factory that chooses one
#   features  kb_core/features: import, search and its narrative, bundles, transfer, kept evaluation runs, the typed
#             results, the protocols features are written against (seams) and who a session acts for (principals)
#   session   kb_core/session: the typed operations (the one session API), the service that opens a home and makes
#             sessions, import jobs, a public demo's visitors, and what drives operations as a front end would
#             (running an evaluation, building the demo KB)
#   edges     kb_core/edges (the kb CLI, the MCP server, envelopes.py: where envelopes are made), app.py and pages/
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("base", ("kb_core.base",)),
    ("engines", ("kb_core.engines",)),
    ("store", ("kb_core.store",)),
    ("features", ("kb_core.features",)),
    ("session", ("kb_core.session",)),
    ("edges", ("kb_core.edges", "pages", "app")),
)
# The package itself is the public facade: an edge.
EXACT = {"kb_core": "edges"}
LAYER_ORDER = {name: position for position, (name, _) in enumerate(LAYERS)}
MODES = frozenset({"hybrid", "semantic", "keyword"})
ENVELOPE_BUILDERS = frozenset({"envelope", "ok", "failure"})


def layer_of(module: str) -> str | None:
    if module in EXACT:
        return EXACT[module]
    best, best_length = None, -1
    for name, prefixes in LAYERS:
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_length:
                best, best_length = name, len(prefix)
    return best


# -- reading the modules ---------------------------------------------------------------------------------------------
def module_files(root: Path) -> dict[str, Path]:
    """Module name → file, for kb_core/, pages/ and app.py under ``root``."""
    found: dict[str, Path] = {}
    for folder in ("kb_core", "pages"):
        for path in sorted((root / folder).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    if (root / "app.py").is_file():
        found["app"] = root / "app.py"
    return found


def is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


@dataclass
class Edge:
    source: str
    target: str
    line: int
    type_only: bool
    names: tuple[str, ...] = ()


@dataclass
class ModuleFacts:
    name: str
    path: Path
    lines: int
    edges: list[Edge] = field(default_factory=list)
    private_imports: list[tuple[int, str, str]] = field(default_factory=list)  # (line, module, name)
    private_attributes: list[tuple[int, str]] = field(default_factory=list)  # (line, "obj._name")
    store_branches: list[tuple[int, str]] = field(default_factory=list)
    envelope_sites: list[tuple[int, str]] = field(default_factory=list)
    enveloped: list[tuple[int, str]] = field(default_factory=list)
    envelope_reads: list[int] = field(default_factory=list)
    envelope_returns: list[tuple[int, str]] = field(default_factory=list)  # (line, function) annotated -> Envelope
    mode_lists: list[int] = field(default_factory=list)
    weight_literals: list[tuple[int, float]] = field(default_factory=list)


def _package_of(name: str, path: Path) -> str:
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def _absolute(module: str | None, level: int, package: str) -> str:
    base = module or ""
    if level:
        parts = package.split(".")
        parts = parts[: len(parts) - level + 1]
        base = ".".join([*parts, base] if base else parts)
    return base


class _Visitor(ast.NodeVisitor):
    def __init__(self, facts: ModuleFacts, known: dict[str, Path]) -> None:
        self.facts, self.known = facts, known
        self.package = _package_of(facts.name, facts.path)
        self.type_only = 0
        self.module_aliases: dict[str, str] = {}  # local name → kb_core module (import x.y as z)
        self.envelope_names: set[str] = set()

    # imports
    def visit_If(self, node: ast.If) -> None:
        if is_type_checking(node):
            self.type_only += 1
            for child in node.body:
                self.visit(child)
            self.type_only -= 1
            for child in node.orelse:
                self.visit(child)
            return
        self._store_branch(node.test)
        self.generic_visit(node)

    def _edge(self, target: str, line: int, names: tuple[str, ...] = ()) -> None:
        if target != self.facts.name:
            self.facts.edges.append(Edge(self.facts.name, target, line, self.type_only > 0, names))

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name in self.known:
                self._edge(alias.name, node.lineno)
                self.module_aliases[alias.asname or alias.name] = alias.name
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = _absolute(node.module, node.level, self.package)
        from_module: list[str] = []
        for alias in node.names:
            full = f"{base}.{alias.name}"
            if full in self.known:  # from kb_core import store: the module store
                self._edge(full, node.lineno)
                self.module_aliases[alias.asname or alias.name] = full
            elif base in self.known:
                from_module.append(alias.name)
                private = alias.name.startswith("_") and not alias.name.startswith("__")
                if private and base != self.facts.name:
                    self.facts.private_imports.append((node.lineno, base, alias.name))
                if base == "kb_core.edges.envelopes" and alias.name in ENVELOPE_BUILDERS:
                    self.envelope_names.add(alias.asname or alias.name)
        if from_module:
            self._edge(base, node.lineno, tuple(from_module))
        self.generic_visit(node)

    # private attributes
    def visit_Attribute(self, node: ast.Attribute) -> None:
        name = node.attr
        if name.startswith("_") and not name.startswith("__"):
            owner = node.value
            if isinstance(owner, ast.Name) and owner.id in self.module_aliases:
                module = self.module_aliases[owner.id]
                if module != self.facts.name:
                    self.facts.private_imports.append((node.lineno, module, name))
            elif not (isinstance(owner, ast.Name) and owner.id in ("self", "cls")):
                self.facts.private_attributes.append((node.lineno, f"{ast.unparse(owner)}.{name}"))
        self.generic_visit(node)

    # store-choosing branches
    def _store_branch(self, test: ast.expr) -> None:
        for node in ast.walk(test):
            if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Is | ast.IsNot):
                left, right = node.left, node.comparators[0]
                if isinstance(right, ast.Constant) and right.value is None and _names_postgres(left):
                    self.facts.store_branches.append((node.lineno, ast.unparse(node)))
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "isinstance"
                and len(node.args) == 2
                and "Postgres" in ast.unparse(node.args[1])
            ):
                self.facts.store_branches.append((node.lineno, ast.unparse(node)))

    def visit_IfExp(self, node: ast.IfExp) -> None:
        self._store_branch(node.test)
        self.generic_visit(node)

    def visit_Assert(self, node: ast.Assert) -> None:
        self._store_branch(node.test)
        self.generic_visit(node)

    def visit_While(self, node: ast.While) -> None:
        self._store_branch(node.test)
        self.generic_visit(node)

    def visit_comprehension(self, node: ast.comprehension) -> None:
        for condition in node.ifs:
            self._store_branch(condition)
        self.generic_visit(node)

    # envelopes
    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        called = func.id if isinstance(func, ast.Name) else None
        builder_module = self.facts.name == "kb_core.edges.envelopes"
        if called in self.envelope_names or (builder_module and called in ENVELOPE_BUILDERS):
            self.facts.envelope_sites.append((node.lineno, f"{called}(…)"))
        self.generic_visit(node)

    def visit_Dict(self, node: ast.Dict) -> None:
        keys = {k.value for k in node.keys if isinstance(k, ast.Constant)}
        if "success" in keys and "message" in keys:
            self.facts.envelope_sites.append((node.lineno, "{'success': …} literal"))
        self._weights(node)
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if isinstance(node.slice, ast.Constant) and node.slice.value == "success":
            self.facts.envelope_reads.append(node.lineno)
        if _is_mode_literal(node):
            self.facts.mode_lists.append(node.lineno)
            self.visit(node.value)  # not the slice: its tuple is this same list
            return
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for decorator in node.decorator_list:
            if ast.unparse(decorator).split(".")[-1] == "enveloped":
                self.facts.enveloped.append((node.lineno, node.name))
        if node.returns is not None and ast.unparse(node.returns) == "Envelope":
            self.facts.envelope_returns.append((node.lineno, node.name))
        for default, argument in zip(
            reversed(node.args.defaults), reversed(node.args.posonlyargs + node.args.args), strict=False
        ):
            self._weight(argument.arg, default)
        for default, argument in zip(node.args.kw_defaults, node.args.kwonlyargs, strict=True):
            if default is not None:
                self._weight(argument.arg, default)
        self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Tuple(self, node: ast.Tuple | ast.List) -> None:
        if _is_mode_literal(node):
            self.facts.mode_lists.append(node.lineno)
        self.generic_visit(node)

    visit_List = visit_Tuple

    # default weights
    def _weight(self, name: str, value: ast.expr | None) -> None:
        if (
            "weight" in name
            and isinstance(value, ast.Constant)
            and isinstance(value.value, float)
            and value.value in (0.7, 0.3)
        ):
            self.facts.weight_literals.append((value.lineno, value.value))

    def _weights(self, node: ast.Dict) -> None:
        for key, value in zip(node.keys, node.values, strict=True):
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                self._weight(key.value, value)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if isinstance(node.target, ast.Name):
            self._weight(node.target.id, node.value)
        self.generic_visit(node)

    def visit_keyword(self, node: ast.keyword) -> None:
        if node.arg:
            self._weight(node.arg, node.value)
        self.generic_visit(node)


def _names_postgres(node: ast.expr) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "postgres") or (
        isinstance(node, ast.Name) and node.id == "postgres"
    )


def _is_mode_literal(node: ast.AST) -> bool:
    if isinstance(node, ast.Tuple | ast.List):
        values = node.elts
    elif isinstance(node, ast.Subscript) and ast.unparse(node.value).endswith("Literal"):
        values = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
    else:
        return False
    strings = {v.value for v in values if isinstance(v, ast.Constant) and isinstance(v.value, str)}
    return len(values) == 3 and strings == MODES


def read_modules(root: Path) -> dict[str, ModuleFacts]:
    known = module_files(root)
    facts: dict[str, ModuleFacts] = {}
    for name, path in known.items():
        source = path.read_text(encoding="utf-8")
        module = ModuleFacts(name, path, len(source.splitlines()))
        _Visitor(module, known).visit(ast.parse(source))
        facts[name] = module
    return facts


# -- graph algorithms ------------------------------------------------------------------------------------------------
def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def graph_of(facts: dict[str, ModuleFacts], *, type_only: bool) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {name: set() for name in facts}
    for module in facts.values():
        for edge in module.edges:
            if type_only or not edge.type_only:
                graph[module.name].add(edge.target)
    return graph


def cycle_edges(component: list[str], facts: dict[str, ModuleFacts]) -> list[Edge]:
    """The edges inside one cycle, type-only ones marked, so a report says which import to remove."""
    members = set(component)
    seen: set[tuple[str, str, bool]] = set()
    edges = []
    for name in component:
        for edge in facts[name].edges:
            key = (edge.source, edge.target, edge.type_only)
            if edge.target in members and key not in seen:
                seen.add(key)
                edges.append(edge)
    return edges


# -- the report ------------------------------------------------------------------------------------------------------
def short(module: str) -> str:
    return module.removeprefix("kb_core.")


def analyse(root: Path) -> dict[str, Any]:
    facts = read_modules(root)
    runtime_cycles = cycles(graph_of(facts, type_only=False))
    all_cycles = cycles(graph_of(facts, type_only=True))
    upward: list[dict[str, Any]] = []
    seen_upward: set[tuple[str, str]] = set()
    postgres_users: dict[str, list[str]] = defaultdict(list)
    for module in facts.values():
        for edge in module.edges:
            source_layer, target_layer = layer_of(edge.source), layer_of(edge.target)
            judged = source_layer is not None and target_layer is not None
            if (
                judged
                and LAYER_ORDER[target_layer] > LAYER_ORDER[source_layer]  # type: ignore[index]
                and (edge.source, edge.target) not in seen_upward
            ):
                seen_upward.add((edge.source, edge.target))
                upward.append(
                    {
                        "from": short(edge.source),
                        "from_layer": source_layer,
                        "to": short(edge.target),
                        "to_layer": target_layer,
                        "line": edge.line,
                        "type_only": all(
                            e.type_only for e in module.edges if e.target == edge.target
                        ),
                    }
                )
            if edge.target.startswith("kb_core.store.postgres") and not edge.source.startswith(
                "kb_core.store.postgres"
            ):
                label = short(edge.target)
                if label not in postgres_users[short(edge.source)]:
                    postgres_users[short(edge.source)].append(label)
    private = [
        {"module": short(m.name), "line": line, "from": short(source), "name": name}
        for m in facts.values()
        for line, source, name in m.private_imports
    ]
    branches = {short(m.name): [text for _, text in m.store_branches] for m in facts.values() if m.store_branches}
    envelope_sites = {short(m.name): len(m.envelope_sites) for m in facts.values() if m.envelope_sites}
    enveloped = {short(m.name): len(m.enveloped) for m in facts.values() if m.enveloped}
    envelope_reads = {
        short(m.name): len(m.envelope_reads)
        for m in facts.values()
        if m.envelope_reads and layer_of(m.name) not in ("edges", None)
    }
    # A second session API: functions answering envelopes below the edges (the Session of before #38), by their
    # declared return type.
    session_mirror = any(m.envelope_returns for m in facts.values() if layer_of(m.name) not in ("edges", None))
    operations_api = session_methods(facts.get("kb_core.session.operations"), "Operations")
    layer_lines: Counter[str] = Counter()
    layer_modules: Counter[str] = Counter()
    for m in facts.values():
        layer_lines[layer_of(m.name) or "unassigned"] += m.lines
        layer_modules[layer_of(m.name) or "unassigned"] += 1
    return {
        "root": str(root),
        "modules": len(facts),
        "lines": sum(m.lines for m in facts.values()),
        "layers": {
            name: {"modules": layer_modules[name], "lines": layer_lines[name]}
            for name in [*(name for name, _ in LAYERS), "unassigned"]
        },
        "unassigned_modules": sorted(short(m) for m in facts if layer_of(m) is None),
        "edges": sum(len({e.target for e in m.edges}) for m in facts.values()),
        "type_only_edges": sum(
            len({e.target for e in m.edges if e.type_only} - {e.target for e in m.edges if not e.type_only})
            for m in facts.values()
        ),
        "cycles_runtime": [[short(n) for n in c] for c in runtime_cycles],
        "cycles_with_type_only": [
            {
                "modules": [short(n) for n in component],
                "edges": [
                    f"{short(e.source)} -> {short(e.target)}{' (type-only)' if e.type_only else ''}"
                    for e in cycle_edges(component, facts)
                ],
            }
            for component in all_cycles
        ],
        "upward_imports": sorted(upward, key=lambda u: (u["from"], u["to"])),
        "postgres_imported_outside_store_postgres": dict(sorted(postgres_users.items())),
        "private_imports": sorted(private, key=lambda p: (p["module"], p["line"])),
        "private_attributes_of_other_objects": {
            short(m.name): sorted({text for _, text in m.private_attributes})
            for m in facts.values()
            if m.private_attributes
        },
        "store_branches": dict(sorted(branches.items(), key=lambda kv: (-len(kv[1]), kv[0]))),
        "store_branch_count": sum(len(v) for v in branches.values()),
        "envelope_sites": dict(sorted(envelope_sites.items(), key=lambda kv: (-kv[1], kv[0]))),
        "enveloped_functions": dict(sorted(enveloped.items(), key=lambda kv: (-kv[1], kv[0]))),
        "envelope_reads_below_edges": dict(sorted(envelope_reads.items(), key=lambda kv: (-kv[1], kv[0]))),
        "session_mirror": session_mirror,
        "operations_api": operations_api,
        "mode_lists": {short(m.name): m.mode_lists for m in facts.values() if m.mode_lists},
        "weight_literals": {
            short(m.name): [f"{line}: {value}" for line, value in m.weight_literals]
            for m in facts.values()
            if m.weight_literals
        },
    }


def session_methods(module: ModuleFacts | None, class_name: str = "Operations") -> dict[str, Any]:
    if module is None:
        return {}
    tree = ast.parse(module.path.read_text(encoding="utf-8"))
    session = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name), None)
    if session is None:
        return {}
    public = [
        n
        for n in session.body
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
        and not n.name.startswith("_")
        and not any(ast.unparse(d) == "property" for d in n.decorator_list)
    ]
    returns = Counter(ast.unparse(n.returns) if n.returns else "(none)" for n in public)
    aliases = [  # ``get_ontology = bundles.get_ontology``: an operation declared once, in a feature
        t.id
        for n in session.body
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Attribute)
        for t in n.targets
        if isinstance(t, ast.Name) and not t.id.startswith("_")
    ]
    return {
        "public_methods": len(public),
        "taken_from_features": len(aliases),
        "returning_envelope": returns.get("Envelope", 0),
        "returns": dict(returns.most_common()),
    }


def print_report(report: dict[str, Any]) -> None:
    def heading(text: str) -> None:
        print(f"\n## {text}")

    print(f"import graph of {report['root']}: {report['modules']} modules, {report['lines']:,} lines, "
          f"{report['edges']} module edges ({report['type_only_edges']} type-only)")
    for name, figures in report["layers"].items():
        print(f"  {name:10} {figures['modules']:4} modules {figures['lines']:7,} lines")
    if report["unassigned_modules"]:
        print(f"  unassigned (give them a layer in LAYERS): {', '.join(report['unassigned_modules'])}")
    heading(f"cycles without type-only imports: {len(report['cycles_runtime'])}")
    for component in report["cycles_runtime"]:
        print("  {" + ", ".join(component) + "}")
    heading(f"cycles counting type-only imports: {len(report['cycles_with_type_only'])}")
    for cycle in report["cycles_with_type_only"]:
        print("  {" + ", ".join(cycle["modules"]) + "}")
        for edge in cycle["edges"]:
            print(f"      {edge}")
    upward = report["upward_imports"]
    heading(f"upward imports: {len(upward)} ({sum(1 for u in upward if u['type_only'])} type-only)")
    for u in upward:
        note = " (type-only)" if u["type_only"] else ""
        print(f"  {u['from']} [{u['from_layer']}] -> {u['to']} [{u['to_layer']}] line {u['line']}{note}")
    users = report["postgres_imported_outside_store_postgres"]
    heading(f"modules outside store/postgres importing it: {len(users)}")
    for module, targets in users.items():
        print(f"  {module}: {', '.join(targets)}")
    private = report["private_imports"]
    heading(f"private names imported across modules: {len(private)}")
    for p in private:
        print(f"  {p['module']}:{p['line']} {p['from']}.{p['name']}")
    attributes = report["private_attributes_of_other_objects"]
    heading(
        f"private attributes read on other objects: {sum(len(v) for v in attributes.values())} in "
        f"{len(attributes)} modules (some are the module's own types)"
    )
    for module, names in attributes.items():
        print(f"  {module}: {', '.join(names)}")
    branches = report["store_branches"]
    heading(f"store-choosing branches: {report['store_branch_count']} in {len(branches)} modules")
    for module, texts in branches.items():
        print(f"  {len(texts):3} {module}")
    heading(f"envelope construction sites: {sum(report['envelope_sites'].values())}")
    for module, count in report["envelope_sites"].items():
        print(f"  {count:3} {module}")
    heading(f"@enveloped functions: {sum(report['enveloped_functions'].values())}")
    for module, count in report["enveloped_functions"].items():
        print(f"  {count:3} {module}")
    heading(f"envelope reads ([\"success\"]) below the edges: {sum(report['envelope_reads_below_edges'].values())}")
    for module, count in report["envelope_reads_below_edges"].items():
        print(f"  {count:3} {module}")
    typed = report.get("operations_api") or {}
    if typed:  # the one session API (#38): typed requests in, results out, KBError raised; no envelope
        methods, enveloping = typed.get("public_methods"), typed.get("returning_envelope")
        heading(
            f"the session API, Operations: {methods} public methods, {enveloping} return Envelope, "
            f"{typed.get('taken_from_features')} taken from a feature by name"
        )
        print("  " + ", ".join(f"{count} -> {annotation}" for annotation, count in typed.get("returns", {}).items()))
    print(f"  a second session API (functions below the edges that return Envelope): "
          f"{'present' if report['session_mirror'] else 'none'}")
    heading(f"literal lists of the search modes: {sum(len(v) for v in report['mode_lists'].values())}")
    for module, lines in report["mode_lists"].items():
        print(f"  {module}: lines {', '.join(map(str, lines))}")
    heading(f"0.7 / 0.3 weight literals: {sum(len(v) for v in report['weight_literals'].values())}")
    for module, found in report["weight_literals"].items():
        print(f"  {module}: {', '.join(found)}")


def problems(report: dict[str, Any]) -> list[str]:
    """What --check refuses: the Done-when of #28."""
    found = []
    if report["unassigned_modules"]:
        found.append(f"{len(report['unassigned_modules'])} module(s) of no layer")
    if report["cycles_with_type_only"]:
        found.append(f"{len(report['cycles_with_type_only'])} import cycle(s), type-only imports counted")
    if report["upward_imports"]:
        found.append(f"{len(report['upward_imports'])} upward import(s)")
    if report["private_imports"]:
        found.append(f"{len(report['private_imports'])} private name(s) imported across modules")
    if report["store_branch_count"]:
        found.append(f"{report['store_branch_count']} store-choosing branch(es)")
    if report["session_mirror"]:
        found.append("a second session API (methods returning Envelope below the edges) beside Operations")
    return found


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout to read (default: this script's)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument(
        "--check", action="store_true", help="exit 1 on a cycle, upward import, private import or store branch"
    )
    args = parser.parse_args(list(argv) if argv is not None else None)
    report = analyse(args.root.resolve())
    if args.json:
        print(json.dumps(report, ensure_ascii=False, indent=1))
    else:
        print_report(report)
    if args.check:
        found = problems(report)
        if found:
            print("\ncheck failed: " + "; ".join(found), file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
