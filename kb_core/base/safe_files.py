"""Opening the paths users and MCP clients name, so that what was checked is what is used.

A path is opened once; every later step works on what was opened (a private copy for document imports, the
descriptor itself for bundles and export files), never on the path again. So a folder swapped for a symlink
after the check cannot redirect a read, a write or a delete:

- :func:`open_input_file` refuses anything but a regular file, saying what it is (a FIFO, a device, a
  folder, a dangling link ...), and never blocks on opening one (``O_NONBLOCK``, ``O_NOCTTY``). With
  ``allowed_dirs`` (the MCP server's ``--allow-dir`` folders) the opened file must lie inside one of them:
  the check is made on the opened file (its device and inode must be those of its symlink-free path, and
  that path must be inside), so a swap before, during or after the open is refused.
- :meth:`OpenedFile.remove` deletes the file's name only while it still names the file that was opened,
  relative to the folder that was checked (``unlinkat`` on a directory descriptor).
- :func:`open_output_folder` opens the folder of a file to be written; the file is created there with
  ``O_EXCL | O_NOFOLLOW`` under a temporary name and renamed into place inside that same folder.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from kb_core.base.errors import InvalidArgument, KBError, PermissionDenied
from kb_core.base.i18n import msg

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | _CLOEXEC
_FOLDER_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _CLOEXEC
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | _CLOEXEC
_COPY_BLOCK = 1 << 20


class UnusablePath(KBError):
    """The path names no regular file that can be read; ``reason`` says what it is instead."""

    code = "FILE_NOT_FOUND"

    def __init__(self, path: Path | str, reason: str) -> None:
        super().__init__(msg("{path} {reason}.", path=str(path), reason=reason), details={"path": str(path)})
        self.path = str(path)
        self.reason = reason


def reject_nul(value: Any, field: str) -> None:
    """A NUL byte cannot be part of a file path (the OS would cut the path there): refuse it as invalid."""
    values = value if isinstance(value, list | tuple) else [value]
    for item in values:
        if isinstance(item, str) and "\x00" in item:
            raise InvalidArgument(
                f"{field} contains a NUL byte (\\x00), which no file path can contain: {item!r}.",
                details={"field": field},
            )


NAME_MAX_BYTES = 255  # one name in a path (ext4, XFS, btrfs, APFS, NTFS in UTF-16 units)
PATH_MAX_BYTES = 4096  # a whole path (Linux PATH_MAX)


def path_name_problem(raw: str) -> str | None:
    """Why the path text ``raw`` cannot name a file KB Workbench will import (None: it can), as the end of a
    sentence that starts with the path (:func:`shown_path`). Checked once, where a path enters (#37): a name that
    is not UTF-8 (a Latin-1 ``café.txt`` from an old archive reaches Python as lone surrogates) or that no file
    system allows (a name over 255 bytes, a path over 4,096) fails that one file, never the whole import."""
    if not isinstance(raw, str) or not raw:
        return msg("is not a file path")
    try:
        encoded = raw.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = raw[exc.start].encode("utf-8", "surrogateescape")
        return msg(
            "has a name that is not UTF-8 text (byte 0x{byte} at character {position}), perhaps from an older "
            "encoding such as Latin-1: rename the file to UTF-8 (e.g. convmv -f latin1 -t utf8 --notest)",
            byte=bad.hex().upper(), position=exc.start + 1,
        )
    if len(encoded) > PATH_MAX_BYTES:
        return msg(
            "is {size:,} bytes long; a path may have at most {most:,}", size=len(encoded), most=PATH_MAX_BYTES
        )
    for part in raw.split("/"):
        size = len(part.encode("utf-8"))
        if size > NAME_MAX_BYTES:
            return msg(
                "has a name of {size:,} bytes ({start}…); a file or folder name may have at most {most} bytes",
                size=size, start=part[:24], most=NAME_MAX_BYTES,
            )
    return None


def shown_path(raw: str) -> str:
    """``raw`` as text that can be shown and stored anywhere: bytes that are not UTF-8 written as ``\\xe9``."""
    return raw.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def kind_of(mode: int) -> str:
    """What a non-regular file is, as the end of a sentence: ``is a FIFO (named pipe), not a regular file``."""
    if stat.S_ISDIR(mode):
        return msg("is a folder, not a file")
    if stat.S_ISFIFO(mode):
        return msg("is a FIFO (named pipe), not a regular file")
    if stat.S_ISCHR(mode):
        return msg("is a character device, not a regular file")
    if stat.S_ISBLK(mode):
        return msg("is a block device, not a regular file")
    if stat.S_ISSOCK(mode):
        return msg("is a socket, not a regular file")
    return msg("is not a regular file")


def _through_link(path: Path, reason: str) -> str:
    """``is a symbolic link to '/dev/zero', which is a character device ...`` when ``path`` is a link."""
    try:
        target = os.readlink(path)
    except (OSError, ValueError):
        return reason
    return msg("is a symbolic link to {target!r}, which {reason}", target=target, reason=reason)


def _access_failure(path: Path, exc: OSError) -> str:
    if exc.errno == errno.ENOENT:
        return _through_link(path, msg("does not exist"))
    if exc.errno == errno.ELOOP:
        return msg("is a symbolic link that loops (or passes through too many links)")
    if exc.errno == errno.ENOTDIR:
        return msg("does not exist (a part of the path is not a folder)")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return msg("cannot be read (permission denied)")
    if exc.errno == errno.ENAMETOOLONG:
        return msg("is too long to be a file path")
    return msg("cannot be opened ({problem})", problem=exc.strerror or str(exc))


def _not_regular(path: Path, mode: int) -> str:
    return _through_link(path, kind_of(mode)) if os.path.islink(path) else kind_of(mode)


def _same_file(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


class AllowedFolders(tuple[Path, ...]):
    """The folders a confined session may read and write by path, less the folders inside them it never may:
    ``denied`` (the session's knowledge-base home: its API keys, token hashes and store)."""

    denied: tuple[Path, ...]

    def __new__(cls, folders: Sequence[Path], denied: Sequence[Path] = ()) -> AllowedFolders:
        made = super().__new__(cls, (Path(os.path.realpath(f)) for f in folders))
        made.denied = tuple(Path(os.path.realpath(d)) for d in denied)
        return made


def require_inside(raw: str | Path, resolved: Path, allowed_dirs: Sequence[Path]) -> None:
    """PermissionDenied unless ``resolved`` (symlinks resolved) lies inside an allowed folder, and not inside one of
    its denied folders (:class:`AllowedFolders`)."""
    allowed = ", ".join(str(d) for d in allowed_dirs)
    if not allowed_dirs:
        raise PermissionDenied(
            "Reading or writing files by path over HTTP is disabled on this server; start it with --allow-dir DIR."
        )
    if not any(resolved == d or resolved.is_relative_to(d) for d in allowed_dirs):
        raise PermissionDenied(
            f"{str(raw)!r} resolves to {resolved}, outside the folders this server may use ({allowed}); refused.",
            details={"file_path": str(raw)},
        )
    if any(resolved == d or resolved.is_relative_to(d) for d in getattr(allowed_dirs, "denied", ())):
        raise PermissionDenied(
            f"{str(raw)!r} lies inside the knowledge-base home, whose files (API keys, tokens, the store) are never "
            "read or written by path; refused.",
            details={"file_path": str(raw)},
        )


def _confirm_inside(raw: Path, opened: os.stat_result, allowed_dirs: Sequence[Path]) -> Path:
    """The symlink-free path of what was opened, checked inside ``allowed_dirs``. The path is resolved again
    after the open and must lead to the very same file; otherwise something on the way was swapped."""
    resolved = Path(os.path.realpath(raw))
    require_inside(raw, resolved, allowed_dirs)
    try:
        now = os.stat(resolved, follow_symlinks=False)
    except OSError:
        now = None
    if now is None or not _same_file(now, opened):
        raise PermissionDenied(
            f"{str(raw)!r} changed while it was being opened (a folder or link on its way was replaced); refused.",
            details={"file_path": str(raw)},
        )
    return resolved


def _open_folder(folder: Path, allowed_dirs: Sequence[Path] | None) -> tuple[int, Path]:
    if allowed_dirs is not None:
        require_inside(folder, Path(os.path.realpath(folder)), allowed_dirs)
    fd = os.open(folder, _FOLDER_FLAGS)
    try:
        real = _confirm_inside(folder, os.fstat(fd), allowed_dirs) if allowed_dirs is not None else folder
    except BaseException:
        os.close(fd)
        raise
    return fd, real


def _sendfile(out: int, source: int, offset: int) -> int | None:
    """Bytes ``sendfile`` copied from ``source`` at ``offset`` to the end of ``out`` (0 at the end of the source);
    ``None`` where the platform or these files do not allow it (macOS sends to sockets only)."""
    send = getattr(os, "sendfile", None)
    if send is None:
        return None
    try:
        return int(send(out, source, offset, _COPY_BLOCK))
    except OSError as exc:
        if exc.errno in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSOCK):
            return None
        raise


@dataclass
class OpenedFile:
    """A regular file opened for reading. ``real_path`` is where it was found (symlinks resolved) when the
    open was confined, else the path as given. Close it (or use it as a context manager)."""

    path: Path
    fd: int
    stat: os.stat_result
    real_path: Path
    folder_fd: int | None = None  # the checked folder holding ``path.name`` (for remove)

    def __enter__(self) -> OpenedFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for fd in (self.fd, self.folder_fd):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.fd, self.folder_fd = -1, None

    def reader(self) -> IO[bytes]:
        """A binary file object over the opened file, from its start (its own descriptor; close it)."""
        handle = os.fdopen(os.dup(self.fd), "rb")
        handle.seek(0)
        return handle

    def copy_to(self, target: Path, max_bytes: int | None = None) -> int:
        """Copy the opened file into a new file ``target`` (created, never followed or overwritten), in the kernel
        where it can (``sendfile``: no Python loop, and no GIL held while the bytes move)."""
        copied = 0
        out = os.open(target, _CREATE_FLAGS, 0o600)
        with os.fdopen(out, "wb") as sink:
            while True:
                sent = _sendfile(out, self.fd, copied)
                if sent is None:  # no sendfile between these files: copy through this process
                    break
                if not sent:
                    return copied
                copied += sent
                if max_bytes is not None and copied > max_bytes:
                    raise UnusablePath(
                        self.path, msg("grew past {most} bytes while it was being read", most=max_bytes)
                    )
            with self.reader() as source:
                source.seek(copied)
                while block := source.read(_COPY_BLOCK):
                    copied += len(block)
                    if max_bytes is not None and copied > max_bytes:
                        raise UnusablePath(
                            self.path, msg("grew past {most} bytes while it was being read", most=max_bytes)
                        )
                    sink.write(block)
        return copied

    def remove(self) -> bool:
        """Delete the name this file was opened by, relative to the folder that was checked, only while that
        name still leads to the opened file. Returns whether it was deleted."""
        if self.folder_fd is None:
            raise ValueError("open the file with keep_folder=True to remove it")
        try:
            now = os.stat(self.path.name, dir_fd=self.folder_fd)
        except FileNotFoundError:
            return False
        if not _same_file(now, self.stat):
            return False
        os.unlink(self.path.name, dir_fd=self.folder_fd)
        return True


def open_input_file(path: Path, allowed_dirs: Sequence[Path] | None = None, *, keep_folder: bool = False) -> OpenedFile:
    """Open the regular file ``path`` (absolute) for reading.

    Raises :class:`UnusablePath` when it is missing or not a regular file (the reason says what it is), and
    PermissionDenied when ``allowed_dirs`` is given and the file is not inside one of them. ``keep_folder``
    also keeps its folder open (checked like the file), for :meth:`OpenedFile.remove`.
    """
    if allowed_dirs is not None:  # refuse paths outside first: say nothing about files there
        require_inside(path, Path(os.path.realpath(path)), allowed_dirs)
    try:
        before = os.stat(path)
    except OSError as exc:
        raise UnusablePath(path, _access_failure(path, exc)) from None
    if not stat.S_ISREG(before.st_mode):
        raise UnusablePath(path, _not_regular(path, before.st_mode))
    folder_fd = None
    try:
        if keep_folder:
            folder_fd, _ = _open_folder(path.parent, allowed_dirs)
            fd = os.open(path.name, _READ_FLAGS, dir_fd=folder_fd)
        else:
            fd = os.open(path, _READ_FLAGS)
    except OSError as exc:
        if folder_fd is not None:
            os.close(folder_fd)
        raise UnusablePath(path, _access_failure(path, exc)) from None
    opened = OpenedFile(path, fd, os.fstat(fd), path, folder_fd)
    try:
        if not stat.S_ISREG(opened.stat.st_mode):  # swapped between the stat and the open
            raise UnusablePath(path, kind_of(opened.stat.st_mode))
        if allowed_dirs is not None:
            opened.real_path = _confirm_inside(path, opened.stat, allowed_dirs)
    except BaseException:
        opened.close()
        raise
    return opened


@dataclass
class OutputFolder:
    """The opened folder a file ``name`` is written into: create a temporary file, then rename it in place."""

    path: Path
    fd: int
    real_path: Path
    name: str

    def __enter__(self) -> OutputFolder:
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)

    def create_temporary(self) -> tuple[str, IO[bytes]]:
        """A new empty file beside the target (never a followed link or an existing file), open for writing."""
        name = f".{self.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        fd = os.open(name, _CREATE_FLAGS, 0o644, dir_fd=self.fd)
        return name, os.fdopen(fd, "w+b")

    def target_exists(self) -> bool:
        """Whether something (a file, a link, anything) already has the target's name in this folder."""
        try:
            os.stat(self.name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        return True

    @staticmethod
    def exists_error(field: str, shown: str) -> KBError:
        return KBError(
            f"{field} {shown!r} already exists; nothing was written. Pass overwrite=true to replace it, or choose "
            "another name.",
            code="FILE_EXISTS",
            details={"field": field},
        )

    def place(self, temporary: str, field: str, shown: str) -> None:
        """Give the temporary file the target name only if nothing has that name (a hard link, which fails on an
        existing name, then the temporary name removed): no file that appeared meanwhile is replaced."""
        try:
            os.link(temporary, self.name, src_dir_fd=self.fd, dst_dir_fd=self.fd, follow_symlinks=False)
        except FileExistsError:
            raise self.exists_error(field, shown) from None
        os.unlink(temporary, dir_fd=self.fd)
        with contextlib.suppress(OSError):
            os.fsync(self.fd)

    def replace(self, temporary: str) -> None:
        """Rename the temporary file to the target name inside this folder (a link there is replaced, not
        followed), then make the rename durable."""
        os.replace(temporary, self.name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        with contextlib.suppress(OSError):
            os.fsync(self.fd)

    def discard(self, temporary: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary, dir_fd=self.fd)


def open_output_folder(target: Path, field: str, allowed_dirs: Sequence[Path] | None = None) -> OutputFolder:
    """Open the folder of the file ``target`` (absolute) is to become. Raises InvalidArgument when the folder
    does not exist or ``target`` is a folder, PermissionDenied when it is outside ``allowed_dirs``."""
    name = target.name
    if name in ("", ".", ".."):
        raise InvalidArgument(f"{field} {str(target)!r} names no file; give a file path, e.g. backup.kbx.")
    try:
        fd, real = _open_folder(target.parent, allowed_dirs)
    except OSError as exc:
        reason = _access_failure(target.parent, exc)
        if exc.errno == errno.ENOTDIR:
            reason = "is not a folder"
        raise InvalidArgument(f"The folder of {field} {str(target.parent)!r} {reason}.") from None
    folder = OutputFolder(target.parent, fd, real, name)
    try:
        existing = os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return folder
    except OSError:
        existing = None
    if existing is not None and stat.S_ISDIR(existing.st_mode):
        os.close(fd)
        raise InvalidArgument(f"{field} {str(target)!r} is a folder; give a file path, e.g. backup.kbx.")
    return folder
