"""Chunking: token bounds, exact offsets, sentence/chapter boundaries and overlap, in English and Chinese.

Documents are tiny stand-ins with the ParsedDocument shape (blocks, ``text``, ``block_offsets()``), so these
tests do not depend on the parsers. The real all-MiniLM-L6-v2 WordPiece tokenizer is used (it loads in
milliseconds from the installed package, without torch), plus the hashing tokenizer.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kb_core.base.errors import InvalidArgument
from kb_core.engines.chunking import Chunk, chunk_document, default_overlap, max_chunk_chars
from kb_core.engines.embedding.hashing import HashingTokenizer
from kb_core.engines.embedding.wordpiece import bundled_tokenizer


@dataclass(frozen=True)
class Block:
    text: str
    chapter: str | None = None
    page: int | None = None


@dataclass(frozen=True)
class Doc:
    blocks: tuple[Block, ...]

    @property
    def text(self) -> str:
        return "\n\n".join(b.text for b in self.blocks)

    def block_offsets(self) -> list[tuple[int, int]]:
        out, pos = [], 0
        for b in self.blocks:
            out.append((pos, pos + len(b.text)))
            pos += len(b.text) + 2
        return out


def doc(*texts: str, chapter: str | None = None) -> Doc:
    return Doc(tuple(Block(t, chapter, 1) for t in texts))


WORDPIECE = bundled_tokenizer()
HASHING = HashingTokenizer()

EN = (
    "Retrieval augmented generation combines a search index with a language model. "
    "The index returns passages that are relevant to the question! Are the passages short enough? "
    "Chunking decides how long each passage is, and overlap keeps context across a boundary. "
)
ZH = (
    "检索增强生成把搜索索引和语言模型结合在一起。索引返回与问题相关的段落！"
    "段落够短吗？分块决定每个段落的长度；重叠在边界处保留上下文。"
)


def check_invariants(d: Doc, chunks: list[Chunk], tokenizer: object, size: int) -> None:
    text = d.text
    for i, c in enumerate(chunks):
        assert c.chunk_index == i
        assert text[c.start : c.end] == c.content
        assert c.content == c.content.strip() and c.content
        assert c.tokens == tokenizer.count(c.content)  # type: ignore[attr-defined]
        assert c.tokens <= size
        assert len(c.content) <= max_chunk_chars(size)
    for a, b in itertools.pairwise(chunks):
        assert a.start < b.start and a.end <= b.end  # document order
    # Together the chunks cover the text of every token of the document (nothing is lost between chunks).
    covered = bytearray(len(text))
    for c in chunks:
        covered[c.start : c.end] = b"\x01" * (c.end - c.start)
    for s, e in tokenizer.offsets(text):  # type: ignore[attr-defined]
        assert all(covered[s:e]), (s, e, text[s:e])


words = st.sampled_from(
    [
        *["the", "model", "embedding", "retrieval", "unbelievably", "3.14", "e.g.", "don't", "naïve", "(ok)", "-", ","],
        *["检索", "增强", "生成", "模型", "向量", "段落", "。", "，", "！", "？", "；"],
        *["Hello.", "World!", "Why?", "\n", "supercalifragilisticexpialidocious", "x" * 30],
    ]
)
block_text = st.lists(words, min_size=1, max_size=80).map(lambda ws: " ".join(ws).strip() or "x")


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    blocks=st.lists(st.tuples(block_text, st.sampled_from([None, "Intro", "第一章"])), min_size=1, max_size=8),
    size=st.integers(min_value=8, max_value=120),
    overlap_frac=st.floats(min_value=0.0, max_value=0.6),
    tokenizer=st.sampled_from([WORDPIECE, HASHING]),
)
# Found by hypothesis: with overlap over half the chunk and a word longer than the chunk, a chunk split after
# re-counting ended where the next one started, so two chunks began at the same character.
@example(
    blocks=[("。 supercalifragilisticexpialidocious the embedding embedding Hello. the the the", None)],
    size=15,
    overlap_frac=0.5625,
    tokenizer=WORDPIECE,
)
def test_no_chunk_exceeds_chunk_size(blocks, size, overlap_frac, tokenizer) -> None:
    d = Doc(tuple(Block(t, ch, i + 1) for i, (t, ch) in enumerate(blocks)))
    overlap = min(size - 1, int(size * overlap_frac))
    chunks = chunk_document(d, tokenizer, size, overlap)
    check_invariants(d, chunks, tokenizer, size)


def test_whole_blocks_are_packed_while_they_fit() -> None:
    d = doc("First paragraph about cats.", "Second paragraph about dogs.", "Third paragraph about birds.")
    chunks = chunk_document(d, WORDPIECE, 64, 0)
    assert [c.content for c in chunks] == [d.text]
    small = chunk_document(d, WORDPIECE, 8, 0)
    assert [c.content for c in small] == [b.text for b in d.blocks]


def test_oversized_english_block_is_cut_at_sentence_ends() -> None:
    d = doc(EN * 3)
    chunks = chunk_document(d, WORDPIECE, 40, 0)
    check_invariants(d, chunks, WORDPIECE, 40)
    assert len(chunks) > 3
    for c in chunks[:-1]:
        assert c.content.endswith((".", "!", "?")), c.content


def test_chinese_block_is_cut_at_chinese_sentence_ends() -> None:
    d = doc(ZH * 4)
    chunks = chunk_document(d, WORDPIECE, 30, 0)
    check_invariants(d, chunks, WORDPIECE, 30)
    assert len(chunks) > 4
    for c in chunks:
        assert c.content.endswith(("。", "！", "？", "；")), c.content
    assert "".join(c.content for c in chunks) == ZH * 4


def test_single_overlong_sentence_is_cut_between_words() -> None:
    sentence = " ".join(["unbelievably", "retrieval", "embeddings"] * 60)  # no sentence end at all
    d = doc(sentence)
    chunks = chunk_document(d, WORDPIECE, 25, 0)
    check_invariants(d, chunks, WORDPIECE, 25)
    words = set(sentence.split())
    for c in chunks:
        assert set(c.content.split()) <= words  # no word was cut in half
    assert " ".join(c.content for c in chunks) == sentence


def test_chunks_never_cross_a_chapter_change() -> None:
    d = Doc(
        (
            Block("Intro text one.", "Intro", 1),
            Block("Intro text two.", "Intro", 1),
            Block("第一章的内容。", "第一章", 2),
            Block("More chapter one text.", "第一章", 3),
            Block("Back to no chapter.", None, 4),
        )
    )
    chunks = chunk_document(d, WORDPIECE, 200, 20)
    assert [(c.chapter, c.page) for c in chunks] == [("Intro", 1), ("第一章", 2), (None, 4)]
    assert chunks[0].content == "Intro text one.\n\nIntro text two."
    assert chunks[1].content == "第一章的内容。\n\nMore chapter one text."


def test_page_is_the_page_of_the_first_block() -> None:
    d = Doc(tuple(Block(f"Paragraph {i} " + EN, "c", i + 1) for i in range(6)))
    chunks = chunk_document(d, WORDPIECE, 60, 0)
    offsets = d.block_offsets()
    for c in chunks:
        block = max(i for i, (s, _) in enumerate(offsets) if s <= c.start)
        assert c.page == block + 1


def test_consecutive_chunks_overlap_at_sentence_granularity() -> None:
    d = doc(EN * 4)
    chunks = chunk_document(d, WORDPIECE, 60, 20)  # every sentence of EN is at most 16 tokens
    check_invariants(d, chunks, WORDPIECE, 60)
    assert len(chunks) >= 3
    sentence_starts = ("Retrieval", "The", "Are", "Chunking")
    for a, b in itertools.pairwise(chunks):
        assert b.start < a.end, "consecutive chunks share text"
        shared = d.text[b.start : a.end]
        assert 10 <= WORDPIECE.count(shared) <= 20
        assert b.content.startswith(sentence_starts)


def test_overlap_falls_back_to_words_inside_a_long_sentence() -> None:
    sentence = " ".join(f"word{i}" for i in range(300))
    d = doc(sentence)
    chunks = chunk_document(d, HASHING, 50, 10)
    check_invariants(d, chunks, HASHING, 50)
    # (The last chunk may overlap less: the tail that fits whole is not cut again just to keep the overlap.)
    for a, b in itertools.pairwise(chunks[:-1]):
        shared = d.text[b.start : a.end]
        assert 5 <= HASHING.count(shared) <= 10
        assert b.content.split()[0].startswith("word")


def test_chinese_overlap() -> None:
    d = doc(ZH * 6)
    chunks = chunk_document(d, WORDPIECE, 50, 12)
    check_invariants(d, chunks, WORDPIECE, 50)
    for a, b in itertools.pairwise(chunks):
        assert b.start < a.end


def test_no_overlap_across_chapters() -> None:
    d = Doc((Block(EN, "A", 1), Block(EN, "B", 2)))
    chunks = chunk_document(d, WORDPIECE, 200, 30)
    assert len(chunks) == 2 and chunks[0].end < chunks[1].start


def test_default_overlap_is_about_ten_percent() -> None:
    assert default_overlap(256) == 26
    assert default_overlap(512) == 51
    assert default_overlap(8) == 0


@pytest.mark.parametrize(("size", "overlap"), [(0, None), (7, None), (10, 10), (10, -1), (True, None), (64.0, None)])
def test_bad_sizes_are_rejected(size, overlap) -> None:
    with pytest.raises(InvalidArgument, match=r"chunk_size|overlap_tokens"):
        chunk_document(doc("text"), HASHING, size, overlap)


def test_empty_document_gives_no_chunks() -> None:
    assert chunk_document(Doc(()), WORDPIECE, 100) == []
    assert chunk_document(doc("   "), WORDPIECE, 100) == []


def test_one_megabyte_chunks_quickly() -> None:
    para = EN + ZH
    d = Doc(tuple(Block(para * (1 + i % 4), f"ch{i // 50}", i // 10 + 1) for i in range(1700)))
    assert len(d.text) > 1_000_000
    t0 = time.perf_counter()
    chunks = chunk_document(d, WORDPIECE, 256)
    elapsed = time.perf_counter() - t0
    assert max(c.tokens for c in chunks) <= 256
    assert all(d.text[c.start : c.end] == c.content for c in chunks)
    # About 1 s on an idle 2-core machine; the bound leaves room for a busy CI machine.
    assert elapsed < 10, f"chunking 1 MB took {elapsed:.1f}s"


ANY_CHAR = st.characters(exclude_categories=("Cs",))  # every code point a Python str from a file can hold


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    texts=st.lists(st.text(ANY_CHAR, min_size=1, max_size=150), min_size=1, max_size=4),
    size=st.integers(min_value=8, max_value=40),
    tokenizer=st.sampled_from([WORDPIECE, HASHING]),
)
def test_any_unicode_text_is_chunked_within_bounds(texts, size, tokenizer) -> None:
    """Arbitrary scripts, symbols and combining marks (Hangul syllables are several word pieces each)."""
    d = doc(*texts)
    check_invariants(d, chunk_document(d, tokenizer, size, size // 5), tokenizer, size)


LONG_RUNS = {
    "one 3 MB word": "a" * 3_000_000,
    "a long word between words": "start here " + "x" * 200_000 + " and end here.",
    "digits and letters": ("0123456789abcdef" * 20_000) + "\n\nA short paragraph after it.",
    "ignored characters between words": "before " + "\u200b" * 100_000 + " after",
    "Chinese then a long Latin run": "中文段落。" * 50 + "Z" * 100_000,
}


@pytest.mark.parametrize("tokenizer", [WORDPIECE, HASHING], ids=["wordpiece", "hashing"])
@pytest.mark.parametrize("text", list(LONG_RUNS.values()), ids=list(LONG_RUNS))
def test_a_long_unsplittable_run_is_cut_into_bounded_chunks(text: str, tokenizer: object) -> None:
    """A word the tokenizer cannot split (one [UNK], one hashing token) used to become one chunk of any length."""
    d = doc(*text.split("\n\n"))
    t0 = time.perf_counter()
    chunks = chunk_document(d, tokenizer, 64)
    assert time.perf_counter() - t0 < 30
    check_invariants(d, chunks, tokenizer, 64)
    assert max(len(c.content) for c in chunks) <= max_chunk_chars(64)
    if "x" * 1000 in text:
        covered = sum(c.content.count("x") for c in chunks)
        assert covered >= 200_000  # every character of the long word is in some chunk


def test_max_chunk_chars_leaves_room_for_real_text() -> None:
    """The character bound never cuts ordinary English or Chinese chunks short of their token budget."""
    for size in (32, 256, 8192):
        assert max_chunk_chars(size) >= 16 * size
    english = doc(EN * 200)
    chunks = chunk_document(english, WORDPIECE, 256)
    assert max(c.tokens for c in chunks) >= 200  # the token budget, not the character bound, decides


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    parts=st.lists(
        st.one_of(words, st.integers(min_value=50, max_value=3000).map(lambda n: "q" * n)), min_size=1, max_size=30
    ),
    size=st.integers(min_value=8, max_value=64),
    overlap_frac=st.floats(min_value=0.0, max_value=0.9),
    tokenizer=st.sampled_from([WORDPIECE, HASHING]),
)
def test_long_words_and_high_overlap_keep_every_bound(parts, size, overlap_frac, tokenizer) -> None:
    d = doc(" ".join(parts).strip() or "x")
    overlap = min(size - 1, int(size * overlap_frac))
    check_invariants(d, chunk_document(d, tokenizer, size, overlap), tokenizer, size)
