"""Where a hit's matched terms occur in its text, as the analyzer sees them (issue #25).

A place is marked only where the analyzer produces one of the matched terms from the text itself: a Latin word whose
stem is the term (``configur`` marks configure, configuring and configuration, whole words only, never the inside
of another word), a Chinese word or bigram as jieba and the bigram pass cut it. Stop words and one-letter Latin
terms are never marked, whatever the caller passes: they say nothing about why a chunk was found.
"""

from __future__ import annotations

from collections.abc import Iterable

from kb_core.retrieval.analysis import Analyzer

__all__ = ["highlight_spans"]


def highlight_spans(text: str, terms: Iterable[str], analyzer: Analyzer) -> list[tuple[int, int]]:
    """Sorted, non-overlapping ``(start, end)`` character spans of ``text`` to mark for the analysed ``terms``."""
    wanted = {t for t in terms if t and (len(t) > 1 or not t.isascii())}
    if not wanted or not text:
        return []
    spans = sorted(
        (s.start, s.end) for s in analyzer.term_spans(text) if s.term in wanted and not s.stop and s.end > s.start
    )
    merged: list[tuple[int, int]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged
