"""The one way anything in a home is deleted: never through a symbolic link, never outside the folder it cleans.

A home's scratch folders (``trash``, ``staging``, a KB's ``staging``) are sometimes symbolic links to a bigger disk.
Deleting "every leftover in ``HOME/trash``" through such a link once deleted every folder of the link's target
(#37). So a deletion names the folder it works in (``within``: a home, a KB's folder, a cache) and the path to
delete inside it; the path is walked one component at a time from an open descriptor of ``within`` with
``O_NOFOLLOW``, so a link anywhere between the two stops the deletion, and the folder itself is removed by
``shutil.rmtree`` on that descriptor (its descriptor-based walk never follows a link inside the tree either:
``shutil.rmtree.avoids_symlink_attacks``). ``within`` itself is trusted (a home, or a KB folder, may be a link).
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import stat
import threading
from pathlib import Path

logger = logging.getLogger(__name__)

_warned: set[str] = set()
_warned_lock = threading.Lock()


def symlink_in_path(path: Path, *, within: Path) -> Path | None:
    """The first symbolic link among the components of ``path`` below ``within`` (``path`` itself included), or
    None. A ``path`` outside ``within`` answers ``path``."""
    try:
        relative = path.relative_to(within)
    except ValueError:
        return path
    current = within
    for part in relative.parts:
        current = current / part
        try:
            if stat.S_ISLNK(os.lstat(current).st_mode):
                return current
        except OSError:
            return None
    return None


def remove_tree(path: Path, *, within: Path) -> bool:
    """Delete ``path`` (a folder and everything in it, or a file) when it lies inside ``within`` and no component
    between the two is a symbolic link; a link at ``path`` itself is removed as a link (its target is never
    touched). Best effort, like ``shutil.rmtree(..., ignore_errors=True)``: returns whether ``path`` is gone, and
    logs a refusal (a warning, once per link per process) instead of raising."""
    try:
        relative = path.relative_to(within)
    except ValueError:
        _refuse(path, f"{path} is outside {within}")
        return False
    parts = relative.parts
    if not parts or any(part in ("", ".", "..") for part in parts):
        _refuse(path, f"{path} is not a path inside {within}")
        return False
    try:
        fd = os.open(within, os.O_RDONLY | os.O_DIRECTORY)
    except FileNotFoundError:
        return True
    except OSError as exc:
        logger.debug("cannot open %s to remove %s: %s", within, path, exc)
        return False
    try:
        for depth, part in enumerate(parts[:-1], start=1):
            try:
                inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                return True
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    report_link(within.joinpath(*parts[:depth]))
                else:
                    logger.debug("cannot open %s to remove %s: %s", within.joinpath(*parts[:depth]), path, exc)
                return False
            os.close(fd)
            fd = inner
        name = parts[-1]
        try:
            mode = os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode
        except FileNotFoundError:
            return True
        if stat.S_ISDIR(mode):
            shutil.rmtree(name, ignore_errors=True, dir_fd=fd)
        else:
            os.unlink(name, dir_fd=fd)
        try:
            os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return True
        return False
    except OSError as exc:
        logger.debug("could not remove %s: %s", path, exc)
        return False
    finally:
        os.close(fd)


def link_description(link: Path) -> str:
    """What a person is told about a scratch folder that is a symbolic link."""
    try:
        target = os.readlink(link)
    except OSError:
        target = "?"
    return f"{link} is a symbolic link (to {target}): KB Workbench deletes nothing through a link"


def report_link(link: Path) -> None:
    """Log (once per process) that nothing is deleted through ``link``."""
    _refuse(link, f"{link_description(link)}, so what is left there is not cleaned up; make it a folder of its own")


def _refuse(key: Path, reason: str) -> None:
    with _warned_lock:
        if str(key) in _warned:
            logger.debug("not removing: %s", reason)
            return
        _warned.add(str(key))
    logger.warning("Not removing anything there: %s", reason)


def own_folder(folder: Path, *, within: Path) -> Path:
    """``folder``, a scratch folder the caller is about to write into (and later delete from); raises
    :class:`~kb_core.base.errors.StoreError` (``SCRATCH_IS_LINK``) when it is, or lies under, a symbolic link below
    ``within``: what went there could never be removed."""
    from kb_core.base.errors import StoreError

    link = symlink_in_path(folder, within=within)
    if link is not None:
        raise StoreError(
            f"{link_description(link)}, so it keeps its scratch files only where it can remove them: replace the "
            "link by a folder (to use a bigger disk, move the whole home there and point KB_HOME or --home at it).",
            code="SCRATCH_IS_LINK",
            details={"path": str(link)},
        )
    return folder
