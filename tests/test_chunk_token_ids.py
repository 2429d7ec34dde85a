"""Issue #15: a chunk's token ids travel from the chunker to the embedder, so an import tokenises each text once."""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kb_core.edges.envelopes import Enveloped
from kb_core.engines.chunking import Chunk, chunk_document
from kb_core.engines.embedding import CachedEmbedder, EmbeddingCache, HashingEmbedder, get_embedder
from kb_core.engines.embedding.base import ProgressCallback, TokenIds
from kb_core.engines.embedding.local import SentenceTransformerEmbedder
from kb_core.engines.embedding.wordpiece import HFTokenizerAdapter, bundled_tokenizer
from kb_core.engines.parsing import parse_file
from kb_core.engines.parsing.base import ParsedDocument
from kb_core.engines.parsing.txt_parser import split_paragraphs
from tests.counting_tokenizer import CountingBackend

WINDOW = 254  # all-MiniLM-L6-v2: 256 tokens with [CLS] and [SEP]

ENGLISH = (
    "Hybrid search mixes BM25 keyword scores with dense vectors.\n\n"
    "The cat sat on the mat while the dog slept by the fire. Photosynthesis converts light energy "
    "into chemical energy in plants, and the stock exchange closed higher after the announcement.\n\n"
    "Retrieval quality is measured with nDCG@10 on judged queries (SciFact, 300 of them)."
)
CHINESE = (
    "深度学习模型需要大量的训练数据。\n\n季度收入增长了百分之十，知识库检索需要中文分词。混合检索结合关键词与向量。"
)
# One paragraph of about 600 tokens: longer than the model's window, cut at sentence ends.
LONG = " ".join(
    f"Sentence {i} explains how the importer cuts a long paragraph into chunks at sentence ends." for i in range(40)
)


class _OffsetsOnly:
    """The same tokenizer without ids: the chunker as it was before ids travelled."""

    def __init__(self, inner: HFTokenizerAdapter) -> None:
        self._inner = inner
        self.boundary_exact = inner.boundary_exact

    def count(self, text: str) -> int:
        return self._inner.count(text)

    def offsets(self, text: str) -> list[tuple[int, int]]:
        return self._inner.offsets(text)

    def count_batch(self, texts: Sequence[str]) -> list[int]:
        return self._inner.count_batch(texts)

    def offsets_batch(self, texts: Sequence[str]) -> list[list[tuple[int, int]]]:
        return self._inner.offsets_batch(texts)


def _document(text: str) -> ParsedDocument:
    return ParsedDocument("txt", tuple(b for b in split_paragraphs(text) if b.text.strip()))


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


# --- the chunker --------------------------------------------------------------------------------------------


def test_chunks_carry_exactly_what_their_text_tokenises_to() -> None:
    tok = bundled_tokenizer()
    doc = _document("\n\n".join([ENGLISH, CHINESE, LONG]))
    chunks = chunk_document(doc, tok, 64)
    assert len(chunks) > 5
    assert chunks == chunk_document(doc, _OffsetsOnly(tok), 64)  # the same chunks as without ids
    for chunk in chunks:
        assert chunk.token_ids is not None, chunk.content
        made = tok.ids_offsets_batch([chunk.content])[0]
        np.testing.assert_array_equal(chunk.token_ids.ids, made.ids)
        np.testing.assert_array_equal(chunk.token_ids.offsets, made.offsets)
        assert chunk.token_ids.tokenizer == tok.fingerprint and len(chunk.token_ids) == chunk.tokens


def test_a_chunk_cut_inside_a_word_gets_no_ids_and_is_still_embedded_right() -> None:
    tok = bundled_tokenizer()
    # A run of letters with no word start: the chunker must cut inside words and re-count those chunks.
    doc = _document("Intro sentence here. " + "abcdefghijklmnopqrstuvwxyz" * 40 + " The end.")
    chunks = chunk_document(doc, tok, 32)
    without = [c for c in chunks if c.token_ids is None]
    assert without and len(without) < len(chunks)
    emb = get_embedder("all-MiniLM-L6-v2")
    assert isinstance(emb, SentenceTransformerEmbedder)
    texts = [c.content for c in chunks]
    with_ids = emb.embed_documents(texts, token_ids=[c.token_ids for c in chunks])
    assert np.all(_cosines(with_ids, emb.embed_documents(texts)) >= 0.99999)


def test_chunks_pickle_with_their_ids_and_serialise_without() -> None:
    chunk = chunk_document(_document(ENGLISH), bundled_tokenizer(), 64)[0]
    again = pickle.loads(pickle.dumps(chunk))
    assert again == chunk and again.token_ids is not None
    np.testing.assert_array_equal(again.token_ids.ids, chunk.token_ids.ids)  # type: ignore[union-attr]
    stored = chunk.to_dict()
    assert "token_ids" not in stored and Chunk(**stored) == chunk
    assert "token_ids" not in repr(chunk)


# --- the embedders ------------------------------------------------------------------------------------------


def test_ids_from_another_tokenizer_are_not_used() -> None:
    emb = get_embedder("all-MiniLM-L6-v2")
    assert isinstance(emb, SentenceTransformerEmbedder)
    texts = ["The cat sat on the mat.", "猫坐在垫子上。"]
    made = emb.tokenizer.ids_offsets_batch(texts)
    wrong = [TokenIds(np.full_like(t.ids, 1000), t.offsets, "another tokenizer") for t in made]
    vectors = emb.embed_documents(texts, token_ids=wrong)
    assert np.all(_cosines(vectors, emb.embed_documents(texts)) >= 0.99999)


class _Recording:
    """An inner embedder recording what ``embed_documents`` is given."""

    model_key = "recording"
    dimension = 4
    max_input_tokens = None

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], list[TokenIds | None] | None]] = []
        self.tokenizer = HashingEmbedder(4).tokenizer

    def embed_documents(
        self,
        texts: Sequence[str],
        progress: ProgressCallback | None = None,
        *,
        token_ids: Sequence[TokenIds | None] | None = None,
    ) -> np.ndarray:
        self.calls.append((list(texts), None if token_ids is None else list(token_ids)))
        return np.eye(4, dtype=np.float32)[[len(t) % 4 for t in texts]]

    def embed_query(self, text: str) -> np.ndarray:
        raise AssertionError("not asked")


def test_cached_embedder_forwards_the_ids_of_the_misses_only(tmp_path: Path) -> None:
    inner = _Recording()
    cached = CachedEmbedder(inner, EmbeddingCache(tmp_path / "cache.sqlite"))
    cached.embed_documents(["hit"])
    ids = [TokenIds(np.array([i], dtype=np.int32), np.array([[0, 1]], dtype=np.int32), "t") for i in range(4)]
    cached.embed_documents(["a", "hit", "bb", "a"], token_ids=[ids[0], ids[1], None, ids[3]])
    texts, forwarded = inner.calls[-1]
    assert texts == ["a", "bb"]  # "hit" came from the cache, the second "a" is the first one's duplicate
    assert forwarded == [ids[0], None]
    cached.embed_documents(["ccc"])
    assert inner.calls[-1] == (["ccc"], None)


def test_hashing_embedder_accepts_and_ignores_ids() -> None:
    emb = HashingEmbedder(64)
    texts = ["The cat sat.", "猫坐在垫子上。"]
    junk = [TokenIds(np.array([7], dtype=np.int32), np.array([[0, 1]], dtype=np.int32), "x"), None]
    np.testing.assert_array_equal(emb.embed_documents(texts, token_ids=junk), emb.embed_documents(texts))


def test_endpoint_embedder_accepts_and_ignores_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    from kb_core.engines.embedding.endpoint import EndpointEmbedder

    emb = EndpointEmbedder("http://127.0.0.1:9/v1", "m")
    sent: list[list[str]] = []

    def fake(batch: list[str]) -> np.ndarray:
        sent.append(list(batch))
        return np.ones((len(batch), 3), dtype=np.float32) / np.sqrt(3)

    monkeypatch.setattr(emb, "_embed_batch", fake)
    junk = [TokenIds(np.array([7], dtype=np.int32), np.array([[0, 1]], dtype=np.int32), "x")]
    assert emb.embed_documents(["text"], token_ids=junk).shape == (1, 3)
    assert sent == [["text"]]


# --- an import through the service ----------------------------------------------------------------------------


@pytest.mark.model
@pytest.mark.parametrize("chunk_size", [128, 512])
def test_an_import_tokenises_each_chunk_only_in_the_chunker(
    service: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk_size: int
) -> None:
    session = Enveloped(service.session())
    assert session.create_knowledge_base("docs", chunk_size, "all-MiniLM-L6-v2")["success"]
    session.select_knowledge_base("docs")
    record = service.find_kb("docs")
    cached = service.embedder(record)
    assert isinstance(cached, CachedEmbedder)
    model = cached.inner
    assert isinstance(model, SentenceTransformerEmbedder)
    model.dimension  # noqa: B018 - the model loads before the counting starts
    for script in ("floor", "下限"):  # an import's first in a home measures the semantic floors (#25): done before
        service.semantic_scale(record, script)
    files = {"english.txt": ENGLISH, "chinese.txt": CHINESE, "long.txt": f"{LONG}\n\n{ENGLISH}"}
    paths = []
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
        paths.append(tmp_path / name)
    blocks = sum(len(parse_file(p).blocks) for p in paths)

    original = model.embed_documents
    seen: list[tuple[list[str], list[TokenIds | None] | None, np.ndarray]] = []

    def spy(
        texts: Sequence[str],
        progress: ProgressCallback | None = None,
        *,
        token_ids: Sequence[TokenIds | None] | None = None,
    ) -> np.ndarray:
        vectors = original(texts, progress, token_ids=token_ids)
        seen.append((list(texts), None if token_ids is None else list(token_ids), vectors))
        return vectors

    backend = CountingBackend(model.tokenizer.backend)
    monkeypatch.setattr(model.tokenizer, "_tok", backend)
    monkeypatch.setattr(model, "embed_documents", spy)
    result = session.import_document([str(p) for p in paths])
    monkeypatch.undo()
    assert result["data"]["success_count"] == len(paths), result

    # The parser processes chunked (each paragraph tokenised once there, by the chunker, #29): this process
    # tokenised nothing, no chunk text again.
    assert backend.texts == 0 < blocks
    texts = [t for call in seen for t in call[0]]
    given = [i for call in seen for i in (call[1] or [None] * len(call[0]))]
    assert all(i is not None for i in given)
    longest = max(model.tokenizer.count(t) for t in texts)
    assert (longest > WINDOW) == (chunk_size > WINDOW)  # a chunk windowed from the chunker's ids
    # The same vectors as the embedder tokenising the texts itself.
    ours = np.concatenate([call[2] for call in seen])
    assert np.all(_cosines(ours, model.embed_documents(texts)) >= 0.99999)
    # The same chunks as the chunker gave before ids travelled.
    snapshot = service.reader(record.id).snapshot()
    names = dict(zip(snapshot.documents()["doc_id"], snapshot.documents()["file_name"], strict=True))
    stored: dict[str, list[tuple[str, int, int, int]]] = {}
    for segment in snapshot.segments:
        for row in segment.chunks.to_pylist():
            stored.setdefault(names[row["doc_id"]], []).append(
                (row["content"], row["tokens"], row["start_char"], row["end_char"])
            )
    plain = _OffsetsOnly(model.tokenizer)
    for path in paths:
        before = chunk_document(parse_file(path), plain, chunk_size)
        assert stored[path.name] == [(c.content, c.tokens, c.start, c.end) for c in before]
