"""The ontology of a knowledge base: which node and edge types a bundle may contain.

An ontology is a mapping (YAML or JSON)::

    nodes:
      Document:
        identity: [doc_uri]            # fields that identify a node; required in every item
        indexed: [content]             # string fields chunked, embedded and searchable
        aliases: [Doc, Paper]          # optional: other names, used only for "Did you mean ...?"
        json_schema:                   # JSON Schema (draft-07) of the node's fields
          type: object
          properties: {doc_uri: {type: string}, content: {type: string}, title: {type: string}}
          required: [content]          # required on upsert (a delete needs only the identity)
    edges:
      REFERENCES:
        from: Document
        to: Document
        json_schema: {type: object, properties: {ref_type: {type: string}}}

It is validated when set (types exist, identity and indexed fields are declared properties, the
property schemas are valid draft-07 schemas) so a bad ontology can never produce a bad bundle schema.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any

from jsonschema import Draft7Validator
from jsonschema.exceptions import SchemaError

from kb_core.base.errors import InvalidArgument
from kb_core.features.bundles.values import format_path, value_problems

TYPE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
FIELD_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
RESERVED_NODE_FIELDS = frozenset({"type", "action"})
RESERVED_EDGE_FIELDS = frozenset({"type", "action", "source", "target"})
IDENTITY_TYPES = frozenset({"string", "integer"})


@dataclass(frozen=True)
class NodeType:
    name: str
    identity: tuple[str, ...]
    properties: dict[str, Any]  # field name -> JSON Schema
    required: tuple[str, ...] = ()  # required on upsert, besides the identity
    indexed: tuple[str, ...] = ()
    description: str = ""
    aliases: tuple[str, ...] = ()  # other names an agent may use; they only feed "Did you mean ...?"

    def to_json(self) -> dict[str, Any]:
        return _type_json(self, {"identity": list(self.identity), "indexed": list(self.indexed)})


@dataclass(frozen=True)
class EdgeType:
    name: str
    source: str  # node type name ("from")
    target: str  # node type name ("to")
    properties: dict[str, Any] = field(default_factory=dict)
    required: tuple[str, ...] = ()
    description: str = ""
    aliases: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return _type_json(self, {"from": self.source, "to": self.target})


def _type_json(kind: NodeType | EdgeType, head: dict[str, Any]) -> dict[str, Any]:
    """The JSON form shared by node and edge types: ``head`` fields, then schema, description, aliases."""
    schema: dict[str, Any] = {"type": "object", "properties": copy.deepcopy(kind.properties)}
    if kind.required:
        schema["required"] = list(kind.required)
    value: dict[str, Any] = {**head, "json_schema": schema}
    if kind.description:
        value["description"] = kind.description
    if kind.aliases:
        value["aliases"] = list(kind.aliases)
    return value


@dataclass(frozen=True)
class Ontology:
    nodes: dict[str, NodeType]
    edges: dict[str, EdgeType]

    def type_names(self) -> list[str]:
        return [*self.nodes, *self.edges]

    def aliases(self) -> dict[str, str]:
        """alias → type name, for suggestions."""
        types: list[NodeType | EdgeType] = [*self.nodes.values(), *self.edges.values()]
        return {alias: t.name for t in types for alias in t.aliases}

    def to_json(self) -> dict[str, Any]:
        return {
            "nodes": {name: node.to_json() for name, node in sorted(self.nodes.items())},
            "edges": {name: edge.to_json() for name, edge in sorted(self.edges.items())},
        }


DEFAULT_ONTOLOGY_JSON: dict[str, Any] = {
    "nodes": {
        "Document": {
            "description": "A text document; its content is chunked, embedded and searchable.",
            "identity": ["doc_uri"],
            "indexed": ["content"],
            "json_schema": {
                "type": "object",
                "properties": {
                    "doc_uri": {"type": "string", "minLength": 1, "description": "Unique identifier of the document"},
                    "content": {"type": "string", "minLength": 1, "description": "Full text of the document"},
                    "title": {"type": "string", "description": "Optional title"},
                },
                "required": ["content"],
            },
        }
    },
    "edges": {
        "REFERENCES": {
            "description": "One document references another.",
            "from": "Document",
            "to": "Document",
            "json_schema": {
                "type": "object",
                "properties": {"ref_type": {"type": "string", "description": "Kind of reference, e.g. citation"}},
            },
        }
    },
}


def default_ontology() -> Ontology:
    return parse_ontology(DEFAULT_ONTOLOGY_JSON)


def _bad(message: str, where: str) -> InvalidArgument:
    return InvalidArgument(f"Invalid ontology at {where}: {message}", details={"path": where})


def _property_schema(raw: Any, where: str, reserved: frozenset[str]) -> tuple[dict[str, Any], tuple[str, ...]]:
    if raw is None:
        return {}, ()
    if not isinstance(raw, dict):
        raise _bad("json_schema must be a mapping with 'properties'.", where)
    unknown = set(raw) - {"type", "properties", "required", "description", "title", "$schema"}
    if unknown:
        raise _bad(f"unsupported key(s) {sorted(unknown)}; allowed: type, properties, required, description.", where)
    if raw.get("type", "object") != "object":
        raise _bad("json_schema.type must be 'object'.", where)
    properties = raw.get("properties", {})
    if not isinstance(properties, dict):
        raise _bad("json_schema.properties must be a mapping of field name to JSON Schema.", where)
    for name, schema in properties.items():
        if not isinstance(name, str) or not FIELD_NAME.match(name):
            raise _bad(f"field name {name!r} must match {FIELD_NAME.pattern}.", f"{where}.properties")
        if name in reserved:
            raise _bad(f"field name {name!r} is reserved ({', '.join(sorted(reserved))}).", f"{where}.properties")
        if not isinstance(schema, dict):
            raise _bad(f"the schema of {name!r} must be a mapping.", f"{where}.properties.{name}")
        try:
            Draft7Validator.check_schema(schema)
        except SchemaError as exc:
            raise _bad(
                f"the schema of {name!r} is not valid draft-07: {exc.message}", f"{where}.properties.{name}"
            ) from exc
    required = raw.get("required", [])
    if not isinstance(required, list) or any(r not in properties for r in required):
        raise _bad("json_schema.required must list declared properties.", where)
    return copy.deepcopy(properties), tuple(dict.fromkeys(required))


def _names(raw: Any, where: str) -> tuple[str, ...]:
    if raw is None:
        return ()
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list) or not all(isinstance(v, str) for v in raw):
        raise _bad("must be a list of field names.", where)
    return tuple(dict.fromkeys(raw))


def parse_ontology(raw: Any) -> Ontology:
    """Validate an ontology mapping and build it; raises InvalidArgument naming the bad path."""
    if not isinstance(raw, dict):
        raise _bad("the ontology must be a mapping with 'nodes' and 'edges'.", "root")
    not_finite = [p for p in value_problems(raw, None) if p.kind == "not-finite"]
    if not_finite:
        where = format_path(not_finite[0].path).lstrip(".")
        raise _bad("a number that is not finite (.nan or .inf) cannot be stored.", where)
    unknown = set(raw) - {"nodes", "edges"}
    if unknown:
        raise _bad(f"unknown key(s) {sorted(unknown)}; allowed: nodes, edges.", "root")
    raw_nodes = raw.get("nodes") or {}
    raw_edges = raw.get("edges") or {}
    if not isinstance(raw_nodes, dict) or not raw_nodes:
        raise _bad("'nodes' must be a non-empty mapping of node type name to definition.", "nodes")
    if not isinstance(raw_edges, dict):
        raise _bad("'edges' must be a mapping of edge type name to definition.", "edges")
    nodes: dict[str, NodeType] = {}
    for name, spec in raw_nodes.items():
        where = f"nodes.{name}"
        if not isinstance(name, str) or not TYPE_NAME.match(name):
            raise _bad(f"type name {name!r} must match {TYPE_NAME.pattern}.", "nodes")
        if not isinstance(spec, dict):
            raise _bad("a node type must be a mapping with identity, indexed and json_schema.", where)
        unknown = set(spec) - {"identity", "indexed", "json_schema", "description", "aliases"}
        if unknown:
            allowed = "identity, indexed, json_schema, description, aliases"
            raise _bad(f"unknown key(s) {sorted(unknown)}; allowed: {allowed}.", where)
        properties, required = _property_schema(spec.get("json_schema"), f"{where}.json_schema", RESERVED_NODE_FIELDS)
        identity = _names(spec.get("identity"), f"{where}.identity")
        if not identity:
            raise _bad("identity must name at least one field.", f"{where}.identity")
        for key in identity:
            if key not in properties:
                raise _bad(f"identity field {key!r} is not a declared property.", f"{where}.identity")
            if properties[key].get("type") not in IDENTITY_TYPES:
                raise _bad(f"identity field {key!r} must have type string or integer.", f"{where}.identity")
        indexed = _names(spec.get("indexed"), f"{where}.indexed")
        for key in indexed:
            if key not in properties or properties[key].get("type") != "string":
                raise _bad(f"indexed field {key!r} must be a declared property of type string.", f"{where}.indexed")
        nodes[name] = NodeType(
            name=name,
            identity=identity,
            properties=properties,
            required=tuple(r for r in required if r not in identity),
            indexed=indexed,
            description=str(spec.get("description") or ""),
            aliases=_names(spec.get("aliases"), f"{where}.aliases"),
        )
    edges: dict[str, EdgeType] = {}
    for name, spec in raw_edges.items():
        where = f"edges.{name}"
        if not isinstance(name, str) or not TYPE_NAME.match(name):
            raise _bad(f"type name {name!r} must match {TYPE_NAME.pattern}.", "edges")
        if name in nodes:
            raise _bad(f"{name!r} is already a node type; type names must be unique.", where)
        if not isinstance(spec, dict):
            raise _bad("an edge type must be a mapping with from, to and json_schema.", where)
        unknown = set(spec) - {"from", "to", "json_schema", "description", "aliases"}
        if unknown:
            raise _bad(
                f"unknown key(s) {sorted(unknown)}; allowed: from, to, json_schema, description, aliases.", where
            )
        for end in ("from", "to"):
            if spec.get(end) not in nodes:
                raise _bad(f"'{end}' must name a node type ({', '.join(nodes)}), got {spec.get(end)!r}.", where)
        properties, required = _property_schema(spec.get("json_schema"), f"{where}.json_schema", RESERVED_EDGE_FIELDS)
        edges[name] = EdgeType(
            name=name,
            source=spec["from"],
            target=spec["to"],
            properties=properties,
            required=required,
            description=str(spec.get("description") or ""),
            aliases=_names(spec.get("aliases"), f"{where}.aliases"),
        )
    return Ontology(nodes=nodes, edges=edges)
