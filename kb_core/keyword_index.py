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
lengths; a query touches only the postings of its terms (df is counted from those same postings).

Query terms are de-duplicated: a term repeated in the query counts once (a query is a set of terms, as in
Lucene's ``BooleanQuery`` of distinct ``TermQuery`` clauses built by most query parsers over analysed text).
"""

from __future__ import annotations

import io
import logging
import os
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from kb_core.analysis import Analyzer
from kb_core.errors import InvalidArgument, StoreError

logger = logging.getLogger(__name__)

__all__ = [
    "KEYWORD_FILE",
    "BM25Parameters",
    "KeywordHit",
    "KeywordSearcher",
    "KeywordSegment",
    "bm25_idf",
    "bm25_length_norm",
    "bm25_term_scores",
]

KEYWORD_FILE = "keyword.npz"
_FORMAT_VERSION = 1
_DF_CACHE_LIMIT = 200_000


# --- scoring: pure functions on arrays -----------------------------------------------------------------------------


def bm25_idf(df: np.ndarray | float, n_docs: int) -> np.ndarray:
    """BM25 inverse document frequency, Lucene/ATIRE form: ``ln(1 + (N - df + 0.5) / (df + 0.5))``.

    Robertson & Zaragoza, "The Probabilistic Relevance Framework: BM25 and Beyond" (2009), eq. 3.3, with the
    ``1 +`` inside the logarithm that Lucene's ``BM25Similarity`` adds so idf stays positive for very common
    terms (Kamphuis et al., "Which BM25 Do You Mean?", ECIR 2020).
    """
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
    term_frequencies: sp.csc_matrix  # (n_rows, n_terms), int32 tf, sorted row indices per column
    lengths: np.ndarray  # (n_rows,) int32 token count per row
    analyzer_name: str = ""

    @property
    def n_rows(self) -> int:
        return int(self.lengths.shape[0])

    @classmethod
    def build(cls, texts: Sequence[str], analyzer: Analyzer) -> KeywordSegment:
        """Analyse ``texts`` (one per row) and build their postings."""
        vocabulary: dict[str, int] = {}
        term_ids: list[int] = []
        lengths = np.zeros(len(texts), dtype=np.int32)
        for row, text in enumerate(texts):
            tokens = analyzer.tokens(text)
            lengths[row] = len(tokens)
            term_ids.extend(vocabulary.setdefault(t, len(vocabulary)) for t in tokens)
        cols = np.asarray(term_ids, dtype=np.int32)
        rows = np.repeat(np.arange(len(texts), dtype=np.int32), lengths)
        matrix = sp.csc_matrix(
            (np.ones(len(cols), dtype=np.int32), (rows, cols)), shape=(len(texts), len(vocabulary)), dtype=np.int32
        )
        matrix.sum_duplicates()  # also sorts row indices within each column
        return cls(vocabulary, matrix, lengths, analyzer.name)

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
        fd, tmp = tempfile.mkstemp(prefix=".keyword-", suffix=".tmp", dir=directory)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(buffer.getbuffer())
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, directory / KEYWORD_FILE)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

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
                matrix = sp.csc_matrix((npz["data"], npz["indices"], npz["indptr"]), shape=(n_rows, n_terms))
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


# --- search --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BM25Parameters:
    """BM25 free parameters. k1 = 1.2 and b = 0.75 are Lucene's defaults and measured best among 0.9/1.2/1.5
    on our evaluation sets (benchmarks/bench_keyword.py)."""

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
    matched_terms: tuple[str, ...]


@dataclass
class _Segment:
    segment: KeywordSegment
    live: np.ndarray
    all_live: bool
    offset: int  # global row id of this segment's row 0
    norm: np.ndarray = field(repr=False)  # bm25_length_norm of every row


class KeywordSearcher:
    """BM25 over the live rows of a fixed set of segments. Thread-safe for concurrent queries.

    Build a new searcher whenever the set of segments or a live mask changes; segments are shared, not copied.
    """

    def __init__(
        self,
        segments: Sequence[tuple[KeywordSegment, np.ndarray]],
        analyzer: Analyzer,
        params: BM25Parameters = BM25Parameters(),
    ) -> None:
        self.analyzer = analyzer
        self.params = params
        n_docs = 0
        total_length = 0
        offset = 0
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
            n_live = int(np.count_nonzero(live))
            n_docs += n_live
            all_live = n_live == segment.n_rows
            total_length += int(segment.lengths.sum(dtype=np.int64) if all_live else segment.lengths[live].sum())
            checked.append((segment, live, all_live))
        self.n_docs = n_docs
        # With no tokens at all nothing can match; any positive avgdl avoids 0/0.
        self.avgdl = total_length / n_docs if n_docs and total_length else 1.0
        self._segments: list[_Segment] = []
        for segment, live, all_live in checked:
            norm = bm25_length_norm(segment.lengths, self.avgdl, params.k1, params.b)
            self._segments.append(_Segment(segment, live, all_live, offset, norm))
            offset += segment.n_rows
        self._offsets = np.array([s.offset for s in self._segments], dtype=np.int64)
        self._total_rows = offset
        self._df_cache: dict[str, int] = {}
        self._df_lock = threading.Lock()

    def query_terms(self, query: str) -> list[str]:
        """The distinct analysed terms of ``query``, in order of first appearance."""
        return list(dict.fromkeys(self.analyzer.tokens(query)))

    def _remember_df(self, term: str, df: int) -> None:
        with self._df_lock:
            if len(self._df_cache) >= _DF_CACHE_LIMIT:
                self._df_cache.clear()
            self._df_cache[term] = df

    def _df(self, term: str) -> int:
        df = self._df_cache.get(term)
        if df is None:
            df = sum(len(self._gather(seg, [term])[0]) for seg in self._segments)
            self._remember_df(term, df)
        return df

    def search(self, query: str, k: int) -> list[KeywordHit]:
        """The ``k`` best live rows for ``query``, best first (ties by segment, then row); only scores > 0."""
        return self.search_terms(self.query_terms(query), k)

    def search_terms(self, terms: Sequence[str], k: int) -> list[KeywordHit]:
        """Like :meth:`search` for already analysed terms (duplicates count once).

        Work is vectorised over the query terms within each segment, so the Python overhead is per segment,
        and the arrays touched are the terms' postings (no pass over all rows).
        """
        if k < 0:
            raise InvalidArgument(f"k must be >= 0, got {k!r}")
        terms = list(dict.fromkeys(terms))
        if k == 0 or not terms or self.n_docs == 0:
            return []
        n_terms = len(terms)
        df = np.zeros(n_terms, dtype=np.int64)
        parts: list[tuple[_Segment, np.ndarray, np.ndarray, np.ndarray]] = []
        for seg in self._segments:
            rows, tf, term_index = self._gather(seg, terms)
            if len(rows):
                df += np.bincount(term_index, minlength=n_terms)
                parts.append((seg, rows, tf, term_index))
        if not parts:
            return []
        idf = bm25_idf(df, self.n_docs)
        k1 = self.params.k1
        global_rows, contributions, term_indexes = [], [], []
        for seg, rows, tf, term_index in parts:
            contributions.append(bm25_term_scores(tf, seg.norm[rows], idf[term_index], k1))
            global_rows.append(rows + seg.offset if seg.offset else rows)
            term_indexes.append(term_index)
        g = np.concatenate(global_rows) if len(parts) > 1 else global_rows[0]
        contribution = np.concatenate(contributions) if len(parts) > 1 else contributions[0]
        term_index = np.concatenate(term_indexes) if len(parts) > 1 else term_indexes[0]

        # Map the touched global rows to compact ids without sorting: the last write per row wins.
        positions = np.arange(len(g), dtype=np.int64)
        stamp = np.empty(self._total_rows, dtype=np.int64)
        stamp[g] = positions
        last = stamp[g] == positions
        candidates = g[last]
        compact = stamp  # reuse the buffer: global row -> compact id
        compact[candidates] = np.arange(len(candidates), dtype=np.int64)
        local = compact[g]
        scores = np.bincount(local, weights=contribution, minlength=len(candidates))

        chosen = self._top_k(scores, candidates, k)
        # Matched terms of the chosen hits only.
        slot = np.full(len(candidates), -1, dtype=np.int64)
        slot[chosen] = np.arange(len(chosen), dtype=np.int64)
        hit_slot = slot[local]
        sel = np.flatnonzero(hit_slot >= 0)
        matched: list[list[int]] = [[] for _ in range(len(chosen))]
        for s_, t_ in zip(hit_slot[sel].tolist(), term_index[sel].tolist(), strict=True):
            matched[s_].append(t_)
        chosen_rows = candidates[chosen]
        seg_of = np.searchsorted(self._offsets, chosen_rows, side="right") - 1
        return [
            KeywordHit(int(si), int(row - self._offsets[si]), float(score), tuple(terms[t] for t in sorted(ts)))
            for si, row, score, ts in zip(
                seg_of.tolist(), chosen_rows.tolist(), scores[chosen].tolist(), matched, strict=True
            )
        ]

    @staticmethod
    def _gather(seg: _Segment, terms: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Live postings in ``seg`` of all ``terms``: rows, tf and the index of the term in ``terms``."""
        vocabulary = seg.segment.vocabulary
        found = [(i, col) for i, t in enumerate(terms) if (col := vocabulary.get(t)) is not None]
        m = seg.segment.term_frequencies
        if not found:
            empty = np.empty(0, dtype=np.int64)
            return m.indices[:0], m.data[:0], empty
        if len(found) == 1:
            i, col = found[0]
            start, end = m.indptr[col], m.indptr[col + 1]
            rows, tf = m.indices[start:end], m.data[start:end]
            term_index = np.full(end - start, i, dtype=np.int64)
        else:
            which, cols = np.array(found, dtype=np.int64).T
            starts = m.indptr[cols]
            lengths = m.indptr[cols + 1] - starts
            # Concatenated ranges [start, start + length) without a Python loop.
            shift = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)
            index = np.arange(len(shift), dtype=np.int64) + shift
            rows, tf = m.indices[index], m.data[index]
            term_index = np.repeat(which, lengths)
        if not seg.all_live:
            keep = seg.live[rows]
            rows, tf, term_index = rows[keep], tf[keep], term_index[keep]
        return rows, tf, term_index

    @staticmethod
    def _top_k(scores: np.ndarray, candidates: np.ndarray, k: int) -> np.ndarray:
        """Indexes into ``scores`` of the k best, by score desc then global row asc; only scores > 0."""
        index = np.arange(len(scores))
        if len(scores) > k:
            threshold = scores[np.argpartition(-scores, k - 1)[k - 1]]
            index = np.flatnonzero(scores >= threshold)  # keep boundary ties so the tie-break is by row
        order = np.lexsort((candidates[index], -scores[index]))[:k]
        chosen = index[order]
        return chosen[scores[chosen] > 0]

    def score_rows(self, query: str, rows: Sequence[tuple[int, int]]) -> np.ndarray:
        """Exact BM25 of ``query`` for the given ``(segment_index, row)`` pairs (0.0 for rows not live)."""
        pairs = np.asarray(rows, dtype=np.int64).reshape(-1, 2)
        out = np.zeros(len(pairs), dtype=np.float64)
        if not len(pairs):
            return out
        n_segments = len(self._segments)
        bad = (pairs[:, 0] < 0) | (pairs[:, 0] >= n_segments)
        if bad.any():
            raise InvalidArgument(
                f"segment index {int(pairs[bad][0, 0])} is out of range; accepted: 0..{n_segments - 1}"
            )
        terms = self.query_terms(query)
        if not terms or self.n_docs == 0:
            return out
        idfs = {t: float(bm25_idf(df, self.n_docs)) for t in terms if (df := self._df(t)) > 0}
        k1 = self.params.k1
        for si in np.unique(pairs[:, 0]).tolist():
            seg = self._segments[si]
            where = np.flatnonzero(pairs[:, 0] == si)
            seg_rows = pairs[where, 1]
            bad_rows = (seg_rows < 0) | (seg_rows >= seg.segment.n_rows)
            if bad_rows.any():
                raise InvalidArgument(
                    f"row {int(seg_rows[bad_rows][0])} is out of range for segment {si}; "
                    f"accepted: 0..{seg.segment.n_rows - 1}"
                )
            live = seg.live[seg_rows]
            where, seg_rows = where[live], seg_rows[live]
            m = seg.segment.term_frequencies
            for term, idf in idfs.items():
                col = seg.segment.vocabulary.get(term)
                if col is None:
                    continue
                col_rows = m.indices[m.indptr[col] : m.indptr[col + 1]]
                if not len(col_rows):
                    continue
                pos = np.searchsorted(col_rows, seg_rows)
                pos[pos >= len(col_rows)] = 0
                found = col_rows[pos] == seg_rows
                tf = m.data[m.indptr[col] + pos[found]]
                out[where[found]] += bm25_term_scores(tf, seg.norm[seg_rows[found]], idf, k1)
        return out
