"""Text analysis for keyword search: one multilingual analyzer, identified by a name string.

The analyzer turns text into index terms the same way at index time and at query time:

1. Unicode NFKC normalisation (full-width ``ＡＢＣ１２３`` becomes ``ABC123``, compatibility
   ideographs fold) and case folding.
2. The text is split into runs: CJK runs (Han, kana, Hangul) and word runs (letters and digits of
   any other script).
3. Word runs: a possessive ``'s`` is dropped, inner apostrophes are removed (``don't`` → ``dont``),
   optional English stop words are removed (Lucene's default English stop set), and the word is
   optionally stemmed with a Snowball stemmer (PyStemmer).
4. Han runs are segmented with jieba in search mode (words plus their sub-words, so ``知识库``
   gives ``知识``, ``知识库`` …), and/or split into overlapping character bigrams (``知识``, ``识库``);
   kana and Hangul runs always use bigrams (jieba's dictionary is Chinese).

Queries leave out stop words (:meth:`Analyzer.query_terms`): the English list applies to the terms of word runs,
the Chinese list to those of Han runs (both in :mod:`kb_core.engines.stopwords`). A query is searched with its
*words*: Latin words (as stems), the words jieba cuts from its Han runs (search mode, so ``知识库`` gives ``知识`` and
``知识库``), and the bigrams of kana and Hangul runs. The Han bigrams the index also keeps are an index detail:
one that is not itself a word of the query (``险理`` straddling 保险|理赔, ``识库`` inside 知识库, ``的水`` reaching
into the stop word 的) is a *support* term (:attr:`QueryTerms.support`): it adds its BM25 to a row that holds one of the
query's words (a chunk that says ``保险理赔`` or ``度的水`` as the query does outranks one that holds the words apart)
but never finds a row alone, is never a matched term or a highlight, and stays out of the keyword reference (so
adding stop words to a query never lowers a chunk's keyword score). Lucene's shingle filter likewise leaves no
shingle across a removed stop word; Lucene's and Elasticsearch's CJK bigram analysers keep every bigram, which would
let ``么是`` (from ``什么是``, both characters in stop words) find unrelated chunks: such a bigram is no support term
either. What people read (matched terms, highlights, notes) is the query's words (:attr:`QueryTerms.words`), never
a bigram that straddles two of them. A query made only of stop words (``的 是 什么``, ``how do I``) has no keyword
term at all: it says so (:attr:`QueryTerms.only_stop_words`) and finds chunks by meaning alone, since a chunk that
holds 的 and 是 is no evidence. The index keeps every term (only the classic 33-word Lucene list is removed at index
time), so the query lists can change without rebuilding any index.

Library choices: PyStemmer is the C Snowball implementation Lucene's stemmers are ported from;
jieba is the most widely used Chinese segmenter and ships its dictionary inside the wheel. Both
are loaded lazily, once per process, behind locks.

The analyzer's :attr:`Analyzer.name` is stored with an index so a searcher can refuse an index
built with different analysis; :func:`analyzer_from_name` rebuilds the analyzer from it.
"""

from __future__ import annotations

import functools
import logging
import re
import threading
import unicodedata
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kb_core.base.errors import InvalidArgument
from kb_core.engines import stopwords

logger = logging.getLogger(__name__)

__all__ = [
    "ANALYZER_FAMILY",
    "ENGLISH_STOP_WORDS",
    "Analyzer",
    "QueryTerms",
    "TermSpan",
    "analyzer_from_name",
    "default_analyzer",
]

ANALYZER_FAMILY = "multilingual-v1"

# Lucene's EnglishAnalyzer.ENGLISH_STOP_WORDS_SET (the classic 33-word list, also Elasticsearch's `_english_`).
ENGLISH_STOP_WORDS: frozenset[str] = frozenset(
    [
        "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it", "no",
        "not", "of", "on", "or", "such", "that", "the", "their", "then", "there", "these", "they", "this", "to",
        "was", "will", "with",
    ]
)
_STOP_LISTS: dict[str, frozenset[str]] = {"en": ENGLISH_STOP_WORDS}
_STEMMER_ALIASES = {"en": "english"}
_CJK_MODES = ("jieba", "bigram", "jieba+bigram")

_HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ffff\U00030000-\U0003134f"
_KANA_HANGUL = "\u3040-\u30ff\u31f0-\u31ff\u1100-\u11ff\u3130-\u318f\uac00-\ud7af"
_TOKEN_RE = re.compile(
    rf"(?P<han>[{_HAN}]+)"
    rf"|(?P<cjk>[{_KANA_HANGUL}]+)"
    rf"|(?P<word>[^\W_{_HAN}{_KANA_HANGUL}]+(?:'[^\W_{_HAN}{_KANA_HANGUL}]+)*)"
)

_PIECE_RE = re.compile(r"\w+(?:'\w+)*")
_CJK_RE = re.compile(f"[{_HAN}{_KANA_HANGUL}]")

_jieba_lock = threading.Lock()
_jieba_tokenizer: Any = None


def _jieba() -> Any:
    """The process-wide jieba tokenizer, initialised once, quietly (jieba logs to stderr by default)."""
    global _jieba_tokenizer
    if _jieba_tokenizer is None:
        with _jieba_lock:
            if _jieba_tokenizer is None:
                with warnings.catch_warnings():
                    # jieba 0.42 imports pkg_resources, which warns on import under new setuptools.
                    warnings.simplefilter("ignore")
                    import jieba
                logging.getLogger("jieba").setLevel(logging.WARNING)
                jieba.setLogLevel(logging.WARNING)
                tokenizer = jieba.Tokenizer()
                tokenizer.initialize()
                logger.debug("jieba dictionary loaded")
                _jieba_tokenizer = tokenizer
    return _jieba_tokenizer


_stemmers = threading.local()


def _stemmer(algorithm: str) -> Any:
    """A per-thread PyStemmer object: Stemmer instances must not be shared between threads."""
    cache: dict[str, Any] | None = getattr(_stemmers, "cache", None)
    if cache is None:
        cache = {}
        _stemmers.cache = cache
    stemmer = cache.get(algorithm)
    if stemmer is None:
        import Stemmer

        stemmer = Stemmer.Stemmer(algorithm)
        cache[algorithm] = stemmer
    return stemmer


@dataclass(frozen=True)
class TermSpan:
    """One index term of a text and where it came from: ``text[start:end]`` (offsets in the text as given).
    ``stop``: a query stop word (or a Han bigram reaching into one)."""

    term: str
    start: int
    end: int
    stop: bool
    stop_word: bool = False  # the term is itself a stop word (not a bigram that only reaches into one)
    inside_stop: bool = False  # a Han bigram both of whose characters belong to stop words (么是 in 什么是)
    pair: bool = False  # a Han bigram beside jieba's words (an index detail, not a word a reader sees)


@dataclass(frozen=True)
class QueryTerms:
    """The terms a query is searched with (distinct, in order of first appearance), the stop words left out, and
    whether the query held only stop words (then no term at all: ``only_stop_words``)."""

    terms: tuple[str, ...]
    stop_words: tuple[str, ...] = ()  # the query's stop words as written (``How``, ``的``)
    only_stop_words: bool = False
    dropped: tuple[str, ...] = ()  # the analysed terms left out: stop words and Han bigrams that are no word
    # Han bigrams that are not words of the query (``险理`` across 保险|理赔, ``的水`` reaching into a stop word)
    # but hold a content character: they add to the BM25 of rows that hold one of ``terms`` but never find a row
    # on their own, and are never matched terms or highlights.
    support: tuple[str, ...] = ()
    # The query's words as a reader sees them, each with the term it is searched as: (``Configuring``, ``configur``),
    # (``理赔``, ``理赔``). What matched terms and highlights are made of.
    words: tuple[tuple[str, str], ...] = ()

    def words_held(self, held: Sequence[str]) -> list[str]:
        """The query's words whose term is among ``held`` (a row's matched terms), in query order; a Chinese word
        inside a longer one that is held too (知识 beside 知识库) is left out."""
        present = set(held)
        found = [word for word, term in self.words if term in present]
        return [w for w in found if not (_CJK_RE.match(w) and any(w != o and w in o for o in found))]

    @property
    def shown_words(self) -> tuple[str, ...]:
        """The words the query is searched with, as written."""
        return tuple(word for word, _ in self.words)


def _bigrams(run: str) -> list[str]:
    if len(run) == 1:
        return [run]
    return [run[i : i + 2] for i in range(len(run) - 1)]


@dataclass(frozen=True)
class Analyzer:
    """Multilingual analyzer; see the module docstring for the pipeline.

    ``stem``: a PyStemmer algorithm (``"en"`` = ``"english"``) or ``None``; ``stop``: ``"en"`` or ``None``;
    ``cjk``: ``"jieba"``, ``"bigram"`` or ``"jieba+bigram"``.
    """

    stem: str | None = "en"
    stop: str | None = "en"
    cjk: str = "jieba+bigram"

    def __post_init__(self) -> None:
        if self.cjk not in _CJK_MODES:
            raise InvalidArgument(f"unknown CJK mode {self.cjk!r}; accepted: {', '.join(_CJK_MODES)}")
        if self.stop is not None and self.stop not in _STOP_LISTS:
            raise InvalidArgument(f"unknown stop-word list {self.stop!r}; accepted: {', '.join(_STOP_LISTS)}, none")
        if self.stem is not None:
            import Stemmer

            algorithm = _STEMMER_ALIASES.get(self.stem, self.stem)
            if algorithm not in Stemmer.algorithms():
                raise InvalidArgument(
                    f"unknown stemmer {self.stem!r}; accepted: en, none, {', '.join(Stemmer.algorithms())}"
                )

    @property
    def name(self) -> str:
        """Identity string stored with an index, e.g. ``multilingual-v1:stem=en:stop=en:cjk=jieba+bigram``."""
        return f"{ANALYZER_FAMILY}:stem={self.stem or 'none'}:stop={self.stop or 'none'}:cjk={self.cjk}"

    def tokens(self, text: str) -> list[str]:
        """Index terms of ``text``, in order of appearance (CJK sub-words follow their run)."""
        if not text:
            return []
        # "_" is a word character to the regex engine but a separator to people (snake_case, file_names).
        text = unicodedata.normalize("NFKC", text).casefold().replace("\u2019", "'").replace("_", " ")
        stop = _STOP_LISTS[self.stop] if self.stop is not None else frozenset()
        out: list[str] = []
        word_positions: list[int] = []
        for piece in _PIECE_RE.findall(text):
            if piece.isascii() or _CJK_RE.search(piece) is None:
                self._word(piece, stop, out, word_positions)
                continue
            for match in _TOKEN_RE.finditer(piece):
                run = match.group()
                if match.lastgroup == "word":
                    self._word(run, stop, out, word_positions)
                elif match.lastgroup == "han":
                    out.extend(self._han(run))
                else:
                    out.extend(_bigrams(run))
        if self.stem is not None and word_positions:
            stemmer = _stemmer(_STEMMER_ALIASES.get(self.stem, self.stem))
            if len(word_positions) == len(out):
                return stemmer.stemWords(out)  # one C call for the whole text
            for i, stemmed in zip(word_positions, stemmer.stemWords([out[i] for i in word_positions]), strict=True):
                out[i] = stemmed
        return out

    def term_ids(self, texts: Sequence[str]) -> tuple[dict[str, int], np.ndarray, np.ndarray]:
        """The index terms of ``texts`` as positions in their own vocabulary: ``(vocabulary, term_ids, lengths)``,
        the vocabulary in order of first appearance, ``term_ids`` (int32) every text's terms in order, text after
        text, ``lengths`` (int32) the terms of each text. What a keyword segment is built from."""
        vocabulary: dict[str, int] = {}
        term_ids: list[int] = []
        lengths = np.zeros(len(texts), dtype=np.int32)
        for row, text in enumerate(texts):
            tokens = self.tokens(text)
            lengths[row] = len(tokens)
            term_ids.extend(vocabulary.setdefault(t, len(vocabulary)) for t in tokens)
        return vocabulary, np.asarray(term_ids, dtype=np.int32), lengths

    @staticmethod
    def _word(word: str, stop: frozenset[str], out: list[str], word_positions: list[int]) -> None:
        if "'" in word:
            if word.endswith("'s"):
                word = word[:-2]
            word = word.replace("'", "")
        if word and word not in stop:
            word_positions.append(len(out))
            out.append(word)

    def term_spans(self, text: str, runs: Callable[[str, str], bool] | None = None) -> list[TermSpan]:
        """The index terms of ``text`` with their places in ``text`` and whether each is a query stop word.

        The same terms as :meth:`tokens` (each word and Han run is normalised and analysed as there), for the
        query side and for highlighting; slower than :meth:`tokens`, so not used to index. ``runs(kind, run)``, when
        given, says which runs to analyse (``kind``: "word", "han" or "cjk"): highlighting skips the Han runs that
        hold none of its words, since segmenting them is most of the cost."""
        if not text:
            return []
        # same-length replacements, so offsets stay those of ``text``
        prepared = text.replace("\u2019", "'").replace("_", " ")
        index_stop = _STOP_LISTS[self.stop] if self.stop is not None else frozenset()
        out: list[TermSpan] = []
        for match in _TOKEN_RE.finditer(prepared):
            run, start = match.group(), match.start()
            if runs is not None and not runs(match.lastgroup or "", run):
                continue
            if match.lastgroup == "word":
                words: list[str] = []
                self._word(unicodedata.normalize("NFKC", run).casefold(), index_stop, words, [])
                if not words:
                    continue
                if self.stem is not None:
                    words = _stemmer(_STEMMER_ALIASES.get(self.stem, self.stem)).stemWords(words)
                stop = _surface(unicodedata.normalize("NFKC", run).casefold()) in stopwords.ENGLISH_STOP_WORDS
                out.extend(TermSpan(w, start, match.end(), stop, stop) for w in words)
            elif match.lastgroup == "han":
                out.extend(self._han_spans(run, start))
            else:
                norm = unicodedata.normalize("NFKC", run).casefold()
                out.extend(TermSpan(b, start, match.end(), False) for b in _bigrams(norm))
        return out

    def query_terms(self, text: str) -> QueryTerms:
        """The terms ``text`` is searched with: its words less the query stop words, the Han bigrams that are no word
        of it as support terms (module docstring); no term at all when it holds only stop words."""
        return _query_terms(self, text)

    def _query_terms(self, text: str) -> QueryTerms:
        terms = list(dict.fromkeys(self.tokens(text)))
        if not terms:
            return QueryTerms(())
        spans = self.term_spans(text)
        words: dict[str, str] = {}  # term -> the word as written, first seen
        for s in spans:
            if not s.pair and not s.stop:
                words.setdefault(s.term, s.term if _CJK_RE.match(s.term) else text[s.start : s.end])
        written = tuple(dict.fromkeys(text[s.start : s.end] for s in spans if s.stop_word and s.term not in words))
        used = [t for t in terms if t in words]
        dropped = tuple(t for t in terms if t not in words)
        if not used:
            return QueryTerms((), written, only_stop_words=True, dropped=dropped)
        listed = {s.term for s in spans if s.stop_word}
        content = {s.term for s in spans if s.pair and not s.inside_stop} | {
            s.term for s in spans if s.stop and not s.stop_word and not s.inside_stop
        }
        support = tuple(t for t in dropped if t in content and t not in listed)
        shown = tuple((word, term) for term, word in words.items())
        return QueryTerms(tuple(used), written, dropped=dropped, support=support, words=shown)

    def _han_spans(self, run: str, offset: int) -> list[TermSpan]:
        norm = unicodedata.normalize("NFKC", run)
        pair = self.cjk == "jieba+bigram"  # bigrams beside jieba's words are index details; alone they are the words
        if len(norm) != len(run):  # compatibility characters that expand: the whole run is the place of its terms
            end = offset + len(run)
            words = [TermSpan(t, offset, end, False) for t in self._han(norm) if self.cjk == "bigram" or len(t) != 2]
            if self.cjk != "bigram":
                words = [TermSpan(w, offset, end, False) for w in _jieba().cut_for_search(norm) if w.strip()]
            pairs = [TermSpan(b, offset, end, False, pair=pair) for b in _bigrams(norm)] if self.cjk != "jieba" else []
            return words + ([] if self.cjk == "bigram" else pairs)
        tokenizer = _jieba()
        stop_chars = np.zeros(len(norm), dtype=bool)
        for word, start, end in tokenizer.tokenize(norm):
            if word in stopwords.CHINESE_STOP_WORDS:
                stop_chars[start:end] = True
        out: list[TermSpan] = []
        if self.cjk != "bigram":
            for word, start, end in tokenizer.tokenize(norm, mode="search"):
                if word.strip():
                    stop = word in stopwords.CHINESE_STOP_WORDS
                    out.append(TermSpan(word, offset + start, offset + end, stop, stop))
            if self.cjk == "jieba" or len(norm) == 1:
                return out
        if len(norm) == 1:
            return [TermSpan(norm, offset, offset + 1, bool(stop_chars[0]), bool(stop_chars[0]))]
        for i in range(len(norm) - 1):
            bigram = norm[i : i + 2]
            listed = bigram in stopwords.CHINESE_STOP_WORDS
            reaches = bool(stop_chars[i] or stop_chars[i + 1])
            inside = bool(stop_chars[i] and stop_chars[i + 1])
            out.append(TermSpan(bigram, offset + i, offset + i + 2, reaches or listed, listed, inside, pair))
        return out

    def _han(self, run: str) -> list[str]:
        out: list[str] = []
        if self.cjk != "bigram":
            out.extend(w for w in _jieba().cut_for_search(run) if w.strip())
            if self.cjk == "jieba" or len(run) == 1:
                return out
        out.extend(_bigrams(run))
        return out


@functools.lru_cache(maxsize=4096)
def _query_terms(analyzer: Analyzer, text: str) -> QueryTerms:
    return analyzer._query_terms(text)  # remembered: a search asks for the same query's terms several times


def _surface(word: str) -> str:
    """A word as the stop lists spell it: possessive 's dropped, inner apostrophes removed (as ``Analyzer._word``)."""
    if word.endswith("'s"):
        word = word[:-2]
    return word.replace("'", "")


def default_analyzer() -> Analyzer:
    """The analyzer new knowledge bases use: Snowball English stemming, Lucene stop words, jieba + bigrams.

    Chosen by BM25 nDCG@10 (``python benchmarks/bench_keyword.py quality``): stemming adds 0.023 on SciFact
    (0.688 vs 0.665); jieba + bigrams beats either alone on XQuAD-zh (0.965 vs 0.963 jieba, 0.964 bigrams);
    stop words are neutral for quality (SciFact +0.001, XQuAD-zh −0.001) and keep the longest postings lists
    out of the index and out of queries.
    """
    return Analyzer()


def analyzer_from_name(name: str) -> Analyzer:
    """Rebuild the analyzer whose :attr:`Analyzer.name` is ``name``."""
    parts = name.split(":")
    if not parts or parts[0] != ANALYZER_FAMILY:
        raise InvalidArgument(f"unknown analyzer {name!r}; accepted: names starting with {ANALYZER_FAMILY!r}")
    options: dict[str, str] = {}
    for part in parts[1:]:
        key, sep, value = part.partition("=")
        if not sep or key not in ("stem", "stop", "cjk") or key in options:
            raise InvalidArgument(f"bad analyzer option {part!r} in {name!r}; accepted: stem=…, stop=…, cjk=…")
        options[key] = value
    if set(options) != {"stem", "stop", "cjk"}:
        raise InvalidArgument(f"analyzer name {name!r} must set stem, stop and cjk")
    return Analyzer(
        stem=None if options["stem"] == "none" else options["stem"],
        stop=None if options["stop"] == "none" else options["stop"],
        cjk=options["cjk"],
    )
