"""Knowledge-bundle operations on a session: schema, import, ontology, nodes, search expansion.

Each function takes the session's operations (a :class:`kb_core.features.seams.Scope`), returns a typed result of
:mod:`kb_core.features.results` and raises KBError; where the spec prescribes a result shape (``get_knowledge_schema``:
``{full_bundle_schema, example_yaml}``; ``import_knowledge_bundle``: ``{status, stats}``) that shape is the result's
``to_json()``, the envelope's ``data`` at the edges.

Import guarantees. A bundle is parsed under limits, validated completely (schema of every item,
then types and edge endpoints), and refused as a whole with every error (up to a cap) and nothing
changed; the temp file is then kept so the agent can fix and retry. An accepted bundle is applied
under the KB's graph lock in two commits: first the search indexes (one KB-store commit that adds
the new texts and tombstones the replaced and deleted ones), then the graph (one atomically linked
state file). If the graph commit fails, the index change is rolled back by syncing the indexes to
the old graph. If the process dies between the two commits, search briefly shows the new texts
while the graph is the old one; ``kb verify`` reports it, and the next bundle import (or
:func:`repair_index`, which ``kb verify --repair`` runs) re-syncs the indexes to the graph, which is the
source of truth. Deleting a node deletes its edges (counted as
``edges_cascaded``). Within a bundle, node items are applied first, then edge items, each in file
order (later items win), so an edge may name a node defined further down. Deleting something that
does not exist is not an error.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kb_core.base.errors import ImportFormatError, InvalidArgument, ItemNotFound, PermissionDenied, QuotaExceeded
from kb_core.base.i18n import msg
from kb_core.base.safe_files import OpenedFile, UnusablePath, open_input_file, reject_nul, require_inside
from kb_core.features.bundles.graph import GraphState, GraphStore, read_shadow
from kb_core.features.bundles.indexing import sync_index
from kb_core.features.bundles.loading import BundleLimits, load_bundle_file, load_bundle_handle, load_bundle_text
from kb_core.features.bundles.ontology import Ontology, parse_ontology
from kb_core.features.bundles.schema import bundle_schema, example_yaml
from kb_core.features.bundles.validation import (
    BundleError,
    BundleValidator,
    EdgeOp,
    NodeOp,
    check_endpoints,
    edge_id,
    node_id,
)
from kb_core.features.results import (
    BundleImported,
    GraphView,
    IndexRepaired,
    Item,
    KnowledgeSchema,
    OntologyInfo,
    OntologySet,
    ShadowExported,
)
from kb_core.features.seams import Scope
from kb_core.store import KnowledgeBaseRecord

if TYPE_CHECKING:
    from kb_core.store.base import Database

logger = logging.getLogger(__name__)

BUNDLE_INVALID = "BUNDLE_INVALID"
MAX_NEIGHBOURS = 100


def graph_store(session: Scope, record: KnowledgeBaseRecord) -> GraphStore:
    service = session.service

    def in_database(database: Database) -> GraphStore:
        from kb_core.features.bundles.postgres import PostgresGraphStore

        # the graph and its documents commit in one database transaction
        return PostgresGraphStore(service, record, database)  # type: ignore[return-value]

    return service.store.choose(folder=lambda: GraphStore(service.kb_store(record.id).root), postgres=in_database)


# -- schema and ontology ------------------------------------------------------------------------------
def get_knowledge_schema(session: Scope, kb_name: str | None = None) -> KnowledgeSchema:
    """The spec's ``{full_bundle_schema, example_yaml}`` for the KB's ontology."""
    record = session.resolve_kb(kb_name)
    ontology = graph_store(session, record).load().ontology
    return KnowledgeSchema(
        msg(
            "Knowledge bundle schema of '{name}': {nodes} node type(s), {edges} edge type(s).",
            name=record.name, nodes=len(ontology.nodes), edges=len(ontology.edges),
        ),
        bundle_schema(ontology),
        example_yaml(ontology),
    )


def get_ontology(session: Scope, kb_name: str | None = None) -> OntologyInfo:
    record = session.resolve_kb(kb_name)
    state = graph_store(session, record).load()
    return OntologyInfo(
        msg(
            "Ontology of '{name}': node types {nodes}; edge types {edges}.",
            name=record.name,
            nodes=", ".join(state.ontology.nodes),
            edges=", ".join(state.ontology.edges) or msg("none"),
        ),
        record.name,
        state.ontology.to_json(),
        len(state.nodes),
        len(state.edges),
    )


def _read_ontology_source(session: Scope, source: str | Path | Mapping[str, Any]) -> Any:
    if isinstance(source, Mapping):
        return dict(source)
    if isinstance(source, str) and "\n" in source:
        return load_bundle_text(source)  # YAML or JSON text pasted in the app
    if not session.principal.server_paths:
        raise PermissionDenied(
            msg("Files on the server are off in this demo; paste the ontology as YAML or JSON text.")
        )
    path = Path(str(source)).expanduser()
    allowed = getattr(session, "allowed_dirs", None)
    if allowed is not None:  # a confined session reads only inside its folders, and says nothing of other paths
        require_inside(str(source), Path(os.path.realpath(path)), allowed)
    if not path.is_file():
        raise InvalidArgument(
            msg("Ontology file {path!r} does not exist.", path=str(source)), details={"path": str(source)}
        )
    return load_bundle_file(path)


def set_ontology(session: Scope, source: str | Path | Mapping[str, Any], kb_name: str | None = None) -> OntologySet:
    """Replace the KB's ontology (a YAML/JSON file path, YAML text, or a mapping).

    Refused, with nothing changed, if the ontology is invalid or an existing node or edge would not
    conform to it. Changed indexed fields re-index the affected nodes.
    """
    record = session.writable_kb(kb_name, msg("change the ontology of"))
    ontology = parse_ontology(_read_ontology_source(session, source))
    store = graph_store(session, record)
    with store.lock():
        state = store.load()
        errors = _conformance_errors(state, ontology)
        if errors:
            raise InvalidArgument(
                msg(
                    "The new ontology does not fit {count} existing node(s)/edge(s); nothing was changed:\n{errors}",
                    count=len(errors), errors="\n".join(errors[:20]),
                ),
                details={"errors": errors[:50]},
            )
        new = GraphState(state.version, ontology, {k: dict(v) for k, v in state.nodes.items()}, dict(state.edges))
        index_stats = sync_index(session.service, record, new)
        committed = _commit_graph(session, record, store, state, new)
    return OntologySet(
        msg("Set the ontology of '{name}'.", name=record.name),
        {"kb_name": record.name, "ontology": ontology.to_json(), "graph_version": committed.version, **index_stats},
    )


def _conformance_errors(state: GraphState, ontology: Ontology) -> list[str]:
    from kb_core.features.bundles.graph import edge_item, node_item

    validator = BundleValidator(ontology, max_errors=50, max_value_chars=None)  # the data was accepted already
    errors: list[str] = []
    for node in state.nodes.values():
        if node["type"] not in ontology.nodes:
            errors.append(f"node {node['id']}: type '{node['type']}' is not in the new ontology")
            continue
        if tuple(ontology.nodes[node["type"]].identity) != tuple(node["identity"]):
            errors.append(f"node {node['id']}: the identity fields of '{node['type']}' changed")
    for edge in state.edges.values():
        spec = ontology.edges.get(edge["type"])
        if spec is None:
            errors.append(f"edge {edge['id']}: type '{edge['type']}' is not in the new ontology")
        elif (spec.source, spec.target) != (
            state.nodes[edge["source"]]["type"],
            state.nodes[edge["target"]]["type"],
        ):
            errors.append(f"edge {edge['id']}: '{edge['type']}' now connects {spec.source} → {spec.target}")
    if errors:
        return errors
    items = [node_item(n) for n in state.nodes.values()] + [edge_item(e, state) for e in state.edges.values()]
    _, _, problems = validator.structural(items)
    return [p.text for p in problems]


def _commit_graph(
    session: Scope, record: KnowledgeBaseRecord, store: GraphStore, old: GraphState, new: GraphState
) -> GraphState:
    """Commit the graph after its index commit; on failure sync the indexes back to ``old``."""
    try:
        committed = store.commit(new)
    except BaseException:
        try:
            sync_index(session.service, record, old.copy())
        except Exception:
            logger.exception("rolling back the index of %s failed; the next bundle import repairs it", record.name)
        raise
    try:
        store.export_shadow(committed)
    except Exception:  # the graph is committed; the export is rewritten after the next commit
        logger.exception("shadow export of %s failed", record.name)
    return committed


# -- import ---------------------------------------------------------------------------------------------
def _refusal(errors: list[BundleError], path: Path, total_items: int | None) -> ImportFormatError:
    lines = "\n".join(e.text for e in errors)
    facts = {"count": len(errors), "path": path, "errors": lines}
    return ImportFormatError(
        msg(
            "The bundle was refused and nothing was changed; {count} error(s) (showing the first ones). Fix them in "
            "{path} and import it again:\n{errors}",
            **facts,
        )
        if len(errors) >= BundleLimits().max_errors
        else msg(
            "The bundle was refused and nothing was changed; {count} error(s). Fix them in {path} and import it "
            "again:\n{errors}",
            **facts,
        ),
        code=BUNDLE_INVALID,
        details={"errors": [e.to_json() for e in errors], "temp_file_path": str(path), "items": total_items},
    )


def _apply_nodes(state: GraphState, ops: Sequence[NodeOp], stats: dict[str, int]) -> None:
    adjacency: dict[str, set[str]] | None = None
    for op in ops:
        nid = op.id
        if op.action == "upsert":
            old = state.nodes.get(nid, {})
            state.nodes[nid] = {
                "id": nid,
                "type": op.type,
                "identity": op.identity,
                "properties": op.properties,
                "doc_id": old.get("doc_id"),
                "doc_name": old.get("doc_name"),
                "text_sha256": old.get("text_sha256"),
            }
            stats["nodes_upserted"] += 1
            continue
        if state.nodes.pop(nid, None) is None:
            continue
        stats["nodes_deleted"] += 1
        if adjacency is None:
            adjacency = {}
            for eid, edge in state.edges.items():
                adjacency.setdefault(edge["source"], set()).add(eid)
                adjacency.setdefault(edge["target"], set()).add(eid)
        for eid in adjacency.pop(nid, set()):
            if state.edges.pop(eid, None) is not None:
                stats["edges_cascaded"] += 1


def _apply_edges(state: GraphState, ops: Sequence[EdgeOp], stats: dict[str, int]) -> None:
    for op in ops:
        spec = state.ontology.edges[op.type]
        source = node_id(spec.source, op.source_identity)
        target = node_id(spec.target, op.target_identity)
        eid = edge_id(op.type, source, target)
        if op.action == "upsert":
            state.edges[eid] = {
                "id": eid,
                "type": op.type,
                "source": source,
                "target": target,
                "properties": op.properties,
            }
            stats["edges_upserted"] += 1
        elif state.edges.pop(eid, None) is not None:
            stats["edges_deleted"] += 1


def _plan(state: GraphState, data: Any) -> tuple[list[BundleError], dict[str, int], GraphState]:
    limits = BundleLimits()
    validator = BundleValidator(
        state.ontology,
        max_errors=limits.max_errors,
        max_items=limits.max_items,
        max_value_chars=limits.max_value_chars,
    )
    node_ops, edge_ops, errors = validator.structural(data)
    stats = dict.fromkeys(("nodes_upserted", "nodes_deleted", "edges_upserted", "edges_deleted", "edges_cascaded"), 0)
    new = state.copy()
    if errors:
        return errors, stats, new
    _apply_nodes(new, node_ops, stats)
    errors = check_endpoints(state.ontology, edge_ops, new.nodes.__contains__, limits.max_errors)
    if errors:
        return errors, stats, new
    _apply_edges(new, edge_ops, stats)
    return [], stats, new


def import_knowledge_bundle(
    session: Scope, temp_file_path: str | Path, kb_name: str | None = None, *, delete_file: bool = True
) -> BundleImported:
    """Validate and apply a YAML bundle as one unit; data is the spec's ``{status, stats}``.

    The file is deleted after a successful import when ``delete_file`` (the MCP tool's temp file);
    it is always kept after a refusal.
    """
    if not isinstance(temp_file_path, (str, Path)) or not str(temp_file_path).strip():
        raise InvalidArgument("temp_file_path must be the path of a YAML file.", details={"field": "temp_file_path"})
    reject_nul(str(temp_file_path), "temp_file_path")
    path = Path(str(temp_file_path)).expanduser().absolute()
    # Opened once: the content read and the file deleted afterwards are the file that was checked.
    try:
        opened = open_input_file(path, getattr(session, "allowed_dirs", None), keep_folder=delete_file)
    except UnusablePath as exc:
        raise InvalidArgument(
            msg("Bundle file {path!r} {reason}.", path=str(temp_file_path), reason=exc.reason),
            details={"field": "temp_file_path", "path": str(temp_file_path)},
            code="FILE_NOT_FOUND",
        ) from None
    with opened:
        return _import_opened_bundle(session, opened, kb_name, delete_file)


def _import_opened_bundle(
    session: Scope, opened: OpenedFile, kb_name: str | None, delete_file: bool
) -> BundleImported:
    path = opened.path
    record = session.writable_kb(kb_name, msg("import a bundle into"))
    with session.importing(record, 1) as allowance:
        if allowance.max_file_bytes is not None and opened.stat.st_size > allowance.max_file_bytes:
            raise QuotaExceeded(
                msg(
                    "The bundle file is {size:.1f} MB, over this demo's limit of {limit:g} MB per file.",
                    size=opened.stat.st_size / 2**20, limit=allowance.max_file_bytes / 2**20,
                ),
                details={"limit_bytes": allowance.max_file_bytes},
            )
        try:
            with opened.reader() as handle:
                data = load_bundle_handle(handle)
        except ImportFormatError as exc:  # unreadable or hostile YAML: refused like any invalid bundle, file kept
            raise _refusal([BundleError(None, "root", exc.message)], path, None) from None
        items = len(data) if isinstance(data, list) else 0
        if allowance.chunk_budget is not None and items > allowance.chunk_budget:
            raise QuotaExceeded(
                msg(
                    "The bundle has {items:,} items; with at least one chunk each they would pass {limit} ({left:,} "
                    "left). Nothing was imported.",
                    items=items, limit=allowance.chunk_limit, left=allowance.chunk_budget,
                ),
                details={"items": items, "left": allowance.chunk_budget},
            )
        return _apply_bundle(session, opened, record, data, delete_file)


def _apply_bundle(
    session: Scope, opened: OpenedFile, record: KnowledgeBaseRecord, data: Any, delete_file: bool
) -> BundleImported:
    path = opened.path
    store = graph_store(session, record)
    with store.lock():
        state = store.load()
        errors, stats, new = _plan(state, data)
        if errors:
            raise _refusal(errors, path, len(data) if isinstance(data, list) else None)
        stats.update(sync_index(session.service, record, new))
        committed = _commit_graph(session, record, store, state, new)
    stats.update(items=len(data or []), nodes_total=len(committed.nodes), edges_total=len(committed.edges))
    if delete_file and not opened.remove():
        logger.warning("Kept the bundle file %s: it was replaced during the import, so it is not the one read", path)
    return BundleImported(
        msg(
            "Imported the bundle into '{name}': {nodes} node(s) upserted, {nodes_deleted} deleted; {edges} edge(s) "
            "upserted, {edges_deleted} deleted; {chunks} chunk(s) indexed.",
            name=record.name, nodes=stats["nodes_upserted"], nodes_deleted=stats["nodes_deleted"],
            edges=stats["edges_upserted"], edges_deleted=stats["edges_deleted"] + stats["edges_cascaded"],
            chunks=stats["chunks_indexed"],
        ),
        "success",
        stats,
        committed.version,
    )


def repair_index(session: Scope, kb_name: str | None = None) -> IndexRepaired:
    """Re-sync the search indexes with the graph (after a crash between the two commits)."""
    record = session.writable_kb(kb_name, msg("repair the bundle index of"))
    store = graph_store(session, record)
    with store.lock():
        state = store.load()
        stats = sync_index(session.service, record, state)
        if stats["documents_indexed"] or stats["documents_removed"]:
            state = _commit_graph(session, record, store, state, state)
    return IndexRepaired(msg("Re-synced the bundle documents of '{name}'.", name=record.name), stats)


# -- shadow export ----------------------------------------------------------------------------------------
def export_shadow(session: Scope, target: str | Path | None = None, kb_name: str | None = None) -> ShadowExported:
    """(Re)write the shadow export, by default to ``graph/shadow`` of the KB."""
    if not session.principal.server_paths:
        raise PermissionDenied(msg("Writing a shadow export on the server is off in this demo."))
    record = session.resolve_kb(kb_name)
    store = graph_store(session, record)
    state = store.load()
    folder = store.export_shadow(state, Path(target) if target is not None else None)
    return ShadowExported(
        msg("Wrote the shadow export of '{name}' to {folder}.", name=record.name, folder=str(folder)), str(folder)
    )


def rebuild_from_shadow(session: Scope, shadow_dir: str | Path, kb_name: str | None = None) -> BundleImported:
    """Rebuild a KB's graph (and its indexed texts) from a shadow export: ontology, then one bundle."""
    import tempfile

    import yaml

    if not session.principal.server_paths:
        raise PermissionDenied("Rebuilding from a shadow export on the server is off in this demo.")
    record = session.writable_kb(kb_name, msg("rebuild the graph of"))
    ontology, items = read_shadow(Path(shadow_dir))
    set_ontology(session, ontology, kb_name=record.name)
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False, encoding="utf-8") as handle:
        yaml.safe_dump(items, handle, allow_unicode=True, sort_keys=True)
    return import_knowledge_bundle(session, handle.name, kb_name=record.name)


# -- graph use ------------------------------------------------------------------------------------------
def _brief(node: dict[str, Any]) -> dict[str, Any]:
    return {"id": node["id"], "type": node["type"], "identity": node["identity"], "doc_name": node.get("doc_name")}


def node_view(state: GraphState, node: dict[str, Any], limit: int = MAX_NEIGHBOURS) -> dict[str, Any]:
    neighbours = []
    for edge in sorted(state.edges_of(node["id"]), key=lambda e: e["id"])[:limit]:
        outgoing = edge["source"] == node["id"]
        other = state.nodes[edge["target"] if outgoing else edge["source"]]
        neighbours.append(
            {
                "direction": "out" if outgoing else "in",
                "edge_id": edge["id"],
                "edge_type": edge["type"],
                "properties": edge["properties"],
                "node": _brief(other),
            }
        )
    return {
        "type": "node",
        "id": node["id"],
        "node_type": node["type"],
        "identity": node["identity"],
        "properties": node["properties"],
        "doc_id": node.get("doc_id"),
        "doc_name": node.get("doc_name"),
        "neighbours": neighbours,
    }


def get_node(session: Scope, node_id_: str, kb_names: Sequence[str] | None = None) -> Item:
    """A node (``node_…`` id) with its properties and neighbours via edges."""
    if not isinstance(node_id_, str) or not node_id_.strip().startswith("node_"):
        raise InvalidArgument(msg("A node id starts with 'node_'."), details={"field": "id"})
    records = [session.find_kb(n) for n in kb_names] if kb_names else session.visible_kbs()
    for record in records:
        state = graph_store(session, record).load()
        node = state.nodes.get(node_id_.strip())
        if node is not None:
            return Item(msg("Found node {id}.", id=node_id_), {"kb_name": record.name, **node_view(state, node)})
    raise ItemNotFound(msg("No node with id {id!r} exists.", id=node_id_), details={"id": node_id_})


def graph_view(session: Scope, kb_name: str | None = None, limit: int = 500) -> GraphView:
    """Nodes and edges (up to ``limit`` nodes) for drawing the graph."""
    record = session.resolve_kb(kb_name)
    state = graph_store(session, record).load()
    chosen = sorted(state.nodes)[:limit]
    kept = set(chosen)
    nodes = [_brief(state.nodes[n]) | {"properties": state.nodes[n]["properties"]} for n in chosen]
    edges = [e for e in sorted(state.edges.values(), key=lambda e: e["id"]) if {e["source"], e["target"]} <= kept]
    return GraphView(
        msg(
            "{nodes} node(s), {edges} edge(s) in '{name}'.",
            nodes=len(state.nodes), edges=len(state.edges), name=record.name,
        ),
        nodes,
        edges,
        len(state.nodes),
        len(state.edges),
        len(state.nodes) > limit,
    )


def expand_hits(session: Scope, hits: Sequence[Mapping[str, Any]], max_related: int = 5) -> list[dict[str, Any]]:
    """Search hits (the ``chunks`` of a search result) plus, after each hit on a bundle document, the
    documents of nodes related to it by an edge.

    Hits are copied, never changed. A hit on a node's document gets ``graph: {node_id, node_type,
    identity, related}``; each added entry is the first chunk of the related document with
    ``expanded: true``, the parent's score, and ``breakdown.graph_expansion`` {from_chunk_id,
    from_node_id, node_id, edge_type, direction} plus a note saying it was added by graph expansion.
    """
    states: dict[str, GraphState] = {}
    by_doc: dict[str, dict[str, dict[str, Any]]] = {}
    records = {r.id: r for r in session.visible_kbs()}
    present = {(h.get("kb_id"), h.get("doc_id")) for h in hits}
    out: list[dict[str, Any]] = []
    for hit in hits:
        copy_ = {**hit, "breakdown": dict(hit.get("breakdown") or {})}
        out.append(copy_)
        kb_id = hit.get("kb_id")
        if kb_id not in records:
            continue
        if kb_id not in states:
            states[kb_id] = graph_store(session, records[kb_id]).load()
            by_doc[kb_id] = {n["doc_id"]: n for n in states[kb_id].nodes.values() if n.get("doc_id")}
        state = states[kb_id]
        node = by_doc[kb_id].get(hit.get("doc_id"))
        if node is None:
            continue
        related = node_view(state, node, limit=max_related)["neighbours"]
        copy_["graph"] = {
            "node_id": node["id"],
            "node_type": node["type"],
            "identity": node["identity"],
            "related": related,
        }
        notes = list(copy_["breakdown"].get("notes") or [])
        notes.append(f"graph: bundle node {node['type']} with {len(related)} related node(s) via edges")
        copy_["breakdown"]["notes"] = notes
        for link in related:
            other = state.nodes[link["node"]["id"]]
            doc_id = other.get("doc_id")
            if not doc_id or (kb_id, doc_id) in present:
                continue
            chunk = _first_chunk(session, records[kb_id], doc_id)
            if chunk is None:
                continue
            present.add((kb_id, doc_id))
            out.append(
                {
                    **chunk,
                    "doc_name": other.get("doc_name"),
                    "kb_id": kb_id,
                    "kb_name": records[kb_id].name,
                    "score": hit.get("score", 0.0),
                    "expanded": True,
                    "graph": {"node_id": other["id"], "node_type": other["type"], "identity": other["identity"]},
                    "breakdown": {
                        "graph_expansion": {
                            "from_chunk_id": hit.get("id"),
                            "from_node_id": node["id"],
                            "node_id": other["id"],
                            "edge_type": link["edge_type"],
                            "direction": link["direction"],
                        },
                        "notes": [
                            f"added by graph expansion: {link['edge_type']} "
                            f"{'from' if link['direction'] == 'out' else 'to'} {node_display(node)}"
                        ],
                    },
                }
            )
    return out


def node_display(node: Mapping[str, Any]) -> str:
    return f"{node['type']} " + ", ".join(f"{k}={v}" for k, v in node["identity"].items())


def _first_chunk(session: Scope, record: KnowledgeBaseRecord, doc_id: str) -> dict[str, Any] | None:
    """The first chunk of a live document, as graph expansion shows it (None when it is gone): read through the
    store's one ``document_chunks``, on either store."""
    storage = session.service.store.kb(record)
    document = storage.document(doc_id)
    rows = storage.document_chunks(document) if document is not None else []
    if not rows:
        return None
    row = rows[0]
    return {
        "id": row["chunk_id"],
        "doc_id": doc_id,
        "content": row["content"],
        "tokens": row["tokens"],
        "chunk_index": row["chunk_index"],
        "chapter": row["chapter"],
        "page": row["page"],
        "file_type": "txt",
    }
