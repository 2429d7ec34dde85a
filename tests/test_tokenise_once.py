"""Issue #15: the local embedder tokenises each text once and feeds the model the ids, with model.encode's vectors."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pytest

from kb_core.engines.embedding import get_embedder
from kb_core.engines.embedding.local import SentenceTransformerEmbedder
from kb_core.engines.embedding.model_input import InputTemplate
from kb_core.engines.embedding.wordpiece import bundled_tokenizer
from tests.counting_tokenizer import CountingBackend

pytestmark = pytest.mark.model

WINDOW = 254  # all-MiniLM-L6-v2: 256 tokens with [CLS] and [SEP]
TOPICS = [
    "Photosynthesis converts light energy into chemical energy in plants.",
    "The stock exchange closed higher after the central bank announcement.",
    "深度学习模型需要大量的训练数据。",
]
SHORT = {
    "english": "The cat sat on the mat while the dog slept by the fire.",
    "chinese": "季度收入增长了百分之十，知识库检索需要中文分词。",
    "mixed": "Hybrid search 混合检索 combines BM25 关键词 with dense vectors (384-d).",
    "one character": "a",
    "one chinese character": "猫",
    "empty": "",
    "window length": " ".join(["hello"] * WINDOW),
}
LONG = {
    "window plus one": " ".join(["hello"] * (WINDOW + 1)),
    "three topics": " ".join(TOPICS[i // 14] + f" Part {i}." for i in range(42)),
}


@pytest.fixture(scope="module")
def minilm() -> SentenceTransformerEmbedder:
    emb = get_embedder("all-MiniLM-L6-v2")
    assert isinstance(emb, SentenceTransformerEmbedder)
    emb.dimension  # noqa: B018 - loads the model once for the module
    return emb


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a / np.linalg.norm(a, axis=-1, keepdims=True)
    b = b / np.linalg.norm(b, axis=-1, keepdims=True)
    return (a * b).sum(axis=-1)


def _weighted_mean_of_encoded_windows(emb: SentenceTransformerEmbedder, text: str) -> np.ndarray:
    """The windowed vector as it was computed before #15: model.encode of each window text, weighted mean."""
    windows = emb.windows(text)
    vectors = emb.model.encode([w for w, _ in windows], normalize_embeddings=True, show_progress_bar=False)
    weights = np.array([max(n, 1) for _, n in windows], dtype=np.float32)
    pooled = (np.asarray(vectors, dtype=np.float32) * weights[:, None]).sum(axis=0)
    return pooled / np.linalg.norm(pooled)


def test_vectors_equal_model_encode_for_texts_that_fit(minilm: SentenceTransformerEmbedder) -> None:
    assert minilm.tokenizer.count(SHORT["window length"]) == WINDOW
    texts = list(SHORT.values())
    ours = minilm.embed_documents(texts)
    reference = minilm.model.encode(texts, normalize_embeddings=True, show_progress_bar=False)
    for name, cosine in zip(SHORT, _cosines(ours, reference), strict=True):
        assert cosine >= 0.99999, name
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)


def test_long_texts_equal_the_weighted_mean_of_their_windows(minilm: SentenceTransformerEmbedder) -> None:
    texts = list(LONG.values())
    assert all(minilm.tokenizer.count(t) > WINDOW for t in texts)
    ours = minilm.embed_documents(texts)
    for name, text, vector in zip(LONG, texts, ours, strict=True):
        expected = _weighted_mean_of_encoded_windows(minilm, text)
        assert float(vector @ expected) >= 0.99999, name
        truncated = minilm.model.encode([text], normalize_embeddings=True, show_progress_bar=False)[0]
        if name == "three topics":
            assert float(vector @ truncated) < 0.9  # the text's later windows count
    # Mixed with short texts in one call, every text still gets its own vector.
    mixed = minilm.embed_documents([SHORT["english"], texts[1], SHORT["chinese"]])
    assert float(mixed[1] @ ours[1]) >= 0.99999


def test_the_fallback_path_gives_the_same_vectors() -> None:
    plain = SentenceTransformerEmbedder(from_token_ids=False)
    texts = [*SHORT.values(), *LONG.values()]
    fallback = plain.embed_documents(texts)
    ours = get_embedder("all-MiniLM-L6-v2").embed_documents(texts)
    assert np.all(_cosines(fallback, ours) >= 0.99999)


@pytest.fixture
def counted(minilm: SentenceTransformerEmbedder, monkeypatch: pytest.MonkeyPatch) -> Iterator[CountingBackend]:
    backend = CountingBackend(minilm.tokenizer.backend)
    monkeypatch.setattr(minilm.tokenizer, "_tok", backend)

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("sentence-transformers tokenised a text again")

    monkeypatch.setattr(minilm.model, "preprocess", refuse)
    monkeypatch.setattr(minilm.model, "tokenize", refuse)
    monkeypatch.setattr(minilm.model[0], "preprocess", refuse)
    yield backend


def test_each_text_is_tokenised_once(minilm: SentenceTransformerEmbedder, counted: CountingBackend) -> None:
    texts = [*SHORT.values(), *LONG.values()]
    vectors = minilm.embed_documents(texts)
    assert vectors.shape == (len(texts), 384)
    assert counted.texts == len(texts)


def test_progress_adds_up_to_the_number_of_texts() -> None:
    emb = SentenceTransformerEmbedder(batch_size=3)
    texts = [*SHORT.values(), *LONG.values(), *(f"Sentence number {i}." for i in range(10))]
    calls: list[int] = []
    vectors = emb.embed_documents(texts, progress=calls.append)
    assert len(vectors) == len(texts)
    assert sum(calls) == len(texts) and all(c > 0 for c in calls) and len(calls) > 1


def _padded_reference(tokenizer: Any, texts: Sequence[str]) -> dict[str, np.ndarray]:
    from tokenizers import Tokenizer

    reference = Tokenizer.from_str(tokenizer.to_str())
    reference.enable_padding(pad_id=0)
    encs = reference.encode_batch(list(texts), add_special_tokens=True)
    return {
        "input_ids": np.array([e.ids for e in encs]),
        "attention_mask": np.array([e.attention_mask for e in encs]),
        "token_type_ids": np.array([e.type_ids for e in encs]),
    }


def test_input_template_builds_what_the_tokenizer_itself_builds() -> None:
    texts = ["Hello, world!", "猫坐在垫子上。", "", "a much longer sentence about retrieval and ranking"]
    bert = bundled_tokenizer()
    template = InputTemplate.from_tokenizer(bert.backend, pad_id=0)
    assert template is not None and template.special == 2
    built = template.batch([t.ids.tolist() for t in bert.ids_offsets_batch(texts)])
    expected = _padded_reference(bert.backend, texts)
    assert built.keys() == expected.keys()
    for key in expected:
        np.testing.assert_array_equal(built[key], expected[key], err_msg=key)


def test_input_template_reads_a_non_bert_post_processor() -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3, "a": 4, "b": 5, "c": 6}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A:1 </s>:2", pair="<s> $A </s> $B </s>", special_tokens=[("<s>", 1), ("</s>", 2)]
    )
    template = InputTemplate.from_tokenizer(tok, pad_id=0)
    assert template is not None
    assert (template.prefix, template.suffix, template.sequence_type) == ((1,), (2,), 1)
    texts = ["a b c", "c", "b a"]
    built = template.batch([tok.encode(t, add_special_tokens=False).ids for t in texts])
    expected = _padded_reference(tok, texts)
    for key in expected:
        np.testing.assert_array_equal(built[key], expected[key], err_msg=key)
