"""kb_core.engines.near_duplicates: exact and near-duplicate removal (shingle Jaccard), stored signatures, and the
stored-signature filter giving exactly the decisions of the definition, in English and Chinese."""

from __future__ import annotations

import numpy as np
import pytest

from kb_core.base.errors import InvalidArgument
from kb_core.engines.fusion import jaccard_similarity
from kb_core.engines.near_duplicates import (
    _normalise_text,
    _shingles,
    near_duplicate_keys,
    near_duplicate_rows,
    text_signatures,
)


def test_near_duplicates_dropped_keeping_best_ranked() -> None:
    base = "Hybrid retrieval fuses BM25 keyword scores with dense vector similarity to rank passages."
    texts = {
        "best": base,
        "exact-copy": "  hybrid   retrieval fuses BM25 keyword scores with dense vector\nsimilarity to rank passages. ",
        "other": "FAISS builds an HNSW graph so approximate nearest neighbour search stays fast at scale.",
        "near-copy": base.replace("passages.", "passages!"),
        "zh-best": "知识库工作台把文档切分成片段，并为每个片段计算向量，以便混合检索。",
        "zh-near": "知识库工作台把文档切分成片段，并为每个片段计算向量，以便混合检索！",
        "zh-other": "删除文档时会记录墓碑，已删除的行不会再出现在结果中。",
    }
    dropped = near_duplicate_keys(texts, threshold=0.9)
    assert dropped == {"exact-copy", "near-copy", "zh-near"}
    # Order decides which one survives: the first (best-ranked) of each group.
    reordered = {"near-copy": texts["near-copy"], "best": texts["best"]}
    assert near_duplicate_keys(reordered) == {"best"}
    assert near_duplicate_keys({}) == set()
    with pytest.raises(InvalidArgument):
        near_duplicate_keys(texts, threshold=0)


def _brute_force_near_duplicates(texts: list[str], threshold: float) -> list[bool]:
    """The definition, without any filter: drop a text whose normalised form equals, or whose shingle Jaccard
    reaches ``threshold`` with, a better-ranked kept text."""
    kept: list[tuple[str, frozenset[str]]] = []
    drop = []
    for text in texts:
        normal = _normalise_text(text)
        shingles = _shingles(normal)
        duplicate = any(normal == other or jaccard_similarity(shingles, s) >= threshold for other, s in kept)
        drop.append(duplicate)
        if not duplicate:
            kept.append((normal, shingles))
    return drop


def test_stored_signature_dedup_matches_the_definition_in_english_and_chinese() -> None:
    rng = np.random.default_rng(7)
    words = ["retrieval", "hybrid", "vector", "keyword", "chunk", "index", "score", "fusion", "model", "query"]
    words += ["检索", "向量", "知识库", "片段", "分数"]
    bases = [" ".join(rng.choice(words, size=int(rng.integers(3, 60)))) for _ in range(40)]
    texts: list[str] = []
    for base in bases:
        texts.append(base)
        for _ in range(int(rng.integers(0, 3))):  # variants: one word changed, case and spaces changed, cut short
            tokens = base.split()
            tokens[int(rng.integers(len(tokens)))] = str(rng.choice(words))
            variant = " ".join(tokens)
            texts.append(str(rng.choice([variant, variant.upper(), "  " + base + " ", base[: max(1, len(base) - 3)]])))
    texts += ["", "ab", "ab", "知识", "x" * 3]
    order = rng.permutation(len(texts))
    shuffled = [texts[i] for i in order]
    for threshold in (0.9, 0.8, 1.0):
        expected = _brute_force_near_duplicates(shuffled, threshold)
        got = near_duplicate_rows(text_signatures(shuffled), shuffled, threshold).tolist()
        assert got == expected
        assert any(expected) and not all(expected)


def test_text_signatures_are_stable_across_processes() -> None:
    """Stored signatures must mean the same in every process: no salted ``hash()``."""
    import json
    import os
    import subprocess
    import sys


    texts = ["Hybrid retrieval fuses BM25 with cosine.", "知识库工作台把文档切分成片段。", "ab", ""]
    mine = text_signatures(texts)
    code = (
        "import json, sys; from kb_core.engines.near_duplicates import text_signatures as t; "
        "s = t(json.loads(sys.argv[1])); "
        "print(json.dumps([s.text_hash.tolist(), s.shingle_count.tolist(), s.sketch.tolist()]))"
    )
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", code, json.dumps(texts)], env=env, capture_output=True, text=True, check=True
        )
        assert json.loads(out.stdout) == [mine.text_hash.tolist(), mine.shingle_count.tolist(), mine.sketch.tolist()]
    assert mine.shingle_count.tolist() == [32, 12, 1, 0]  # distinct 4-character shingles, spaces removed


def test_sketch_values_shared_by_many_texts_keep_the_exact_decisions() -> None:
    """A window where a few sketch values sit in most sketches (common shingles with small hashes, as on SciFact)
    takes the bitset path for them; texts outside the Basic Multilingual Plane take the 16-byte shingle keys."""
    from kb_core.engines.near_duplicates import _DENSE_RUN, SKETCH_EMPTY

    rng = np.random.default_rng(11)
    words = ["the", "of", "and", "retrieval", "vector", "检索", "向量", "🙂", "𠀋", "index"]
    texts: list[str] = []
    for _ in range(260):
        base = " ".join(rng.choice(words, size=int(rng.integers(2, 40))))
        texts.append(base)
        if rng.random() < 0.3:  # a near copy: one word changed or cut short
            tokens = base.split()
            tokens[int(rng.integers(len(tokens)))] = str(rng.choice(words))
            texts.append(str(rng.choice([" ".join(tokens), base[: max(1, len(base) - 2)], base.upper()])))
    signatures = text_signatures(texts)
    _, held_by = np.unique(signatures.sketch[signatures.sketch != SKETCH_EMPTY], return_counts=True)
    assert held_by.max() >= _DENSE_RUN and (held_by < _DENSE_RUN).any() and (held_by > 1).any()
    for threshold in (0.9, 1.0):  # (below ~0.85 the sketch filter is no longer a necessary condition)
        expected = _brute_force_near_duplicates(texts, threshold)
        assert near_duplicate_rows(signatures, texts, threshold).tolist() == expected
        assert any(expected) and not all(expected)


def test_small_windows_count_every_shared_sketch_value_in_bitsets_with_the_same_counts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Small windows (top_k ≤ 100) count every shared sketch value in per-row bitsets; the counts must equal the
    large windows' path (pair by pair for rare values, bitsets for common ones) exactly, for every pair, in English
    and Chinese."""
    from kb_core.engines import near_duplicates
    from kb_core.engines.near_duplicates import _DENSE_RUN, _shared_sketch_values

    rng = np.random.default_rng(5)
    words = ["the", "of", "and", "retrieval", "vector", "检索", "向量", "知识库", "𠀋", "index"]
    texts = [" ".join(rng.choice(words, size=int(rng.integers(1, 30)))) for _ in range(300)]
    texts += [texts[3], texts[7].upper(), "", "a"]
    sketch = text_signatures(texts).sketch
    for size in (2, 20, 110, len(texts)):
        window = sketch[:size]
        monkeypatch.setattr(near_duplicates, "_SMALL_WINDOW_WORK", 0)  # rare values pair by pair
        by_pairs = _shared_sketch_values(window)
        monkeypatch.setattr(near_duplicates, "_SMALL_WINDOW_WORK", 10**12)  # every shared value in bitsets
        by_bits = _shared_sketch_values(window)
        assert by_bits.dtype == by_pairs.dtype == np.uint8
        assert np.array_equal(by_bits, by_pairs)
    _, held_by = np.unique(sketch[sketch != near_duplicates.SKETCH_EMPTY], return_counts=True)
    assert held_by.max() >= _DENSE_RUN and by_pairs.max() >= 8  # both kinds of value, and near-duplicate pairs
