"""Crash-safe file writes: write a temporary file, fsync it, rename it into place, fsync the folder.

A reader in another process sees either the old file or the new one, never a torn one, and a
process killed at any instant leaves at most a temporary file that :func:`remove_stale_temporaries`
cleans up later.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kb_core.base.json_text import json_text
from kb_core.base.removal import remove_tree, report_link, symlink_in_path

TEMP_MARKER = ".tmp-"


def temporary_sibling(path: Path) -> Path:
    """A unique temporary name in the same folder (so the final rename is atomic), tagged with our pid."""
    return path.with_name(f".{path.name}{TEMP_MARKER}{os.getpid()}-{uuid.uuid4().hex[:8]}")


def fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, write: Callable[[Path], None], *, replace: bool = True) -> None:
    """Call ``write(tmp)`` and move the result to ``path`` atomically.

    With ``replace=False`` the final step is ``os.link``, which fails with FileExistsError when
    ``path`` already exists: two writers can never both believe they created the same file.
    """
    tmp = temporary_sibling(path)
    try:
        write(tmp)
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        if replace:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)
            tmp.unlink()
    finally:
        if tmp.exists():
            tmp.unlink()
    fsync_directory(path.parent)


def write_bytes_atomically(
    path: Path, data: bytes | memoryview, *, replace: bool = True, mode: int | None = None
) -> None:
    def write(tmp: Path) -> None:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
        fd = os.open(tmp, flags, 0o600 if mode is None else mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)

    write_atomically(path, write, replace=replace)


def write_json_atomically(path: Path, value: Any, *, replace: bool = True, mode: int | None = None) -> None:
    data = json_text(value, indent=1, sort_keys=True).encode("utf-8")
    if mode is None:
        write_bytes_atomically(path, data, replace=replace, mode=0o644)
    else:
        write_bytes_atomically(path, data, replace=replace, mode=mode)


def read_json(path: Path) -> Any:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def pid_is_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def owner_pid(name: str) -> int | None:
    """The pid encoded in a temporary or staging name (``...tmp-<pid>-<hex>`` or ``<pid>-<hex>``)."""
    tail = name.rsplit(TEMP_MARKER, 1)[-1] if TEMP_MARKER in name else name
    head = tail.split("-", 1)[0]
    return int(head) if head.isdigit() else None


def remove_abandoned_folders(directory: Path, *, within: Path) -> None:
    """Remove the sub-folders of ``directory`` (staging folders named ``<pid>-…``) whose process is gone, and those
    no process owns (a name without a pid). Nothing when ``directory`` is (or lies under) a symbolic link below
    ``within`` (:func:`kb_core.base.removal.remove_tree`)."""
    link = symlink_in_path(directory, within=within)
    if link is not None:
        report_link(link)
        return
    if not directory.is_dir():
        return
    for folder in directory.iterdir():
        pid = owner_pid(folder.name)
        if pid is None or not pid_is_alive(pid):
            remove_tree(folder, within=within)


def remove_stale_temporaries(directory: Path, *, within: Path | None = None) -> int:
    """Delete temporary files left by processes that no longer exist (never through a symbolic link below
    ``within``, by default ``directory``'s parent). Returns how many were removed."""
    removed = 0
    if not directory.is_dir():
        return 0
    for entry in directory.iterdir():
        if TEMP_MARKER not in entry.name:
            continue
        pid = owner_pid(entry.name)
        if pid is not None and pid_is_alive(pid) and pid != os.getpid():
            continue
        if remove_tree(entry, within=directory.parent if within is None else within):
            removed += 1
    return removed


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def prefetch(path: Path) -> None:
    """Ask the kernel to read ``path`` into the page cache in the background.

    Index files are read at random (HNSW codes, exact vectors, chunk rows): after a restart the first
    searches would wait on one small disk read after another. The cache is the kernel's, not the
    process's memory, and the hint is dropped silently where unsupported.
    """
    if not hasattr(os, "posix_fadvise"):
        return
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
    except OSError:
        pass
    finally:
        os.close(fd)
