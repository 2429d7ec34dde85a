"""kb_core.engines.vector_index: exact search equals numpy, deleted rows never return, approximate recall,
persistence."""

from __future__ import annotations

import os
from pathlib import Path

import faiss
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kb_core.base.errors import InvalidArgument, StoreError
from kb_core.engines.vector_index import (
    EXACT_FILENAME,
    INDEX_FILENAME,
    ExactVectors,
    VectorHit,
    VectorIndexSettings,
    VectorSearcher,
    VectorSegment,
)


def unit_rows(rows: int, dim: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((rows, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def clustered(rows: int, dim: int, clusters: int, seed: int, spread: float = 0.6, rank: int = 8) -> np.ndarray:
    """Gaussian clusters whose noise lies in a few directions, like real sentence embeddings."""
    rng = np.random.default_rng(seed)
    structure = np.random.default_rng(1000 + dim)
    centres = structure.standard_normal((clusters, dim)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    basis = structure.standard_normal((rank, dim)).astype(np.float32) / np.sqrt(rank * dim)
    noise = spread * np.sqrt(dim) * rng.standard_normal((rows, rank)).astype(np.float32) @ basis
    x = centres[rng.integers(0, clusters, rows)] + noise
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def brute_force(
    vectors: np.ndarray, query: np.ndarray, k: int, live: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    rows = np.arange(len(vectors)) if live is None else np.flatnonzero(live)
    scores = vectors[rows] @ query
    order = np.lexsort((rows, -scores))[:k]
    return scores[order], rows[order]


def test_exact_search_equals_numpy() -> None:
    vectors = unit_rows(500, 24, seed=1)
    segment = VectorSegment.build(vectors, VectorIndexSettings(kind="flat"))
    assert (segment.kind, segment.size, segment.dimension) == ("flat", 500, 24)
    for query in unit_rows(20, 24, seed=2):
        scores, rows = segment.search(query, 10, None)
        expected_scores, expected_rows = brute_force(vectors, query, 10, None)
        np.testing.assert_allclose(scores, expected_scores, atol=1e-5)
        np.testing.assert_array_equal(rows, expected_rows)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=st.integers(1, 120),
    k=st.integers(1, 150),
    kind=st.sampled_from(["flat", "hnsw", "ivf"]),
    data=st.data(),
)
def test_live_mask_excludes_deleted_rows_and_padding(rows: int, k: int, kind: str, data: st.DataObject) -> None:
    vectors = unit_rows(rows, 8, seed=rows)
    live = np.array(data.draw(st.lists(st.booleans(), min_size=rows, max_size=rows)), dtype=bool)
    segment = VectorSegment.build(vectors, VectorIndexSettings(kind=kind))
    query = unit_rows(1, 8, seed=k)[0]
    scores, found = segment.search(query, k, live)
    assert -1 not in found
    assert live[found].all(), "a deleted row came back"
    assert len(found) == min(k, int(live.sum())), "results are short although live rows remain"
    assert len(set(found.tolist())) == len(found)
    assert np.all(np.diff(scores) <= 1e-6), "scores must be best first"
    if kind == "flat":
        _, expected = brute_force(vectors, query, k, live)
        assert set(found.tolist()) == set(expected.tolist())


def test_k_larger_than_live_rows_never_pads() -> None:
    vectors = unit_rows(50, 16, seed=3)
    live = np.zeros(50, dtype=bool)
    live[[4, 9, 33]] = True
    for kind in ("flat", "hnsw", "ivf"):
        segment = VectorSegment.build(vectors, VectorIndexSettings(kind=kind))
        scores, rows = segment.search(vectors[0], 40, live)
        assert sorted(rows.tolist()) == [4, 9, 33]
        assert np.isfinite(scores).all()
    all_dead = np.zeros(50, dtype=bool)
    scores, rows = segment.search(vectors[0], 5, all_dead)
    assert rows.size == 0 and scores.size == 0


def test_hnsw_recall_on_clustered_vectors() -> None:
    vectors = clustered(6000, 48, clusters=30, seed=5)
    queries = clustered(100, 48, clusters=30, seed=6)
    exact = VectorSegment.build(vectors, VectorIndexSettings(kind="flat"))
    approx = VectorSegment.build(vectors, VectorIndexSettings(kind="hnsw"))
    assert approx.kind == "hnsw"
    live = np.random.default_rng(7).random(6000) > 0.3
    for mask in (None, live):
        hits = 0
        for query in queries:
            truth = set(exact.search(query, 10, mask)[1].tolist())
            hits += len(truth & set(approx.search(query, 10, mask)[1].tolist()))
        assert hits / (10 * len(queries)) >= 0.95


def test_auto_kind_switches_at_threshold() -> None:
    vectors = unit_rows(300, 8, seed=8)
    assert VectorSegment.build(vectors, VectorIndexSettings(approximate_threshold=1000)).kind == "flat"
    assert VectorSegment.build(vectors, VectorIndexSettings(approximate_threshold=100)).kind == "hnsw"


@pytest.mark.parametrize("kind", ["flat", "hnsw", "ivf"])
@pytest.mark.parametrize("mmap", [True, False])
def test_save_load_round_trip(tmp_path: Path, kind: str, mmap: bool) -> None:
    vectors = clustered(1500, 32, clusters=10, seed=9)
    segment = VectorSegment.build(vectors, VectorIndexSettings(kind=kind))
    segment.save(tmp_path)
    assert (tmp_path / INDEX_FILENAME).is_file()
    expected = sorted([EXACT_FILENAME, INDEX_FILENAME]) if kind == "hnsw" else [INDEX_FILENAME]
    assert sorted(p.name for p in tmp_path.iterdir()) == expected, "temporary file left behind"
    loaded = VectorSegment.load(tmp_path, mmap=mmap)
    assert (loaded.kind, loaded.size, loaded.dimension) == (kind, 1500, 32)
    live = np.ones(1500, dtype=bool)
    live[::3] = False
    for query in vectors[:5]:
        a, b = segment.search(query, 10, live), loaded.search(query, 10, live)
        np.testing.assert_array_equal(a[1], b[1])
        np.testing.assert_allclose(a[0], b[0], atol=1e-6)
    np.testing.assert_allclose(loaded.reconstruct(np.array([7, 0, 7])), vectors[[7, 0, 7]], atol=1e-6)


def test_load_missing_or_corrupt_raises_store_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError):
        VectorSegment.load(tmp_path)
    (tmp_path / INDEX_FILENAME).write_bytes(b"not a faiss index")
    with pytest.raises(StoreError):
        VectorSegment.load(tmp_path)


def test_searcher_merges_segments_and_respects_tombstones() -> None:
    vectors = unit_rows(900, 16, seed=10)
    parts = [vectors[:500], vectors[500:850], vectors[850:]]
    masks = [np.ones(500, dtype=bool), np.ones(350, dtype=bool), np.ones(50, dtype=bool)]
    masks[1][:100] = False
    searcher = VectorSearcher([(VectorSegment.build(p), m) for p, m in zip(parts, masks, strict=True)])
    offsets = [0, 500, 850]
    global_live = np.concatenate(masks)
    query = unit_rows(1, 16, seed=11)[0]
    hits = searcher.search(query, 25)
    assert all(isinstance(h, VectorHit) for h in hits)
    found = [offsets[h.segment_index] + h.row for h in hits]
    _, expected = brute_force(vectors, query, 25, global_live)
    assert found == expected.tolist()
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert searcher.live_count == int(global_live.sum())
    exact = searcher.score_rows(query, [(1, 3), (0, 0), (2, 49)])
    np.testing.assert_allclose(exact, vectors[[503, 0, 899]] @ query, atol=1e-6)
    assert searcher.score_rows(query, []).size == 0


def test_invalid_input_names_the_problem() -> None:
    vectors = unit_rows(10, 4, seed=12)
    with pytest.raises(InvalidArgument, match="kind"):
        VectorIndexSettings(kind="annoy")
    with pytest.raises(InvalidArgument, match="normalised"):
        VectorSegment.build(vectors * 3)
    with pytest.raises(InvalidArgument, match="NaN"):
        VectorSegment.build(np.full((2, 4), np.nan, dtype=np.float32))
    segment = VectorSegment.build(vectors)
    with pytest.raises(InvalidArgument, match="dimension 4"):
        segment.search(np.ones(5, dtype=np.float32), 3, None)
    with pytest.raises(InvalidArgument, match="live mask"):
        segment.search(vectors[0], 3, np.ones(9, dtype=bool))
    with pytest.raises(InvalidArgument, match="k must"):
        segment.search(vectors[0], 0, None)
    with pytest.raises(InvalidArgument, match="different vector dimensions"):
        VectorSearcher([(segment, None), (VectorSegment.build(unit_rows(3, 6, seed=1)), None)])


def test_empty_segment() -> None:
    segment = VectorSegment.build(np.empty((0, 8), dtype=np.float32), VectorIndexSettings(kind="hnsw"))
    assert segment.size == 0
    _scores, rows = segment.search(np.ones(8, dtype=np.float32) / np.sqrt(8), 5, None)
    assert rows.size == 0


def test_hnsw_walks_quantised_codes_but_returns_exact_cosines_after_reload(tmp_path: Path) -> None:
    vectors = clustered(3000, 32, clusters=12, seed=21)
    VectorSegment.build(vectors, VectorIndexSettings(kind="hnsw")).save(tmp_path)
    loaded = VectorSegment.load(tmp_path)
    assert isinstance(loaded._index, faiss.IndexHNSWSQ)
    rows = np.array([2999, 0, 17, 17, 1500])
    np.testing.assert_array_equal(loaded.reconstruct(rows), vectors[rows])  # bit-exact, not decoded codes
    for query in vectors[100:110]:
        scores, found = loaded.search(query, 10, None)
        np.testing.assert_allclose(scores, vectors[found] @ query, rtol=1e-6)
        assert list(scores) == sorted(scores, reverse=True)


def test_hnsw_flat_segments_written_before_the_quantised_layout_still_load(tmp_path: Path) -> None:
    vectors = clustered(1000, 16, clusters=8, seed=22)
    index = faiss.IndexHNSWFlat(16, 16, faiss.METRIC_INNER_PRODUCT)
    index.add(vectors)
    faiss.write_index(index, str(tmp_path / INDEX_FILENAME))
    loaded = VectorSegment.load(tmp_path)
    assert loaded.kind == "hnsw"
    scores, rows = loaded.search(vectors[5], 3, None)
    assert rows[0] == 5 and scores[0] == pytest.approx(1.0, abs=1e-5)


def test_quantised_hnsw_without_its_exact_vectors_is_a_clear_store_error(tmp_path: Path) -> None:
    VectorSegment.build(clustered(600, 16, clusters=4, seed=23), VectorIndexSettings(kind="hnsw")).save(tmp_path)
    (tmp_path / EXACT_FILENAME).unlink()
    with pytest.raises(StoreError, match="no exact vectors"):
        VectorSegment.load(tmp_path)


@pytest.mark.parametrize("window", [64 << 20, 256, 4096])
def test_exact_vectors_read_any_rows_from_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, window: int) -> None:
    import kb_core.engines.vector_index as vector_index

    monkeypatch.setattr(vector_index, "_READ_WINDOW_BYTES", window)
    real_pread = os.pread
    monkeypatch.setattr(vector_index.os, "pread", lambda fd, n, at: real_pread(fd, min(n, 1000), at))  # short reads
    rng = np.random.default_rng(31)
    vectors = rng.standard_normal((3000, 16), dtype=np.float32)
    ExactVectors(vectors).save(tmp_path / EXACT_FILENAME)
    stored = ExactVectors(path=tmp_path / EXACT_FILENAME)
    cases = [np.arange(3000), np.arange(10, 2000), np.array([], dtype=np.int64), np.array([2999, 0, 0, 5])]
    cases += [rng.integers(0, 3000, size=int(rng.integers(1, 400))) for _ in range(30)]
    cases += [np.sort(rng.choice(3000, size=1500, replace=False))]
    for rows in cases:
        np.testing.assert_array_equal(stored.rows(rows), vectors[rows])
