"""Import executors: where parsing, chunking and embedding run for :class:`kb_core.features.ingest.pipeline.Importer`.

``local`` (the default) is the importer's own thread pool in this process. ``ray``
(:mod:`kb_core.features.ingest.executors.ray_data`, optional extra ``kb-workbench[ray]``) runs them as Ray Data stages
on a Ray cluster. Every executor hands back :class:`ExecutedDocument` results; the importer commits them in this process
through the store's commit protocol, so the KB's consistency never depends on where the work ran.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np

from kb_core.base.errors import Cancelled

if TYPE_CHECKING:
    from kb_core.engines.chunking import Chunk
    from kb_core.store.sink import ImportSource

EXECUTORS = ("local", "ray")


@dataclass
class ExecutedDocument:
    """One source file, parsed, chunked and embedded elsewhere (or failed there with ``error``)."""

    index: int  # position in the sources handed to the executor
    file_type: str = ""
    text: str = ""
    chunks: list[Chunk] = field(default_factory=list)
    vectors: np.ndarray | None = None  # (len(chunks), dimension) float32, L2-normalised
    error: str | None = None


class ImportCancelled(Cancelled):
    """The user stopped the import (``cancel`` was set): what was committed stays, the rest fails with this."""

    def __init__(self, message: str = "cancelled: the import was stopped before this file was committed") -> None:
        super().__init__(message, code="IMPORT_CANCELLED")


class DocumentExecutor(Protocol):
    """Parses, chunks and embeds sources; yields each document once, in any order, as soon as it is done. Once
    ``cancel`` is set it stops within about a second, raising :class:`ImportCancelled`, and leaves nothing running."""

    name: str

    def execute(
        self, sources: Sequence[ImportSource], chunk_size: int, cancel: threading.Event | None = None
    ) -> Iterator[ExecutedDocument]: ...

    def summary(self) -> dict[str, object]:
        """What the last run did (e.g. chunks per node), for the import's result."""
        ...


def executor_choices() -> dict[str, str | None]:
    """Each executor, and why it cannot run here (``None``: it can), without importing Ray itself."""
    from importlib.util import find_spec

    ray_missing = None
    if find_spec("ray") is None or find_spec("ray.data") is None:
        ray_missing = "Ray Data is not installed; install the optional extra: pip install 'kb-workbench[ray]'"
    return {"local": None, "ray": ray_missing}
