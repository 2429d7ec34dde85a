"""The evaluation home: a :class:`KnowledgeBaseService` at ``<home>/cache/eval``, so evaluation KBs (and their
embedding cache) never clutter the user's KB list. Kept apart from :mod:`kb_core.evaluation` so that the evaluation
code never imports the service (the service imports the kept runs, which import the evaluation's types).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from kb_core.seams import Resources
from kb_core.service import KnowledgeBaseService
from kb_core.store import KnowledgeBaseRecord

logger = logging.getLogger(__name__)

EVAL_HOME = Path("cache") / "eval"


def open_eval_service(service_or_home: Resources | str | os.PathLike[str]) -> Resources:
    """A :class:`~kb_core.service.KnowledgeBaseService` on the evaluation home ``<home>/cache/eval`` of the given
    service (or home folder), so evaluation KBs and their embedding cache stay out of the user's KB list."""
    from kb_core.config import FOLDER_STORE

    if isinstance(service_or_home, str | os.PathLike):
        root, device = Path(service_or_home).expanduser(), None
    else:
        root, device = Path(service_or_home.home.root), service_or_home.device_argument
    home = root / EVAL_HOME

    def embedder_factory(record: KnowledgeBaseRecord, api_key: str | None) -> Any:
        # The service's own recipe (shared model, persistent document cache) plus a query memo: an evaluation
        # embeds each query once instead of once per pass and setting. The vectors are the same.
        from kb_core.embedding import CachedEmbedder, EmbeddingCache, get_embedder, is_hashing_model

        local = not record.embedding_endpoint and not is_hashing_model(record.embedding_model)
        device = eval_service.device_request if local else None
        inner = get_embedder(record.embedding_model, record.embedding_endpoint, api_key, device=device)
        return _QueryMemo(CachedEmbedder(inner, EmbeddingCache(home / "cache" / "embeddings.sqlite")))

    # always a folder: evaluation KBs stay out of a shared PostgreSQL store ($KB_STORE) too
    eval_service = KnowledgeBaseService(home, store=FOLDER_STORE, embedder_factory=embedder_factory, device=device)
    return eval_service


class _QueryMemo:
    """An embedder whose ``embed_query`` remembers its answers; everything else is the wrapped embedder's."""

    LIMIT = 100_000

    def __init__(self, embedder: Any) -> None:
        self._embedder = embedder
        self._queries: dict[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._embedder, name)

    def embed_query(self, text: str) -> Any:
        vector = self._queries.get(text)
        if vector is None:
            vector = self._embedder.embed_query(text)
            if len(self._queries) < self.LIMIT:
                self._queries[text] = vector
        return vector
