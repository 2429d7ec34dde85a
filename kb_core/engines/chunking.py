"""Split a parsed document into chunks of at most ``chunk_size`` tokens of the embedder's tokenizer.

How chunks are cut, in order of preference:

1. Whole blocks (paragraphs) are packed together while they fit.
2. A block too long for one chunk is cut at sentence ends (``. ! ?`` followed by a space, Chinese
   ``。！？；``, and newlines).
3. A single sentence too long for one chunk is cut between tokens, at a word start where there is one.

A chunk never spans a chapter change (its ``chapter`` is that of its blocks; its ``page`` is the page of the
block it starts in), except that headings with no text of their own under them (a document's title, a heading
followed at once by its first sub-heading) go with the text that follows them, in that text's chapter: a title is
context, not a chunk. Consecutive chunks of one chapter share about ``overlap_tokens`` tokens: the next chunk
starts that far back, at a sentence start when one is close enough, else at a word start. The overlap is
shrunk rather than letting a chunk grow past ``chunk_size``.

Characters are bounded too (:func:`max_chunk_chars`, 16 per token of the budget): a word no tokenizer splits
(a 3 MB line without spaces is one hashing token, or one WordPiece ``[UNK]``) is cut into pieces of at most
that many characters, so every chunk is small whatever the tokenizer. Each chunk starts at least one token
after the one before it; a piece of a re-split chunk that another chunk wholly contains is dropped.

Every chunk's ``content`` is exactly ``doc.text[start:end]`` and its ``tokens`` is the tokenizer's count of
that content, which is checked to be ``<= chunk_size`` (a chunk that would re-tokenise longer is split again).

Speed: the document is tokenised once (batch path, one call per document) and all cutting happens in token
index space with binary searches, so a 1 MB text chunks in about a second. Chunk token counts are then checked by
re-counting in one batch call: all chunks for tokenizers not marked ``boundary_exact``, only the chunks with
a cut inside a word for those that are (BERT WordPiece, the hashing tokenizer).

Token ids (#15): a tokenizer that gives ids (:class:`~kb_core.engines.embedding.base.IdTokenizer`, e.g. a model's fast
tokenizer) gives them in that same call, and each chunk that was not re-counted carries its own slice of them
(``token_ids``), which the embedder of that tokenizer uses instead of tokenising the chunk again. A re-counted
chunk carries none.
"""

from __future__ import annotations

import logging
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Protocol

import numpy as np

from kb_core.base.errors import InvalidArgument
from kb_core.engines.embedding.base import IdTokenizer, TokenIds, Tokenizer, count_batch, offsets_batch

if TYPE_CHECKING:
    from kb_core.engines.parsing.base import ParsedDocument

log = logging.getLogger(__name__)

# A sentence ends after . ! ? (plus closing quotes/brackets) when whitespace or the end follows, after Chinese
# full stops/exclamations/questions/semicolons (no space needed), or at a newline. The cut is after the match.
_SENTENCE_END = re.compile(r"(?=[.!?…。！？；\n])(?:[.!?…]+[\"'”’)\]]*(?=\s|$)|[。！？；!?]+[”’」』）)\]]*|\n)\s*")


# One character can be several word pieces (a Hangul syllable is up to 3 jamo tokens), so tinier limits
# cannot always be met; the product's own minimum (kb_core.base.validation) is far above this.
MIN_CHUNK_SIZE = 8


@dataclass(frozen=True)
class Chunk:
    """One piece of a document; ``content == doc.text[start:end]``.

    ``token_ids``: what ``content`` tokenises to, when the chunker's tokenizer gave ids and the chunk's tokens are
    exactly the document's tokens over its span; only for the embedder (not compared, not stored).
    """

    chunk_index: int
    content: str
    tokens: int
    chapter: str | None
    page: int | None
    start: int
    end: int
    token_ids: TokenIds | None = field(default=None, compare=False, repr=False)

    def to_dict(self) -> dict[str, str | int | None]:
        """The stored fields (everything but ``token_ids``), e.g. for JSON; ``Chunk(**d)`` reads it back."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "token_ids"}


class _Block(Protocol):
    text: str
    chapter: str | None
    page: int | None


class _Document(Protocol):
    @property
    def blocks(self) -> Sequence[_Block]: ...

    @property
    def text(self) -> str: ...

    def block_offsets(self) -> list[tuple[int, int]]: ...


# Real text averages 3-6 characters per token (English) or 1 (Chinese); only an unsplittable run comes near this.
CHARS_PER_TOKEN_BOUND = 16


def max_chunk_chars(chunk_size: int) -> int:
    """The most characters a chunk of ``chunk_size`` tokens may hold."""
    return CHARS_PER_TOKEN_BOUND * chunk_size


def default_overlap(chunk_size: int) -> int:
    """About 10% of ``chunk_size`` (0 for tiny chunks)."""
    return max(0, round(chunk_size * 0.1)) if chunk_size >= 10 else 0


_IDEOGRAPHS = (
    (0x3400, 0x4DBF),
    (0x4E00, 0x9FFF),
    (0xF900, 0xFAFF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2CEAF),
    (0x2F800, 0x2FA1F),
)


def _stands_alone(ch: str) -> bool:
    """Characters a word tokenizer always splits off: punctuation and CJK ideographs (as BERT defines them)."""
    cp = ord(ch)
    if any(lo <= cp <= hi for lo, hi in _IDEOGRAPHS):
        return True
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


class _Cutter:
    """Token-index-space cutting of one document (see the module docstring)."""

    def __init__(
        self, text: str, starts: np.ndarray, ends: np.ndarray, sentence_starts: np.ndarray, max_chars: int
    ) -> None:
        self.text = text
        self.starts = starts
        self.ends = ends
        self.sentences = sentence_starts
        self.max_chars = max_chars

    def char_end(self, fresh: int) -> int:
        """The largest end (exclusive) such that tokens ``fresh..end-1`` span at most ``max_chars`` characters
        (at least one token: a longer single token is cut by characters later)."""
        limit = int(self.starts[fresh]) + self.max_chars
        return max(fresh + 1, int(np.searchsorted(self.ends, limit, side="right")))

    def char_start(self, end: int) -> int:
        """The smallest start such that tokens ``start..end-1`` span at most ``max_chars`` characters."""
        return int(np.searchsorted(self.starts, int(self.ends[end - 1]) - self.max_chars, side="left"))

    def clean(self, k: int) -> bool:
        """Whether cutting before token ``k`` leaves whole words on both sides."""
        if k <= 0 or k >= len(self.starts):
            return True
        s = int(self.starts[k])
        prev_end = int(self.ends[k - 1])
        if s > prev_end and any(ch.isspace() for ch in self.text[prev_end:s]):
            return True
        return _stands_alone(self.text[s - 1]) or _stands_alone(self.text[s])

    def last_in(self, marks: np.ndarray, lo: int, hi: int) -> int | None:
        """Largest element of sorted ``marks`` in ``(lo, hi]``."""
        i = int(np.searchsorted(marks, hi, side="right")) - 1
        if i >= 0 and marks[i] > lo:
            return int(marks[i])
        return None

    def first_in(self, marks: np.ndarray, lo: int, hi: int) -> int | None:
        """Smallest element of sorted ``marks`` in ``[lo, hi)``."""
        i = int(np.searchsorted(marks, lo, side="left"))
        if i < len(marks) and marks[i] < hi:
            return int(marks[i])
        return None

    def token_cut(self, lo: int, hi: int) -> int:
        """A cut in ``(lo, hi]``: the last clean one in its upper half, else ``hi``."""
        floor = max(lo + 1, lo + (hi - lo) // 2)
        for k in range(hi, floor - 1, -1):
            if self.clean(k):
                return k
        return hi

    def choose_end(
        self, fresh: int, at_block_start: bool, run_end: int, blocks: np.ndarray, size: int, reserve: int
    ) -> int:
        """Where the chunk whose new text starts at token ``fresh`` ends.

        From a block start, whole blocks are packed into the full budget (the overlap shrinks to fit). Inside an
        oversized block, ``reserve`` tokens are kept free for the overlap when a sentence end allows it.
        """
        full = min(fresh + size, run_end, self.char_end(fresh))
        lim = max(fresh + 1, min(full, fresh + size - reserve))
        if at_block_start:
            candidates = ((blocks, full), (self.sentences, lim), (self.sentences, full))
        else:
            candidates = ((blocks, lim), (self.sentences, lim), (blocks, full), (self.sentences, full))
        for marks, hi in candidates:
            end = self.last_in(marks, fresh, hi)
            if end is not None:
                return end
        return self.token_cut(fresh, lim)

    def overlap_start(self, prev_start: int, fresh: int, end: int, size: int, overlap: int) -> int:
        lo = max(prev_start + 1, fresh - overlap, end - size, self.char_start(end))
        if overlap <= 0 or lo >= fresh:
            return fresh
        s = self.first_in(self.sentences, lo, fresh)
        if s is not None and 2 * (fresh - s) >= overlap:
            return s
        for k in range(lo, fresh):
            if self.clean(k):
                return k
        return lo


def _validate(chunk_size: int, overlap_tokens: int | None) -> int:
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < MIN_CHUNK_SIZE:
        raise InvalidArgument(f"chunk_size must be an integer of at least {MIN_CHUNK_SIZE} tokens, got {chunk_size!r}")
    overlap = default_overlap(chunk_size) if overlap_tokens is None else overlap_tokens
    if isinstance(overlap, bool) or not isinstance(overlap, int) or not 0 <= overlap < chunk_size:
        raise InvalidArgument(
            f"overlap_tokens must be an integer from 0 to chunk_size - 1 ({chunk_size - 1}), got {overlap_tokens!r}"
        )
    return overlap


def chunk_document(
    doc: ParsedDocument | _Document,
    tokenizer: Tokenizer,
    chunk_size: int,
    overlap_tokens: int | None = None,
) -> list[Chunk]:
    """Chunks of ``doc`` of at most ``chunk_size`` tokens; ``overlap_tokens`` defaults to :func:`default_overlap`."""
    overlap = _validate(chunk_size, overlap_tokens)
    text = doc.text
    blocks = list(doc.blocks)
    if not blocks:
        return []
    block_spans = doc.block_offsets()
    block_texts = [text[s:e] for s, e in block_spans]
    per_block_ids = tokenizer.ids_offsets_batch(block_texts) if isinstance(tokenizer, IdTokenizer) else None
    per_block = (
        [t.offsets for t in per_block_ids] if per_block_ids is not None else offsets_batch(tokenizer, block_texts)
    )

    arrays: list[np.ndarray] = []
    id_arrays: list[np.ndarray] = []
    first_token: list[int] = []
    n_tokens = 0
    for i, ((bs, _), spans) in enumerate(zip(block_spans, per_block, strict=True)):
        first_token.append(n_tokens)
        arr = np.array(spans, dtype=np.int64).reshape(-1, 2)
        kept = arr[:, 1] > arr[:, 0]  # zero-width tokens have no text to cut at
        if per_block_ids is not None:
            if not kept.all():  # a chunk's ids would then lack tokens its text has: no chunk gets ids
                per_block_ids = None
            else:
                id_arrays.append(per_block_ids[i].ids)
        arr = arr[kept] + bs
        arrays.append(arr)
        n_tokens += len(arr)
    if n_tokens == 0:
        return []
    spans_all = np.concatenate(arrays)
    ids_all = np.concatenate(id_arrays) if per_block_ids is not None else None
    starts = np.ascontiguousarray(spans_all[:, 0])
    ends = np.ascontiguousarray(spans_all[:, 1])
    first = np.asarray(first_token, dtype=np.int64)

    marks = [m.end() for m in _SENTENCE_END.finditer(text)]
    sentence_tokens = np.searchsorted(starts, np.asarray(marks, dtype=np.int64), side="left") if marks else first
    sentences = np.unique(np.concatenate([sentence_tokens, first, [n_tokens]]))
    cutter = _Cutter(text, starts, ends, sentences, max_chunk_chars(chunk_size))

    # Runs of consecutive blocks with one chapter, in token index space, and whether a run holds headings only.
    runs: list[tuple[int, int, str | None]] = []
    headings_only: list[bool] = []
    for i, block in enumerate(blocks):
        lo = int(first[i])
        hi = int(first[i + 1]) if i + 1 < len(blocks) else n_tokens
        if hi <= lo:
            continue
        heading = bool(getattr(block, "heading", False))
        if runs and runs[-1][2] == block.chapter and runs[-1][1] == lo:
            runs[-1] = (runs[-1][0], hi, block.chapter)
            headings_only[-1] = headings_only[-1] and heading
        else:
            runs.append((lo, hi, block.chapter))
            headings_only.append(heading)
    runs = _headings_joined(runs, headings_only)

    ranges: list[tuple[int, int, str | None]] = []
    for run_start, run_end, chapter in runs:
        block_marks = first[(first > run_start) & (first <= run_end)]
        block_marks = np.unique(np.concatenate([block_marks, [run_end]]))
        fresh, prev_start = run_start, None
        while fresh < run_end:
            reserve = overlap if prev_start is not None else 0
            at_block_start = fresh == run_start or cutter.first_in(block_marks, fresh, fresh + 1) is not None
            end = cutter.choose_end(fresh, at_block_start, run_end, block_marks, chunk_size, reserve)
            start = fresh if prev_start is None else cutter.overlap_start(prev_start, fresh, end, chunk_size, overlap)
            ranges.append((start, end, chapter))
            prev_start, fresh = start, end

    ids = (ids_all, tokenizer.fingerprint) if ids_all is not None and isinstance(tokenizer, IdTokenizer) else None
    return _finish(ranges, cutter, tokenizer, chunk_size, blocks, first, ids)


def _headings_joined(
    runs: list[tuple[int, int, str | None]], headings_only: list[bool]
) -> list[tuple[int, int, str | None]]:
    """Runs with each run of headings only (a title, a heading followed at once by a sub-heading) joined to the run
    after it, whose chapter the joined run takes: a title is context for the text under it, not a chunk of its own
    (a 6-token chunk "保险理赔指南" matches a query's words and holds none of the answer)."""
    joined: list[tuple[int, int, str | None]] = []
    start: int | None = None
    for (lo, hi, chapter), heading in zip(runs, headings_only, strict=True):
        if start is None:
            start = lo
        if heading:
            continue
        joined.append((start, hi, chapter))
        start = None
    if start is not None:  # headings at the very end: nothing follows them
        joined.append((start, runs[-1][1], runs[-1][2]))
    return joined


def _span(cutter: _Cutter, a: int, b: int) -> tuple[int, int]:
    cs, ce = int(cutter.starts[a]), int(cutter.ends[b - 1])
    piece = cutter.text[cs:ce]
    lead = len(piece) - len(piece.lstrip())
    trail = len(piece) - len(piece.rstrip())
    return cs + lead, max(cs + lead, ce - trail)


def _split_chars(
    text: str, s: int, e: int, tokenizer: Tokenizer, chunk_size: int, max_chars: int
) -> list[tuple[int, int, int]]:
    """Cut one token's text into longest prefixes of at most ``max_chars`` characters that count ``<= chunk_size``
    (a tiny chunk size, or a run the tokenizer does not split)."""
    out: list[tuple[int, int, int]] = []
    while s < e:
        window_end = min(e, s + max_chars)
        n = tokenizer.count(text[s:window_end])
        if n <= chunk_size:  # the whole window fits: the usual case for a run the tokenizer does not split
            lo = window_end
        else:  # the longest fitting prefix end, by binary search; one character always goes
            lo, hi = s + 1, window_end - 1
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if tokenizer.count(text[s:mid]) <= chunk_size:
                    lo = mid
                else:
                    hi = mid - 1
        piece = text[s:lo]
        if piece.strip():
            ps = s + len(piece) - len(piece.lstrip())
            pe = lo - (len(piece) - len(piece.rstrip()))
            exact = lo == window_end and (ps, pe) == (s, lo) and n <= chunk_size
            out.append((ps, pe, n if exact else tokenizer.count(text[ps:pe])))
        s = lo
    return out


def _finish(
    ranges: list[tuple[int, int, str | None]],
    cutter: _Cutter,
    tokenizer: Tokenizer,
    chunk_size: int,
    blocks: Sequence[_Block],
    first: np.ndarray,
    ids: tuple[np.ndarray, str] | None = None,
) -> list[Chunk]:
    """Check every chunk's real token count; split any that re-tokenises too long (cuts inside words can) or
    holds too many characters (a single unsplittable token). With ``ids`` (the document's token ids and their
    tokenizer's fingerprint), each chunk that was not re-counted carries its slice of them."""
    max_chars = cutter.max_chars
    # (char start, char end, tokens, chapter, first token index, end token index when its tokens are exact else -1)
    accepted: list[tuple[int, int, int, str | None, int, int]] = []
    pending = ranges
    if getattr(tokenizer, "boundary_exact", False):
        pending = []
        for a, b, chapter in ranges:
            span = _span(cutter, a, b)
            if cutter.clean(a) and cutter.clean(b) and span[1] - span[0] <= max_chars:
                accepted.append((*span, b - a, chapter, a, b))
            else:
                pending.append((a, b, chapter))
    while pending:
        spans = [_span(cutter, a, b) for a, b, _ in pending]
        # A span over the character bound is cut whatever its count: counting it (megabytes) would be wasted.
        countable = [i for i, (s, e) in enumerate(spans) if e - s <= max_chars]
        counted = count_batch(tokenizer, [cutter.text[spans[i][0] : spans[i][1]] for i in countable])
        counts: dict[int, int] = dict(zip(countable, counted, strict=True))
        again: list[tuple[int, int, str | None]] = []
        for i, ((a, b, chapter), (s, e)) in enumerate(zip(pending, spans, strict=True)):
            n = counts.get(i)
            if n is not None and n <= chunk_size:
                accepted.append((s, e, n, chapter, a, -1))
            elif b - a <= 1:
                # A word piece alone ("##ilis" -> "il", "##is") can re-tokenise longer than a tiny chunk_size, and
                # one token ("[UNK]" for a 3 MB word) can hold any number of characters.
                pieces = _split_chars(cutter.text, s, e, tokenizer, chunk_size, max_chars)
                accepted += [(ps, pe, pn, chapter, a, -1) for ps, pe, pn in pieces]
            else:
                mid = cutter.token_cut(a, a + (b - a) // 2) if b - a > 2 else a + 1
                mid = min(max(mid, a + 1), b - 1)
                again += [(a, mid, chapter), (mid, b, chapter)]
        pending = again

    chunks: list[Chunk] = []
    covered_to = -1
    # Longest first among equal starts; a piece wholly inside an earlier chunk (the second half of a re-split
    # chunk that the next chunk's overlap also starts at) adds nothing and would break document order.
    for s, e, n, chapter, a, b in sorted(accepted, key=lambda x: (x[0], -x[1])):
        if e <= covered_to:
            continue
        covered_to = e
        block_index = int(np.searchsorted(first, a, side="right")) - 1
        token_ids = None
        if ids is not None and b >= 0:
            offsets = np.stack([cutter.starts[a:b], cutter.ends[a:b]], axis=1) - s
            token_ids = TokenIds(ids[0][a:b], offsets.astype(np.int32), ids[1])
        chunks.append(
            Chunk(
                chunk_index=len(chunks),
                content=cutter.text[s:e],
                tokens=n,
                chapter=chapter,
                page=blocks[block_index].page,
                start=s,
                end=e,
                token_ids=token_ids,
            )
        )
    return chunks
