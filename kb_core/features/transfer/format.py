"""The export file format's names and limits (the format itself: ``docs/export-format.md``)."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from kb_core.base.errors import InvalidArgument
from kb_core.base.files import EXACT_VECTORS_FILE
from kb_core.base.safe_files import reject_nul
from kb_core.base.validation import ITEM_ID, KB_NAME_MAX_LENGTH, name_key
from kb_core.store.registry import KnowledgeBaseRecord

if TYPE_CHECKING:
    from kb_core.features.bundles.graph import GraphState

logger = logging.getLogger(__name__)


FORMAT_NAME = "kb-workbench-export"
FORMAT_VERSION = 1
MANIFEST_MEMBER = "manifest.json"
VECTORS_FILE = EXACT_VECTORS_FILE
SEGMENT_PATH = re.compile(r"^kb/\d{4}/seg/\d{4}$")
GRAPH_PATH = re.compile(r"^kb/\d{4}/graph/state\.json$")
MEMBER_PATH = re.compile(
    r"^kb/\d{4}/(?:seg/\d{4}/(?:documents\.parquet|chunks\.parquet|texts\.parquet|vectors\.npy"
    r"|files/[A-Za-z0-9][A-Za-z0-9_-]{0,127}(?:\.[A-Za-z0-9]{1,16})?)|graph/state\.json)$"
)
NODE_KEYS = frozenset({"id", "type", "identity", "properties", "doc_id", "doc_name", "text_sha256"})
EDGE_KEYS = frozenset({"id", "type", "source", "target", "properties"})
SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")
ID_PATTERN = ITEM_ID
SUFFIX_PATTERN = re.compile(r"^(?:\.[A-Za-z0-9]{1,16})?$")
DOCUMENT_NAME_MAX = 255
READ_BLOCK = 1 << 20
SNAPSHOT_ATTEMPTS = 5
MAX_MANIFEST_DEPTH = 16  # the format nests 5 levels (manifest, KB list, KB, document list, document)
MAX_GRAPH_DEPTH = 64  # a graph state nests its bundles' properties (at most 32 levels, see BundleLimits)
NPY_VERSIONS = ((1, 0), (2, 0))

# Known embedding dimensions (lower-cased base model name → dimension); others are checked for consistency only.
KNOWN_DIMENSIONS = {
    "all-minilm-l6-v2": 384,
    "all-minilm-l12-v2": 384,
    "paraphrase-multilingual-minilm-l12-v2": 384,
    "multi-qa-minilm-l6-cos-v1": 384,
    "all-mpnet-base-v2": 768,
    "paraphrase-multilingual-mpnet-base-v2": 768,
}
_HASHING_MODEL = re.compile(r"^hashing(?:[-:](\d+))?$")


@dataclass(frozen=True)
class TransferLimits:
    """Bounds an import file must respect (decompression-bomb and resource guards)."""

    max_members: int = 500_000
    max_member_bytes: int = 4 << 30
    max_total_bytes: int = 64 << 30
    max_manifest_bytes: int = 256 << 20
    max_ratio: float = 200.0  # uncompressed / compressed size
    ratio_floor_bytes: int = 1 << 20  # smaller members may compress better than max_ratio (tiny files of spaces)
    max_graph_bytes: int = 1 << 30  # one KB's graph state, parsed into memory as a whole
    # Values (strings, numbers, lists, objects, keys) a JSON member may hold, counted before it is parsed: each
    # costs about 100 bytes of memory once parsed, whatever the few bytes it takes in the file.
    max_manifest_values: int = 2_000_000  # about 200,000 documents (a document entry is about 9 values)
    max_graph_values: int = 8_000_000  # four bundles at their 2,000,000-value limit


# -- shared helpers ------------------------------------------------------------------------------------------------
def expected_dimension(embedding_model: str, embedding_endpoint: str | None) -> int | None:
    """The vector dimension a KB's model produces, when it is known without loading the model."""
    if embedding_endpoint:
        return None
    name = embedding_model.strip()
    match = _HASHING_MODEL.match(name)
    if match:
        return int(match.group(1)) if match.group(1) else 64
    return KNOWN_DIMENSIONS.get(name.rstrip("/").rsplit("/", 1)[-1].lower())


def resolve_path(value: object, field_name: str) -> Path:
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str) or not value.strip():
        raise InvalidArgument(f"{field_name} must be a non-empty file path.", details={"field": field_name})
    reject_nul(value, field_name)
    path = Path(value.strip()).expanduser()
    return path if path.is_absolute() else Path.cwd() / path


@dataclass
class SegmentExport:
    path: str
    documents: pa.Table
    chunks: pa.Table
    texts: pa.Table
    vectors: np.ndarray
    originals: dict[str, IO[bytes]]  # member name → open handle (kept open: the folder may be collected meanwhile)
    model_key: str
    analyzer: str


@dataclass
class SegmentData:
    """One segment of an export file as read and validated, rows as dicts (what the import writes)."""

    documents: list[dict[str, Any]]
    chunks: list[dict[str, Any]]
    texts: list[dict[str, Any]]
    vectors: np.ndarray
    originals: dict[str, Path]  # doc id → extracted original
    model_key: str
    analyzer: str


@dataclass
class KBPlan:
    """One knowledge base of an export file as the import will write it: its record, segments and graph."""

    record: KnowledgeBaseRecord
    had_api_key: bool
    segments: list[SegmentData]
    root: Path | None = None
    document_count: int = 0
    renamed_documents: list[str] = field(default_factory=list)
    graph: GraphState | None = None
    graph_unlinked: int = 0  # nodes whose indexed document was not in the file (re-indexed by the next bundle)


def _kb_name_with_stamp(name: str, stamp: str, taken: set[str]) -> str:
    """``name_<stamp>`` (then ``-2``, ``-3``...) within the name length limit, not in ``taken`` (name keys)."""
    counter = 1
    while True:
        suffix = f"_{stamp}" + (f"-{counter}" if counter > 1 else "")
        candidate = name[: KB_NAME_MAX_LENGTH - len(suffix)] + suffix
        if name_key(candidate) not in taken:
            return candidate
        counter += 1


def rename_clashing(plans: Sequence[KBPlan], taken: set[str], now: datetime) -> list[tuple[str, str]]:
    """Give each planned KB whose name is taken (``taken``: name keys, updated) the name with the import's time
    stamp. Returns the KBs renamed, as (old, new)."""
    renamed: list[tuple[str, str]] = []
    stamp = now.strftime("%Y%m%d-%H%M%S")
    for plan in plans:
        if name_key(plan.record.name) in taken:
            new_name = _kb_name_with_stamp(plan.record.name, stamp, taken)
            renamed.append((plan.record.name, new_name))
            plan.record = replace(plan.record, name=new_name)
        taken.add(name_key(plan.record.name))
    return renamed
