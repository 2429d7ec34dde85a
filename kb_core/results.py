"""Typed requests and results shared by the session, the CLI, the MCP server and the app.

Envelopes (:mod:`kb_core.envelope`) are built from these by the session only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kb_core.retrieval.search import SearchFilters, SearchHit, SearchOutcome, SearchSettings

__all__ = ["SearchHit", "SearchRequest", "SearchResult", "SearchSettings"]


@dataclass(frozen=True)
class SearchRequest:
    """One search: the query, where (the current KB unless ``kb_ids`` or ``kb_names`` is given), the filters,
    and the settings given for this call (``None`` values mean "not given"); each KB's saved defaults fill in
    the rest. With ``skip_failing`` a KB whose query embedding fails is left out (see
    :meth:`kb_core.session.Session.search_chunks`). With ``drop_copies`` (search_knowledge_base) a hit whose text is
    the same as a better-ranked hit's from another KB (a KB and its imported copy) is dropped and counted."""

    query: str
    kb_names: tuple[str, ...] = ()
    kb_ids: tuple[str, ...] = ()
    filters: SearchFilters = field(default_factory=SearchFilters)
    settings: Mapping[str, Any] = field(default_factory=dict)
    skip_failing: bool = False
    drop_copies: bool = False  # over several KBs, drop a hit whose text equals a better hit's from another KB


@dataclass
class SearchResult(SearchOutcome):
    """A search's hits, warnings, settings and weights, plus the KBs left out (``{kb_name, code, message}``)."""

    skipped: list[dict[str, str]] = field(default_factory=list)
    duplicates_dropped: int = 0  # hits of several KBs whose text equals a better-ranked hit's from another KB
