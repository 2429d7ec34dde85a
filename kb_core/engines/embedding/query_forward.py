"""Query vectors without torch: the forward pass of a BERT sentence-transformers model in numpy.

A query is one short text. Importing torch, transformers and sentence-transformers to embed it costs a fresh
process (``kb search``) 5-10 s of CPU on 2 cores before the first vector. This module reads the same weights
(``model.safetensors``, with safetensors' numpy loader) and computes the same float32 forward pass (embeddings,
then per layer self-attention and a GELU feed-forward, each with its residual layer norm), then the model's
pooling: about 10 ms for a query on one core, and the vector equals the torch model's to ~1e-7 per component
(tests/test_query_forward.py compares them on English, Chinese and windowed queries).

It applies only to what it implements exactly: ``BertModel`` weights (``model_type`` "bert", absolute position
embeddings, exact ``gelu``) under a sentence-transformers pipeline of Transformer → Pooling (mean or CLS) →
optional Normalize, with a ``tokenizer.json``, no lower-casing outside the tokenizer and no default prompt.
:meth:`BertQueryEncoder.load` returns None for any other model (the reason logged), and the caller embeds
queries with the torch model as before (:mod:`kb_core.engines.embedding.local`).

BLAS runs on one thread during a query: its matrices have a few rows, and OpenBLAS threads on a busy 2-core
machine cost more than they save (measured at load 10: 0.1-1.5 s per query with 2 threads, 10-25 ms with one;
torch's CPU threads behave the same).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kb_core.engines.embedding.model_input import InputTemplate

log = logging.getLogger(__name__)

_ST = "sentence_transformers.models."
_POOLING_MODES = (
    "pooling_mode_cls_token",
    "pooling_mode_mean_tokens",
    "pooling_mode_max_tokens",
    "pooling_mode_mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens",
    "pooling_mode_lasttoken",
)


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def _unsupported(folder: Path) -> str:
    """Why the model in ``folder`` is not one this module computes exactly ("" when it is)."""
    modules = _read_json(folder / "modules.json")
    if not isinstance(modules, list) or not modules:
        return "no modules.json"
    types = [str(m.get("type", "")) for m in modules]
    if types[:2] != [f"{_ST}Transformer", f"{_ST}Pooling"] or types[2:] not in ([], [f"{_ST}Normalize"]):
        return f"its modules are {types}, not Transformer, Pooling[, Normalize]"
    if modules[0].get("path", "") not in ("", "."):
        return "its Transformer is not in the model folder itself"
    config = _read_json(folder / "config.json") or {}
    if config.get("model_type") != "bert" or config.get("hidden_act") != "gelu":
        return f"it is a {config.get('model_type')!r} model with {config.get('hidden_act')!r}, not BERT with gelu"
    if config.get("position_embedding_type", "absolute") != "absolute":
        return "its position embeddings are not absolute"
    if (_read_json(folder / "sentence_bert_config.json") or {}).get("do_lower_case"):
        return "it lower-cases texts outside its tokenizer"
    settings = _read_json(folder / "config_sentence_transformers.json") or {}
    if settings.get("default_prompt_name") and (settings.get("prompts") or {}).get(settings["default_prompt_name"]):
        return "it has a default prompt"
    pooling = _read_json(folder / str(modules[1].get("path", "1_Pooling")) / "config.json") or {}
    chosen = [mode for mode in _POOLING_MODES if pooling.get(mode)]
    if chosen not in (["pooling_mode_mean_tokens"], ["pooling_mode_cls_token"]):
        return f"its pooling is {chosen}, not mean or CLS"
    if not (folder / "model.safetensors").is_file() or not (folder / "tokenizer.json").is_file():
        return "it has no model.safetensors or tokenizer.json"
    return ""


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    centred = x - mean
    variance = (centred * centred).mean(axis=-1, keepdims=True)
    return centred / np.sqrt(variance + np.float32(eps)) * weight + bias


@dataclass(frozen=True)
class BertQueryEncoder:
    """One BERT sentence-transformers model's weights as numpy arrays, and its forward pass for one sequence."""

    weights: dict[str, np.ndarray]
    prefix: str  # "" or "bert." before the weight names
    layers: int
    heads: int
    eps: float
    pooling: str  # "mean" or "cls"
    template: InputTemplate
    blas: Any  # threadpoolctl's BLAS libraries of this process, limited to one thread per query

    @classmethod
    def load(cls, folder: str | Path, tokenizer: Any) -> BertQueryEncoder | None:
        """The encoder of the model in ``folder`` (``tokenizer``: its ``tokenizers.Tokenizer``, without truncation
        and padding), or None when this module does not compute that model exactly."""
        folder = Path(folder)
        reason = _unsupported(folder)
        template = None
        if not reason:
            config = _read_json(folder / "config.json")
            template = InputTemplate.from_tokenizer(tokenizer, pad_id=int(config.get("pad_token_id") or 0))
            if template is None:
                reason = "its tokenizer does not simply wrap a sequence in special tokens"
        if reason or template is None:
            log.info("queries of %s are embedded by the torch model: %s", folder, reason)
            return None
        from safetensors.numpy import load_file
        from threadpoolctl import ThreadpoolController

        weights = load_file(str(folder / "model.safetensors"))
        prefix = "" if "embeddings.word_embeddings.weight" in weights else "bert."
        if f"{prefix}embeddings.word_embeddings.weight" not in weights:
            log.info("queries of %s are embedded by the torch model: unexpected weight names", folder)
            return None
        pooling_path = json.loads((folder / "modules.json").read_text(encoding="utf-8"))[1].get("path", "1_Pooling")
        pooling = _read_json(folder / pooling_path / "config.json")
        log.info("queries of %s are embedded by its numpy forward pass (no torch)", folder)
        return cls(
            weights={name: np.asarray(value, dtype=np.float32) for name, value in weights.items()},
            prefix=prefix,
            layers=int(config["num_hidden_layers"]),
            heads=int(config["num_attention_heads"]),
            eps=float(config.get("layer_norm_eps", 1e-12)),
            pooling="cls" if pooling.get("pooling_mode_cls_token") else "mean",
            template=template,
            blas=ThreadpoolController().select(user_api="blas"),
        )

    def _w(self, name: str) -> np.ndarray:
        return self.weights[self.prefix + name]

    def _dense(self, x: np.ndarray, name: str) -> np.ndarray:
        return x @ self._w(f"{name}.weight").T + self._w(f"{name}.bias")

    def encode(self, token_ids: Sequence[int]) -> np.ndarray:
        """The unit vector of one sequence given as token ids without special tokens (the template adds them)."""
        with self.blas.limit(limits=1):
            return self._forward(token_ids)

    def _forward(self, token_ids: Sequence[int]) -> np.ndarray:
        features = self.template.batch([list(token_ids)])
        ids = features["input_ids"][0]
        types = features.get("token_type_ids", np.zeros_like(features["input_ids"]))[0]
        n = len(ids)
        x = (
            self._w("embeddings.word_embeddings.weight")[ids]
            + self._w("embeddings.position_embeddings.weight")[:n]
            + self._w("embeddings.token_type_embeddings.weight")[types]
        )
        x = _layer_norm(x, self._w("embeddings.LayerNorm.weight"), self._w("embeddings.LayerNorm.bias"), self.eps)
        from scipy.special import erf

        hidden = x.shape[1]
        size = hidden // self.heads
        scale = np.float32(1.0 / math.sqrt(size))
        for layer in range(self.layers):
            at = f"encoder.layer.{layer}."
            q, k, v = (
                self._dense(x, f"{at}attention.self.{part}").reshape(n, self.heads, size).transpose(1, 0, 2)
                for part in ("query", "key", "value")
            )
            scores = (q @ k.transpose(0, 2, 1)) * scale
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            attention = scores / scores.sum(axis=-1, keepdims=True)
            context = (attention @ v).transpose(1, 0, 2).reshape(n, hidden)
            x = _layer_norm(
                self._dense(context, f"{at}attention.output.dense") + x,
                self._w(f"{at}attention.output.LayerNorm.weight"),
                self._w(f"{at}attention.output.LayerNorm.bias"),
                self.eps,
            )
            inner = self._dense(x, f"{at}intermediate.dense")
            inner = inner * np.float32(0.5) * (np.float32(1.0) + erf(inner * np.float32(1.0 / math.sqrt(2.0))))
            x = _layer_norm(
                self._dense(inner, f"{at}output.dense") + x,
                self._w(f"{at}output.LayerNorm.weight"),
                self._w(f"{at}output.LayerNorm.bias"),
                self.eps,
            )
        pooled = x[0] if self.pooling == "cls" else x.mean(axis=0)
        norm = float(np.linalg.norm(pooled))
        return (pooled / norm if norm > 0 else pooled).astype(np.float32)
