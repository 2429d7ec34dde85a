"""Reading a bundle file: PyYAML's safe loader under limits.

``yaml.safe_load`` alone is not enough for files written by an agent or a stranger: aliases make a
"billion laughs" file of a few hundred bytes expand to 10^9 values once anything walks it, and deep
nesting overflows the recursive composer. The loader here counts alias uses and the number of
values and characters the document expands to (computed on the node graph, before anything is
constructed), refuses an alias inside its own anchor (``- &a [*a]`` never ends), caps nesting
depth, refuses duplicate keys (PyYAML silently keeps the last one) and keeps timestamps as
strings (an agent's ``2024-01-01`` is text, not a ``datetime.date`` that fails a string schema).
Only JSON-shaped values come out: ``!!binary``, ``!!set``, ``!!omap``, ``!!pairs`` and
``!!timestamp`` tags, unreadable numbers and integers Python cannot print are refused.
The per-value length limit (``max_value_chars``) is applied by the validator, which knows each
value's item and field.
libyaml scans and parses when PyYAML has it; composition stays in Python so the limits apply
while the node graph is built, before any expansion.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.resolver import Resolver

from kb_core.errors import ImportFormatError


@dataclass(frozen=True)
class BundleLimits:
    max_file_bytes: int = 64 * 1024 * 1024
    max_depth: int = 32
    max_aliases: int = 100
    max_values: int = 2_000_000  # scalars, lists and mappings after alias expansion
    max_items: int = 100_000
    max_value_chars: int = 2_000_000  # one string (a Document's content: about 1,000 pages)
    max_text_chars: int = 64 * 1024 * 1024  # all strings together after alias expansion
    max_errors: int = 50  # validation errors reported at most


class LimitExceeded(ImportFormatError):
    pass


class _Limits:
    """Mixed in before a loader's composer: depth and alias caps, duplicate-key refusal."""

    limits: BundleLimits = BundleLimits()
    _depth = 0
    _aliases = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node:  # type: ignore[override]
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > self.limits.max_aliases:
                mark = self.peek_event().start_mark
                raise LimitExceeded(
                    f"The YAML uses more than {self.limits.max_aliases} aliases (line {mark.line + 1}); "
                    "write the values out instead of using anchors and aliases."
                )
        self._depth += 1
        try:
            if self._depth > self.limits.max_depth:
                mark = self.peek_event().start_mark
                raise LimitExceeded(
                    f"The YAML nests deeper than {self.limits.max_depth} levels (line {mark.line + 1})."
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:  # type: ignore[override]
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if isinstance(key_node, ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                key = (key_node.tag, key_node.value)
                if key in seen:
                    raise ImportFormatError(
                        f"Duplicate key {key_node.value!r} in one mapping (line {key_node.start_mark.line + 1}); "
                        "each field may appear once per item."
                    )
                seen.add(key)
        return super().construct_mapping(node, deep=deep)

    def construct_object(self, node: Node, deep: bool = False) -> Any:
        if node.tag in _NOT_JSON_TAGS:
            raise ImportFormatError(
                f"The YAML tag {node.tag.rsplit(':', 1)[-1]!r} (line {node.start_mark.line + 1}) is not accepted: "
                "a bundle holds strings, numbers, booleans, null, lists and mappings."
            )
        try:
            value = super().construct_object(node, deep=deep)
        except (ValueError, IndexError, TypeError, OverflowError) as exc:  # "!!int abc", "!!int " (empty) ...
            reason = str(exc).split(";")[0]
            raise ImportFormatError(f"The value on line {node.start_mark.line + 1} cannot be read: {reason}.") from None
        if isinstance(value, int) and value.bit_length() > _MAX_INT_BITS:  # "0xfff...": Python cannot print it
            line = node.start_mark.line + 1
            raise ImportFormatError(f"The number on line {line} is too large (at most about 3,900 digits).")
        return value


_MAX_INT_BITS = 13_000  # about 3,900 decimal digits, under Python's 4,300-digit str() limit
# Values a JSON-shaped bundle cannot hold (bytes, sets, ordered pairs, dates): refused rather than handed on.
_NOT_JSON_TAGS = frozenset(f"tag:yaml.org,2002:{name}" for name in ("binary", "set", "omap", "pairs", "timestamp"))


class _PythonLoader(_Limits, yaml.SafeLoader):  # type: ignore[misc]
    pass


try:
    from yaml._yaml import CParser

    class _FastLoader(_Limits, Composer, CParser, SafeConstructor, Resolver):  # type: ignore[misc]
        """libyaml's scanner and parser (fast) under PyYAML's Python composer (where the limits hook in)."""

        def __init__(self, stream: Any) -> None:
            CParser.__init__(self, stream)
            Composer.__init__(self)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)

    _LimitedLoader: type = _FastLoader
except ImportError:  # PyYAML built without libyaml
    _LimitedLoader = _PythonLoader

# Timestamps stay strings: drop the implicit timestamp resolver in our loaders only.
_NO_TIMESTAMPS = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_PythonLoader.yaml_implicit_resolvers = _NO_TIMESTAMPS
_LimitedLoader.yaml_implicit_resolvers = _NO_TIMESTAMPS


class AliasCycle(LimitExceeded):
    pass


def _expanded_size(root: Node, limits: BundleLimits) -> tuple[int, int]:
    """(values, characters of scalars) the node graph expands to when aliases are followed.

    Memoised per node, so linear in distinct nodes however deep a "billion laughs" DAG is; both counts
    are capped just above their limits. An alias inside its own anchor (``&a [*a]``, ``&a {k: *a}``)
    makes the graph cyclic: it would expand without end, so it is refused here, before any value is
    constructed.
    """
    value_cap, char_cap = limits.max_values + 1, limits.max_text_chars + 1
    sizes: dict[int, tuple[int, int]] = {}
    open_nodes: set[int] = set()  # on the current depth-first path: met again below itself means a cycle
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            child_sizes = [sizes[id(c)] for c in _children(node)]
            sizes[key] = (
                min(1 + sum(v for v, _ in child_sizes), value_cap),
                min(sum(c for _, c in child_sizes), char_cap),
            )
            open_nodes.discard(key)
            continue
        if key in sizes:
            continue
        if key in open_nodes:
            raise AliasCycle(
                "The YAML contains a value that includes itself through an alias (the anchor on line "
                f"{node.start_mark.line + 1}); such a value never ends. Write the values out instead of using "
                "anchors and aliases."
            )
        if isinstance(node, ScalarNode):
            sizes[key] = (1, len(node.value))
            continue
        open_nodes.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in _children(node) if id(c) not in sizes)
    return sizes[id(root)]


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def load_bundle_file(path: Path, limits: BundleLimits | None = None) -> Any:
    """Parse a YAML (or JSON) bundle file under ``limits``; raises ImportFormatError with the reason."""
    with path.open("rb") as handle:
        return load_bundle_handle(handle, limits)


def load_bundle_handle(handle: BinaryIO, limits: BundleLimits | None = None) -> Any:
    """:func:`load_bundle_file` on a file already open for reading (from its current position)."""
    limits = limits or BundleLimits()
    size = os.fstat(handle.fileno()).st_size
    if size > limits.max_file_bytes:
        raise LimitExceeded(
            f"The bundle file is {size} bytes; at most {limits.max_file_bytes} bytes are accepted. "
            "Split it into several bundles."
        )
    data = handle.read(limits.max_file_bytes + 1)
    if len(data) > limits.max_file_bytes:  # grew after the size check
        raise LimitExceeded(f"The bundle file is over {limits.max_file_bytes} bytes. Split it into several bundles.")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ImportFormatError(f"The bundle file is not UTF-8 text (byte {exc.start}).") from exc
    return load_bundle_text(text, limits)


def load_bundle_text(text: str, limits: BundleLimits | None = None) -> Any:
    limits = limits or BundleLimits()
    loader_class = type("_Loader", (_LimitedLoader,), {"limits": limits})
    loader = loader_class(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        values, chars = _expanded_size(node, limits)
        if values > limits.max_values:
            raise LimitExceeded(
                f"The YAML expands to more than {limits.max_values} values through aliases "
                "(a 'billion laughs' file?); write the values out instead of using anchors and aliases."
            )
        if chars > limits.max_text_chars:
            raise LimitExceeded(
                f"The YAML's text expands to more than {limits.max_text_chars:,} characters through aliases; "
                "write the values out instead of using anchors and aliases, or split the bundle."
            )
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise ImportFormatError(f"The bundle is not valid YAML: {exc}") from exc
    except RecursionError as exc:
        raise LimitExceeded("The YAML nests too deeply to be read.") from exc
    finally:
        loader.dispose()
