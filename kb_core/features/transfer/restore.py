"""Import an export file into the home, all or nothing (``docs/export-format.md``).

Everything is validated before the home changes; KBs are staged in ``HOME/.transfer-PID-HEX/`` and moved into
place under the registry lock (the commit point); any failure removes what was staged.
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any

from kb_core.base.atomic import fsync_directory
from kb_core.base.errors import ImportFormatError, InvalidArgument, KBError
from kb_core.base.files import CHUNKS_FILE, DOCUMENTS_FILE, TABLE_FILES, TEXTS_FILE
from kb_core.base.i18n import msg
from kb_core.base.json_text import JSONLimitExceeded, parse_json_within
from kb_core.base.removal import remove_tree
from kb_core.base.validation import name_key, validate_chunk_size, validate_endpoint, validate_kb_name
from kb_core.engines.text_language import document_language
from kb_core.features.bundles.graph import GraphState, GraphStore, write_shadow
from kb_core.features.results import ImportSummary
from kb_core.features.seams import Scope
from kb_core.features.transfer.archive import (
    Package,
    open_package,
    read_table,
    read_vectors,
    refuse,
)
from kb_core.features.transfer.format import (
    DOCUMENT_NAME_MAX,
    EDGE_KEYS,
    GRAPH_PATH,
    ID_PATTERN,
    MAX_GRAPH_DEPTH,
    NODE_KEYS,
    SEGMENT_PATH,
    SHA256_HEX,
    VECTORS_FILE,
    KBPlan,
    SegmentData,
    TransferLimits,
    expected_dimension,
    rename_clashing,
    resolve_path,
)
from kb_core.store import Change, KBStore, KnowledgeBaseRecord, StagedSegment, catalog, new_id, utc_now
from kb_core.store.sink import timestamped_name

if TYPE_CHECKING:
    from kb_core.store.base import Database

logger = logging.getLogger(__name__)


def _string(value: Any, what: str, *, allow_none: bool = False, max_length: int = 4096) -> str | None:
    if value is None and allow_none:
        return None
    if not isinstance(value, str) or len(value) > max_length:
        raise refuse(f"{what} must be a string of at most {max_length} characters, got {str(value)[:40]!r}.")
    return value


def _int(value: Any, what: str, low: int = 0, high: int = 2**62) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise refuse(f"{what} must be an integer from {low} to {high}, got {value!r}.")
    return value


def _validate_kb(entry: Any, position: int, package: Package, graph_paths: set[str] | None = None) -> KBPlan:
    if not isinstance(entry, dict):
        raise refuse(f"knowledge_bases[{position}] must be an object.")
    where = f"knowledge_bases[{position}]"
    try:
        name = validate_kb_name(entry.get("name"))
        chunk_size = validate_chunk_size(entry.get("chunk_size"))
        endpoint = validate_endpoint(entry.get("embedding_endpoint"))
    except InvalidArgument as exc:
        raise refuse(f"{where}: {exc.message}") from exc
    model = _string(entry.get("embedding_model"), f"{where}.embedding_model", max_length=512) or ""
    if not model.strip():
        raise refuse(f"{where}.embedding_model must not be empty.")
    created_at = _string(entry.get("created_at"), f"{where}.created_at", max_length=64) or utc_now()
    settings = entry.get("search_settings") or {}
    if not isinstance(settings, dict):
        raise refuse(f"{where}.search_settings must be an object.")
    settings = _validate_search_settings(settings, where)
    segment_entries = entry.get("segments")
    if not isinstance(segment_entries, list):
        raise refuse(f"{where}.segments must be a list.")
    expected = expected_dimension(model, endpoint)
    dimension: int | None = None
    segments: list[SegmentData] = []
    seen_docs: set[str] = set()
    seen_chunks: set[str] = set()
    seen_paths: set[str] = set()
    for number, segment in enumerate(segment_entries):
        label = f"{where}.segments[{number}]"
        if not isinstance(segment, dict):
            raise refuse(f"{label} must be an object.")
        path = _string(segment.get("path"), f"{label}.path", max_length=64) or ""
        if not SEGMENT_PATH.match(path) or path in seen_paths:
            raise refuse(f"{label}.path {path!r} is not a valid, unique segment path (kb/NNNN/seg/NNNN).")
        seen_paths.add(path)
        for file_name in (*TABLE_FILES, VECTORS_FILE):
            if f"{path}/{file_name}" not in package.members:
                raise refuse(f"{label}: member {path}/{file_name} is missing.")
        declared = _int(segment.get("dimension"), f"{label}.dimension", 1, 65536)
        if expected is not None and declared != expected:
            raise refuse(
                f"Knowledge base {name!r} uses {model!r}, whose vectors have {expected} dimensions, but segment "
                f"{path} declares {declared}; refused.",
                kb_name=name,
            )
        if dimension is not None and declared != dimension:
            raise refuse(f"Knowledge base {name!r} mixes vector dimensions {dimension} and {declared}; refused.")
        dimension = declared
        documents = read_table(
            package.members[f"{path}/{DOCUMENTS_FILE}"],
            catalog.DOCUMENTS_SCHEMA,
            f"{path}/documents",
            optional=("language",),  # files written before documents stored it
        )
        chunks = read_table(package.members[f"{path}/{CHUNKS_FILE}"], catalog.CHUNKS_SCHEMA, f"{path}/chunks")
        texts = read_table(package.members[f"{path}/{TEXTS_FILE}"], catalog.TEXTS_SCHEMA, f"{path}/texts")
        vectors = read_vectors(package.members[f"{path}/{VECTORS_FILE}"], len(chunks), f"{path}/{VECTORS_FILE}")
        if vectors.shape[1] != declared:
            raise refuse(
                f"{path}/{VECTORS_FILE} holds {vectors.shape[1]}-dimensional vectors but the manifest declares "
                f"{declared}; refused.",
                kb_name=name,
            )
        if _int(segment.get("rows"), f"{label}.rows") != len(chunks):
            raise refuse(f"{label} declares {segment.get('rows')} rows but {path}/chunks has {len(chunks)}.")
        if not documents:
            raise refuse(f"{label} has no documents.")
        originals: dict[str, Path] = {}
        counts: dict[str, int] = {}
        for row in documents:
            doc_id = _string(row["doc_id"], f"{path}/documents doc_id", max_length=128) or ""
            if not ID_PATTERN.match(doc_id) or doc_id in seen_docs:
                raise refuse(f"{path}/documents: doc_id {doc_id!r} is malformed or repeated.")
            seen_docs.add(doc_id)
            row["name"] = _document_name(row["name"], path)
            if row["status"] not in ("ready", "failed"):
                raise refuse(f"{path}/documents: status {row['status']!r} of {doc_id} is not ready or failed.")
            for column in ("size_bytes", "chunk_size", "chunk_count"):
                row[column] = _int(row[column] if row[column] is not None else 0, f"{path}/documents {column}")
            relative = row["original"] or ""
            if relative:
                suffix = Path(relative).suffix
                member = f"{path}/files/{doc_id}{suffix.lower()}"
                if relative != f"files/{doc_id}{suffix}" or member not in package.members:
                    raise refuse(f"{path}/documents: the original {relative!r} of {doc_id} is not in the file.")
                originals[doc_id] = package.members[member]
                row["original"] = f"files/{doc_id}{suffix.lower()}"
            counts[doc_id] = 0
        for row in chunks:
            chunk_id = _string(row["chunk_id"], f"{path}/chunks chunk_id", max_length=128) or ""
            if not ID_PATTERN.match(chunk_id) or chunk_id in seen_chunks:
                raise refuse(f"{path}/chunks: chunk_id {chunk_id!r} is malformed or repeated.")
            seen_chunks.add(chunk_id)
            if row["doc_id"] not in counts:
                raise refuse(f"{path}/chunks: chunk {chunk_id} belongs to no document of its segment.")
            if row["content"] is None:
                raise refuse(f"{path}/chunks: chunk {chunk_id} has no content.")
            counts[row["doc_id"]] += 1
        for row in documents:
            if counts[row["doc_id"]] != row["chunk_count"]:
                raise refuse(
                    f"{path}: document {row['doc_id']} declares {row['chunk_count']} chunks but has "
                    f"{counts[row['doc_id']]}."
                )
        texts = [t for t in texts if t["doc_id"] in counts]  # unreferenced rows and originals are not copied
        # The language is detected again from the text rather than taken from the file (older files lack it).
        text_of = {t["doc_id"]: t["text"] for t in texts}
        for row in documents:
            row["language"] = document_language(text_of.get(row["doc_id"])) if row["status"] == "ready" else None
        segments.append(
            SegmentData(
                documents=documents,
                chunks=chunks,
                texts=texts,
                vectors=vectors,
                originals=originals,
                model_key=str(segment.get("model_key") or ""),
                analyzer=str(segment.get("analyzer") or ""),
            )
        )
    record = KnowledgeBaseRecord(
        id=new_id("kb"),
        name=name,
        chunk_size=chunk_size,
        embedding_model=model.strip(),
        embedding_endpoint=endpoint,
        has_api_key=False,
        created_at=created_at,
        search_settings=settings,
    )
    plan = KBPlan(record, bool(entry.get("had_api_key")), segments)
    plan.document_count = len(seen_docs)
    if entry.get("graph") is not None:
        documents_by_id = {row["doc_id"]: row for segment in segments for row in segment.documents}
        plan.graph, plan.graph_unlinked = _validate_graph(
            entry["graph"], where, name, package, documents_by_id, graph_paths if graph_paths is not None else set()
        )
    return plan


def _validate_graph(
    entry: Any,
    where: str,
    kb_name: str,
    package: Package,
    documents: dict[str, dict[str, Any]],
    seen_paths: set[str],
) -> tuple[GraphState, int]:
    """Parse and check one KB's graph state completely; returns it (doc links checked) and the unlinked count."""
    from kb_core.features.bundles.graph import edge_item, node_item
    from kb_core.features.bundles.ontology import parse_ontology
    from kb_core.features.bundles.validation import BundleValidator, edge_id, node_id

    label = f"{where}.graph"
    if not isinstance(entry, dict):
        raise refuse(f"{label} must be an object.")
    path = _string(entry.get("path"), f"{label}.path", max_length=64) or ""
    if not GRAPH_PATH.match(path) or path in seen_paths or path not in package.members:
        raise refuse(f"{label}.path {path!r} is not a unique graph member of the file (kb/NNNN/graph/state.json).")
    seen_paths.add(path)
    try:
        raw = parse_json_within(
            package.members[path].read_bytes().decode("utf-8"),
            max_values=package.limits.max_graph_values,
            max_depth=MAX_GRAPH_DEPTH,
        )
    except JSONLimitExceeded as exc:  # measured before parsing: nothing was built
        raise refuse(f"{path} is refused: {exc}.", kb_name=kb_name) from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise refuse(f"{path} is not valid UTF-8 JSON: {exc}.", kb_name=kb_name) from None

    def bad(message: str) -> ImportFormatError:
        return refuse(f"{path} (graph of knowledge base {kb_name!r}): {message}; refused.", kb_name=kb_name)

    if not isinstance(raw, dict) or set(raw) != {"version", "ontology", "nodes", "edges"}:
        raise bad("it must be an object with exactly version, ontology, nodes and edges")
    version = raw["version"]
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise bad(f"version {version!r} must be a positive integer")
    try:
        ontology = parse_ontology(raw["ontology"])
    except KBError as exc:
        raise bad(f"the ontology is invalid: {exc.message}") from None
    if not isinstance(raw["nodes"], list) or not isinstance(raw["edges"], list):
        raise bad("nodes and edges must be lists")

    nodes: dict[str, dict[str, Any]] = {}
    linked: dict[str, str] = {}  # doc id → node id
    unlinked = 0
    for number, node in enumerate(raw["nodes"]):
        at = f"nodes[{number}]"
        if not isinstance(node, dict) or not {"id", "type", "identity", "properties"} <= set(node) <= NODE_KEYS:
            raise bad(f"{at} must be an object with id, type, identity, properties[, doc_id, doc_name, text_sha256]")
        node = {key: node.get(key) for key in sorted(NODE_KEYS)}
        spec = ontology.nodes.get(node["type"]) if isinstance(node["type"], str) else None
        if spec is None:
            raise bad(f"{at}.type {node['type']!r} is not a node type of its ontology")
        properties, identity = node["properties"], node["identity"]
        if not isinstance(properties, dict) or not isinstance(identity, dict):
            raise bad(f"{at}: identity and properties must be objects")
        if set(identity) != set(spec.identity) or any(properties.get(k) != v for k, v in identity.items()):
            raise bad(f"{at}.identity does not match the identity fields {list(spec.identity)} of its properties")
        expected = node_id(node["type"], identity)
        if node["id"] != expected or expected in nodes:
            raise bad(f"{at}.id {node['id']!r} is not {expected!r} (derived from type and identity) or is repeated")
        doc_id = node["doc_id"]
        if doc_id is not None:
            if not isinstance(doc_id, str) or not ID_PATTERN.match(doc_id) or doc_id in linked:
                raise bad(f"{at}.doc_id {str(doc_id)[:40]!r} is malformed or shared with another node")
            row = documents.get(doc_id)
            if row is not None and row["source"] != "bundle":
                raise bad(f"{at}.doc_id {doc_id!r} names a document of source {row['source']!r}, not 'bundle'")
            if row is None:
                node.update(doc_id=None, doc_name=None, text_sha256=None)
                unlinked += 1
            else:
                linked[doc_id] = expected
        if node["doc_name"] is not None and not isinstance(node["doc_name"], str):
            raise bad(f"{at}.doc_name must be a string or null")
        sha = node["text_sha256"]
        if sha is not None and (not isinstance(sha, str) or not SHA256_HEX.match(sha)):
            raise bad(f"{at}.text_sha256 must be 64 hex digits or null")
        nodes[expected] = node

    edges: dict[str, dict[str, Any]] = {}
    for number, edge in enumerate(raw["edges"]):
        at = f"edges[{number}]"
        if not isinstance(edge, dict) or set(edge) != EDGE_KEYS:
            raise bad(f"{at} must be an object with exactly id, type, source, target, properties")
        spec_ = ontology.edges.get(edge["type"]) if isinstance(edge["type"], str) else None
        if spec_ is None:
            raise bad(f"{at}.type {edge['type']!r} is not an edge type of its ontology")
        source, target = edge["source"], edge["target"]
        if not isinstance(source, str) or not isinstance(target, str) or source not in nodes or target not in nodes:
            raise bad(f"{at}: source and target must be ids of nodes in the graph")
        if (nodes[source]["type"], nodes[target]["type"]) != (spec_.source, spec_.target):
            raise bad(f"{at}: '{edge['type']}' connects {spec_.source} → {spec_.target}")
        if not isinstance(edge["properties"], dict):
            raise bad(f"{at}.properties must be an object")
        expected = edge_id(edge["type"], source, target)
        if edge["id"] != expected or expected in edges:
            raise bad(f"{at}.id {edge['id']!r} is not {expected!r} (derived from type and endpoints) or is repeated")
        edges[expected] = dict(edge)

    state = GraphState(version, ontology, nodes, edges)
    items = [node_item(n) for n in nodes.values()] + [edge_item(e, state) for e in edges.values()]
    validator = BundleValidator(ontology, max_errors=5, max_items=max(len(items), 1))
    _, _, problems = validator.structural(items)
    if problems:
        raise bad("its nodes/edges do not fit its ontology: " + "; ".join(p.text for p in problems))
    return state, unlinked


def _validate_search_settings(settings: dict[str, Any], where: str) -> dict[str, Any]:
    from kb_core.features.retrieval.search import SearchSettings

    unknown = set(settings) - set(SearchSettings.SAVED_FIELDS)
    if unknown:
        raise refuse(f"{where}.search_settings has unknown setting(s) {sorted(unknown)}.")
    try:
        SearchSettings(**settings).validated()
    except (InvalidArgument, TypeError) as exc:
        raise refuse(f"{where}.search_settings are invalid: {exc}") from exc
    return dict(settings)


def _document_name(value: Any, path: str) -> str:
    import unicodedata

    if not isinstance(value, str):
        raise refuse(f"{path}/documents: a document name is not a string.")
    name = unicodedata.normalize("NFC", value).strip()
    if (
        not name
        or len(name) > DOCUMENT_NAME_MAX
        or "/" in name
        or "\\" in name
        or any(unicodedata.category(c) in ("Cc", "Cf") for c in name)
    ):
        raise refuse(f"{path}/documents: document name {value[:40]!r} is empty, too long or has path characters.")
    return name


def _fresh_ids(plan: KBPlan) -> None:
    remapped: dict[str, str] = {}
    for segment in plan.segments:
        mapping = {row["doc_id"]: f"doc_{uuid.uuid4().hex[:16]}" for row in segment.documents}
        remapped.update(mapping)
        for row in segment.documents:
            old = row["doc_id"]
            row["doc_id"] = mapping[old]
            if row["original"]:
                row["original"] = f"files/{mapping[old]}{Path(row['original']).suffix}"
        for row in segment.chunks:
            row["doc_id"] = mapping[row["doc_id"]]
            row["chunk_id"] = f"chk_{uuid.uuid4().hex[:16]}"
        for row in segment.texts:
            row["doc_id"] = mapping[row["doc_id"]]
        segment.originals = {mapping[d]: p for d, p in segment.originals.items()}
    if plan.graph is not None:
        for node in plan.graph.nodes.values():
            if node["doc_id"] is not None:
                node["doc_id"] = remapped[node["doc_id"]]


def _unique_document_names(plan: KBPlan, now: datetime) -> None:
    taken: set[str] = set()
    for segment in plan.segments:
        for row in segment.documents:
            if row["name"].casefold() in taken:
                renamed = timestamped_name(row["name"], taken, now)
                plan.renamed_documents.append(f"{row['name']} → {renamed}")
                row["name"] = renamed
            taken.add(row["name"].casefold())


def _stage_kb(plan: KBPlan, staging: Path, analyzer: Any) -> None:
    from kb_core.store.segments import write_segment_files

    root = staging / "kbs" / plan.record.id
    store = KBStore.create(root, plan.record.id)
    staged_segments: list[StagedSegment] = []
    for segment in plan.segments:
        staged = store.stage_segment()
        rows = {row["doc_id"]: row for row in segment.documents}
        for doc_id, source in segment.originals.items():
            shutil.copyfile(source, staged.path / rows[doc_id]["original"])
        write_segment_files(
            staged,
            segment.documents,
            segment.chunks,
            segment.texts,
            segment.vectors,
            segment.model_key,
            analyzer,
        )
        staged_segments.append(staged)
    if staged_segments:
        store.commit(Change(add=tuple(staged_segments)))
    if plan.graph is not None:
        names = {row["doc_id"]: row["name"] for segment in plan.segments for row in segment.documents}
        for node in plan.graph.nodes.values():
            if node["doc_id"] is not None:
                node["doc_name"] = names[node["doc_id"]]  # after renames of clashing document names
        graph = GraphStore(root)
        graph.root.mkdir()
        committed = graph.commit(plan.graph)
        write_shadow(committed, graph.root / "shadow")
    plan.root = root


def _commit(home: Any, plans: Sequence[KBPlan], now: datetime) -> list[tuple[str, str]]:
    """Move the staged KB folders into the home and register them in one registry write (the commit point)."""

    with home.registry_lock():
        existing = home.knowledge_bases()
        renamed = rename_clashing(plans, {name_key(r.name) for r in existing}, now)
        moved: list[Path] = []
        try:
            for plan in plans:
                assert plan.root is not None
                target = home.kb_dir(plan.record.id)
                os.replace(plan.root, target)
                moved.append(target)
            if moved:
                fsync_directory(home.root / "kbs")
            # One registry write for all KBs: Home.add would commit them one by one.
            home._write_registry([*existing, *(p.record for p in plans)])
        except BaseException:
            registered = {r.id for r in home.knowledge_bases()}
            if not all(p.record.id in registered for p in plans):
                for target in moved:
                    remove_tree(target, within=home.root)
                raise
            logger.exception("registry table rewrite failed after the import was committed")
    return renamed


def import_database(
    session: Scope,
    source_db_path: str | os.PathLike[str],
    *,
    limits: TransferLimits | None = None,
    display_name: str | None = None,
) -> ImportSummary:
    """Merge every KB of an export file into the home, all or nothing. ``display_name`` names the file in messages
    and the result instead of its path (an upload saved under a temporary name is known by the user's file name).

    Hostile or damaged files are refused with INVALID_IMPORT_FILE (a KBError) before anything in the home changes.
    """
    if display_name is None:
        return _import_database(session, source_db_path, limits, None)
    try:
        return _import_database(session, source_db_path, limits, display_name)
    except KBError as exc:
        given = str(source_db_path)
        message = exc.message.replace(given, display_name).replace(PurePath(given).name, display_name)
        raise KBError(message, code=exc.code, details={**exc.details, "source_db_path": display_name}) from None


def _import_database(
    session: Scope, source_db_path: str | os.PathLike[str], limits: TransferLimits | None, display_name: str | None
) -> ImportSummary:
    source = resolve_path(source_db_path, "source_db_path")
    service = session.service
    home = service.home
    limits = limits or TransferLimits()
    now = datetime.now(UTC)
    home.abandoned_transfer_staging(remove=True)
    staging = home.open_transfer_staging()
    try:
        package = open_package(source, staging.path, limits, getattr(session, "allowed_dirs", None))
        entries = package.manifest["knowledge_bases"]
        graph_paths: set[str] = set()
        plans = [_validate_kb(entry, position, package, graph_paths) for position, entry in enumerate(entries)]
        taken_ids = service.store.document_ids()
        for plan in plans:
            ids = {row["doc_id"] for segment in plan.segments for row in segment.documents}
            if ids & taken_ids:
                _fresh_ids(plan)
                ids = {row["doc_id"] for segment in plan.segments for row in segment.documents}
            taken_ids |= ids
            _unique_document_names(plan, now)

        def into_home() -> list[tuple[str, str]]:
            for plan in plans:
                _stage_kb(plan, staging.path, service.analyzer)
            return _commit(home, plans, now)

        def into_database(database: Database) -> list[tuple[str, str]]:
            from kb_core.features.transfer.postgres import commit_plans

            return commit_plans(database, plans, service.analyzer, now)

        renamed = service.store.choose(folder=into_home, postgres=into_database)
    finally:
        staging.close()
    documents = sum(p.document_count for p in plans)
    shown = display_name or source.name
    said: list[str] = [
        msg(
            "Imported {kbs} knowledge base(s) with {documents} document(s) from {source}.",
            kbs=len(plans), documents=documents, source=shown,
        )
    ]
    if renamed:
        said.append(
            msg(
                "Renamed because the name existed: {renamed}.",
                renamed=", ".join(f"{a!r} → {b!r}" for a, b in renamed),
            )
        )
    renamed_docs = [r for p in plans for r in p.renamed_documents]
    if renamed_docs:
        said.append(msg("Renamed {count} clashing document name(s).", count=len(renamed_docs)))
    graphs = [p.graph for p in plans if p.graph is not None]
    if graphs:
        said.append(
            msg(
                "Restored {graphs} knowledge-bundle graph(s) with {nodes} node(s) and {edges} edge(s).",
                graphs=len(graphs), nodes=sum(len(g.nodes) for g in graphs), edges=sum(len(g.edges) for g in graphs),
            )
        )
    for plan in plans:
        if plan.graph_unlinked:
            said.append(
                msg(
                    "{count} node(s) of {name!r} had no indexed document in the file; the next bundle import into it "
                    "re-indexes them.",
                    count=plan.graph_unlinked, name=plan.record.name,
                )
            )
    keyed = [p.record.name for p in plans if p.had_api_key or p.record.embedding_endpoint]
    if keyed:
        said.append(
            msg(
                "API keys are never part of an export file: the imported knowledge bases have no API key; {names} "
                "use an embedding endpoint and need their key (and any password in the endpoint's URL, shown as ***) "
                "set again.",
                names=", ".join(repr(n) for n in keyed),
            )
        )
    else:
        said.append(msg("API keys are never part of an export file: the imported knowledge bases have no API key."))
    message = said[0]
    for sentence in said[1:]:
        message = msg("{first} {then}", first=message, then=sentence)
    logger.info(message)
    return ImportSummary(message, display_name or str(source), [p.record.name for p in plans], documents, renamed)
