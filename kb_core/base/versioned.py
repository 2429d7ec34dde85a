"""Numbered JSON versions in one folder, ``<prefix>000000000042.json``: the highest readable one is the truth.

A new version is linked into place (never replaces one), so two writers can never both commit the same number;
old versions are pruned to the last few. The KB store's manifests and a bundle graph's states use this.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from kb_core.base.atomic import read_json, write_json_atomically
from kb_core.base.errors import StoreError

T = TypeVar("T")


class VersionedJSON:
    def __init__(self, folder: Path, prefix: str = "") -> None:
        self.folder = folder
        self.prefix = prefix
        self._name = re.compile(rf"^{re.escape(prefix)}(\d{{12}})\.json$")

    def path(self, version: int) -> Path:
        return self.folder / f"{self.prefix}{version:012d}.json"

    def versions(self) -> list[int]:
        """The versions present, oldest first (FileNotFoundError when the folder is gone)."""
        return sorted(int(m.group(1)) for n in os.listdir(self.folder) if (m := self._name.match(n)))

    def read(self, version: int) -> Any:
        return read_json(self.path(version))

    def newest(self, parse: Callable[[Any], T], describe: Callable[[int], str], versions: list[int]) -> T | None:
        """The newest of ``versions`` that still exists, parsed; None when none does. A version pruned between
        listing and opening is skipped; an unreadable one raises StoreError ("<describe(version)> is unreadable")."""
        for version in reversed(versions):
            try:
                return parse(self.read(version))
            except FileNotFoundError:
                continue
            except (ValueError, KeyError, TypeError) as exc:
                raise StoreError(f"{describe(version)} is unreadable: {exc}") from exc
        return None

    def write(self, version: int, value: Any) -> None:
        """Commit ``value`` as ``version``; FileExistsError if that version exists (the link is the commit)."""
        write_json_atomically(self.path(version), value, replace=False)

    def prune(self, versions: list[int], keep: int, grace_seconds: float = 0.0) -> None:
        """Delete all but the newest ``keep`` of ``versions``, each only once older than ``grace_seconds``."""
        now = time.time()
        for version in versions[:-keep] if keep else versions:
            path = self.path(version)
            try:
                if grace_seconds <= 0 or now - path.stat().st_mtime > grace_seconds:
                    path.unlink(missing_ok=True)
            except FileNotFoundError:
                continue
