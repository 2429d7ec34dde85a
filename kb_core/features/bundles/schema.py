"""JSON Schema (draft-07) of a knowledge bundle, generated from an ontology, and an example bundle.

The full schema is what the spec describes: an ``array`` whose ``items`` is a ``oneOf`` over one
schema per node and edge type. Validation does not use that ``oneOf`` (its errors say only "not
valid under any of the given schemas"); :mod:`kb_core.features.bundles.validation` dispatches each item by
its ``type`` to :func:`item_schema`. Deletes need only the identity (nodes) or ``source`` and
``target`` (edges): fields required on upsert are required through ``if action == delete / else``.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

import yaml
from jsonschema import Draft7Validator

from kb_core.features.bundles.ontology import EdgeType, NodeType, Ontology

logger = logging.getLogger(__name__)

SCHEMA_DRAFT = "http://json-schema.org/draft-07/schema#"
ACTIONS = ("upsert", "delete")


def _action_schema() -> dict[str, Any]:
    return {"type": "string", "enum": list(ACTIONS), "default": "upsert"}


def _upsert_only(required: tuple[str, ...]) -> dict[str, Any]:
    """``required`` applies unless the item is a delete."""
    if not required:
        return {}
    return {
        "if": {"properties": {"action": {"const": "delete"}}, "required": ["action"]},
        "else": {"required": list(required)},
    }


def node_schema(node: NodeType) -> dict[str, Any]:
    properties: dict[str, Any] = {"type": {"const": node.name}, "action": _action_schema()}
    properties.update(copy.deepcopy(node.properties))
    schema: dict[str, Any] = {
        "title": f"{node.name} Node",
        "type": "object",
        "required": ["type", *node.identity],
        "properties": properties,
        "additionalProperties": False,
    }
    if node.description:
        schema["description"] = node.description
    schema.update(_upsert_only(node.required))
    return schema


def _endpoint_schema(node: NodeType) -> dict[str, Any]:
    return {
        "type": "object",
        "description": f"Identity of the {node.name} node",
        "required": list(node.identity),
        "properties": {key: copy.deepcopy(node.properties[key]) for key in node.identity},
        "additionalProperties": False,
    }


def edge_schema(edge: EdgeType, ontology: Ontology) -> dict[str, Any]:
    properties: dict[str, Any] = {
        "type": {"const": edge.name},
        "action": _action_schema(),
        "source": _endpoint_schema(ontology.nodes[edge.source]),
        "target": _endpoint_schema(ontology.nodes[edge.target]),
    }
    properties.update(copy.deepcopy(edge.properties))
    schema: dict[str, Any] = {
        "title": f"{edge.name} Edge",
        "type": "object",
        "required": ["type", "source", "target"],
        "properties": properties,
        "additionalProperties": False,
    }
    if edge.description:
        schema["description"] = edge.description
    schema.update(_upsert_only(edge.required))
    return schema


def item_schema(ontology: Ontology, type_name: str) -> dict[str, Any]:
    if type_name in ontology.nodes:
        return node_schema(ontology.nodes[type_name])
    return edge_schema(ontology.edges[type_name], ontology)


def bundle_schema(ontology: Ontology) -> dict[str, Any]:
    return {
        "$schema": SCHEMA_DRAFT,
        "title": "KB Workbench Knowledge Bundle Schema",
        "description": "A YAML list of items. Each item has a 'type' (a node or edge type) and an optional "
        "'action' (upsert, the default, or delete). Nodes give their identity fields; edges give 'source' and "
        "'target' objects with the identity fields of their endpoint nodes.",
        "type": "array",
        "items": {"oneOf": [item_schema(ontology, name) for name in ontology.type_names()]},
    }


# -- example ---------------------------------------------------------------------------------------
def _example_value(field_name: str, schema: dict[str, Any], type_name: str, n: int) -> Any:
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    if "default" in schema:
        return schema["default"]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind == "integer":
        return max(n, int(schema.get("minimum", n)))
    if kind == "number":
        return float(schema.get("minimum", n + 0.5))
    if kind == "boolean":
        return True
    if kind == "array":
        items = schema.get("items") if isinstance(schema.get("items"), dict) else {"type": "string"}
        return [_example_value(field_name, items, type_name, n)] * max(1, int(schema.get("minItems", 1)))
    if kind == "object":
        return {}
    prefix = "doc" if field_name.endswith("uri") else field_name
    if field_name == "content" or field_name in ("text", "body", "description"):
        return f"Text of {type_name.lower()} {n:03d}, chunked and indexed for search. 中文内容也可以。"
    if field_name in ("title", "name"):
        return f"{type_name} {n:03d}"
    return f"{prefix}-{n:03d}"


def _example_node(node: NodeType, n: int, full: bool) -> dict[str, Any]:
    item: dict[str, Any] = {"type": node.name}
    for name, schema in node.properties.items():
        if name in node.identity or name in node.required or full:
            item[name] = _example_value(name, schema, node.name, n)
    return item


def example_bundle(ontology: Ontology) -> list[dict[str, Any]]:
    """A small bundle that uses every type: two nodes per node type, one delete, one edge per edge type."""
    items: list[dict[str, Any]] = []
    nodes = {name: [_example_node(node, n, full=n == 1) for n in (1, 2)] for name, node in ontology.nodes.items()}
    for name in ontology.nodes:
        items.extend(nodes[name])
    first = next(iter(ontology.nodes.values()))
    delete = {"type": first.name, "action": "delete"}
    delete.update({key: _example_value(key, first.properties[key], first.name, 99) for key in first.identity})
    items.append(delete)
    for edge in ontology.edges.values():
        source, target = ontology.nodes[edge.source], ontology.nodes[edge.target]
        item: dict[str, Any] = {
            "type": edge.name,
            "source": {key: nodes[source.name][0][key] for key in source.identity},
            "target": {key: nodes[target.name][1][key] for key in target.identity},
        }
        for name, schema in edge.properties.items():
            item[name] = _example_value(name, schema, edge.name, 1)
        items.append(item)
    return items


def example_yaml(ontology: Ontology) -> str:
    items = example_bundle(ontology)
    errors = [
        e.message for item in items for e in Draft7Validator(item_schema(ontology, item["type"])).iter_errors(item)
    ]
    if errors:  # exotic property constraints (patterns, formats) the generator cannot satisfy
        logger.warning("the generated example bundle does not validate: %s", "; ".join(errors[:5]))
    return yaml.safe_dump(items, sort_keys=False, allow_unicode=True, default_flow_style=None, width=100)
