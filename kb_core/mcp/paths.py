"""Path confinement over HTTP: paths that tools receive must resolve inside the ``--allow-dir`` folders.

This early check gives one clear refusal for the whole call; the session checks again on the files it opens
(see :mod:`kb_core.safe_files`), which is what a folder swapped for a symlink after this check meets.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kb_core.errors import PermissionDenied
from kb_core.safe_files import reject_nul


def confine_paths(file_paths: Any, allowed_dirs: Sequence[Path]) -> Any:
    """Over HTTP: every path must resolve (symlinks followed) inside an allowed folder. Returns resolved paths."""
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
            raise PermissionDenied(f"{raw!r} is not an absolute path; over HTTP give absolute paths under: {allowed}.")
        resolved = Path(os.path.realpath(path))  # unlike Path.resolve, never raises on a symlink loop
        if not any(resolved.is_relative_to(d) for d in allowed_dirs):
            raise PermissionDenied(
                f"{raw!r} resolves to {resolved}, outside the folders this server may read ({allowed}); refused.",
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
    return confine_paths([raw], allowed_dirs)[0]


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
            confine_paths(value, allowed_dirs) if field == "file_paths" else confine_path(value, allowed_dirs, field)
        )
    return confined
