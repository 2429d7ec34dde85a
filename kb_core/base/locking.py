"""Inter-process writer locks.

``filelock`` uses ``flock`` on POSIX, which the kernel releases when the holder dies, so a writer
killed with SIGKILL never leaves a stale lock behind. Readers never take these locks.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, Timeout

from kb_core.base.errors import LockTimeout

DEFAULT_LOCK_TIMEOUT_SECONDS = 120.0


@contextmanager
def writer_lock(path: Path, timeout: float = DEFAULT_LOCK_TIMEOUT_SECONDS) -> Iterator[None]:
    lock = FileLock(str(path), timeout=timeout)
    try:
        lock.acquire()
    except Timeout as exc:
        raise LockTimeout(
            f"Another process has held the write lock {path} for more than {timeout:.0f} s; try again later."
        ) from exc
    try:
        yield
    finally:
        lock.release()


def try_writer_lock(path: Path) -> FileLock | None:
    """The lock if it is free right now, else None (for opportunistic clean-up)."""
    lock = FileLock(str(path), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        return None
    return lock


@contextmanager
def lock_if_free(path: Path) -> Iterator[bool]:
    """Hold the lock of an existing lock file if nobody does (its holder died): yields True while held, False when
    a live process holds it or the file is gone. Unlike FileLock it never creates the file."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
    except OSError:
        yield False
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # FileLock's own call: the two exclude each other
        except OSError:
            yield False
            return
        yield True
    finally:
        os.close(fd)  # closing the descriptor releases the lock
