"""The demo knowledge base the app opens on: the project's own documentation, in English and Chinese.

The documents live in ``data/demo`` (TXT, DOCX and DOC files written for the project). The demo is
built through the session's operations (typed results, KBError raised), as a front end would, so it is an ordinary
knowledge base a user may search, change or delete.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kb_core.base.config import PROJECT_ROOT
from kb_core.base.errors import KBError
from kb_core.features.ingest.pipeline import ImportProgress

if TYPE_CHECKING:
    from kb_core.features.results import ImportJobStatus, ImportReport
    from kb_core.session.operations import Operations

logger = logging.getLogger(__name__)

DEMO_KB_NAME = "Demo · 演示"
DEMO_FOLDER = PROJECT_ROOT / "data" / "demo"
DEMO_CHUNK_SIZE = 256
# The demo is bilingual (English and Chinese documents and questions): a model that reads both.
DEMO_EMBEDDING_MODEL = "multilingual-e5-small"
DEMO_SUFFIXES = (".txt", ".docx", ".doc")
# Relevance judgments over the demo documents (BEIR queries.jsonl + qrels.tsv; corpus ids are document names).
DEMO_JUDGMENTS_FOLDER = DEMO_FOLDER / "eval"

# One build at a time in this process (two browser sessions may start together).
_build_lock = threading.Lock()


def demo_files(folder: str | Path | None = None) -> list[Path]:
    """The demo documents, sorted by name (only the formats the importer reads)."""
    root = Path(folder) if folder is not None else DEMO_FOLDER
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_file() and p.suffix.lower() in DEMO_SUFFIXES)


def demo_judgments_folder(folder: str | Path | None = None) -> Path | None:
    """The folder of the demo judgments (``queries.jsonl`` and ``qrels.tsv``), or None where they are not shipped.

    They judge the documents of the demo KB by name, so they evaluate that KB (``kb eval FOLDER --kb NAME``)."""
    root = Path(folder) if folder is not None else DEMO_JUDGMENTS_FOLDER
    if (root / "queries.jsonl").is_file() and (root / "qrels.tsv").is_file():
        return root
    return None


def _demo_listing(session: Operations, kb_name: str) -> dict[str, Any] | None:
    try:
        listing = session.list_knowledge_bases()
    except KBError:
        return None
    key = kb_name.casefold()
    return next((kb for kb in listing.to_json()["knowledge_bases"] if kb["name"].casefold() == key), None)


def demo_exists(session: Operations, kb_name: str = DEMO_KB_NAME) -> bool:
    """Whether the demo KB exists with documents. An empty one is a first build that was cut off (the browser tab
    closed while it imported, which stops the app's script run): :func:`ensure_demo_kb` fills it."""
    found = _demo_listing(session, kb_name)
    return found is not None and int(found.get("document_count") or 0) > 0


def _demo_target(
    session: Operations,
    files: list[Path],
    folder: str | Path | None,
    kb_name: str,
    embedding_model: str | None,
    chunk_size: int,
    model_progress: Callable[[str], None] | None,
) -> str | None:
    """The demo KB's name to import ``files`` into (created here, or an empty one a cut-off build left); None when
    there is nothing to build. A failed creation raises its KBError. Called under ``_build_lock``."""
    if not files:
        logger.warning("No demo documents found in %s", folder or DEMO_FOLDER)
        return None
    if demo_exists(session, kb_name):
        return None
    interrupted = _demo_listing(session, kb_name)
    if interrupted is None:
        name = session.create_knowledge_base(
            kb_name, chunk_size, embedding_model=embedding_model, progress=model_progress
        ).kb_name
    else:
        name = interrupted["name"]
        logger.warning("The demo knowledge base %r is empty (a first build was cut off): filling it", name)
    logger.info("Building the demo knowledge base from %d files", len(files))
    return name


def start_demo_build(
    session: Operations,
    *,
    folder: str | Path | None = None,
    kb_name: str = DEMO_KB_NAME,
    embedding_model: str | None = DEMO_EMBEDDING_MODEL,
    chunk_size: int = DEMO_CHUNK_SIZE,
    model_progress: Callable[[str], None] | None = None,
) -> ImportJobStatus | None:
    """:func:`ensure_demo_kb` as an import job the service runs (#34): the KB is created here (a built-in model's
    folder is built first where this machine has none: ``model_progress`` hears about it), its documents are imported
    by the job; returns the started job's status (``job_id``), or None when there is nothing to build. A failed
    creation raises its KBError."""
    files = demo_files(folder)
    with _build_lock:
        target = _demo_target(session, files, folder, kb_name, embedding_model, chunk_size, model_progress)
        if target is None:
            return None
        return session.start_import([str(p) for p in files], kb_name=target)


def ensure_demo_kb(
    session: Operations,
    *,
    progress: Callable[[ImportProgress], None] | None = None,
    folder: str | Path | None = None,
    kb_name: str = DEMO_KB_NAME,
    embedding_model: str | None = DEMO_EMBEDDING_MODEL,
    chunk_size: int = DEMO_CHUNK_SIZE,
    model_progress: Callable[[str], None] | None = None,
) -> ImportReport | None:
    """Create and fill the demo KB unless it exists; returns the import's report, or None if nothing was built.

    The session's current KB is left unchanged; callers select the demo themselves. A failed
    creation (for example a race with another process that created it first) raises its KBError.
    ``model_progress`` hears about the one-time build of the model's folder on a machine that has none.
    """
    files = demo_files(folder)
    with _build_lock:
        target = _demo_target(session, files, folder, kb_name, embedding_model, chunk_size, model_progress)
        if target is None:
            return None
        return session.import_document([str(p) for p in files], progress=progress, kb_name=target)
