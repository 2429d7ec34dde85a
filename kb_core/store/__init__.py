"""Crash-safe, multi-process storage: a home registry plus per-KB segments and manifests."""

from kb_core.store.kb_store import Change, KBStore, Manifest, SegmentRef, StagedSegment
from kb_core.store.registry import Home, KnowledgeBaseRecord, new_id, utc_now

__all__ = [
    "Change",
    "Home",
    "KBStore",
    "KnowledgeBaseRecord",
    "Manifest",
    "SegmentRef",
    "StagedSegment",
    "new_id",
    "utc_now",
]
