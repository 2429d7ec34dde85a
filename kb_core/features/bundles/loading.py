"""Reading a bundle file: PyYAML's event parser, values built one event at a time within budgets.

``yaml.safe_load`` alone is not enough for files written by an agent or a stranger: aliases make a "billion
laughs" file of a few hundred bytes expand to 10^9 values once anything walks it; a flat file that is merely wide
(4 MB of ``- 1`` lines) costs about 250 bytes per value as PyYAML's node graph, built whole before anything is
counted; deep nesting overflows the recursive composer. So there is no node graph: the values are built straight
from the parser's events, and every value counts against the budgets the moment it is read. A value reached
through an alias counts as often as it is used (the values and characters it expands to), so the budgets hold for
the document as a program walking it would see it. The loader refuses an alias inside its own anchor
(``- &a [*a]`` never ends), nesting deeper than the limit, more aliases than the limit, and duplicate keys, also
keys that differ only in how they are written (``1`` and ``0x1``, ``true`` and ``yes``: PyYAML silently keeps the
last one); it keeps timestamps as strings (an agent's ``2024-01-01`` is text, not a ``datetime.date`` that fails a
string schema). Only JSON-shaped values come out: ``!!binary``, ``!!set``, ``!!omap``, ``!!pairs`` and
``!!timestamp`` tags, unreadable numbers and integers Python cannot print are refused. Merge keys (``<<``) work as
in PyYAML. The per-value length limit (``max_value_chars``) and finite numbers are checked by the validator, which
knows each value's item and field. libyaml scans and parses when PyYAML has it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import yaml
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.events import (
    AliasEvent,
    DocumentStartEvent,
    Event,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
    StreamStartEvent,
)
from yaml.nodes import ScalarNode
from yaml.resolver import Resolver

from kb_core.base.errors import ImportFormatError


@dataclass(frozen=True)
class BundleLimits:
    max_file_bytes: int = 64 * 1024 * 1024
    max_depth: int = 32
    max_aliases: int = 100
    max_values: int = 2_000_000  # scalars, lists and mappings (keys included), aliases counted as expanded
    max_items: int = 100_000
    max_value_chars: int = 2_000_000  # one string (a Document's content: about 1,000 pages)
    max_text_chars: int = 64 * 1024 * 1024  # all strings together, aliases counted as expanded
    max_errors: int = 50  # validation errors reported at most


class LimitExceeded(ImportFormatError):
    pass


class AliasCycle(LimitExceeded):
    pass


_MAX_INT_BITS = 13_000  # about 3,900 decimal digits, under Python's 4,300-digit str() limit
# Values a JSON-shaped bundle cannot hold (bytes, sets, ordered pairs, dates): refused rather than handed on.
_NOT_JSON_TAGS = frozenset(f"tag:yaml.org,2002:{name}" for name in ("binary", "set", "omap", "pairs", "timestamp"))
_SEQ = "tag:yaml.org,2002:seq"
_MAP = "tag:yaml.org,2002:map"
_MERGE = "tag:yaml.org,2002:merge"
_STR = "tag:yaml.org,2002:str"


class _Python(yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser, SafeConstructor, Resolver):  # type: ignore[misc]
    def __init__(self, stream: str) -> None:
        yaml.reader.Reader.__init__(self, stream)
        yaml.scanner.Scanner.__init__(self)
        yaml.parser.Parser.__init__(self)
        SafeConstructor.__init__(self)
        Resolver.__init__(self)


try:
    from yaml._yaml import CParser

    class _Fast(CParser, SafeConstructor, Resolver):  # type: ignore[misc]
        """libyaml's scanner and parser (fast); the events are turned into values here, under the limits."""

        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)

    _EventSource: type = _Fast
except ImportError:  # PyYAML built without libyaml
    _EventSource = _Python

# Timestamps stay strings: drop the implicit timestamp resolver in our loaders only.
_NO_TIMESTAMPS = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Python.yaml_implicit_resolvers = _NO_TIMESTAMPS
_EventSource.yaml_implicit_resolvers = _NO_TIMESTAMPS

_NO_KEY = object()
_MERGE_KEY = object()  # a plain "<<": a merge when it is a mapping's key, the text "<<" elsewhere


@dataclass
class _Open:
    """A list or mapping being read: its value so far and what it has cost."""

    value: Any
    anchor: str | None
    line: int
    values_before: int  # the budget counters when it opened
    chars_before: int
    key: Any = _NO_KEY  # a mapping's key waiting for its value
    key_text: str = ""
    key_is_merge: bool = False
    written: dict[Any, str] = field(default_factory=dict)  # a mapping's keys as written
    merges: list[dict[Any, Any]] = field(default_factory=list)


@dataclass
class _Anchored:
    value: Any
    values: int  # what a use of it costs
    chars: int


class _Builder:
    """Values from PyYAML events, under :class:`BundleLimits`."""

    def __init__(self, source: Any, limits: BundleLimits) -> None:
        self.source = source
        self.limits = limits
        self.values = self.chars = 0  # as expanded: aliases count what they repeat
        self.written_values = self.written_chars = 0  # as written in the file
        self.aliases = 0
        self.anchors: dict[str, _Anchored] = {}
        self.open: list[_Open] = []

    def document(self) -> Any:
        event = self.source.get_event()
        if not isinstance(event, StreamStartEvent):  # pragma: no cover - the parser always starts so
            raise ImportFormatError("The bundle is not valid YAML: no stream start.")
        event = self.source.get_event()
        if isinstance(event, StreamEndEvent):
            return None
        if not isinstance(event, DocumentStartEvent):  # pragma: no cover
            raise ImportFormatError("The bundle is not valid YAML: no document start.")
        root = self.node()
        self.source.get_event()  # DocumentEndEvent
        if not self.source.check_event(StreamEndEvent):
            event = self.source.get_event()
            raise ImportFormatError(
                f"The bundle holds more than one YAML document (a second one starts on line {_line(event)}); "
                "a bundle is one list of items."
            )
        return root

    def node(self) -> Any:
        """Read one whole value (iteratively: nesting never recurses in Python)."""
        while True:
            event = self.source.get_event()
            if isinstance(event, ScalarEvent):
                done = self.scalar(event)
            elif isinstance(event, AliasEvent):
                done = self.alias(event)
            elif isinstance(event, (SequenceStartEvent, MappingStartEvent)):
                self.start(event)
                continue
            elif isinstance(event, (SequenceEndEvent, MappingEndEvent)):
                done = self.end()
            else:  # pragma: no cover - the parser checks the event order
                raise ImportFormatError(f"The bundle is not valid YAML: unexpected {type(event).__name__}.")
            if not self.open:
                return "<<" if done is _MERGE_KEY else done
            self.add(done, event)

    # -- the budgets ---------------------------------------------------------------------------------------
    def spend(self, values: int, chars: int, event: Event, *, written: bool) -> None:
        self.values += values
        self.chars += chars
        if written:
            self.written_values += values
            self.written_chars += chars
        limits = self.limits
        if self.values > limits.max_values:
            if self.written_values > limits.max_values:
                raise LimitExceeded(
                    f"The bundle holds more than {limits.max_values:,} values (line {_line(event)}); "
                    "split it into several bundles."
                )
            raise LimitExceeded(
                f"The YAML expands to more than {limits.max_values} values through aliases (line {_line(event)}; "
                "a 'billion laughs' file?); write the values out instead of using anchors and aliases."
            )
        if self.chars > limits.max_text_chars:
            if self.written_chars > limits.max_text_chars:  # pragma: no cover - max_file_bytes comes first
                raise LimitExceeded(f"The bundle holds more than {limits.max_text_chars:,} characters of text.")
            raise LimitExceeded(
                f"The YAML's text expands to more than {limits.max_text_chars:,} characters through aliases; "
                "write the values out instead of using anchors and aliases, or split the bundle."
            )

    # -- events --------------------------------------------------------------------------------------------
    def scalar(self, event: ScalarEvent) -> Any:
        self.spend(1, len(event.value), event, written=True)
        tag = event.tag
        if tag is None or tag == "!":
            tag = self.source.resolve(ScalarNode, event.value, event.implicit)
        _refuse_tag(tag, event)
        if tag == _MERGE:
            return _MERGE_KEY
        if tag == _STR:  # most values: no node to build
            self.remember(event.anchor, event.value, 1, len(event.value))
            return event.value
        node = ScalarNode(tag, event.value, event.start_mark, event.end_mark, event.style)
        constructor = self.source.yaml_constructors.get(tag) or self.source.yaml_constructors[None]
        try:
            value = constructor(self.source, node)
        except (ValueError, IndexError, TypeError, OverflowError) as exc:  # "!!int abc", "!!int " (empty) ...
            reason = str(exc).split(";")[0]
            raise ImportFormatError(f"The value on line {_line(event)} cannot be read: {reason}.") from None
        if isinstance(value, int) and value.bit_length() > _MAX_INT_BITS:  # "0xfff...": Python cannot print it
            raise ImportFormatError(f"The number on line {_line(event)} is too large (at most about 3,900 digits).")
        self.remember(event.anchor, value, 1, len(event.value))
        return value

    def alias(self, event: AliasEvent) -> Any:
        self.aliases += 1
        if self.aliases > self.limits.max_aliases:
            raise LimitExceeded(
                f"The YAML uses more than {self.limits.max_aliases} aliases (line {_line(event)}); "
                "write the values out instead of using anchors and aliases."
            )
        if any(frame.anchor == event.anchor for frame in self.open):
            line = next(f.line for f in reversed(self.open) if f.anchor == event.anchor)
            raise AliasCycle(
                f"The YAML contains a value that includes itself through an alias (the anchor on line {line}); "
                "such a value never ends. Write the values out instead of using anchors and aliases."
            )
        anchored = self.anchors.get(event.anchor)  # type: ignore[arg-type]
        if anchored is None:
            raise ImportFormatError(
                f"The bundle is not valid YAML: alias *{event.anchor} on line {_line(event)} names no anchor."
            )
        self.spend(anchored.values, anchored.chars, event, written=False)
        return anchored.value

    def start(self, event: SequenceStartEvent | MappingStartEvent) -> None:
        if len(self.open) >= self.limits.max_depth:
            raise LimitExceeded(f"The YAML nests deeper than {self.limits.max_depth} levels (line {_line(event)}).")
        self.spend(1, 0, event, written=True)
        sequence = isinstance(event, SequenceStartEvent)
        tag = event.tag
        if tag is None or tag == "!":
            tag = _SEQ if sequence else _MAP
        _refuse_tag(tag, event)
        if tag != (_SEQ if sequence else _MAP):
            kind = "a list" if sequence else "a mapping"
            raise ImportFormatError(
                f"The YAML tag {tag!r} on line {_line(event)} cannot be used on {kind}: a bundle holds strings, "
                "numbers, booleans, null, lists and mappings."
            )
        self.open.append(
            _Open([] if sequence else {}, event.anchor, _line(event), self.values - 1, self.chars)
        )

    def end(self) -> Any:
        frame = self.open.pop()
        value = frame.value
        if isinstance(value, dict) and frame.merges:
            merged: dict[Any, Any] = {}
            for source in frame.merges:  # the first mapping named wins, explicit keys win over all
                for key, item in source.items():
                    merged.setdefault(key, item)
            merged.update(value)
            value = merged
        self.remember(frame.anchor, value, self.values - frame.values_before, self.chars - frame.chars_before)
        return value

    def add(self, value: Any, event: Event) -> None:
        frame = self.open[-1]
        merge_key = value is _MERGE_KEY
        if merge_key:
            value = "<<"
        if isinstance(frame.value, list):
            frame.value.append(value)
            return
        if frame.key is _NO_KEY:  # this value is a key
            if isinstance(value, (list, dict)):
                raise ImportFormatError(
                    f"A key on line {_line(event)} is a list or a mapping; keys must be text or numbers."
                )
            frame.key = value
            frame.key_text = event.value if isinstance(event, ScalarEvent) else f"*{getattr(event, 'anchor', '')}"
            frame.key_is_merge = merge_key
            return
        key, text, merge = frame.key, frame.key_text, frame.key_is_merge
        frame.key = _NO_KEY
        if merge:
            sources = value if isinstance(value, list) else [value]
            if not all(isinstance(source, dict) for source in sources):
                raise ImportFormatError(
                    f"The merge key '<<' on line {frame.line} needs a mapping or a list of mappings."
                )
            frame.merges.extend(sources)
            return
        if key in frame.value:
            first = frame.written[key]
            same = "" if first == text else f" (the same key as {first!r} once read)"
            raise ImportFormatError(
                f"Duplicate key {text!r}{same} in one mapping (line {_line(event)}); each field may appear once "
                "per item."
            )
        frame.written[key] = text
        frame.value[key] = value

    def remember(self, anchor: str | None, value: Any, values: int, chars: int) -> None:
        if anchor is not None:
            self.anchors[anchor] = _Anchored(value, values, chars)


def _line(event: Event) -> int:
    return event.start_mark.line + 1 if event.start_mark is not None else 0


def _refuse_tag(tag: str, event: Event) -> None:
    if tag in _NOT_JSON_TAGS:
        raise ImportFormatError(
            f"The YAML tag {tag.rsplit(':', 1)[-1]!r} (line {_line(event)}) is not accepted: "
            "a bundle holds strings, numbers, booleans, null, lists and mappings."
        )


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
    source = _EventSource(text)
    try:
        return _Builder(source, limits).document()
    except ConstructorError as exc:  # an unknown tag ("!!python/object"), a merge of something not a mapping
        raise ImportFormatError(f"The bundle is not valid YAML: {exc}") from exc
    except yaml.YAMLError as exc:
        raise ImportFormatError(f"The bundle is not valid YAML: {exc}") from exc
    except RecursionError as exc:  # pragma: no cover - nothing here recurses; kept as a last line
        raise LimitExceeded("The YAML nests too deeply to be read.") from exc
    finally:
        source.dispose()
