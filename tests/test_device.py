"""Device selection: KB_DEVICE / --device, clear errors for devices that are not there, a device-free cache key,
queries on the CPU, the device shown by `kb info`, the app and the evaluation output; GPU vectors match CPU ones."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kb_core import KnowledgeBaseService
from kb_core.cli.main import main as kb_main
from kb_core.embedding import CachedEmbedder, EmbeddingCache
from kb_core.embedding.device import (
    DeviceRequest,
    available_devices,
    cpu_threads,
    device_request,
    resolve_device,
)
from kb_core.errors import InvalidArgument

TEXTS = [
    "Hybrid retrieval combines BM25 keyword scores with dense vector similarity.",
    "Quarterly revenue grew by ten percent while costs stayed flat.",
    "混合检索把关键词得分和向量相似度结合起来。",
    "季度收入增长了百分之十，成本保持不变。",
]


def _cuda_available() -> bool:
    return any(d.startswith("cuda") for d in available_devices())


def test_kb_device_is_read_and_an_explicit_choice_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KB_DEVICE", "CPU")
    assert device_request() == DeviceRequest("cpu", "auto", "KB_DEVICE")
    assert device_request("cuda:1", source="--device") == DeviceRequest("cuda:1", "auto", "--device")
    monkeypatch.delenv("KB_DEVICE")
    assert device_request() == DeviceRequest("auto", "auto", "default")


@pytest.mark.parametrize("value", ["tpu", "cuda:x", "gpu", "cpu;rm -rf /", "cuda:1:2"])
def test_a_malformed_device_is_refused_naming_the_accepted_values(value: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        device_request(value, source="--device")
    assert repr(value) in info.value.message
    assert "auto, cpu, cuda, cuda:N, mps" in info.value.message


def test_auto_picks_the_best_device_here_and_the_cpu_gets_the_allowed_cores() -> None:
    choice = resolve_device(DeviceRequest())
    available = available_devices()
    expected = next((d for d in available if d.startswith("cuda")), "mps" if "mps" in available else "cpu")
    assert choice.name == expected
    assert choice.precision == ("float16" if expected.startswith("cuda") else "float32")
    assert choice.threads == cpu_threads() >= 1
    assert choice.request.source == "default"


@pytest.mark.skipif(_cuda_available(), reason="this machine has CUDA: the missing-device error cannot happen")
def test_an_unavailable_device_is_refused_naming_the_devices_that_are_there() -> None:
    with pytest.raises(InvalidArgument) as info:
        resolve_device(DeviceRequest("cuda", "auto", "--device"))
    assert "'cuda'" in info.value.message and "--device" in info.value.message
    assert f"available: {', '.join(available_devices())}" in info.value.message


def test_float16_on_the_cpu_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KB_PRECISION", "fp16")
    with pytest.raises(InvalidArgument, match="float16"):
        resolve_device(device_request("cpu"))
    monkeypatch.setenv("KB_PRECISION", "half")
    with pytest.raises(InvalidArgument, match="KB_PRECISION"):
        device_request("cpu")


def test_the_model_key_has_no_device_in_it() -> None:
    from kb_core.embedding.local import SentenceTransformerEmbedder

    keys = {
        SentenceTransformerEmbedder(device=DeviceRequest(spec, precision)).model_key
        for spec, precision in [("cpu", "float32"), ("cuda", "float16"), ("cuda:1", "auto"), ("mps", "auto")]
    }
    assert keys == {"local:all-MiniLM-L6-v2"}


@pytest.mark.model
def test_vectors_cached_on_one_device_are_served_to_another(tmp_path: Path) -> None:
    from kb_core.embedding.local import SentenceTransformerEmbedder

    cache = EmbeddingCache(tmp_path / "embeddings.sqlite")
    on_cpu = CachedEmbedder(SentenceTransformerEmbedder(device=DeviceRequest("cpu")), cache)
    first = on_cpu.embed_documents(TEXTS)
    # A GPU embedder (here one that cannot even load without CUDA) gets every vector from the cache.
    elsewhere = SentenceTransformerEmbedder(device=DeviceRequest("cuda:7"))
    again = CachedEmbedder(elsewhere, cache).embed_documents(TEXTS)
    assert np.array_equal(first, again)
    assert elsewhere._model is None  # no model time was spent on that device


@pytest.mark.model
@pytest.mark.skipif(_cuda_available(), reason="needs a machine without CUDA to show queries avoid the GPU")
def test_queries_are_embedded_on_the_cpu_whatever_the_document_device() -> None:
    from kb_core.embedding.local import SentenceTransformerEmbedder

    gpu_documents = SentenceTransformerEmbedder(device=DeviceRequest("cuda"))
    cpu = SentenceTransformerEmbedder(device=DeviceRequest("cpu"))
    query = "如何配置混合检索"
    assert np.allclose(gpu_documents.embed_query(query), cpu.embed_documents([query])[0], atol=1e-6)
    with pytest.raises(InvalidArgument, match="not available"):
        gpu_documents.embed_documents([query])  # documents are never moved to another device silently


@pytest.mark.gpu
@pytest.mark.model
def test_gpu_and_cpu_vectors_agree() -> None:
    if not _cuda_available():
        pytest.skip("no CUDA device here (torch.cuda.is_available() is False): GPU vectors cannot be compared")
    from kb_core.embedding.local import SentenceTransformerEmbedder

    long_text = " ".join(TEXTS * 40)  # several 256-token windows
    texts = [*TEXTS, long_text]
    gpu = SentenceTransformerEmbedder(device=DeviceRequest("cuda")).embed_documents(texts)
    cpu = SentenceTransformerEmbedder(device=DeviceRequest("cpu")).embed_documents(texts)
    cosines = np.sum(gpu * cpu, axis=1)
    assert cosines.min() >= 0.999, cosines


@pytest.mark.gpu
@pytest.mark.model
def test_gpu_feeding_gives_the_librarys_own_vectors_on_the_same_device() -> None:
    """#29: token-budget batches queued without waiting, one copy back, equal the library's encode on the GPU."""
    if not _cuda_available():
        pytest.skip("no CUDA device here (torch.cuda.is_available() is False): the GPU feeding cannot run")
    from kb_core.embedding.local import DEVICE_BATCH_TOKENS, MAX_DEVICE_BATCH, SentenceTransformerEmbedder

    texts = [f"{t} ({i})" * (1 + i % 7) for i, t in enumerate(TEXTS * 500)]
    gpu = SentenceTransformerEmbedder(device=DeviceRequest("cuda"))
    ours = gpu.embed_documents(texts)
    # Batches by the token budget: far more than 64 rows each, and as many as the longest row allows.
    assert len(gpu.last_batches) > 1 and max(gpu.last_batches) > 64
    windows = [len(w.ids) for pieces in gpu._windows_many(texts) for w in pieces]
    expected = min(len(windows), MAX_DEVICE_BATCH, DEVICE_BATCH_TOKENS // (max(windows) + 2))
    assert gpu.last_batches[0] == expected
    reference = gpu.model.encode(texts, batch_size=256, normalize_embeddings=True, show_progress_bar=False)
    cosines = np.sum(ours * np.asarray(reference, dtype=np.float32), axis=1)
    assert cosines.min() >= 0.9999, cosines.min()


def test_kb_info_shows_the_device_and_a_bad_device_is_an_error_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KB_DEVICE", raising=False)
    home = str(tmp_path / "home")
    assert kb_main(["--home", home, "--device", "cpu", "info"]) == 0
    out = capsys.readouterr().out
    assert "document embedding: cpu" in out and "asked for by --device" in out and "query embedding: cpu" in out
    assert kb_main(["--home", home, "--json", "info"]) == 0
    data = json.loads(capsys.readouterr().out)["data"]
    assert data["device"]["device"] == resolve_device().name
    assert data["device"]["available"] == list(available_devices())

    assert kb_main(["--home", home, "--device", "tpu", "info"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: unknown device 'tpu'") and "Traceback" not in err
    if not _cuda_available():
        assert kb_main(["--home", home, "--device", "cuda", "info"]) == 1
        err = capsys.readouterr().err
        assert "not available here; available: cpu" in err and "Traceback" not in err


def test_a_malformed_kb_device_fails_only_what_needs_a_local_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KB_DEVICE", "quantum")
    session = KnowledgeBaseService(tmp_path / "home").session()
    assert session.create_knowledge_base("哈希", 64, embedding_model="hashing")["success"]
    note = tmp_path / "note.txt"
    note.write_text("混合检索 hybrid retrieval", encoding="utf-8")
    assert session.import_document([str(note)], kb_name="哈希")["data"]["success_count"] == 1
    info = session.device_info()
    assert not info["success"] and "'quantum' (from KB_DEVICE)" in info["message"]
    assert session.create_knowledge_base("model", 64)["success"]
    result = session.import_document([str(note)], kb_name="model")
    assert not result["success"] and result["message"].startswith("unknown device 'quantum' (from KB_DEVICE)")


def test_the_evaluation_output_names_the_embedding_device(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.test_evaluation import write_beir

    monkeypatch.delenv("KB_DEVICE", raising=False)
    beir = write_beir(tmp_path / "beir")
    home = str(tmp_path / "home")
    assert kb_main(["--home", home, "eval", str(beir), "--model", "hashing", "--mode", "keyword"]) == 0
    assert "embedding device: none (the hashing embedder runs no model)" in capsys.readouterr().out
    session = KnowledgeBaseService(tmp_path / "home").session()
    assert session.create_knowledge_base("minilm", 64)["success"]
    described = session.service.embedding_device(session.find_kb("minilm"))
    assert described.startswith(f"{resolve_device().name} (") and "chosen automatically" in described


def test_the_knowledge_bases_page_shows_the_device(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    repo = Path(__file__).resolve().parents[1]
    if str(repo) not in sys.path:
        sys.path.insert(0, str(repo))
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("KB_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("KB_DEMO", "0")
    monkeypatch.setenv("KB_DEVICE", "cpu")
    test = AppTest.from_file(str(repo / "app.py"), default_timeout=60)
    test.run()
    test.switch_page("pages/knowledge_bases.py").run()
    assert not test.exception, test.exception
    captions = [str(c.value) for c in test.caption]
    assert any(c.startswith("Embedding device: cpu (float32") and "asked for by KB_DEVICE" in c for c in captions)
