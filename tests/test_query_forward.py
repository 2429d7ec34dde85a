"""Query vectors from the numpy forward pass (kb_core.engines.embedding.query_forward) equal the torch model's, and
models it does not compute exactly are left to the torch model."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from kb_core.engines.embedding.query_forward import BertQueryEncoder
from kb_core.engines.embedding.wordpiece import bundled_model_path, bundled_tokenizer

QUERIES = [
    "How are keyword and vector scores combined?",
    "混合检索如何计算得分？",
    "BM25 与 cosine similarity 的加权 fusion",
    "a",
    # over 256 tokens: embedded in two windows (a query's vector reads its first two, kb_core.engines.embedding.local)
    " ".join(["retrieval", "augmented", "generation", "知识库"] * 70),
]


@pytest.mark.model
def test_query_vectors_equal_the_torch_models_in_english_chinese_and_windows() -> None:
    from kb_core.engines.embedding.local import SentenceTransformerEmbedder

    embedder = SentenceTransformerEmbedder()  # queries only: no document model loaded in it, so the numpy path
    assert len(embedder.windows(QUERIES[-1])) > 1
    # the torch model, as every document is embedded (another embedder: one whose document model is loaded on the
    # CPU lets that model serve its queries too)
    documents = SentenceTransformerEmbedder().embed_documents(QUERIES)
    for query, reference in zip(QUERIES, documents, strict=True):
        vector = embedder.embed_query(query)
        assert vector.dtype == np.float32 and vector.shape == (384,)
        assert np.abs(vector - reference).max() < 1e-5, query[:30]
        assert float(vector @ reference) > 0.99999
    assert embedder._numpy_query_encoder() is not None
    assert embedder._query_model is None  # no second torch model was loaded for the queries


def linked_copy(tmp_path: Path) -> Path:
    """The bundled model's folder, its files linked (not copied), so one file can be changed."""
    source = bundled_model_path()
    target = tmp_path / "model"
    shutil.copytree(source, target, copy_function=lambda src, dst: Path(dst).symlink_to(src))
    return target


def rewrite(path: Path, change: dict) -> None:
    value = json.loads(path.read_text(encoding="utf-8"))
    if isinstance(value, list):
        value.append(change)
    else:
        value.update(change)
    path.unlink()
    path.write_text(json.dumps(value), encoding="utf-8")


@pytest.mark.parametrize(
    ("file", "change"),
    [
        ("config.json", {"hidden_act": "gelu_new"}),
        ("config.json", {"model_type": "xlm-roberta"}),
        ("config.json", {"position_embedding_type": "relative_key"}),
        ("1_Pooling/config.json", {"pooling_mode_mean_tokens": False, "pooling_mode_max_tokens": True}),
        ("modules.json", {"idx": 3, "name": "3", "path": "3_Dense", "type": "sentence_transformers.models.Dense"}),
        ("sentence_bert_config.json", {"do_lower_case": True}),
        ("config_sentence_transformers.json", {"prompts": {"query": "query: "}, "default_prompt_name": "query"}),
    ],
)
def test_models_it_does_not_compute_exactly_are_left_to_torch(tmp_path: Path, file: str, change: dict) -> None:
    folder = linked_copy(tmp_path)
    assert BertQueryEncoder.load(folder, bundled_tokenizer().backend) is not None
    rewrite(folder / file, change)
    assert BertQueryEncoder.load(folder, bundled_tokenizer().backend) is None
