"""Device selection: KB_DEVICE / --device, clear errors for devices that are not there, a device-free cache key,
queries on the CPU, the device shown by `kb info`, the app and the evaluation output; GPU vectors match CPU ones."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kb_core import KnowledgeBaseService
from kb_core.base.errors import InvalidArgument
from kb_core.edges.cli.main import main as kb_main
from kb_core.edges.envelopes import Enveloped
from kb_core.engines.embedding import CachedEmbedder, EmbeddingCache
from kb_core.engines.embedding.device import (
    DeviceRequest,
    available_devices,
    cpu_threads,
    device_request,
    resolve_device,
)

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
    from kb_core.engines.embedding.local import SentenceTransformerEmbedder

    keys = {
        SentenceTransformerEmbedder(device=DeviceRequest(spec, precision)).model_key
        for spec, precision in [("cpu", "float32"), ("cuda", "float16"), ("cuda:1", "auto"), ("mps", "auto")]
    }
    assert keys == {"local:all-MiniLM-L6-v2"}


@pytest.mark.model
def test_vectors_cached_on_one_device_are_served_to_another(tmp_path: Path) -> None:
    from kb_core.engines.embedding.local import SentenceTransformerEmbedder

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
    from kb_core.engines.embedding.local import SentenceTransformerEmbedder

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
    from kb_core.engines.embedding.local import SentenceTransformerEmbedder

    long_text = " ".join(TEXTS * 40)  # several 256-token windows
    texts = [*TEXTS, long_text]
    gpu = SentenceTransformerEmbedder(device=DeviceRequest("cuda")).embed_documents(texts)
    cpu = SentenceTransformerEmbedder(device=DeviceRequest("cpu")).embed_documents(texts)
    cosines = np.sum(gpu * cpu, axis=1)
    assert cosines.min() >= 0.999, cosines


# Sentences of the kind documents are made of, in both languages; chunk-like texts join a few of them.
SENTENCES = [
    "Hybrid retrieval combines BM25 keyword scores with dense vector similarity.",
    "The cohort included 1,204 adults who were followed for a median of 6.2 years.",
    "Mutations in BRCA1 increase the lifetime risk of breast and ovarian cancer.",
    "Insulin sensitivity was measured with a hyperinsulinaemic euglycaemic clamp.",
    "Results were robust to adjustment for age, sex, smoking and body-mass index.",
    "Quarterly revenue grew by ten percent while operating costs stayed flat.",
    "Macrophages polarise towards an M2 phenotype in the tumour microenvironment.",
    "The committee approved the budget after a second reading on Thursday.",
    "混合检索把关键词得分和向量相似度结合起来。",
    "研究纳入了一千二百零四名成年人，中位随访六点二年。",
    "该基因突变会增加患乳腺癌和卵巢癌的终生风险。",
    "季度收入增长了百分之十，而运营成本保持不变。",
    "肿瘤微环境中的巨噬细胞倾向于M2表型极化。",
]


def chunk_like_texts(count: int) -> list[str]:
    """``count`` texts like an import's chunks: one to nine sentences each (about 15 to 200 tokens)."""
    import random

    rng = random.Random(29)
    return [" ".join(rng.choice(SENTENCES) for _ in range(rng.randint(1, 9))) for _ in range(count)]


def feeding_against_the_library(fed: object, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Cosines of ``fed``'s vectors (the import's feeding) against the library's own ``encode`` on the same device
    (the lower of those at batch 32, its default, and 1,024), and of the library against itself at those two batch
    sizes: its own precision on that device (in float16, batches of other sizes pick other kernels and round
    differently)."""

    def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.sum(a * b, axis=1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)

    ours = fed.embed_documents(texts)
    encode = fed.model.encode
    small, large = (
        np.asarray(encode(texts, batch_size=b, normalize_embeddings=True, show_progress_bar=False), dtype=np.float32)
        for b in (32, 1024)
    )
    return np.minimum(cosines(ours, small), cosines(ours, large)), cosines(small, large)


@pytest.mark.model
def test_device_feeding_is_as_close_to_the_librarys_encode_as_the_library_is_to_itself_on_the_cpu() -> None:
    """The GPU test's check, run on the CPU (fed like a device), where float32 also meets a fixed 0.9999."""
    from kb_core.engines.embedding.local import DEVICE_BATCH_TOKENS, SentenceTransformerEmbedder

    fed = SentenceTransformerEmbedder(device=DeviceRequest("cpu"), device_batch_tokens=DEVICE_BATCH_TOKENS)
    ours, floor = feeding_against_the_library(fed, chunk_like_texts(24))
    assert ours.min() >= floor.min() - 1e-4 and ours.mean() >= 0.9999, (ours.min(), floor.min())
    assert ours.min() >= 0.9999 and floor.min() >= 0.9999


@pytest.mark.gpu
@pytest.mark.model
def test_gpu_feeding_gives_the_librarys_own_vectors_on_the_same_device() -> None:
    """#29: token-budget batches queued without waiting, one copy back, give the library's own encode on the GPU, to
    the library's own precision there: in float16 the library disagrees with itself between batch sizes (cosines of
    0.9997 to 1.0002 were seen on an H200), so the feeding may differ from it as much, and no more; on average the
    vectors agree to 0.9999."""
    if not _cuda_available():
        pytest.skip("no CUDA device here (torch.cuda.is_available() is False): the GPU feeding cannot run")
    from kb_core.engines.embedding.local import DEVICE_BATCH_TOKENS, MAX_DEVICE_BATCH, SentenceTransformerEmbedder

    texts = chunk_like_texts(2000)
    gpu = SentenceTransformerEmbedder(device=DeviceRequest("cuda"))
    ours, floor = feeding_against_the_library(gpu, texts)
    # Batches by the token budget: far more than 64 rows each, and as many as the longest row allows.
    assert len(gpu.last_batches) > 1 and max(gpu.last_batches) > 64
    windows = [len(w.ids) for pieces in gpu._windows_many(texts) for w in pieces]
    expected = min(len(windows), MAX_DEVICE_BATCH, DEVICE_BATCH_TOKENS // (max(windows) + 2))
    assert gpu.last_batches[0] == expected
    assert ours.min() >= floor.min() - 1e-4, f"feeding {ours.min():.6f}, the library against itself {floor.min():.6f}"
    assert ours.mean() >= 0.9999, ours.mean()


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
    session = Enveloped(KnowledgeBaseService(tmp_path / "home").session())
    assert session.create_knowledge_base("哈希", 64, embedding_model="hashing")["success"]
    note = tmp_path / "note.txt"
    note.write_text("混合检索 hybrid retrieval", encoding="utf-8")
    assert session.import_document([str(note)], kb_name="哈希")["data"]["success_count"] == 1
    info = session.device_info()
    assert not info["success"] and "'quantum' (from KB_DEVICE)" in info["message"]
    assert session.create_knowledge_base("model", 64, "all-MiniLM-L6-v2")["success"]
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
    session = Enveloped(KnowledgeBaseService(tmp_path / "home").session())
    assert session.create_knowledge_base("minilm", 64, "all-MiniLM-L6-v2")["success"]
    described = session.operations.service.embedding_device(session.operations.find_kb("minilm"))
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
