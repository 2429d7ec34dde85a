"""BM25 keyword index over immutable segments, scored with global statistics of the live rows.

A knowledge base is a list of immutable segments; deletions are recorded as a boolean ``live`` mask per
segment. :class:`KeywordSegment` holds one segment's term frequencies (a CSC matrix, one column per term,
so a term's postings are one contiguous slice). :class:`KeywordSearcher` scores a query against all
segments with *global* statistics computed over live rows only::

    N     = number of live rows in all segments
    avgdl = mean token count of the live rows
    df(t) = number of live rows containing t

so the scores equal those of a BM25 index built from scratch over exactly the live rows. Building a
segment costs in proportion to the segment; a searcher's construction costs one vector pass over the row
lengths and live masks. On first use of a term the searcher computes its df and exact per-row contributions
from the term's postings (these are constants while the set of live rows is fixed) and caches them; a query
then sums its terms' cached contributions — into a dense array when the postings cover at least an eighth of
the rows, else by sorting the touched rows — and selects the top k with a lower bound taken from the
best single-term contributions, so that most rows are discarded by one comparison pass.

Query terms are de-duplicated: a term repeated in the query counts once (a query is a set of terms, as in
Lucene's ``BooleanQuery`` of distinct ``TermQuery`` clauses built by most query parsers over analysed text).
"""

from __future__ import annotations

import io
import logging
import math
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from kb_core.base import files
from kb_core.base.atomic import write_bytes_atomically
from kb_core.base.errors import InvalidArgument, StoreError
from kb_core.engines.analysis import Analyzer

logger = logging.getLogger(__name__)

__all__ = [
    "KEYWORD_FILE",
    "BM25Parameters",
    "KeywordHit",
    "KeywordSearcher",
    "KeywordSegment",
    "RowTerms",
    "bm25_idf",
    "bm25_length_norm",
    "bm25_term_scores",
]

KEYWORD_FILE = files.KEYWORD_FILE
_FORMAT_VERSION = 1


# --- scoring: pure functions on arrays -----------------------------------------------------------------------------


def bm25_idf(df: np.ndarray | float, n_docs: int) -> np.ndarray:
    """BM25 inverse document frequency, Lucene/ATIRE form: ``ln(1 + (N - df + 0.5) / (df + 0.5))``.

    Robertson & Zaragoza, "The Probabilistic Relevance Framework: BM25 and Beyond" (2009), eq. 3.3, with the
    ``1 +`` inside the logarithm that Lucene's ``BM25Similarity`` adds so idf stays positive for very common
    terms (Kamphuis et al., "Which BM25 Do You Mean?", ECIR 2020).
    """
    if isinstance(df, int | float):  # scalar fast path: a query computes one idf per term
        return np.float64(math.log1p((n_docs - df + 0.5) / (df + 0.5)))
    df = np.asarray(df, dtype=np.float64)
    return np.log1p((n_docs - df + 0.5) / (df + 0.5))


def bm25_length_norm(lengths: np.ndarray, avgdl: float, k1: float, b: float) -> np.ndarray:
    """Per-document denominator term ``k1 · (1 − b + b · dl / avgdl)`` (Robertson & Zaragoza 2009, eq. 3.15)."""
    return k1 * (1.0 - b + b * (np.asarray(lengths, dtype=np.float64) / avgdl))


def bm25_term_scores(tf: np.ndarray, norm: np.ndarray, idf: float | np.ndarray, k1: float) -> np.ndarray:
    """One term's BM25 contribution ``idf · tf · (k1 + 1) / (tf + norm)`` for documents with ``tf > 0``.

    ``norm`` comes from :func:`bm25_length_norm`. Lucene ≥ 8 and bm25s' ``method="lucene"`` drop the constant
    ``(k1 + 1)`` factor; we keep it, as Robertson & Zaragoza and Lucene < 8 do. It scales every score equally,
    so rankings are identical; divide by ``k1 + 1`` to compare with bm25s.
    """
    tf = np.asarray(tf, dtype=np.float64)
    return idf * (tf * (k1 + 1.0)) / (tf + norm)


# --- segments ------------------------------------------------------------------------------------------------------


def _encode_vocabulary(terms: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    encoded = [t.encode("utf-8") for t in terms]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    if encoded:
        np.cumsum([len(e) for e in encoded], out=offsets[1:])
    blob = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    return blob, offsets


def _decode_vocabulary(blob: np.ndarray, offsets: np.ndarray) -> list[str]:
    raw = blob.tobytes()
    bounds = offsets.tolist()
    return [raw[bounds[i] : bounds[i + 1]].decode("utf-8") for i in range(len(bounds) - 1)]


@dataclass
class KeywordSegment:
    """Immutable postings of one segment: term frequencies per (row, term) and token counts per row."""

    vocabulary: dict[str, int]
    term_frequencies: sp.csc_matrix  # (n_rows, n_terms), integer tf, sorted row indices per column
    lengths: np.ndarray  # (n_rows,) int32 token count per row
    analyzer_name: str = ""

    @property
    def n_rows(self) -> int:
        return int(self.lengths.shape[0])

    @cached_property
    def distinct_terms(self) -> np.ndarray:
        """Number of distinct terms per row (each (row, term) pair is stored once)."""
        return np.bincount(self.term_frequencies.indices, minlength=self.n_rows).astype(np.int32)

    @classmethod
    def build(cls, texts: Sequence[str], analyzer: Analyzer) -> KeywordSegment:
        """Analyse ``texts`` (one per row) and build their postings."""
        vocabulary, term_ids, lengths = analyzer.term_ids(texts)
        return cls.from_terms(vocabulary, term_ids, lengths, analyzer.name)

    @classmethod
    def from_terms(
        cls, vocabulary: dict[str, int], term_ids: np.ndarray, lengths: np.ndarray, analyzer_name: str
    ) -> KeywordSegment:
        """The postings of rows already analysed: ``term_ids`` holds every row's terms in order (row after row,
        ``lengths[row]`` of them), as ids in ``vocabulary``."""
        cols = np.asarray(term_ids, dtype=np.int32)
        lengths = np.asarray(lengths, dtype=np.int32)
        rows = np.repeat(np.arange(len(lengths), dtype=np.int32), lengths)
        matrix = sp.csc_matrix(
            (np.ones(len(cols), dtype=np.int32), (rows, cols)), shape=(len(lengths), len(vocabulary)), dtype=np.int32
        )
        matrix.sum_duplicates()  # also sorts row indices within each column
        return cls(vocabulary, matrix, lengths, analyzer_name)

    def save(self, directory: Path) -> None:
        """Write ``directory/keyword.npz`` atomically (temporary file + ``os.replace``); no pickled objects."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        terms = sorted(self.vocabulary, key=self.vocabulary.__getitem__)
        blob, offsets = _encode_vocabulary(terms)
        m = self.term_frequencies
        buffer = io.BytesIO()
        np.savez(
            buffer,
            format_version=np.array(_FORMAT_VERSION, dtype=np.int64),
            shape=np.array(m.shape, dtype=np.int64),
            data=m.data.astype(np.int32, copy=False),
            indices=m.indices.astype(np.int32, copy=False),
            indptr=m.indptr.astype(np.int64, copy=False),
            lengths=self.lengths.astype(np.int32, copy=False),
            vocab_blob=blob,
            vocab_offsets=offsets,
            analyzer_name=np.frombuffer(self.analyzer_name.encode("utf-8"), dtype=np.uint8),
        )
        write_bytes_atomically(directory / KEYWORD_FILE, buffer.getbuffer())

    @classmethod
    def load(cls, directory: Path) -> KeywordSegment:
        """Read a segment written by :meth:`save`; raises :class:`StoreError` if it is missing or damaged."""
        path = Path(directory) / KEYWORD_FILE
        try:
            with np.load(path, allow_pickle=False) as npz:
                version = int(npz["format_version"])
                if version != _FORMAT_VERSION:
                    raise StoreError(f"{path}: keyword index format {version} is not supported; accepted: 1")
                n_rows, n_terms = (int(x) for x in npz["shape"])
                data = npz["data"]
                if data.size and int(data.max()) <= np.iinfo(np.uint16).max:
                    data = data.astype(np.uint16)  # term frequencies are small: half the memory of int32
                matrix = sp.csc_matrix((data, npz["indices"], npz["indptr"]), shape=(n_rows, n_terms), copy=False)
                lengths = npz["lengths"]
                terms = _decode_vocabulary(npz["vocab_blob"], npz["vocab_offsets"])
                analyzer_name = npz["analyzer_name"].tobytes().decode("utf-8")
        except FileNotFoundError as exc:
            raise StoreError(f"keyword index {path} does not exist", code="STORE_ERROR") from exc
        except (OSError, KeyError, ValueError, UnicodeDecodeError) as exc:
            raise StoreError(f"keyword index {path} is unreadable: {exc}") from exc
        if len(terms) != n_terms or lengths.shape != (n_rows,):
            raise StoreError(f"keyword index {path} is inconsistent: {n_terms} columns, {len(terms)} terms")
        return cls({t: i for i, t in enumerate(terms)}, matrix, lengths, analyzer_name)


def _top_k(scores: np.ndarray, rows: np.ndarray | None, k: int, floor: float = 0.0) -> np.ndarray:
    """Positions of the ``k`` best ``scores`` > 0, by score desc then row asc (``rows=None``: row = position).

    ``floor`` is a known lower bound of the k-th best score: positions below it are dropped with one cheap
    comparison pass before the (costlier) partition.
    """
    index = np.flatnonzero(scores >= floor) if floor > 0 else np.flatnonzero(scores > 0)
    if len(index) > k:
        values = scores[index]
        threshold = values[np.argpartition(-values, k - 1)[k - 1]]
        index = index[values >= threshold]  # keep ties at the boundary so the tie-break below is by row
    values = scores[index]
    order = np.lexsort((index if rows is None else rows[index], -values))[:k]
    return index[order]


# --- search --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BM25Parameters:
    """BM25 free parameters: Lucene's defaults k1 = 1.2, b = 0.75.

    Measured nDCG@10 (benchmarks/bench_keyword.py quality) for k1 0.9 / 1.2 / 1.5: SciFact 0.685 / 0.688 / 0.692,
    XQuAD-zh 0.965 / 0.965 / 0.965: differences within noise and in opposite directions, so we keep the
    standard value rather than fit k1 to those query sets.
    """

    k1: float = 1.2
    b: float = 0.75

    def __post_init__(self) -> None:
        if not (self.k1 >= 0.0 and np.isfinite(self.k1)):
            raise InvalidArgument(f"BM25 k1 must be a finite number >= 0, got {self.k1!r}")
        if not 0.0 <= self.b <= 1.0:
            raise InvalidArgument(f"BM25 b must be between 0 and 1, got {self.b!r}")


@dataclass(frozen=True)
class KeywordHit:
    segment_index: int
    row: int
    score: float


@dataclass
class _Segment:
    segment: KeywordSegment
    live: np.ndarray
    all_live: bool
    offset: int  # global row id of this segment's row 0
    norm: np.ndarray = field(repr=False)  # bm25_length_norm of every row


@dataclass(frozen=True)
class _TermPostings:
    """A term's live postings in all segments and their exact BM25 contributions under one searcher."""

    rows: np.ndarray  # sorted global row ids (segment offset + row) of the live rows containing the term
    scores: np.ndarray  # idf · saturated tf, float64, aligned with rows
    top: np.ndarray  # the largest contributions, descending (at most _TOP_KEPT)

    @property
    def df(self) -> int:
        return len(self.rows)


_NO_POSTINGS = _TermPostings(np.empty(0, dtype=np.int64), np.empty(0), np.empty(0))
_NO_HITS = (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64))
_TOP_KEPT = 256  # enough for the over-fetch of hybrid search (k up to a few hundred)


class KeywordSearcher:
    """BM25 over the live rows of a fixed set of segments. Thread-safe for concurrent queries.

    Build a new searcher whenever the set of segments or a live mask changes; segments are shared, not copied,
    and construction costs one vector pass over the row lengths. Since N, avgdl and every df are fixed for
    a searcher, a term's contributions are exact constants for it: they are computed on first use of the term,
    from its postings only, and kept in a bounded LRU cache (``cache_postings`` entries, 12 bytes each).
    """

    def __init__(
        self,
        segments: Sequence[tuple[KeywordSegment, np.ndarray]],
        analyzer: Analyzer,
        params: BM25Parameters = BM25Parameters(),
        *,
        cache_postings: int = 8_000_000,
    ) -> None:
        self.analyzer = analyzer
        self.params = params
        n_docs = 0
        total_length = 0
        checked: list[tuple[KeywordSegment, np.ndarray, bool]] = []
        for i, (segment, live) in enumerate(segments):
            if segment.analyzer_name and segment.analyzer_name != analyzer.name:
                raise InvalidArgument(
                    f"segment {i} was indexed with analyzer {segment.analyzer_name!r}, not {analyzer.name!r}",
                    code="ANALYZER_MISMATCH",
                )
            live = np.asarray(live)
            if live.dtype != np.bool_ or live.shape != (segment.n_rows,):
                raise InvalidArgument(
                    f"live mask of segment {i} must be a bool array of shape ({segment.n_rows},), "
                    f"got {live.dtype} {live.shape}"
                )
            live = live.copy()  # the caller may reuse its mask; our N, avgdl and cached dfs must not drift
            live.flags.writeable = False
            n_live = int(np.count_nonzero(live))
            n_docs += n_live
            all_live = n_live == segment.n_rows
            total_length += int(segment.lengths.sum(dtype=np.int64) if all_live else segment.lengths[live].sum())
            checked.append((segment, live, all_live))
        self.n_docs = n_docs
        # With no tokens at all nothing can match; any positive avgdl avoids 0/0.
        self.avgdl = total_length / n_docs if n_docs and total_length else 1.0
        self._segments: list[_Segment] = []
        offset = 0
        for segment, live, all_live in checked:
            norm = bm25_length_norm(segment.lengths, self.avgdl, params.k1, params.b)
            self._segments.append(_Segment(segment, live, all_live, offset, norm))
            offset += segment.n_rows
        self._offsets = np.array([s.offset for s in self._segments], dtype=np.int64)
        self._total_rows = offset
        self._cache: OrderedDict[str, _TermPostings] = OrderedDict()
        self._cache_size = 0
        self._cache_limit = cache_postings
        self._cache_lock = threading.Lock()

    def query_terms(self, query: str) -> list[str]:
        """The distinct analysed terms ``query`` is searched with, in order of first appearance: its words, stop words
        left out (:meth:`kb_core.engines.analysis.Analyzer.query_terms`)."""
        return list(self.analyzer.query_terms(query).terms)

    def _postings(self, term: str) -> _TermPostings:
        with self._cache_lock:
            entry = self._cache.get(term)
            if entry is not None:
                self._cache.move_to_end(term)
                return entry
        found: list[tuple[_Segment, np.ndarray, np.ndarray]] = []
        for seg in self._segments:
            col = seg.segment.vocabulary.get(term)
            if col is None:
                continue
            m = seg.segment.term_frequencies
            start, end = m.indptr[col], m.indptr[col + 1]
            rows, tf = m.indices[start:end], m.data[start:end]
            if not seg.all_live:
                keep = seg.live[rows]
                rows, tf = rows[keep], tf[keep]
            if len(rows):
                found.append((seg, rows, tf))
        if not found:
            return _NO_POSTINGS
        df = sum(len(rows) for _, rows, _ in found)
        idf = float(bm25_idf(df, self.n_docs))
        k1 = self.params.k1
        parts = [bm25_term_scores(tf, seg.norm[rows], idf, k1) for seg, rows, tf in found]
        scores = parts[0] if len(parts) == 1 else np.concatenate(parts)
        row_parts = [np.add(rows, seg.offset, dtype=np.int64) for seg, rows, _ in found]
        global_rows = row_parts[0] if len(row_parts) == 1 else np.concatenate(row_parts)
        top = scores if len(scores) <= _TOP_KEPT else scores[np.argpartition(-scores, _TOP_KEPT - 1)[:_TOP_KEPT]]
        entry = _TermPostings(global_rows, scores, np.sort(top)[::-1])
        with self._cache_lock:
            if term not in self._cache and df <= self._cache_limit:
                self._cache[term] = entry
                self._cache_size += df
                while self._cache_size > self._cache_limit:
                    _, old = self._cache.popitem(last=False)
                    self._cache_size -= old.df
        return entry

    def reference_score(self, terms: Sequence[str]) -> float:
        """The BM25 of a row of average length holding each of ``terms`` once: Σ idf(t) over the terms the live
        rows hold (a term's ``tf · (k1 + 1) / (tf + norm)`` is exactly 1 there). Search measures BM25 in this
        unit to put it on a [0, 1] scale (:func:`kb_core.engines.fusion.keyword_normalized`)."""
        total = 0.0
        for term in dict.fromkeys(terms):
            entry = self._postings(term)
            if entry.df:
                total += float(bm25_idf(entry.df, self.n_docs))
        return total

    def search(self, query: str, k: int) -> list[KeywordHit]:
        """The ``k`` best live rows for ``query``, best first (ties by segment, then row); only scores > 0."""
        analysed = self.analyzer.query_terms(query)
        return self.search_terms(analysed.terms, k, analysed.support)

    def search_terms(self, terms: Sequence[str], k: int, support: Sequence[str] = ()) -> list[KeywordHit]:
        """Like :meth:`search` for already analysed terms (duplicates count once)."""
        segments, rows, scores = self.search_terms_arrays(terms, k, support)
        return [
            KeywordHit(si, row, score)
            for si, row, score in zip(segments.tolist(), rows.tolist(), scores.tolist(), strict=True)
        ]

    def search_terms_arrays(
        self, terms: Sequence[str], k: int, support: Sequence[str] = ()
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`search_terms` as arrays ``(segment indexes, rows, scores)``, best first.

        ``support`` terms (:attr:`kb_core.engines.analysis.QueryTerms.support`) add their BM25 to the rows that
        hold one of ``terms`` and find no row on their own. Per segment the cost is the query terms' postings in
        it, plus one pass over the segment's rows when those postings are dense enough that a dense accumulator
        beats sorting them.
        """
        if k < 0:
            raise InvalidArgument(f"k must be >= 0, got {k!r}")
        terms = list(dict.fromkeys(terms))
        if k == 0 or not terms or self.n_docs == 0:
            return _NO_HITS
        postings = [(term, entry) for term in terms if (entry := self._postings(term)).df]
        if not postings:
            return _NO_HITS
        held = set(terms)
        extra = [e for t in dict.fromkeys(support) if t not in held and (e := self._postings(t)).df]
        # Every row's score is at least its contribution from any one term, so the k-th best contribution of
        # any single term is a lower bound of the k-th best score (support terms only add).
        floor = max((float(e.top[k - 1]) for _, e in postings if len(e.top) >= k), default=0.0)
        if len(postings) == 1 and not extra:
            entry = postings[0][1]
            rows, scores = entry.rows, entry.scores
            best = _top_k(scores, rows, k, floor)
            return self._hit_arrays(rows[best], scores[best])
        if sum(e.df for _, e in postings) * 8 >= self._total_rows:
            dense = np.zeros(self._total_rows, dtype=np.float64)
            largest = max(range(len(postings)), key=lambda i: postings[i][1].df)
            dense[postings[largest][1].rows] = postings[largest][1].scores  # a plain scatter for the longest list
            for i, (_, entry) in enumerate(postings):
                if i != largest:
                    np.add.at(dense, entry.rows, entry.scores)  # numpy >= 2 fast path: ~4x `dense[rows] += s`
            if extra:
                found = dense > 0  # every contribution is > 0, so these are the rows holding a term
                for entry in extra:
                    keep = found[entry.rows]
                    np.add.at(dense, entry.rows[keep], entry.scores[keep])
            best = _top_k(dense, None, k, floor)
            return self._hit_arrays(best, dense[best])
        unique_rows, inverse = np.unique(np.concatenate([e.rows for _, e in postings]), return_inverse=True)
        summed = np.bincount(inverse, weights=np.concatenate([e.scores for _, e in postings]))
        for entry in extra:
            pos = np.searchsorted(unique_rows, entry.rows)
            pos[pos >= len(unique_rows)] = 0
            keep = unique_rows[pos] == entry.rows
            np.add.at(summed, pos[keep], entry.scores[keep])
        best = _top_k(summed, unique_rows, k, floor)
        return self._hit_arrays(unique_rows[best], summed[best])

    def _hit_arrays(self, global_rows: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Hits as (segment, row, score) arrays; which query terms a hit holds is :meth:`row_terms`' job."""
        seg_of = np.searchsorted(self._offsets, global_rows, side="right") - 1
        local_rows = global_rows - self._offsets[seg_of]
        return seg_of.astype(np.int64), local_rows.astype(np.int64), np.asarray(scores, dtype=np.float64)

    def score_rows(self, query: str, rows: Sequence[tuple[int, int]]) -> np.ndarray:
        """Exact BM25 of ``query`` for the given ``(segment_index, row)`` pairs (0.0 for rows not live)."""
        analysed = self.analyzer.query_terms(query)
        return self.row_terms(analysed.terms, rows, analysed.support).bm25

    def row_terms(
        self, terms: Sequence[str], rows: Sequence[tuple[int, int]], support: Sequence[str] = ()
    ) -> RowTerms:
        """Exact BM25 of the analysed query ``terms`` for ``(segment_index, row)`` pairs, which of the terms
        each row contains, and each row's number of distinct terms: from the postings, no chunk text read.
        ``support`` terms add to the BM25 of a row holding one of ``terms`` (as in :meth:`search_terms_arrays`)."""
        terms = tuple(dict.fromkeys(terms))
        support = tuple(t for t in dict.fromkeys(support) if t not in terms)
        pairs = np.asarray(rows, dtype=np.int64).reshape(-1, 2)
        bm25 = np.zeros(len(pairs), dtype=np.float64)
        contains = np.zeros((len(pairs), len(terms)), dtype=bool)
        distinct = np.zeros(len(pairs), dtype=np.int64)
        if not len(pairs):
            return RowTerms(terms, bm25, contains, distinct, support, np.zeros((0, len(support)), dtype=bool))
        n_segments = len(self._segments)
        bad = (pairs[:, 0] < 0) | (pairs[:, 0] >= n_segments)
        if bad.any():
            raise InvalidArgument(
                f"segment index {int(pairs[bad][0, 0])} is out of range; accepted: 0..{n_segments - 1}"
            )
        sizes = np.array([s.segment.n_rows for s in self._segments], dtype=np.int64)
        bad = (pairs[:, 1] < 0) | (pairs[:, 1] >= sizes[pairs[:, 0]])
        if bad.any():
            si, row = (int(x) for x in pairs[bad][0])
            raise InvalidArgument(f"row {row} is out of range for segment {si}; accepted: 0..{sizes[si] - 1}")
        wanted = self._offsets[pairs[:, 0]] + pairs[:, 1]
        for column, term in enumerate(terms):
            found, scores = self._row_contributions(term, wanted)
            bm25[found] += scores
            contains[:, column] = found
        supports = np.zeros((len(pairs), len(support)), dtype=bool)
        if support:
            holding = contains.any(axis=1)
            for column, term in enumerate(support):
                found, scores = self._row_contributions(term, wanted)
                bm25[found & holding] += scores[holding[found]]
                supports[:, column] = found & holding
        for si in np.unique(pairs[:, 0]).tolist():
            where = pairs[:, 0] == si
            distinct[where] = self._segments[si].segment.distinct_terms[pairs[where, 1]]
        return RowTerms(terms, bm25, contains, distinct, support, supports)

    def _row_contributions(self, term: str, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Which of the global rows ``wanted`` hold ``term`` (bool per row) and their contributions (per found row)."""
        entry = self._postings(term)
        if not entry.df:
            return np.zeros(len(wanted), dtype=bool), np.empty(0)
        pos = np.searchsorted(entry.rows, wanted)
        pos[pos >= entry.df] = 0
        found = entry.rows[pos] == wanted  # deleted rows are not in the live postings: they stay 0
        return found, entry.scores[pos[found]]


@dataclass(frozen=True)
class RowTerms:
    """What the keyword index knows of some rows for one query (see :meth:`KeywordSearcher.row_terms`)."""

    terms: tuple[str, ...]  # the distinct query terms, columns of ``contains``
    bm25: np.ndarray  # float64 per row (support terms included)
    contains: np.ndarray  # bool, rows × terms
    distinct: np.ndarray  # distinct analysed terms per row
    support: tuple[str, ...]  # terms that added to ``bm25`` but are not matched terms
    supports: np.ndarray  # bool, rows × support: which support terms added to each row's ``bm25``

    def jaccard(self) -> np.ndarray:
        """Jaccard similarity of the query's term set and each row's term set (0 when both are empty)."""
        shared = self.contains.sum(axis=1)
        union = len(self.terms) + self.distinct - shared
        return np.divide(shared, union, out=np.zeros(len(shared), dtype=np.float64), where=union > 0)

    def matched(self, position: int) -> list[str]:
        return self.matched_many([position])[0]

    def matched_many(self, positions: Sequence[int]) -> list[list[str]]:
        """:meth:`matched` of each of ``positions``, with one sort of the terms and one array read for all."""
        return _held_terms(self.terms, self.contains, positions)

    def supported(self, position: int) -> list[str]:
        """The support terms that added to row ``position``'s BM25 (it holds them and a matched term)."""
        return self.supported_many([position])[0]

    def supported_many(self, positions: Sequence[int]) -> list[list[str]]:
        return _held_terms(self.support, self.supports, positions)


def _held_terms(terms: tuple[str, ...], held: np.ndarray, positions: Sequence[int]) -> list[list[str]]:
    """For each of ``positions``, the ``terms`` whose column of ``held`` (rows × terms) is set there, sorted."""
    order = sorted(range(len(terms)), key=terms.__getitem__)
    names = [terms[i] for i in order]
    rows = held[np.asarray(positions, dtype=np.int64)][:, order].tolist()
    return [[term for term, found in zip(names, row, strict=True) if found] for row in rows]
