"""KB Workbench's domain package. Front ends use :class:`KnowledgeBaseService` and its sessions (an
:class:`Operations`: typed results, :class:`KBError` raised; a search takes a :class:`SearchRequest`); the edges
turn them into envelopes (:mod:`kb_core.edges.envelopes`).

The names below are imported on first use (PEP 562): a parser worker process imports
``kb_core.engines.parsing`` without loading the service, the store, pandas and the rest.
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kb_core.base.errors import KBError
    from kb_core.features.results import SearchRequest
    from kb_core.session.operations import Operations
    from kb_core.session.service import KnowledgeBaseService

logging.getLogger(__name__).addHandler(logging.NullHandler())

__all__ = ["KBError", "KnowledgeBaseService", "Operations", "SearchRequest"]

_HOMES = {
    "KBError": "kb_core.base.errors",
    "KnowledgeBaseService": "kb_core.session.service",
    "Operations": "kb_core.session.operations",
    "SearchRequest": "kb_core.features.results",
}


def __getattr__(name: str) -> Any:
    module = _HOMES.get(name)
    if module is None:
        raise AttributeError(f"module 'kb_core' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
