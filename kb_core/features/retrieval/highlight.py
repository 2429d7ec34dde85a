"""Where a hit's matched words occur in its text (issues #25, #35), and the passage around them (its snippet).

A place is marked only where the analyzer finds one of the query's words in the text itself, as a whole word: a
Latin word whose stem is the word's (``configuring`` marks configure, configuring and configuration, whole words
only, never the inside of another word), a Chinese word where jieba cuts that word from the text (理赔 is marked in
保险理赔 but not across 处理|赔偿, whatever bigrams the index keeps). Stop words and one-letter Latin words are never
marked, whatever the caller passes: they say nothing about why a chunk was found.

A hit's **passage** is the window of its text, about :data:`PASSAGE_UNITS` display units long (a CJK character
counts two), that holds the most distinct matched words (then the one where they lie closest together, then the
earliest), started at the beginning of its sentence when that is close, so a card or an agent reads the evidence
first and the rest on demand ("show all", the full ``content``). A hit without a matched word (found by meaning
alone) starts at its beginning.
"""

from __future__ import annotations

import bisect
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kb_core.engines.analysis import Analyzer

__all__ = ["PASSAGE_UNITS", "Passage", "highlight_spans", "passage", "snippet_text"]

# About three lines of a result card at 1280 px, or 50 English words, or 150 Chinese characters.
PASSAGE_UNITS = 320
# How far before the first marked word a passage may start to begin at its sentence (a share of the window).
_LEAD = 0.3
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")
_SENTENCE_END = re.compile(r"[.!?…。！？；\n]")


@dataclass(frozen=True)
class Passage:
    """A hit's snippet window ``[start, end)`` of its text and the ``marks`` (character spans of the matched words,
    sorted, not overlapping) in the whole text."""

    start: int
    end: int
    marks: tuple[tuple[int, int], ...]


def _wanted(words: Iterable[str], analyzer: Analyzer) -> tuple[set[str], set[str]]:
    """The terms to mark for ``words``: Latin words as the analyzer stems them; CJK words as they are."""
    latin: set[str] = set()
    cjk: set[str] = set()
    for word in words:
        if not word:
            continue
        if _CJK.search(word):
            cjk.add(unicodedata.normalize("NFKC", word).casefold())
        else:
            latin.update(t for t in analyzer.tokens(word) if len(t) > 1 or not t.isascii())
    return latin, cjk


def _word_spans(text: str, words: Iterable[str], analyzer: Analyzer) -> list[tuple[int, int, str]]:
    latin, cjk = _wanted(words, analyzer)
    if not text or not (latin or cjk):
        return []

    def runs(kind: str, run: str) -> bool:
        if kind == "word":
            return bool(latin)
        folded = unicodedata.normalize("NFKC", run).casefold()
        return any(word in folded for word in cjk)

    wanted = latin | cjk
    return sorted(
        (s.start, s.end, s.term)
        for s in analyzer.term_spans(text, runs)
        if s.term in wanted and not s.stop and not s.pair and s.end > s.start
    )


def _merged(spans: Sequence[tuple[int, int, str]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end, _ in spans:
        if merged and start < merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def highlight_spans(text: str, words: Iterable[str], analyzer: Analyzer) -> list[tuple[int, int]]:
    """Sorted, non-overlapping ``(start, end)`` character spans of ``text`` to mark for the query's ``words`` (a hit's
    ``matched_terms``)."""
    return _merged(_word_spans(text, words, analyzer))


def _units(text: str) -> list[int]:
    """Cumulative display units of ``text``: ``units[i]`` is the width of ``text[:i]``."""
    out = [0]
    for ch in text:
        out.append(out[-1] + (2 if unicodedata.east_asian_width(ch) in "WF" else 1))
    return out


def passage(text: str, words: Iterable[str], analyzer: Analyzer, units: int = PASSAGE_UNITS) -> Passage:
    """The snippet window of ``text`` for the matched ``words`` and the marks (module docstring)."""
    spans = _word_spans(text, words, analyzer)
    marks = tuple(_merged(spans))
    width = _units(text)
    if width[-1] <= units:
        return Passage(0, len(text), marks)
    best: tuple[int, int, int] = (0, 0, 0)  # distinct words, -(units until the last of them first appears), -start
    start = 0
    starts = [width[s] for s, _, _ in spans]
    for i, (first, _, _) in enumerate(spans):
        limit = width[first] + units
        seen: dict[str, int] = {}
        for _, e, term in spans[i : bisect.bisect_right(starts, limit)]:
            if width[e] <= limit:
                seen.setdefault(term, width[e])
        score = (len(seen), -(max(seen.values(), default=limit) - width[first]), -first)
        if score > best:
            best, start = score, first
    if best[0]:
        start = _sentence_start(text, start, width, units)
    end = bisect.bisect_right(width, width[start] + units) - 1
    end = _word_end(text, start, end)
    return Passage(start, end, marks)


def _sentence_start(text: str, first: int, width: list[int], units: int) -> int:
    """Where a window holding ``first`` starts: after the sentence end before it when that is close, else a little
    before it at a word start."""
    lead = int(units * _LEAD)
    lowest = bisect.bisect_left(width, width[first] - lead)
    for position in range(first - 1, lowest - 1, -1):
        if _SENTENCE_END.match(text[position]):
            start = position + 1
            while start < first and text[start].isspace():
                start += 1
            return start
    if lowest == 0:
        return 0
    start = lowest
    while start < first and not (text[start - 1].isspace() or _CJK.match(text[start])):
        start += 1
    return start if start < first else lowest


def _word_end(text: str, start: int, end: int) -> int:
    """``end`` moved back to a word end when it falls inside a Latin word (not past half the window)."""
    if end >= len(text) or not text[end].isalnum() or not text[end - 1].isalnum() or _CJK.match(text[end]):
        return end
    position = end
    while position > start + (end - start) // 2 and not text[position - 1].isspace():
        position -= 1
    return position if position > start + (end - start) // 2 else end


def snippet_text(text: str, window: Passage) -> str:
    """The passage as plain text, one line, with "…" where it cuts the text."""
    piece = " ".join(text[window.start : window.end].split())
    return ("…" if window.start > 0 else "") + piece + ("…" if window.end < len(text) else "")
