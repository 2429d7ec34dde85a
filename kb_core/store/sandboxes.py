"""The ledger of a public demo (``KB_DEMO=1``, :mod:`kb_core.session.public_demo`): which visitor owns which knowledge
base and until when, and which knowledge bases are published (shared, read-only to visitors).

One JSON file, ``HOME/demo/ledger.json``, replaced atomically under a file lock, so several app processes on one home
agree. It changes only when a visitor creates a KB, the operator publishes or unpublishes one, or KBs expire; reads
(every page run) are answered from memory while the file is unchanged. A KB the ledger does not name is the
operator's: visitors never see it unless it is published.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kb_core.base.atomic import write_json_atomically
from kb_core.base.locking import writer_lock

logger = logging.getLogger(__name__)

LEDGER_FOLDER = "demo"
LEDGER_FILE = "ledger.json"


@dataclass(frozen=True)
class Claim:
    """A visitor's knowledge base: whose it is, and when it was made and expires (seconds since the epoch)."""

    visitor: str
    created_at: float
    expires_at: float


@dataclass(frozen=True)
class LedgerState:
    owners: dict[str, Claim] = field(default_factory=dict)  # KB id -> its visitor's claim
    published: frozenset[str] = frozenset()  # KB ids every visitor may read

    def owned_by(self, visitor: str) -> list[str]:
        return [kb_id for kb_id, claim in self.owners.items() if claim.visitor == visitor]


class SandboxLedger:
    """The ledger of one home (``HOME/demo``). Thread-safe; shared safely by processes on the same home."""

    def __init__(self, home_root: Path) -> None:
        self.folder = Path(home_root) / LEDGER_FOLDER
        self.folder.mkdir(parents=True, exist_ok=True)
        self.path = self.folder / LEDGER_FILE
        self._lock = threading.Lock()
        self._seen: tuple[int, int] | None = None
        self._state = LedgerState()

    def read(self) -> LedgerState:
        """The ledger as last committed (re-read only when the file changed)."""
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            return LedgerState()
        key = (stat.st_mtime_ns, stat.st_size)
        with self._lock:
            if key != self._seen:
                self._state = self._load()
                self._seen = key
            return self._state

    def _load(self) -> LedgerState:
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
            owners = {
                str(kb_id): Claim(str(c["visitor"]), float(c["created_at"]), float(c["expires_at"]))
                for kb_id, c in dict(raw.get("owners") or {}).items()
            }
            return LedgerState(owners, frozenset(str(k) for k in raw.get("published") or ()))
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
            # A damaged ledger must not open every visitor's KB to every other: nothing is owned or published
            # until the operator repairs or removes it.
            logger.error("The demo ledger %s cannot be read (%s); no visitor or published KB is shown", self.path, exc)
            return LedgerState(owners={}, published=frozenset())

    def _update(self, change: Any) -> LedgerState:
        with writer_lock(self.folder / "ledger.lock"):
            self._seen = None
            state = self.read()
            owners, published = dict(state.owners), set(state.published)
            change(owners, published)
            document = {
                "owners": {
                    kb_id: {"visitor": c.visitor, "created_at": c.created_at, "expires_at": c.expires_at}
                    for kb_id, c in owners.items()
                },
                "published": sorted(published),
            }
            write_json_atomically(self.path, document)
            with self._lock:
                self._seen = None
        return self.read()

    def claim(self, kb_id: str, visitor: str, created_at: float, expires_at: float) -> None:
        self._update(lambda owners, published: owners.__setitem__(kb_id, Claim(visitor, created_at, expires_at)))

    def publish(self, kb_id: str, published_flag: bool = True) -> None:
        """Share ``kb_id`` with every visitor (read-only), or (``published_flag=False``) stop sharing it. A published
        visitor KB is the operator's from then on: it no longer expires."""

        def change(owners: dict[str, Claim], published: set[str]) -> None:
            if published_flag:
                published.add(kb_id)
                owners.pop(kb_id, None)
            else:
                published.discard(kb_id)

        self._update(change)

    def forget(self, kb_ids: Iterable[str]) -> None:
        """Drop KBs that no longer exist (deleted or expired)."""
        doomed = set(kb_ids)
        if not doomed:
            return

        def change(owners: dict[str, Claim], published: set[str]) -> None:
            for kb_id in doomed:
                owners.pop(kb_id, None)
                published.discard(kb_id)

        self._update(change)
