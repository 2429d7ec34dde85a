"""A consistent read view of one KB in PostgreSQL, and the retrieval primitives computed in SQL.

A :class:`PostgresSnapshot` lives inside one ``REPEATABLE READ READ ONLY`` transaction (see
:meth:`kb_core.store.postgres.store.PostgresStore.snapshot`): every query it runs sees the same committed state,
so a search never mixes rows or statistics from before and after a commit. Rows are addressed by ``row_id``, the
chunk's position in insertion order (the tie-break of equal scores, as the folder store's segment and row order).

Retrieval, with exactly the folder store's formulas (:mod:`kb_core.engines.keyword_index`,
:mod:`kb_core.engines.vector_index`):

* :meth:`~PostgresSnapshot.query_terms`: the query's analysed terms (analysis stays in Python), their df and
  ``idf = ln(1 + (N − df + 0.5) / (df + 0.5))`` from the live statistics; ``reference`` = Σ idf of the terms
  present (the keyword score scale of the fusion);
* :meth:`~PostgresSnapshot.keyword_candidates`: the top k rows by BM25 (k1, b of
  :class:`kb_core.engines.keyword_index.BM25Parameters`, the ``(k1 + 1)`` factor kept), summed over the query terms'
  postings by one ``GROUP BY`` in SQL;
* :meth:`~PostgresSnapshot.vector_candidates`: the top k rows by cosine: the HNSW index (``<=>``, iterative scan)
  proposes ``k + max(k // 2, 42)`` rows, which are rescored exactly (the stored float32 vectors' inner product,
  ``<#>``, as the folder store's FAISS inner product) and cut to k; small KBs and short answers are scanned exactly;
* :meth:`~PostgresSnapshot.row_scores`: for any rows, exact BM25, which query terms each holds, its number of
  distinct terms (for Jaccard) and its cosine: what the fusion and the score breakdown need;
* :meth:`~PostgresSnapshot.candidates`: both candidate lists, their union and its row scores.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import psycopg
import psycopg.errors
from psycopg import sql

from kb_core.base.errors import InvalidArgument, KBNotFound
from kb_core.engines.analysis import Analyzer
from kb_core.engines.keyword_index import BM25Parameters, RowTerms
from kb_core.store.postgres import schema
from kb_core.store.postgres.connection import DatabaseTarget
from kb_core.store.postgres.records import ChunkRecord, DocumentRecord, KeywordStatistics

logger = logging.getLogger(__name__)

__all__ = [
    "CandidateRows",
    "KBTables",
    "PostgresSnapshot",
    "QueryTerms",
    "ScoredRow",
    "VectorSearchSettings",
]

_S = sql.Identifier(schema.SCHEMA)
_RESCORE_EXTRA = 42  # as the folder store: an approximate search for k rows rescores k + max(k // 2, 42)
_MAX_EF_SEARCH = 1000  # pgvector's limit
_SEED_POSTINGS = 2_000  # MaxScore's first round scores the rows of the rarest terms, up to this many postings
_SEED_MAX_ROWS = 8_000  # a rarest term in more rows than this gives no cheap threshold
_PROBE_POSTINGS = 20_000  # above this many essential postings, one aggregation beats scoring rows by index probes
_CHUNK_COLUMNS = sql.SQL("chunk_id, doc_id, chunk_index, content, tokens, chapter, page, start_char, end_char")


@dataclass(frozen=True)
class VectorSearchSettings:
    """How vector candidates are found. ``exact_below_rows``: KBs with at most this many live rows are scanned
    exactly (as the folder store's flat index below 50k rows a segment; a scan of a few thousand rows costs less
    than an index walk). ``ef_search``: HNSW's candidate list (raised to the number of rows fetched)."""

    ef_search: int = 128
    exact_below_rows: int = 5_000

    def __post_init__(self) -> None:
        if not 1 <= self.ef_search <= _MAX_EF_SEARCH:
            raise InvalidArgument(f"ef_search must lie in 1..{_MAX_EF_SEARCH}, got {self.ef_search!r}")
        if self.exact_below_rows < 0:
            raise InvalidArgument(f"exact_below_rows must be >= 0, got {self.exact_below_rows!r}")


@dataclass(frozen=True)
class KBTables:
    """A KB's table number and statistics as one transaction sees them."""

    kb_id: str
    table_no: int
    analyzer: str
    dimension: int | None
    live_rows: int
    total_length: int
    version: int
    embedding_model: str

    @property
    def chunks(self) -> sql.Identifier:
        return schema.table("chunks", self.table_no)

    @property
    def terms(self) -> sql.Identifier:
        return schema.table("terms", self.table_no)

    @property
    def postings(self) -> sql.Identifier:
        return schema.table("postings", self.table_no)

    @property
    def statistics(self) -> KeywordStatistics:
        return KeywordStatistics(self.live_rows, self.total_length)


@dataclass(frozen=True)
class QueryTerms:
    """The distinct analysed terms of a query, in order of first appearance, then its support terms (which add to
    the BM25 of a row holding one of ``terms`` and find none on their own: :attr:`kb_core.engines.analysis.
    QueryTerms.support`), with the df and idf of each in one snapshot (``term_id`` None and df 0 for a term no live
    row holds). ``term_ids``, ``df`` and ``idf`` follow :attr:`scored_terms`."""

    terms: tuple[str, ...]
    term_ids: tuple[int | None, ...]
    df: tuple[int, ...]
    idf: tuple[float, ...]
    support: tuple[str, ...] = ()

    @property
    def scored_terms(self) -> tuple[str, ...]:
        return self.terms + self.support

    @property
    def reference(self) -> float:
        """Σ idf over the query's terms (not its support terms) the live rows hold: the BM25 of an average-length
        row holding each term once (:meth:`kb_core.engines.keyword_index.KeywordSearcher.reference_score`)."""
        total = 0.0
        for df, idf in zip(self.df[: len(self.terms)], self.idf[: len(self.terms)], strict=True):
            if df:
                total += idf
        return total

    def present(self) -> tuple[list[int], list[float], list[int]]:
        """(term ids, idfs, positions in :attr:`scored_terms`) of the terms some live row holds."""
        ids: list[int] = []
        idfs: list[float] = []
        positions: list[int] = []
        for position, (term_id, df, idf) in enumerate(zip(self.term_ids, self.df, self.idf, strict=True)):
            if term_id is not None and df:
                ids.append(term_id)
                idfs.append(idf)
                positions.append(position)
        return ids, idfs, positions


@dataclass(frozen=True)
class ScoredRow:
    row_id: int
    score: float


@dataclass(frozen=True)
class CandidateRows:
    """Both signals' candidates and what the fusion needs of each, in one snapshot.

    ``row_ids`` is the union (keyword candidates first, in rank order, then vector-only ones); ranks are 1-based
    positions in each list (None: not in it); ``row_terms`` holds exact BM25, the query terms each row contains
    and its distinct term count; ``cosine`` the exact cosine (NaN without a query vector).
    """

    query: QueryTerms
    row_ids: tuple[int, ...]
    keyword_rank: tuple[int | None, ...]
    vector_rank: tuple[int | None, ...]
    row_terms: RowTerms
    cosine: np.ndarray

    @property
    def keyword_reference(self) -> float:
        return self.query.reference


class PostgresSnapshot:
    """One KB as of one instant; valid inside the ``with store.snapshot(kb_id)`` block that made it."""

    def __init__(
        self,
        conn: psycopg.Connection,
        target: DatabaseTarget,
        tables: KBTables,
        *,
        bm25: BM25Parameters,
        vector_search: VectorSearchSettings,
        warnings: tuple[str, ...] = (),
    ) -> None:
        self._conn = conn
        self.server = target.display
        self.tables = tables
        self.bm25 = bm25
        self.vector_search = vector_search
        self.warnings = warnings

    @property
    def kb_id(self) -> str:
        return self.tables.kb_id

    @property
    def version(self) -> int:
        """Commits so far: a cache of anything derived from this KB is valid while this number stays."""
        return self.tables.version

    @property
    def statistics(self) -> KeywordStatistics:
        return self.tables.statistics

    def _fetch(self, query: sql.Composable, params: object = None) -> list[tuple]:  # type: ignore[type-arg]
        try:
            return self._conn.execute(query, params).fetchall()  # type: ignore[arg-type]
        except psycopg.errors.UndefinedTable as exc:
            raise KBNotFound(f"Knowledge base id '{self.kb_id}' was deleted.", details={"kb_id": self.kb_id}) from exc

    # -- catalog -----------------------------------------------------------------------------------------------
    def documents(self, doc_ids: Sequence[str] | None = None) -> list[DocumentRecord]:
        """The live documents (ready and failed), oldest first; only those of ``doc_ids`` if given."""
        columns = [f for f in DocumentRecord.__dataclass_fields__]
        only = sql.SQL("" if doc_ids is None else "AND doc_id = ANY(%s) ")
        rows = self._fetch(
            sql.SQL("SELECT {} FROM {}.documents WHERE kb_id = %s {}ORDER BY created_at, doc_id").format(
                sql.SQL(", ").join(sql.Identifier(c) for c in columns), _S, only
            ),
            (self.kb_id,) if doc_ids is None else (self.kb_id, list(doc_ids)),
        )
        return [DocumentRecord.from_row(dict(zip(columns, row, strict=True))) for row in rows]

    def text(self, doc_id: str) -> str | None:
        rows = self._fetch(
            sql.SQL("SELECT text FROM {}.texts WHERE kb_id = %s AND doc_id = %s").format(_S), (self.kb_id, doc_id)
        )
        return str(rows[0][0]) if rows else None

    def original(self, doc_id: str) -> bytes | None:
        rows = self._fetch(
            sql.SQL("SELECT content FROM {}.originals WHERE kb_id = %s AND doc_id = %s").format(_S),
            (self.kb_id, doc_id),
        )
        return bytes(rows[0][0]) if rows else None

    def chunks(self, row_ids: Sequence[int]) -> dict[int, ChunkRecord]:
        """The chunk rows of ``row_ids`` that are live, by row id."""
        rows = self._fetch(
            sql.SQL("SELECT row_id, {} FROM {} WHERE row_id = ANY(%s)").format(_CHUNK_COLUMNS, self.tables.chunks),
            ([int(r) for r in row_ids],),
        )
        names = list(ChunkRecord.__dataclass_fields__)
        return {int(row[0]): ChunkRecord.from_row(dict(zip(names, row[1:], strict=True))) for row in rows}

    def chunks_with_signatures(
        self, row_ids: Sequence[int]
    ) -> dict[int, tuple[ChunkRecord, tuple[int, int, np.ndarray] | None]]:
        """The live chunk rows of ``row_ids`` with their stored near-duplicate signatures ``(text_hash,
        shingle_count, sketch)`` (None for a row written before signatures were stored), by row id."""
        rows = self._fetch(
            sql.SQL("SELECT row_id, {}, text_hash, shingle_count, sketch FROM {} WHERE row_id = ANY(%s)").format(
                _CHUNK_COLUMNS, self.tables.chunks
            ),
            ([int(r) for r in row_ids],),
        )
        names = list(ChunkRecord.__dataclass_fields__)
        found: dict[int, tuple[ChunkRecord, tuple[int, int, np.ndarray] | None]] = {}
        for row in rows:
            chunk = ChunkRecord.from_row(dict(zip(names, row[1 : 1 + len(names)], strict=True)))
            text_hash, count, sketch = row[1 + len(names) :]
            signature = None
            if text_hash is not None and count is not None and sketch is not None:
                signature = (int(text_hash), int(count), np.frombuffer(bytes(sketch), dtype="<u8").astype(np.uint64))
            found[int(row[0])] = (chunk, signature)
        return found

    def document_chunks(self, doc_id: str) -> list[tuple[int, ChunkRecord]]:
        """A document's chunks in order, with their row ids."""
        rows = self._fetch(
            sql.SQL("SELECT row_id, {} FROM {} WHERE doc_id = %s ORDER BY chunk_index, row_id").format(
                _CHUNK_COLUMNS, self.tables.chunks
            ),
            (doc_id,),
        )
        names = list(ChunkRecord.__dataclass_fields__)
        return [(int(row[0]), ChunkRecord.from_row(dict(zip(names, row[1:], strict=True)))) for row in rows]

    def find_chunk(self, chunk_id: str) -> int | None:
        rows = self._fetch(sql.SQL("SELECT row_id FROM {} WHERE chunk_id = %s").format(self.tables.chunks), (chunk_id,))
        return int(rows[0][0]) if rows else None

    def vectors(self, row_ids: Sequence[int]) -> np.ndarray:
        """The stored float32 vectors of ``row_ids`` (live rows), in the given order."""
        wanted = [int(r) for r in row_ids]
        if not wanted or self.tables.dimension is None:
            return np.empty((len(wanted) if self.tables.dimension else 0, self.tables.dimension or 0), dtype=np.float32)
        with self._conn.cursor(binary=True) as cur:
            cur.execute(
                sql.SQL("SELECT row_id, embedding FROM {} WHERE row_id = ANY(%s)").format(self.tables.chunks), (wanted,)
            )
            found = {int(r): v.to_numpy() for r, v in cur.fetchall()}
        missing = [r for r in wanted if r not in found]
        if missing:
            raise InvalidArgument(f"rows {missing[:5]} are not live rows of knowledge base {self.kb_id}")
        return np.vstack([found[r] for r in wanted]).astype(np.float32, copy=False)

    # -- retrieval ---------------------------------------------------------------------------------------------
    def query_terms(self, query: str, analyzer: Analyzer) -> QueryTerms:
        """Analyse ``query`` (in Python, with the KB's analyzer) and look its terms up in this snapshot."""
        if analyzer.name != self.tables.analyzer:
            raise InvalidArgument(
                f"knowledge base {self.kb_id} was indexed with analyzer {self.tables.analyzer!r}, "
                f"not {analyzer.name!r}",
                code="ANALYZER_MISMATCH",
            )
        analysed = analyzer.query_terms(query)
        return self.lookup_terms(analysed.terms, analysed.support)

    def lookup_terms(self, terms: Sequence[str], support: Sequence[str] = ()) -> QueryTerms:
        """df and idf (computed in SQL from the live N) of already analysed, distinct ``terms`` and ``support``."""
        kept = tuple(dict.fromkeys(terms))
        extra = tuple(t for t in dict.fromkeys(support) if t not in kept)
        terms = kept + extra
        found: dict[int, tuple[int, int, float]] = {}
        if terms and self.tables.live_rows:
            rows = self._fetch(
                sql.SQL(
                    "SELECT q.position, t.term_id, t.df, ln(1 + (%(n)s - t.df + 0.5) / (t.df + 0.5)) "
                    "FROM unnest(%(terms)s::text[]) WITH ORDINALITY AS q(term, position) "
                    "JOIN {} t ON t.term = q.term WHERE t.df > 0"
                ).format(self.tables.terms),
                {"terms": list(terms), "n": float(self.tables.live_rows)},
            )
            found = {int(p) - 1: (int(i), int(df), float(idf)) for p, i, df, idf in rows}
        return QueryTerms(
            terms=kept,
            term_ids=tuple(found[i][0] if i in found else None for i in range(len(terms))),
            df=tuple(found[i][1] if i in found else 0 for i in range(len(terms))),
            idf=tuple(found[i][2] if i in found else 0.0 for i in range(len(terms))),
            support=extra,
        )

    def _bm25_params(self, query: QueryTerms) -> dict[str, object]:
        ids, idfs, positions = query.present()
        k1, b = self.bm25.k1, self.bm25.b
        return {
            "ids": ids,
            "idf": idfs,
            "pos": positions,
            "k1": k1,
            "k1p1": k1 + 1.0,
            "b": b,
            "avgdl": self.statistics.avgdl,
            "kept": len(query.terms),  # positions below it are the query's terms, the rest support terms
        }

    # BM25 of one posting as kb_core.engines.keyword_index computes it, the same float8 operations in the same order:
    # idf · (tf · (k1 + 1)) / (tf + k1 · (1 − b + b · dl / avgdl))
    _CONTRIBUTION = "q.idf * (p.tf * %(k1p1)s) / (p.tf + %(k1)s * (1 - %(b)s + %(b)s * (p.dl / %(avgdl)s)))"

    def keyword_candidates(self, query: QueryTerms, k: int, *, exhaustive: bool = False) -> list[ScoredRow]:
        """The ``k`` best live rows by BM25, best first (ties by row id); only rows holding a query term.

        Exact, with MaxScore pruning (Turtle & Flood 1995): the rows of the rarest terms' postings, scored in full,
        give a threshold θ (the k-th best of them); a term contributes less than ``idf · (k1 + 1)`` to any row, so
        the most common terms whose bounds add up to less than θ cannot lift a row that holds none of the other
        ("essential") terms into the top k, and their long postings are never scanned. ``exhaustive`` scores every
        posting of every term instead (the reference the tests compare with)."""
        if k < 0:
            raise InvalidArgument(f"k must be >= 0, got {k!r}")
        params = self._bm25_params(query)
        if k == 0 or not any(p < len(query.terms) for p in params["pos"]):  # type: ignore[attr-defined]
            return []
        if not exhaustive and len(params["ids"]) > 1:  # type: ignore[arg-type]
            pruned = self._pruned_keyword_candidates(query, params, k)
            if pruned is not None:
                return pruned
        rows = self._fetch(
            sql.SQL(
                "SELECT p.row_id, sum(" + self._CONTRIBUTION + " ORDER BY q.pos) AS score "
                "FROM unnest(%(ids)s::int[], %(idf)s::float8[], %(pos)s::int[]) AS q(term_id, idf, pos) "
                "JOIN {} p ON p.term_id = q.term_id "
                "GROUP BY p.row_id HAVING bool_or(q.pos < %(kept)s) ORDER BY score DESC, p.row_id LIMIT %(k)s"
            ).format(self.tables.postings),
            {**params, "k": int(k)},
        )
        return [ScoredRow(int(r), float(s)) for r, s in rows]

    def _score_rows_fully(self, params: dict[str, object], rows: list[int], k: int | None) -> list[ScoredRow]:
        """Exact BM25 over every query term of the given rows (index probes), best first, at most ``k``; the rows
        are those of query terms' postings, so support terms only add to rows that hold a term."""
        if not rows:
            return []
        limit = sql.SQL("LIMIT %(k)s") if k is not None else sql.SQL("")
        found = self._fetch(
            sql.SQL(
                "SELECT p.row_id, sum(" + self._CONTRIBUTION + " ORDER BY q.pos) AS score "
                "FROM unnest(%(ids)s::int[], %(idf)s::float8[], %(pos)s::int[]) AS q(term_id, idf, pos) "
                "JOIN {} p ON p.term_id = q.term_id WHERE p.row_id = ANY(%(rows)s) "
                "GROUP BY p.row_id ORDER BY score DESC, p.row_id {}"
            ).format(self.tables.postings, limit),
            {**params, "rows": rows, "k": k},
        )
        return [ScoredRow(int(r), float(s)) for r, s in found]

    def _rows_of(self, term_ids: list[int]) -> list[int]:
        found = self._fetch(
            sql.SQL("SELECT DISTINCT row_id FROM {} WHERE term_id = ANY(%s)").format(self.tables.postings), (term_ids,)
        )
        return [int(r[0]) for r in found]

    def _pruned_keyword_candidates(
        self, query: QueryTerms, params: dict[str, object], k: int
    ) -> list[ScoredRow] | None:
        """MaxScore (see :meth:`keyword_candidates`), or None when it would not save work."""
        ids, idfs, positions = query.present()
        df = {term_id: query.df[query.term_ids.index(term_id)] for term_id in ids}
        bound = {term_id: idf * (self.bm25.k1 + 1.0) for term_id, idf in zip(ids, idfs, strict=True)}
        kept = [t for t, position in zip(ids, positions, strict=True) if position < len(query.terms)]
        if len(kept) < 2:
            return None
        # Support terms find no row, but they add to any row that holds a query term: their bounds always count.
        support_bound = sum(bound[t] for t, p in zip(ids, positions, strict=True) if p >= len(query.terms))
        rarest_first = sorted(kept, key=lambda t: (df[t], t))
        if df[rarest_first[0]] > _SEED_MAX_ROWS:
            logger.debug("MaxScore: no rare term (the rarest is in %d rows): full aggregation", df[rarest_first[0]])
            return None  # scoring that many rows by index probes costs more than the aggregation saves
        seed: list[int] = []
        postings = 0
        for term_id in rarest_first[:-1]:  # never the most common term: that is the work to avoid
            if seed and postings + df[term_id] > _SEED_POSTINGS:
                break
            seed.append(term_id)
            postings += df[term_id]
        seed_rows = self._rows_of(seed)
        if len(seed_rows) < k:
            logger.debug("MaxScore: %d seed rows, fewer than k=%d: no threshold", len(seed_rows), k)
            return None
        first = self._score_rows_fully(params, seed_rows, k)
        threshold = first[-1].score
        # The most common terms whose bounds add up to less than θ (with a margin for rounding) are not essential.
        optional: set[int] = set()
        total = support_bound
        for term_id in reversed(rarest_first):
            total += bound[term_id]
            if total * (1 + 1e-9) >= threshold:
                break
            optional.add(term_id)
        essential = [t for t in kept if t not in optional]
        if set(essential) <= set(seed):
            # every row that can reach θ holds a seed term: the seed's top k is the top k
            logger.debug("MaxScore: the seed's top %d is final (%d of %d terms skipped)", k, len(optional), len(ids))
            return first
        if sum(df[t] for t in essential) > _PROBE_POSTINGS:
            logger.debug("MaxScore: %d essential terms with long postings: full aggregation", len(essential))
            return None
        logger.debug("MaxScore: scoring the rows of %d essential terms (%d skipped)", len(essential), len(optional))
        return self._score_rows_fully(params, self._rows_of(essential), k)

    def vector_candidates(self, vector: np.ndarray, k: int, *, exact: bool = False) -> list[ScoredRow]:
        """The ``k`` best live rows by cosine with ``vector`` (unit length), best first (ties by row id).

        The HNSW index proposes candidates; their scores are recomputed exactly and they are cut to ``k``. An
        exact scan answers instead for small KBs, with ``exact``, and when the index returns fewer than ``k``
        live rows (many deleted rows in its graph)."""
        if not isinstance(k, int) or k < 1:
            raise InvalidArgument(f"k must be a positive integer; got {k!r}")
        query = self._checked_vector(vector)
        live = self.tables.live_rows
        if live == 0 or self.tables.dimension is None:
            return []
        wanted = min(k, live)
        if not exact and live > self.vector_search.exact_below_rows:
            fetch = min(live, k + max(k // 2, _RESCORE_EXTRA))
            self._conn.execute(
                "SELECT set_config('hnsw.ef_search', %s, true), "
                "set_config('hnsw.iterative_scan', 'relaxed_order', true)",
                (str(min(_MAX_EF_SEARCH, max(self.vector_search.ef_search, fetch))),),
            )
            rows = self._fetch(
                sql.SQL(
                    "WITH proposed AS MATERIALIZED ("
                    "SELECT row_id, embedding FROM {} ORDER BY embedding <=> %(q)s LIMIT %(fetch)s) "
                    "SELECT row_id, -(embedding <#> %(q)s) AS cosine FROM proposed "
                    "ORDER BY cosine DESC, row_id LIMIT %(k)s"
                ).format(self.tables.chunks),
                {"q": query, "fetch": fetch, "k": wanted},
            )
            if len(rows) >= wanted:
                return [ScoredRow(int(r), float(s)) for r, s in rows]
            logger.debug("HNSW returned %d of %d live rows; exact scan", len(rows), wanted)
        # ORDER BY the inner product: no index serves it, so this is an exact scan of the live rows.
        rows = self._fetch(
            sql.SQL(
                "SELECT row_id, -(embedding <#> %(q)s) AS cosine FROM {} ORDER BY cosine DESC, row_id LIMIT %(k)s"
            ).format(self.tables.chunks),
            {"q": query, "k": wanted},
        )
        return [ScoredRow(int(r), float(s)) for r, s in rows]

    def _checked_vector(self, vector: np.ndarray) -> np.ndarray:
        query = np.asarray(vector, dtype=np.float32).reshape(-1)
        if self.tables.dimension is not None and query.shape[0] != self.tables.dimension:
            raise InvalidArgument(
                f"the query vector has dimension {query.shape[0]}; knowledge base {self.kb_id} holds "
                f"{self.tables.dimension}-dimensional vectors"
            )
        if not np.isfinite(query).all():
            raise InvalidArgument("the query vector holds NaN or infinite values")
        return query

    def row_scores(
        self, query: QueryTerms, row_ids: Sequence[int], vector: np.ndarray | None = None
    ) -> tuple[RowTerms, np.ndarray]:
        """For each of ``row_ids`` (in order): exact BM25, which query terms it holds, its distinct term count, and
        its exact cosine with ``vector`` (NaN without one). Rows not live score 0 and hold nothing."""
        wanted = [int(r) for r in row_ids]
        n_terms = len(query.terms)
        bm25 = np.zeros(len(wanted), dtype=np.float64)
        contains = np.zeros((len(wanted), n_terms), dtype=bool)
        supports = np.zeros((len(wanted), len(query.support)), dtype=bool)
        distinct = np.zeros(len(wanted), dtype=np.int64)
        cosine = np.full(len(wanted), np.nan, dtype=np.float64)
        if not wanted or self.tables.dimension is None:
            return RowTerms(query.terms, bm25, contains, distinct, query.support, supports), cosine
        params = self._bm25_params(query)
        query_vector = None if vector is None else self._checked_vector(vector)
        rows = self._fetch(
            sql.SQL(
                "WITH q AS (SELECT * FROM unnest(%(ids)s::int[], %(idf)s::float8[], %(pos)s::int[]) "
                "AS q(term_id, idf, pos)), "
                "hits AS (SELECT p.row_id, sum(" + self._CONTRIBUTION + " ORDER BY q.pos) AS bm25, "
                "array_agg(q.pos ORDER BY q.pos) AS found "
                "FROM q JOIN {postings} p ON p.term_id = q.term_id WHERE p.row_id = ANY(%(rows)s) GROUP BY p.row_id "
                "HAVING bool_or(q.pos < %(kept)s)) "
                "SELECT c.row_id, cardinality(c.term_ids), -(c.embedding <#> %(qv)s::vector), h.bm25, h.found "
                "FROM {chunks} c LEFT JOIN hits h ON h.row_id = c.row_id WHERE c.row_id = ANY(%(rows)s)"
            ).format(postings=self.tables.postings, chunks=self.tables.chunks),
            {**params, "rows": wanted, "qv": query_vector},
        )
        position = {row_id: i for i, row_id in enumerate(wanted)}
        for row_id, n_distinct, cos, score, found in rows:
            i = position[int(row_id)]
            distinct[i] = int(n_distinct)
            if cos is not None:
                cosine[i] = float(cos)
            if score is not None:
                bm25[i] = float(score)
                contains[i, [p for p in found if p < n_terms]] = True
                supports[i, [p - n_terms for p in found if p >= n_terms]] = True
        return RowTerms(query.terms, bm25, contains, distinct, query.support, supports), cosine

    def candidates(
        self, query: QueryTerms, vector: np.ndarray | None, *, keyword_k: int, vector_k: int, exact: bool = False
    ) -> CandidateRows:
        """Both candidate lists (0 for a list not wanted), their union, and exact scores of every union row."""
        keyword = self.keyword_candidates(query, keyword_k) if keyword_k > 0 else []
        vectors = self.vector_candidates(vector, vector_k, exact=exact) if vector is not None and vector_k > 0 else []
        keyword_rank = {hit.row_id: rank for rank, hit in enumerate(keyword, start=1)}
        vector_rank = {hit.row_id: rank for rank, hit in enumerate(vectors, start=1)}
        union = list(dict.fromkeys([hit.row_id for hit in keyword] + [hit.row_id for hit in vectors]))
        row_terms, cosine = self.row_scores(query, union, vector)
        return CandidateRows(
            query=query,
            row_ids=tuple(union),
            keyword_rank=tuple(keyword_rank.get(r) for r in union),
            vector_rank=tuple(vector_rank.get(r) for r in union),
            row_terms=row_terms,
            cosine=cosine,
        )
