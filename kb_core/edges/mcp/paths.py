"""Path confinement over HTTP: paths that tools receive must resolve inside the ``--allow-dir`` folders.

This early check gives one clear refusal for the whole call (an export, an import-db, a bundle); the session checks
again on the files it opens (see :mod:`kb_core.base.safe_files`), which is what a folder swapped for a symlink after
this check meets. ``import_document``'s files are judged one by one: the session fails each bad path alone, with its
reason in ``failed_files``, and imports the rest.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kb_core.base.errors import InvalidArgument, PermissionDenied
from kb_core.base.safe_files import reject_nul
from kb_core.edges.envelopes import Envelope, failure


def relative_path_refusal(raw: Any, field: str) -> Envelope | None:
    """The INVALID_ARGUMENT envelope for a relative ``raw`` path given to an MCP tool (over any transport), else None.

    A relative path would resolve against the server's working directory, which the client neither knows nor
    chose (``export_database("backup.kbx")`` would write wherever the server was started)."""
    if isinstance(raw, str) and raw.strip() and "\x00" not in raw and not Path(raw).expanduser().is_absolute():
        return failure(
            InvalidArgument(
                f"{field} {raw!r} is a relative path; MCP tools take absolute paths only (a relative path would "
                "resolve against the server's working directory), e.g. /home/me/backups/kb.kbx.",
                details={"field": field},
            )
        )
    return None


def confine_paths(
    file_paths: Any, allowed_dirs: Sequence[Path], verb: str = "read", *, each_alone: bool = False
) -> Any:
    """Over HTTP: every path must resolve (symlinks followed) inside an allowed folder. Returns resolved paths.
    ``verb`` says in the refusal what the server would have done there (read, or write for an export). With
    ``each_alone`` (import_document) a relative path or one outside is passed on as given, for the session to fail
    alone (it checks every file it opens), and the others are imported."""
    if isinstance(file_paths, str) or not isinstance(file_paths, list):
        return file_paths  # the service reports the wrong type
    reject_nul(file_paths, "file_paths")
    if not allowed_dirs:
        raise PermissionDenied(
            "Importing files by path over HTTP is disabled on this server; start it with --allow-dir DIR."
        )
    allowed = ", ".join(str(d) for d in allowed_dirs)
    resolved_paths = []
    for raw in file_paths:
        if not isinstance(raw, str) or not raw.strip():
            return file_paths
        path = Path(raw).expanduser()
        if not path.is_absolute():
            if each_alone:
                resolved_paths.append(raw)
                continue
            raise InvalidArgument(
                f"{raw!r} is a relative path; MCP tools take absolute paths only, here under: {allowed}.",
                details={"file_path": raw},
            )
        resolved = Path(os.path.realpath(path))  # unlike Path.resolve, never raises on a symlink loop
        if not any(resolved.is_relative_to(d) for d in allowed_dirs):
            if each_alone:
                resolved_paths.append(raw)
                continue
            raise PermissionDenied(
                f"{raw!r} resolves to {resolved}, outside the folders this server may {verb} ({allowed}); refused.",
                details={"file_path": raw},
            )
        resolved_paths.append(str(resolved))
    return resolved_paths


def confine_path(raw: Any, allowed_dirs: Sequence[Path], field: str) -> Any:
    """Like :func:`confine_paths` for one path (export target, import source, bundle file)."""
    if not isinstance(raw, str) or not raw.strip():
        return raw  # the service reports it
    reject_nul(raw, field)
    if not allowed_dirs:
        raise PermissionDenied(f"{field} over HTTP is disabled on this server; start it with --allow-dir DIR.")
    return confine_paths([raw], allowed_dirs, "write" if field == "export_path" else "read")[0]


def confine_arguments(
    arguments: Mapping[str, Any], fields: Sequence[str], allowed_dirs: Sequence[Path]
) -> dict[str, Any]:
    """``arguments`` with each of ``fields`` that is present replaced by its confined, resolved value.

    Raises PermissionDenied (outside, relative, or no --allow-dir) or InvalidArgument (a NUL byte)."""
    confined = dict(arguments)
    for field in fields:
        if field not in confined:
            continue
        value = confined[field]
        confined[field] = (
            confine_paths(value, allowed_dirs, each_alone=True)
            if field == "file_paths"
            else confine_path(value, allowed_dirs, field)
        )
    return confined
