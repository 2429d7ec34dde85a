"""The graph of one knowledge base: versioned, atomically replaced state files plus a shadow export.

Layout under the KB folder::

    graph/
      state-000000000007.json  one complete state per version: ontology, nodes, edges; the highest
                               complete version is the truth (written via temp file + fsync + link,
                               like the KB manifests, so a commit is all or nothing)
      write.lock               bundle imports and ontology changes of this KB serialise here
      shadow/                  readable export of the newest state, rebuilt after every commit:
        ontology.json
        nodes/TYPE.jsonl       one bundle item per line, sorted by identity, keys sorted
        edges/TYPE.jsonl
        shadow.json            version and counts, written last

A node is ``{id, type, identity, properties, doc_id, doc_name, text_sha256}``; ``doc_id`` names the
indexed document holding its searchable text (None for nodes without indexed text). An edge is
``{id, type, source, target, properties}`` with node ids as endpoints. Node and edge ids derive
from type plus identity (see :func:`kb_core.features.bundles.validation.node_id`), so they are the same in
every KB and after a rebuild from the shadow export.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kb_core.base.atomic import (
    fsync_directory,
    read_json,
    remove_stale_temporaries,
    write_bytes_atomically,
    write_json_atomically,
)
from kb_core.base.errors import StoreError
from kb_core.base.json_text import json_text
from kb_core.base.locking import writer_lock
from kb_core.base.removal import remove_tree
from kb_core.base.versioned import VersionedJSON
from kb_core.features.bundles.ontology import Ontology, default_ontology, parse_ontology

logger = logging.getLogger(__name__)

STATES_KEPT = 3


@dataclass
class GraphState:
    version: int
    ontology: Ontology
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    edges: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "ontology": self.ontology.to_json(),
            "nodes": [self.nodes[k] for k in sorted(self.nodes)],
            "edges": [self.edges[k] for k in sorted(self.edges)],
        }

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> GraphState:
        return cls(
            version=int(value["version"]),
            ontology=parse_ontology(value["ontology"]),
            nodes={n["id"]: n for n in value["nodes"]},
            edges={e["id"]: e for e in value["edges"]},
        )

    def copy(self) -> GraphState:
        return GraphState(
            self.version,
            self.ontology,
            {k: dict(v) for k, v in self.nodes.items()},
            {k: dict(v) for k, v in self.edges.items()},
        )

    def edges_of(self, node: str) -> list[dict[str, Any]]:
        return [e for e in self.edges.values() if e["source"] == node or e["target"] == node]


class GraphStore:
    def __init__(self, kb_root: Path) -> None:
        self.root = kb_root / "graph"
        self._states = VersionedJSON(self.root, prefix="state-")

    def _state_path(self, version: int) -> Path:
        return self._states.path(version)

    def versions(self) -> list[int]:
        try:
            return self._states.versions()
        except FileNotFoundError:
            return []

    def load(self) -> GraphState:
        """The newest committed state; an empty graph with the default ontology if none yet."""
        newest = self._states.newest(
            GraphState.from_json, lambda version: f"Graph state {version} in {self.root}", self.versions()
        )
        return newest if newest is not None else GraphState(version=0, ontology=default_ontology())

    @contextmanager
    def lock(self) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True)
        with writer_lock(self.root / "write.lock"):
            remove_stale_temporaries(self.root)
            yield

    def commit(self, state: GraphState) -> GraphState:
        """Write ``state`` as the next version (call under :meth:`lock`). The link is the commit point."""
        current = self.versions()
        version = (current[-1] if current else 0) + 1
        committed = GraphState(version, state.ontology, state.nodes, state.edges)
        self._states.write(version, committed.to_json())
        self._states.prune([*current, version], STATES_KEPT + 1)
        return committed

    # -- shadow export -------------------------------------------------------------------------
    def export_shadow(self, state: GraphState, target: Path | None = None) -> Path:
        """Write the deterministic text export of ``state``; returns its folder."""
        folder = target or self.root / "shadow"
        write_shadow(state, folder)
        return folder


def node_item(node: dict[str, Any]) -> dict[str, Any]:
    """A node as the bundle item that recreates it."""
    return {"type": node["type"], **node["properties"]}


def edge_item(edge: dict[str, Any], state: GraphState) -> dict[str, Any]:
    return {
        "type": edge["type"],
        "source": state.nodes[edge["source"]]["identity"],
        "target": state.nodes[edge["target"]]["identity"],
        **edge["properties"],
    }


def _jsonl(rows: list[dict[str, Any]]) -> bytes:
    return "".join(json_text(r, sort_keys=True) + "\n" for r in rows).encode("utf-8")


def _key(identity: dict[str, Any]) -> str:
    return json_text(identity, sort_keys=True)


def write_shadow(state: GraphState, folder: Path) -> None:
    """One JSONL file per type, each line a bundle item, sorted by identity: byte-identical for equal graphs."""
    for sub in ("nodes", "edges"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    wanted: dict[Path, bytes] = {}
    by_type: dict[tuple[str, str], list[tuple[str, dict[str, Any]]]] = {}
    for node in state.nodes.values():
        by_type.setdefault(("nodes", node["type"]), []).append((_key(node["identity"]), node_item(node)))
    for edge in state.edges.values():
        item = edge_item(edge, state)
        key = _key(item["source"]) + "\x00" + _key(item["target"])
        by_type.setdefault(("edges", edge["type"]), []).append((key, item))
    for (sub, type_name), rows in by_type.items():
        wanted[folder / sub / f"{type_name}.jsonl"] = _jsonl([r for _, r in sorted(rows, key=lambda r: r[0])])
    for sub in ("nodes", "edges"):
        for stale in (folder / sub).glob("*.jsonl"):
            if stale not in wanted:
                stale.unlink()
        remove_stale_temporaries(folder / sub)
    for path, data in wanted.items():
        if not path.exists() or path.read_bytes() != data:
            write_bytes_atomically(path, data, mode=0o644)
    write_json_atomically(folder / "ontology.json", state.ontology.to_json())
    summary = {"graph_version": state.version, "nodes": len(state.nodes), "edges": len(state.edges)}
    write_json_atomically(folder / "shadow.json", summary)
    fsync_directory(folder)


def read_shadow(folder: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The ontology and the bundle items (nodes first, then edges) of a shadow export."""
    if not (folder / "ontology.json").is_file():
        raise StoreError(f"{folder} is not a shadow export: ontology.json is missing.")
    ontology = read_json(folder / "ontology.json")
    items: list[dict[str, Any]] = []
    for sub in ("nodes", "edges"):
        for path in sorted((folder / sub).glob("*.jsonl")):
            with open(path, encoding="utf-8") as handle:
                items.extend(json.loads(line) for line in handle if line.strip())
    return ontology, items


def remove_graph(kb_root: Path) -> None:
    remove_tree(kb_root / "graph", within=kb_root)
