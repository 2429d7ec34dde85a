"""Validation of a parsed bundle: structure (JSON Schema per item) then meaning (types, endpoints).

Every error names its place in the spec's form, ``[4].doc_uri`` (item 4, field doc_uri), and all
errors are collected up to a cap, so an agent can fix the whole file in one go. Each item is
validated against its own type's schema (dispatch by ``type``) rather than the bundle's ``oneOf``,
whose errors only say "not valid under any of the given schemas".
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from jsonschema import Draft7Validator
from jsonschema.exceptions import ValidationError

from kb_core.base.json_text import json_text
from kb_core.features.bundles.loading import BundleLimits
from kb_core.features.bundles.ontology import Ontology
from kb_core.features.bundles.schema import item_schema
from kb_core.features.bundles.values import ValueProblem, format_path, value_problems

_MAX_MESSAGE_CHARS = 400  # a schema message quotes the bad value; a long one is cut


@dataclass(frozen=True)
class BundleError:
    index: int | None  # item index, None for the whole file
    path: str  # "[4].doc_uri"
    message: str
    kind: str = "validation"  # validation | semantic

    @property
    def text(self) -> str:
        if self.kind == "semantic":
            return f"Error at {self.path}: {self.message}"
        return f"Validation error at {self.path}: {self.message}"

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "path": self.path, "message": self.message, "kind": self.kind, "text": self.text}


def canonical_identity(identity: dict[str, Any]) -> str:
    return json_text(identity, sort_keys=True, separators=(",", ":"))


def node_id(type_name: str, identity: dict[str, Any]) -> str:
    """Stable id of a node: the same type and identity always give the same id, in any KB."""
    digest = hashlib.sha256(f"{type_name}\x00{canonical_identity(identity)}".encode()).hexdigest()
    return f"node_{digest[:24]}"


def edge_id(type_name: str, source_id: str, target_id: str) -> str:
    digest = hashlib.sha256(f"{type_name}\x00{source_id}\x00{target_id}".encode()).hexdigest()
    return f"edge_{digest[:24]}"


def identity_text(identity: dict[str, Any]) -> str:
    """``{doc_uri: "doc-001"}`` as the spec's messages write it."""
    inner = ", ".join(f"{k}: {json.dumps(v, ensure_ascii=False)}" for k, v in identity.items())
    return "{" + inner + "}"


@dataclass
class NodeOp:
    index: int
    type: str
    action: str
    identity: dict[str, Any]
    properties: dict[str, Any]  # every field but type/action (identity included)

    @property
    def id(self) -> str:
        return node_id(self.type, self.identity)


@dataclass
class EdgeOp:
    index: int
    type: str
    action: str
    source_identity: dict[str, Any]
    target_identity: dict[str, Any]
    properties: dict[str, Any] = field(default_factory=dict)


def _shorten(message: str) -> str:
    if len(message) <= _MAX_MESSAGE_CHARS:
        return message
    return f"{message[: _MAX_MESSAGE_CHARS - 40]}… ({len(message):,} characters in all)"


def _schema_error(index: int, error: ValidationError) -> BundleError:
    return _bounded(_schema_error_unbounded(index, error))


def _bounded(error: BundleError) -> BundleError:
    if len(error.message) <= _MAX_MESSAGE_CHARS:
        return error
    return BundleError(error.index, _shorten(error.path), _shorten(error.message), error.kind)


def _schema_error_unbounded(index: int, error: ValidationError) -> BundleError:
    parts: list[Any] = [index, *error.absolute_path]
    if error.validator == "required":
        missing = error.message.split("'")[1] if error.message.count("'") >= 2 else ""
        return BundleError(index, format_path([*parts, missing]), f'"{missing}" is required')
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {})) if isinstance(error.schema, dict) else []
        # YAML allows keys that are not text ({1: x}); str() keeps the sort from comparing int with str.
        extra = sorted(set(error.instance) - set(allowed), key=str) if isinstance(error.instance, dict) else []
        if extra:
            return BundleError(
                index,
                format_path([*parts, extra[0]]),
                f"{', '.join(repr(e) for e in extra)} not allowed here; allowed fields: {', '.join(allowed)}",
            )
    if error.validator == "const" and list(error.absolute_path) == ["type"]:
        return BundleError(index, format_path(parts), error.message)
    return BundleError(index, format_path(parts), error.message)


class BundleValidator:
    """Validates parsed bundles against one ontology (the compiled per-type validators are reused)."""

    def __init__(
        self,
        ontology: Ontology,
        max_errors: int = 50,
        max_items: int = 100_000,
        max_value_chars: int | None = BundleLimits.max_value_chars,
    ) -> None:
        self.ontology = ontology
        self.max_errors = max_errors
        self.max_items = max_items
        self.max_value_chars = max_value_chars  # None: no per-value check (data accepted earlier)
        self._validators = {name: Draft7Validator(item_schema(ontology, name)) for name in ontology.type_names()}

    def structural(self, data: Any) -> tuple[list[NodeOp], list[EdgeOp], list[BundleError]]:
        """Schema-check every item; returns the operations in file order and the errors (capped)."""
        errors: list[BundleError] = []
        if data is None:
            data = []
        if not isinstance(data, list):
            kind = "mapping" if isinstance(data, dict) else type(data).__name__
            message = f"the bundle must be a YAML list of items (- type: ...), got a {kind}"
            return [], [], [BundleError(None, "root", message)]
        if len(data) > self.max_items:
            message = f"the bundle has {len(data)} items; at most {self.max_items} per bundle"
            return [], [], [BundleError(None, "root", message)]
        nodes: list[NodeOp] = []
        edges: list[EdgeOp] = []
        for index, item in enumerate(data):
            if len(errors) >= self.max_errors:
                break
            if not isinstance(item, dict):
                errors.append(BundleError(index, f"[{index}]", f"each item must be a mapping, got {item!r:.60}"))
                continue
            type_name = item.get("type")
            if type_name is None:
                errors.append(BundleError(index, f"[{index}].type", '"type" is required'))
                continue
            validator = self._validators.get(type_name) if isinstance(type_name, str) else None
            if validator is None:
                errors.append(BundleError(index, f"[{index}].type", self.unknown_type(type_name), "semantic"))
                continue
            problems = value_problems(item, self.max_value_chars)
            if problems:
                errors.extend(self._value_error(index, problem) for problem in problems)
                continue
            found = sorted(validator.iter_errors(item), key=lambda e: (list(map(str, e.absolute_path)), e.message))
            if found:
                errors.extend(_schema_error(index, e) for e in found)
                continue
            action = item.get("action", "upsert")
            fields = {k: v for k, v in item.items() if k not in ("type", "action")}
            if type_name in self.ontology.nodes:
                identity = {k: item[k] for k in self.ontology.nodes[type_name].identity}
                nodes.append(NodeOp(index, type_name, action, identity, fields))
            else:
                properties = {k: v for k, v in fields.items() if k not in ("source", "target")}
                edges.append(EdgeOp(index, type_name, action, dict(item["source"]), dict(item["target"]), properties))
        return nodes, edges, errors[: self.max_errors]

    def _value_error(self, index: int, problem: ValueProblem) -> BundleError:
        where = _shorten(format_path([index, *problem.path]))
        if problem.kind == "not-finite":
            shown = "NaN" if math.isnan(problem.value) else ("-" if problem.value < 0 else "") + "infinity"
            return BundleError(
                index, where, f"{shown} is not a finite number; a bundle holds finite numbers only (no .nan or .inf)"
            )
        what = "a field name" if problem.kind == "long-key" else "the text"
        return BundleError(
            index,
            where,
            f"{what} is {problem.length:,} characters long; at most {self.max_value_chars:,} characters per value "
            "are accepted. Split a long text into several items.",
        )

    def unknown_type(self, type_name: Any) -> str:
        names = self.ontology.type_names()
        if not isinstance(type_name, str):
            return f"Entity type {type_name!r} is not defined; 'type' must be one of: {', '.join(names)}."
        aliases = {a.casefold(): name for a, name in self.ontology.aliases().items()}
        lowered = {n.casefold(): n for n in names}
        close = [aliases[type_name.casefold()]] if type_name.casefold() in aliases else []
        if not close and type_name.casefold() in lowered:
            close = [lowered[type_name.casefold()]]
        if not close:
            close = difflib.get_close_matches(type_name, names, n=1, cutoff=0.6)
        if close:
            return f"Entity type '{type_name}' is not defined. Did you mean '{close[0]}'?"
        return f"Entity type '{type_name}' is not defined. Defined types: {', '.join(names)}."


def check_endpoints(
    ontology: Ontology,
    edges: Sequence[EdgeOp],
    node_exists: Callable[[str], bool],
    max_errors: int,
) -> list[BundleError]:
    """The spec's orphan check: an edge upsert needs both endpoints in the KB or in the same bundle."""
    errors: list[BundleError] = []
    for op in edges:
        if op.action != "upsert":
            continue
        edge = ontology.edges[op.type]
        for role, type_name, identity in (
            ("Source", edge.source, op.source_identity),
            ("Target", edge.target, op.target_identity),
        ):
            if not node_exists(node_id(type_name, identity)):
                message = (
                    f"Cannot create '{op.type}' relation: {role} '{type_name}' with identity "
                    f"{identity_text(identity)} not found."
                )
                errors.append(BundleError(op.index, f"[{op.index}].{role.lower()}", message, "semantic"))
        if len(errors) >= max_errors:
            break
    return errors[:max_errors]
