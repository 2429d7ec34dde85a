"""Which device a local model runs on: CUDA when there is one (float16), else Apple MPS, else the CPU.

A device is asked for as ``auto`` (the default), ``cpu``, ``cuda``, ``cuda:N`` or ``mps``, by the ``--device``
option of ``kb`` or the ``KB_DEVICE`` environment variable (the option wins). ``KB_PRECISION`` (``auto``,
``float32``/``fp32``, ``float16``/``fp16``) overrides the precision: ``auto`` is float16 on CUDA and float32
elsewhere. A device that is not there is refused with an error naming the devices that are, never silently
replaced by another.

Which devices exist is asked of torch, except where the installed torch build has no accelerator at all (a CPU
build of torch, as its ``torch/version.py`` says, on a machine other than a Mac): there the answer is the CPU without
importing torch, which costs a fresh process (``kb info``) 1-2 s.

The device never changes what a vector means (the embedding cache key has no device in it): float16 on a GPU
and float32 on a CPU agree to cosine >= 0.999 for the same text (tests/test_device.py).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from kb_core.base.errors import EmbeddingError, InvalidArgument
from kb_core.base.i18n import msg

log = logging.getLogger(__name__)

DEVICE_VARIABLE = "KB_DEVICE"
PRECISION_VARIABLE = "KB_PRECISION"
DEVICE_CHOICES = ("auto", "cpu", "cuda", "cuda:N", "mps")
_SPEC_RE = re.compile(r"^(auto|cpu|mps|cuda(?::\d{1,3})?)$")
_PRECISIONS = {"auto": "auto", "float32": "float32", "fp32": "float32", "float16": "float16", "fp16": "float16"}


@dataclass(frozen=True)
class DeviceRequest:
    """A device as asked for, checked for form only (nothing is imported)."""

    spec: str = "auto"
    precision: str = "auto"
    source: str = "default"  # default | KB_DEVICE | --device | argument

    def describe_source(self) -> str:
        if self.source == "default":
            return "chosen automatically"
        return f"asked for by {self.source}"


@dataclass(frozen=True)
class DeviceChoice:
    """The device a model runs on, resolved against the hardware of this process."""

    name: str  # "cuda:0", "mps" or "cpu"
    precision: str  # "float16" or "float32"
    threads: int  # torch CPU threads (tokenising and, on the CPU, the model)
    label: str  # e.g. "NVIDIA H100 80GB HBM3" or "CPU (2 threads)"
    request: DeviceRequest
    available: tuple[str, ...]

    @property
    def kind(self) -> str:
        return self.name.split(":", 1)[0]

    def describe(self) -> str:
        """One line for people: ``cpu (float32, 2 threads; chosen automatically; available: cpu)``."""
        detail = f"{self.precision}, {self.threads} CPU thread{'s' if self.threads != 1 else ''}"
        if self.kind != "cpu":
            detail = f"{self.label}, {detail}"
        return f"{self.name} ({detail}; {self.request.describe_source()}; available: {', '.join(self.available)})"

    def to_json(self) -> dict[str, object]:
        return {
            "device": self.name,
            "precision": self.precision,
            "threads": self.threads,
            "label": self.label,
            "requested": self.request.spec,
            "requested_precision": self.request.precision,
            "source": self.request.source,
            "available": list(self.available),
            "description": self.describe(),
        }


def device_request(spec: str | None = None, *, source: str = "argument") -> DeviceRequest:
    """The request for ``spec``, else ``$KB_DEVICE``, else ``auto``; a malformed value is refused here."""
    if spec is None or not str(spec).strip():
        env = os.environ.get(DEVICE_VARIABLE, "").strip()
        spec, source = (env, DEVICE_VARIABLE) if env else ("auto", "default")
    value = str(spec).strip().lower()
    if not _SPEC_RE.match(value):
        choices = ", ".join(DEVICE_CHOICES)
        raise InvalidArgument(
            msg("unknown device {spec!r} (from {source}): use one of {choices}", spec=spec, source=source,
                choices=choices)
            if source != "default"
            else msg("unknown device {spec!r}: use one of {choices}", spec=spec, choices=choices),
            details={"field": "device", "accepted": list(DEVICE_CHOICES)},
        )
    raw_precision = os.environ.get(PRECISION_VARIABLE, "").strip().lower() or "auto"
    precision = _PRECISIONS.get(raw_precision)
    if precision is None:
        raise InvalidArgument(
            msg(
                "unknown precision {precision!r} (from {variable}): use auto, float32 or float16",
                precision=raw_precision, variable=PRECISION_VARIABLE,
            ),
            details={"field": "precision"},
        )
    return DeviceRequest(value, precision, source)


def cpu_threads() -> int:
    """The CPUs this process may run on (its affinity, so a container's or taskset's limit is respected)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


_BUILD_RE = re.compile(r"^(cuda|hip|xpu)\s*(?::[^=]*)?=\s*(.+?)\s*$", re.MULTILINE)


def torch_build_is_cpu_only() -> bool:
    """Whether the installed torch can only use the CPU here, known without importing torch: a build without CUDA,
    ROCm (hip) or XPU, as ``torch/version.py`` records, on a machine other than a Mac (where MPS needs no special
    build). False when in doubt (torch will be asked)."""
    if sys.platform == "darwin":
        return False
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return False
    if spec is None or not spec.submodule_search_locations:
        return False
    try:
        text = (Path(next(iter(spec.submodule_search_locations))) / "version.py").read_text(encoding="utf-8")
    except OSError:
        return False
    return cpu_only_build(text)


def cpu_only_build(version_py: str) -> bool:
    """Whether a ``torch/version.py`` text records a build with no CUDA, ROCm (hip) or XPU support."""
    builds = dict(_BUILD_RE.findall(version_py))
    return set(builds) == {"cuda", "hip", "xpu"} and all(value == "None" for value in builds.values())


def available_devices() -> tuple[str, ...]:
    """``cpu`` plus each CUDA device and MPS that torch can use here (imports torch unless its build is CPU-only)."""
    if torch_build_is_cpu_only():
        return ("cpu",)
    try:
        import torch
    except ImportError as error:  # an install without torch (or a broken one): said, not a crash of the caller
        raise EmbeddingError(
            msg("PyTorch cannot be imported here ({error}): local embedding models cannot run.", error=str(error))
        ) from error

    found = ["cpu"]
    if torch.cuda.is_available():
        found += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        found.append("mps")
    return tuple(found)


def resolve_device(request: DeviceRequest | None = None) -> DeviceChoice:
    """The device for ``request`` on this machine; an unavailable one raises :class:`InvalidArgument`."""
    request = request or device_request()
    available = available_devices()
    spec = request.spec
    if spec == "auto":
        name = next((d for d in available if d.startswith("cuda")), "mps" if "mps" in available else "cpu")
    elif spec == "cuda":
        name = next((d for d in available if d.startswith("cuda")), "")
    else:
        name = spec if spec in available else ""
    if not name:
        raise InvalidArgument(
            f"device {spec!r} ({request.describe_source()}) is not available here; available: {', '.join(available)}",
            details={"field": "device", "available": list(available)},
        )
    precision = request.precision
    if precision == "auto":
        precision = "float16" if name.startswith("cuda") else "float32"
    elif precision == "float16" and name == "cpu":
        raise InvalidArgument(
            f"float16 ({PRECISION_VARIABLE}) is not supported on the CPU; use float32 or auto there",
            details={"field": "precision"},
        )
    threads = cpu_threads()
    if name.startswith("cuda"):
        import torch

        label = torch.cuda.get_device_name(int(name.split(":")[1]))
    elif name == "mps":
        label = "Apple MPS"
    else:
        label = f"CPU ({threads} thread{'s' if threads != 1 else ''})"
    return DeviceChoice(name, precision, threads, label, request, available)
