"""Knowledge bundles: an ontology per KB, a generated JSON Schema, validated YAML import, a graph.

The operations live in :mod:`kb_core.bundles.api`: each takes the session's operations, returns a typed result and
raises KBError. The functions of the same names here are the Python API's form, for notebooks: each takes a
:class:`kb_core.session.Session` and returns the envelope of that operation (``session.answer(api.…)``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kb_core.bundles import api
from kb_core.bundles.api import check_bundle, expand_hits
from kb_core.bundles.loading import BundleLimits, load_bundle_file, load_bundle_text
from kb_core.bundles.ontology import DEFAULT_ONTOLOGY_JSON, Ontology, default_ontology, parse_ontology
from kb_core.bundles.schema import bundle_schema, example_yaml, item_schema
from kb_core.seams import Answering

__all__ = [
    "DEFAULT_ONTOLOGY_JSON",
    "BundleLimits",
    "Ontology",
    "bundle_schema",
    "check_bundle",
    "default_ontology",
    "example_yaml",
    "expand_hits",
    "export_shadow",
    "get_knowledge_schema",
    "get_node",
    "get_ontology",
    "graph_view",
    "import_knowledge_bundle",
    "item_schema",
    "load_bundle_file",
    "load_bundle_text",
    "parse_ontology",
    "rebuild_from_shadow",
    "repair_index",
    "set_ontology",
]


def get_knowledge_schema(session: Answering, kb_name: str | None = None) -> dict[str, Any]:
    return session.answer(api.get_knowledge_schema, kb_name)


def get_ontology(session: Answering, kb_name: str | None = None) -> dict[str, Any]:
    return session.answer(api.get_ontology, kb_name)


def set_ontology(
    session: Answering, source: str | Path | Mapping[str, Any], kb_name: str | None = None
) -> dict[str, Any]:
    return session.answer(api.set_ontology, source, kb_name)


def import_knowledge_bundle(
    session: Answering, temp_file_path: str | Path, kb_name: str | None = None, *, delete_file: bool = True
) -> dict[str, Any]:
    return session.answer(api.import_knowledge_bundle, temp_file_path, kb_name, delete_file=delete_file)


def repair_index(session: Answering, kb_name: str | None = None) -> dict[str, Any]:
    return session.answer(api.repair_index, kb_name)


def export_shadow(session: Answering, target: str | Path | None = None, kb_name: str | None = None) -> dict[str, Any]:
    return session.answer(api.export_shadow, target, kb_name)


def rebuild_from_shadow(session: Answering, shadow_dir: str | Path, kb_name: str | None = None) -> dict[str, Any]:
    return session.answer(api.rebuild_from_shadow, shadow_dir, kb_name)


def get_node(session: Answering, node_id_: str, kb_names: Sequence[str] | None = None) -> dict[str, Any]:
    return session.answer(api.get_node, node_id_, kb_names)


def graph_view(session: Answering, kb_name: str | None = None, limit: int = 500) -> dict[str, Any]:
    return session.answer(api.graph_view, kb_name, limit)
