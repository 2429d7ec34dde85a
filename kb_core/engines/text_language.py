"""The language a document is written in, told from its letters: fast, dependency-free, for documents (not queries).

A document's language decides whether a KB's embedding model can read it (all-MiniLM-L6-v2 reads English;
multilingual-e5-small reads Chinese too; :mod:`kb_core.engines.embedding.builtin`). What a model reads is known per
writing system, so the detector first tells the writing system apart, from a sample of the text (its start,
middle and end, 4,000 characters at most): when at least 30 % of the letters are Chinese, Japanese or Korean (the
share the query-side language guard uses; a CJK character carries about a word, a Latin letter a fifth of one) the
document is ``zh``, or ``ja`` when a tenth of those are kana, or ``ko`` when most are Hangul; otherwise the
script with the most letters wins. Latin-script text is ``en`` when English function words make up at least a
tenth of its words (English prose: 35-50 %; French, German or Spanish prose: under 5 %) and ``latin`` otherwise;
other scripts are named by the script (``cyrillic``, ``arabic``, ...). Too little text to tell — fewer than 20
letters, a CJK character counting as 3 — gives ``None`` (unknown).

A library (py3langid) names more languages but costs about 5 µs per character on this machine's cores, which
would add seconds to every thousand documents an import reads; counting letters costs well under a millisecond
per document.
"""

from __future__ import annotations

import numpy as np

from kb_core.base.i18n import Text, msg

SAMPLE_CHARS = 4_000
MIN_LETTERS = 20
CJK_SHARE = 0.3

# Code point ranges of the letters of each writing system (start inclusive, end exclusive).
_RANGES: dict[str, tuple[tuple[int, int], ...]] = {
    "han": ((0x3400, 0x4DC0), (0x4E00, 0xA000), (0xF900, 0xFB00), (0x20000, 0x2FA20)),
    "kana": ((0x3040, 0x3100), (0x31F0, 0x3200)),
    "hangul": ((0x1100, 0x1200), (0x3130, 0x3190), (0xAC00, 0xD7B0)),
    "latin": ((0x41, 0x5B), (0x61, 0x7B), (0xC0, 0xD7), (0xD8, 0xF7), (0xF8, 0x250), (0x1E00, 0x1F00)),
    "cyrillic": ((0x400, 0x500),),
    "greek": ((0x370, 0x400),),
    "arabic": ((0x600, 0x700), (0x750, 0x780)),
    "hebrew": ((0x590, 0x600),),
    "devanagari": ((0x900, 0x980),),
    "thai": ((0xE00, 0xE80),),
}
_SCRIPT_NAMES = tuple(_RANGES)
_BOUNDS = np.array(sorted({b for ranges in _RANGES.values() for r in ranges for b in r}), dtype=np.uint32)
# The script of each interval between consecutive bounds (-1: none).
_INTERVAL_SCRIPT = np.full(len(_BOUNDS) + 1, -1, dtype=np.int64)
for _index, _name in enumerate(_SCRIPT_NAMES):
    for _start, _end in _RANGES[_name]:
        _INTERVAL_SCRIPT[
            np.searchsorted(_BOUNDS, _start, side="right") : np.searchsorted(_BOUNDS, _end, side="right")
        ] = _index
_ENGLISH_FUNCTION_WORDS = frozenset(
    {
        "the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "with", "was", "on", "are", "by", "be",
        "this", "which", "or", "from", "at", "an", "not", "have", "has", "but", "were", "can", "their", "they",
        "these", "been", "its", "than", "also", "more", "we", "our", "you", "your", "he", "she", "his", "her",
        "there", "when", "what", "who", "how", "if", "will", "would", "should", "could", "may", "into", "about",
        "between", "after", "such", "other", "most", "some", "only", "all",
    }
)
ENGLISH_SHARE = 0.1
_PUNCTUATION = ".,;:!?()[]{}\"'“”‘’«»-"

NAMES: dict[str, Text] = {
    "zh": msg("Chinese"),
    "ja": msg("Japanese"),
    "ko": msg("Korean"),
    "en": msg("English"),
    "latin": msg("a Latin-script language other than English"),
    "cyrillic": msg("a Cyrillic-script language"),
    "greek": msg("Greek"),
    "arabic": msg("an Arabic-script language"),
    "hebrew": msg("Hebrew"),
    "devanagari": msg("a Devanagari-script language"),
    "thai": msg("Thai"),
}
# The writing system each detected language is written in (what models are known to read).
SCRIPT_OF = {"zh": "cjk", "ja": "cjk", "ko": "cjk", "en": "latin", "latin": "latin"}


def _sample(text: str) -> str:
    if len(text) <= SAMPLE_CHARS:
        return text
    part = SAMPLE_CHARS // 4
    middle = len(text) // 2
    return text[: 2 * part] + text[middle : middle + part] + text[-part:]


def document_language(text: str | None) -> str | None:
    """The language of ``text`` as described in the module docstring (``zh``, ``ja``, ``ko``, ``en``, ``latin``,
    ``cyrillic``, ...), or None when it has too few letters to tell."""
    if not text:
        return None
    sample = _sample(text)
    # Every code point is placed among the range bounds at once (a regular expression per script is 100x slower).
    points = np.frombuffer(sample.encode("utf-32-le"), dtype=np.uint32)
    scripts = _INTERVAL_SCRIPT[np.searchsorted(_BOUNDS, points, side="right")]
    tally = np.bincount(scripts[scripts >= 0], minlength=len(_SCRIPT_NAMES))
    counts = dict(zip(_SCRIPT_NAMES, tally.tolist(), strict=True))
    letters = sum(counts.values())
    cjk = counts["han"] + counts["kana"] + counts["hangul"]
    if letters + 2 * cjk < MIN_LETTERS:  # a CJK character says about as much as three Latin letters
        return None
    if cjk >= CJK_SHARE * letters:
        if counts["hangul"] >= 0.5 * cjk:
            return "ko"
        return "ja" if counts["kana"] >= 0.1 * cjk else "zh"
    script = max((s for s in counts if s not in ("han", "kana", "hangul")), key=lambda s: counts[s])
    if script != "latin":
        return script
    words = sample.lower().split()
    common = sum(1 for w in words if w.strip(_PUNCTUATION) in _ENGLISH_FUNCTION_WORDS)
    return "en" if words and common >= ENGLISH_SHARE * len(words) else "latin"


def language_script(language: str) -> str:
    """The writing system of a detected language: ``cjk``, ``latin``, or the script's own name."""
    return SCRIPT_OF.get(language, language)


def language_name(language: str | None) -> str:
    """The language for people: "Chinese", "English", ... ("unknown" for None)."""
    if not language:
        return msg("unknown")
    return NAMES.get(language, language)
