"""A public demo (``KB_DEMO=1``, ``scripts/run.sh --demo``): visitors in sandboxes, read-only shared knowledge bases,
quotas, and an operator.

- A **visitor** (one browser, known by a random token the app keeps in a cookie) sees the shared knowledge bases (the
  demo KB and any the operator publishes) read-only, and its own: the KBs it creates, which no other visitor sees
  (their names carry the visitor's tag, so two visitors never collide on a name) and which expire (default 24 h after
  creation). Quotas bound what one visitor costs the host: file size, files per import, chunks in all its KBs, KBs,
  imports and searches per minute, judged queries per evaluation. No visitor names a file on the server, an embedding
  endpoint the operator did not list, or a local model folder.
- The **operator** (the secret in ``KB_DEMO_OPERATOR_TOKEN``) sees and changes every KB, publishes or unpublishes one,
  and sees each visitor's usage. No server paths either: the whole demo has none.

Everything here is enforced in the session (:class:`kb_core.features.principals.Principal`); the app only hides what
would be refused. The ownership of KBs lives in the home's ledger (:mod:`kb_core.store.sandboxes`); usage counts and
rate windows live in this process.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import math
import os
import re
import secrets
import shutil
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kb_core.base.errors import InvalidArgument, KBError, KBNotFound, PermissionDenied, QuotaExceeded, RateLimited
from kb_core.base.i18n import msg
from kb_core.base.rate_limits import SlidingWindowLimiter
from kb_core.base.validation import KB_NAME_MAX_LENGTH, endpoint_refusal
from kb_core.features.principals import ImportAllowance, Principal
from kb_core.store.sandboxes import SandboxLedger

if TYPE_CHECKING:
    from kb_core.session.operations import Operations
    from kb_core.session.service import KnowledgeBaseService
    from kb_core.store import KnowledgeBaseRecord

logger = logging.getLogger(__name__)

DEMO_ENVIRONMENT_VARIABLE = "KB_DEMO"
OPERATOR_ENVIRONMENT_VARIABLE = "KB_DEMO_OPERATOR_TOKEN"
MEGABYTE = 1024 * 1024  # the MB of Streamlit's upload limit (server.maxUploadSize), which run.sh --demo sets to ours
EXCHANGE_LEFTOVER_SECONDS = 6 * 3600


def demo_setting(environ: Mapping[str, str] | None = None) -> str:
    """What ``KB_DEMO`` asks for: ``public`` (1: a public demo), ``off`` (0: no demo KB, as tests use it) or
    ``private`` (unset: a private workbench that opens on the demo KB)."""
    value = (os.environ if environ is None else environ).get(DEMO_ENVIRONMENT_VARIABLE, "").strip().lower()
    if value == "":
        return "private"
    if value in ("0", "false", "no", "off"):
        return "off"
    if value in ("1", "true", "yes", "on"):
        return "public"
    raise InvalidArgument(
        f"{DEMO_ENVIRONMENT_VARIABLE}={value!r} is not understood: 1 runs a public demo, 0 builds no demo knowledge "
        "base, unset opens a private workbench on the demo knowledge base."
    )


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$", re.IGNORECASE)
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str, name: str) -> float:
    """Seconds from ``90``, ``90s``, ``30m``, ``24h`` or ``7d``."""
    match = _DURATION.match(text)
    if match is None or float(match.group(1)) <= 0:
        raise InvalidArgument(f"{name}={text!r} is not a duration; give e.g. 24h, 30m, 90s or 7d.")
    return float(match.group(1)) * _UNIT_SECONDS[match.group(2).lower()]


def format_duration(seconds: float) -> str:
    """``24 h``, ``30 min``, ``90 s`` (whole units where they fit)."""
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


@dataclass(frozen=True)
class DemoLimits:
    """A public demo's quotas, per visitor (and how many imports run at once for all of them). The defaults suit a
    2-core, 4 GB host (README: Deployment, with the measurements): one import at a time, since one import of a few
    hundred chunks of 512 tokens took the app from 0.6 to 1.3 GB and both cores for minutes; a visitor's whole
    allowance of chunks is about 400 pages of text."""

    expiry_seconds: float = 24 * 3600  # a visitor's KB is deleted this long after it was created
    max_file_mb: float = 1.0  # per uploaded file
    files_per_import: int = 5
    chunks_per_visitor: int = 500  # in all the visitor's KBs
    kbs_per_visitor: int = 3
    imports_at_once: int = 1  # for all visitors together
    imports_per_minute: int = 2
    searches_per_minute: int = 60  # an evaluation counts as one
    evaluation_queries: int = 100  # judged queries one evaluation may run

    @property
    def max_file_bytes(self) -> int:
        return int(self.max_file_mb * MEGABYTE)

    @property
    def upload_limit_mb(self) -> int:
        """Streamlit's ``server.maxUploadSize`` for this limit (whole MB): the browser refuses a larger file."""
        return max(1, math.ceil(self.max_file_mb))

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> DemoLimits:
        """The defaults, each replaced by its environment variable where set (:data:`LIMIT_VARIABLES`)."""
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for item in fields(cls):
            variable = LIMIT_VARIABLES[item.name]
            raw = environ.get(variable, "").strip()
            if not raw:
                continue
            if item.name == "expiry_seconds":
                values[item.name] = parse_duration(raw, variable)
                continue
            try:
                value = float(raw) if item.name == "max_file_mb" else int(raw)
            except ValueError:
                value = -1
            if value <= 0:
                kind = "number" if item.name == "max_file_mb" else "whole number"
                raise InvalidArgument(f"{variable}={raw!r} must be a positive {kind}.")
            values[item.name] = value
        return cls(**values)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# The environment variable of each limit (README: Deployment).
LIMIT_VARIABLES = {
    "expiry_seconds": "KB_DEMO_EXPIRY",
    "max_file_mb": "KB_DEMO_MAX_FILE_MB",
    "files_per_import": "KB_DEMO_FILES_PER_IMPORT",
    "chunks_per_visitor": "KB_DEMO_CHUNKS_PER_VISITOR",
    "kbs_per_visitor": "KB_DEMO_KBS_PER_VISITOR",
    "imports_at_once": "KB_DEMO_IMPORTS_AT_ONCE",
    "imports_per_minute": "KB_DEMO_IMPORTS_PER_MINUTE",
    "searches_per_minute": "KB_DEMO_SEARCHES_PER_MINUTE",
    "evaluation_queries": "KB_DEMO_EVALUATION_QUERIES",
}


@dataclass
class VisitorUsage:
    """What one visitor did since this process started (the operator's usage table)."""

    first_seen: float
    last_seen: float
    imports: int = 0
    searches: int = 0
    refused: int = 0


class PublicDemo:
    """The demo of one home in this process: its ledger, limits, rate windows, usage, and the operator's secret."""

    def __init__(
        self,
        service: KnowledgeBaseService,
        limits: DemoLimits | None = None,
        operator_secret: str | None = None,
        *,
        allowed_endpoints: tuple[str, ...] = (),
        models: tuple[str, ...] | None = None,
        exchange_root: Path | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``models``: the local models visitors may choose (default: the built-in ones)."""
        from kb_core.engines.embedding.builtin import BUILTIN_MODELS

        self.service = service
        self.models = tuple(models) if models is not None else tuple(BUILTIN_MODELS)
        self.limits = limits or DemoLimits()
        self._operator_secret = (operator_secret or "").strip() or None
        self.allowed_endpoints = allowed_endpoints
        self.clock = clock
        self.ledger = SandboxLedger(service.home.root)
        # Where the app writes what it hands a session (uploads, exports to download): the only files a demo session
        # opens by path. Outside the home (a session never reads inside it by path).
        self.exchange_root = Path(os.path.realpath(exchange_root or tempfile.mkdtemp(prefix="kb-demo-files-")))
        self.exchange_root.mkdir(parents=True, exist_ok=True)
        if exchange_root is None:  # a folder of our own: gone with this demo, or when the process exits
            weakref.finalize(self, shutil.rmtree, str(self.exchange_root), ignore_errors=True)
        self._searches = SlidingWindowLimiter(60.0)
        self._imports = SlidingWindowLimiter(60.0)
        self._sign_ins = SlidingWindowLimiter(60.0)
        self._usage: dict[str, VisitorUsage] = {}
        self._usage_lock = threading.Lock()
        self._importing: set[str] = set()
        self._importing_lock = threading.Lock()
        self._sweeper: threading.Thread | None = None
        self._stop = threading.Event()

    @classmethod
    def from_environment(cls, service: KnowledgeBaseService, environ: Mapping[str, str] | None = None) -> PublicDemo:
        from kb_core.base.config import allowed_endpoints

        environ = os.environ if environ is None else environ
        return cls(
            service,
            DemoLimits.from_environment(environ),
            environ.get(OPERATOR_ENVIRONMENT_VARIABLE),
            allowed_endpoints=allowed_endpoints(environ),
        )

    # -- who is asking -------------------------------------------------------------------------------------------
    @staticmethod
    def new_visitor_token() -> str:
        """A visitor's secret (the app's cookie): whoever holds it acts as that visitor."""
        return secrets.token_urlsafe(24)

    @staticmethod
    def visitor_id(token: str) -> str:
        """The visitor a token stands for, as the ledger and the operator see it (never the token itself)."""
        return "v" + hashlib.sha256(token.encode("utf-8")).hexdigest()[:12]

    @property
    def operator_enabled(self) -> bool:
        return self._operator_secret is not None

    def visitor_session(self, token: str) -> Operations:
        return self._session(Visitor(self, self.visitor_id(token)))

    def operator_session(self, secret: str) -> Operations:
        """The operator's session, for the right secret; PermissionDenied otherwise (at most 10 tries a minute, for
        everyone together)."""
        if self._operator_secret is None:
            raise PermissionDenied(
                f"This demo has no operator: start it with {OPERATOR_ENVIRONMENT_VARIABLE}=<a long secret> to have one."
            )
        wait = self._sign_ins.acquire("operator", 10)
        if wait is not None:
            raise RateLimited(msg("Too many operator sign-in attempts; try again in {wait} s.", wait=wait))
        if not hmac.compare_digest(secret.strip().encode("utf-8"), self._operator_secret.encode("utf-8")):
            logger.warning("A wrong operator secret was given")
            raise PermissionDenied(msg("That is not the operator's token."))
        return self._session(Operator(self))

    def readable_folders(self) -> list[Path]:
        """The only folders a demo session opens files in by path: its exchange folder (what the app wrote for it)
        and the demo's judgments (data shipped with the app, for the Evaluate page)."""
        from kb_core.session.demo import demo_judgments_folder

        judgments = demo_judgments_folder()
        return [self.exchange_root] + ([Path(os.path.realpath(judgments))] if judgments is not None else [])

    def _session(self, principal: Principal) -> Operations:
        return self.service.session(principal=principal, allowed_dirs=self.readable_folders())

    # -- usage ---------------------------------------------------------------------------------------------------
    def _note(self, visitor: str, what: str) -> None:
        now = self.clock()
        with self._usage_lock:
            usage = self._usage.setdefault(visitor, VisitorUsage(now, now))
            usage.last_seen = now
            if what:
                setattr(usage, what, getattr(usage, what) + 1)

    def seen(self, visitor: str) -> None:
        self._note(visitor, "")

    def owned(self, visitor: str) -> list[KnowledgeBaseRecord]:
        mine = set(self.ledger.read().owned_by(visitor))
        return [r for r in self.service.store.knowledge_bases() if r.id in mine]

    def chunks_of(self, records: list[KnowledgeBaseRecord]) -> int:
        total = 0
        for record in records:
            try:
                total += self.service.kb_counts(record)[1]
            except KBNotFound:
                continue
        return total

    def usage(self) -> list[dict[str, Any]]:
        """One row per visitor with a KB or seen by this process: KBs, chunks, imports, searches, refusals, when
        last seen and when their first KB expires."""
        ledger = self.ledger.read()
        records = {r.id: r for r in self.service.store.knowledge_bases()}
        with self._usage_lock:
            usage = {k: VisitorUsage(**asdict(v)) for k, v in self._usage.items()}
        visitors = set(usage) | {c.visitor for c in ledger.owners.values()}
        rows = []
        for visitor in sorted(visitors):
            mine = [records[k] for k in ledger.owned_by(visitor) if k in records]
            seen = usage.get(visitor)
            expiries = [ledger.owners[r.id].expires_at for r in mine]
            rows.append(
                {
                    "visitor": visitor,
                    "knowledge_bases": [r.name for r in mine],
                    "chunks": self.chunks_of(mine),
                    "imports": seen.imports if seen else 0,
                    "searches": seen.searches if seen else 0,
                    "refused": seen.refused if seen else 0,
                    "last_seen": seen.last_seen if seen else None,
                    "next_expiry": min(expiries) if expiries else None,
                }
            )
        return rows

    def refuse(self, visitor: str, error: KBError) -> KBError:
        self._note(visitor, "refused")
        return error

    def rate(self, visitor: str, kind: str) -> None:
        """Count one search or import of ``visitor``, or refuse it (RATE_LIMITED) past the minute's limit."""
        limit = self.limits.searches_per_minute if kind == "searches" else self.limits.imports_per_minute
        limiter = self._searches if kind == "searches" else self._imports
        wait = limiter.acquire(visitor, limit)
        if wait is not None:
            raise self.refuse(
                visitor,
                RateLimited(
                    msg(
                        "This demo allows {limit} searches (an evaluation counts as one) per minute per visitor; "
                        "try again in {wait} s.",
                        limit=limit, wait=wait,
                    )
                    if kind == "searches"
                    else msg(
                        "This demo allows {limit} imports per minute per visitor; try again in {wait} s.",
                        limit=limit, wait=wait,
                    ),
                    details={"limit_per_minute": limit, "retry_after_sec": wait},
                ),
            )
        self._note(visitor, kind)

    def start_import(self, visitor: str) -> None:
        """Take ``visitor``'s one import slot (one import at a time per visitor) and count the import, or refuse."""
        with self._importing_lock:
            if visitor in self._importing:
                raise self.refuse(
                    visitor, QuotaExceeded(msg("An import of yours is still running; this demo runs one at a time."))
                )
            if len(self._importing) >= self.limits.imports_at_once:
                raise self.refuse(
                    visitor,
                    QuotaExceeded(
                        msg(
                            "This demo imports for {limit} visitor(s) at a time and is busy with another visitor's "
                            "files; try again in a minute.",
                            limit=self.limits.imports_at_once,
                        ),
                        details={"limit": self.limits.imports_at_once},
                    ),
                )
            self.rate(visitor, "imports")
            self._importing.add(visitor)

    def end_import(self, visitor: str) -> None:
        with self._importing_lock:
            self._importing.discard(visitor)

    def endpoint_refusal(self, endpoint: str | None) -> str | None:
        """Why a demo KB may not use ``endpoint``: only the endpoints the operator lists (KB_ALLOW_ENDPOINTS), none on
        loopback by default; None when it may, or none is given."""
        if not endpoint:
            return None
        reason = endpoint_refusal(endpoint, self.allowed_endpoints, loopback=False)
        if reason is None:
            return None
        return msg(
            "Custom embedding endpoints are off in this demo (only the built-in models and the endpoints the operator "
            "lists); nothing was sent to that address."
        )

    # -- expiry --------------------------------------------------------------------------------------------------
    def sweep(self) -> list[str]:
        """Delete the visitor KBs past their expiry, and forget the ledger's KBs that no longer exist; the names of
        the KBs deleted. Also removes the evaluation runs of visitors who have no KB left and were not seen within
        the expiry."""
        now = self.clock()
        ledger = self.ledger.read()
        records = {r.id: r for r in self.service.store.knowledge_bases()}
        gone = [kb_id for kb_id in list(ledger.owners) + list(ledger.published) if kb_id not in records]
        deleted: list[str] = []
        for kb_id, claim in ledger.owners.items():
            record = records.get(kb_id)
            if record is None or claim.expires_at > now:
                continue
            try:
                self.service.delete_kb(record)
            except KBNotFound:
                pass
            except KBError as exc:  # tried again at the next sweep
                logger.warning("Expired demo knowledge base %s could not be deleted: %s", record.name, exc)
                continue
            logger.info("Deleted the expired demo knowledge base %s of visitor %s", record.name, claim.visitor)
            deleted.append(record.name)
            gone.append(kb_id)
        self.ledger.forget(gone)
        self._remove_idle_visitor_folders(now)
        self._remove_stale_exchange(now)
        return deleted

    def _remove_stale_exchange(self, now: float) -> None:
        """Files the app left in the exchange folder (a process stopped during an upload's import): each import
        removes its own, so anything older than a few hours is left over."""
        for entry in self.exchange_root.iterdir():
            try:
                stale = now - entry.stat().st_mtime > EXCHANGE_LEFTOVER_SECONDS
            except OSError:
                continue
            if stale:
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)

    def _remove_idle_visitor_folders(self, now: float) -> None:
        owners = {c.visitor for c in self.ledger.read().owners.values()}
        with self._usage_lock:
            recent = {k for k, v in self._usage.items() if v.last_seen > now - self.limits.expiry_seconds}
            for visitor in set(self._usage) - recent - owners:  # gone, with nothing left: not kept forever
                del self._usage[visitor]
        folder = self.ledger.folder / "visitors"
        if not folder.is_dir():
            return
        for entry in folder.iterdir():
            if entry.name in owners or entry.name in recent:
                continue
            try:
                idle = now - entry.stat().st_mtime > self.limits.expiry_seconds
            except OSError:
                continue
            if idle:
                shutil.rmtree(entry, ignore_errors=True)

    def start_sweeper(self) -> None:
        """Sweep on a daemon thread, every expiry / 20 (1 s to 60 s); once per process."""
        if self._sweeper is not None:
            return
        interval = min(60.0, max(1.0, self.limits.expiry_seconds / 20))

        def loop() -> None:
            while not self._stop.wait(interval):
                try:
                    self.sweep()
                except Exception:  # the next sweep tries again
                    logger.exception("The demo's expiry sweep failed")

        self._sweeper = threading.Thread(target=loop, name="kb-demo-expiry", daemon=True)
        self._sweeper.start()

    def stop_sweeper(self) -> None:
        self._stop.set()


def tag_of(visitor: str) -> str:
    """The short tag a visitor's KB names carry (the first six characters of its id after the ``v``)."""
    return visitor[1:7]


class _DemoPrincipal(Principal):
    """What visitors and the operator share: no server paths, no endpoint the operator did not list, server paths
    hidden from results."""

    hides_server = True
    server_paths = False

    def __init__(self, demo: PublicDemo) -> None:
        self.demo = demo

    def _check_endpoint(self, embedding_endpoint: str | None) -> None:
        reason = self.demo.endpoint_refusal(embedding_endpoint)
        if reason is not None:
            raise PermissionDenied(reason, details={"field": "embedding_endpoint"})

    def scratch_root(self) -> Path | None:
        return self.demo.exchange_root

    def _check_folder(self, folder: Path) -> None:
        real = Path(os.path.realpath(folder))
        if not any(real == a or real.is_relative_to(a) for a in self.demo.readable_folders()):
            raise PermissionDenied(
                msg("This demo evaluates the demo judgments or uploaded judgments only; folders on the server are off.")
            )


class Visitor(_DemoPrincipal):
    kind = "visitor"

    def __init__(self, demo: PublicDemo, visitor: str) -> None:
        super().__init__(demo)
        self.id = visitor
        demo.seen(visitor)

    @property
    def tag(self) -> str:
        return tag_of(self.id)

    def _owns(self, record: KnowledgeBaseRecord) -> bool:
        claim = self.demo.ledger.read().owners.get(record.id)
        return claim is not None and claim.visitor == self.id

    def sees(self, record: KnowledgeBaseRecord) -> bool:
        return bool(self.visible([record]))

    def visible(self, records: list[KnowledgeBaseRecord]) -> list[KnowledgeBaseRecord]:
        ledger = self.demo.ledger.read()  # once for the whole list
        mine = set(ledger.owned_by(self.id))
        return [r for r in records if r.id in ledger.published or r.id in mine]

    def change_refusal(self, record: KnowledgeBaseRecord, action: str) -> str | None:
        if self._owns(record):
            return None
        return msg(
            "'{name}' is shared in this demo and read-only: you may search, inspect, evaluate and export it, "
            "not {action} it. Create a knowledge base of your own to do that.",
            name=record.name, action=action,
        )

    def name_for(self, kb_name: str) -> str:
        suffix = f" [{self.tag}]"
        name = kb_name.strip()
        if name.endswith(suffix):
            return name
        if len(name) + len(suffix) > KB_NAME_MAX_LENGTH:
            raise InvalidArgument(
                msg(
                    "In this demo a knowledge-base name may have at most {most} characters "
                    "(your tag{suffix} is added to it); '{name}' has {length}.",
                    most=KB_NAME_MAX_LENGTH - len(suffix), suffix=suffix, name=name, length=len(name),
                ),
                details={"field": "kb_name"},
            )
        return name + suffix

    def check_create(self, embedding_model: str | None, embedding_endpoint: str | None) -> None:
        self._check_endpoint(embedding_endpoint)
        model = (embedding_model or "").strip()
        if not embedding_endpoint and model and model not in self.demo.models:
            raise self.demo.refuse(
                self.id,
                InvalidArgument(
                    msg(
                        "This demo offers these models only: {models}; {model!r} is not one.",
                        models=", ".join(self.demo.models), model=model,
                    ),
                    details={"field": "embedding_model"},
                ),
            )
        limit = self.demo.limits.kbs_per_visitor
        if len(self.demo.owned(self.id)) >= limit:
            raise self.demo.refuse(
                self.id,
                QuotaExceeded(
                    msg(
                        "This demo keeps at most {limit} knowledge bases per visitor; delete one of yours first.",
                        limit=limit,
                    ),
                    details={"limit": limit},
                ),
            )

    def created(self, record: KnowledgeBaseRecord) -> None:
        now = self.demo.clock()
        self.demo.ledger.claim(record.id, self.id, now, now + self.demo.limits.expiry_seconds)

    def deleted(self, record: KnowledgeBaseRecord) -> None:
        self.demo.ledger.forget([record.id])

    def import_allowance(self, record: KnowledgeBaseRecord, files: int) -> ImportAllowance:
        limits = self.demo.limits
        if files > limits.files_per_import:
            raise self.demo.refuse(
                self.id,
                QuotaExceeded(
                    msg(
                        "This demo imports at most {limit} files at a time; {files} were given.",
                        limit=limits.files_per_import, files=files,
                    ),
                    details={"limit": limits.files_per_import},
                ),
            )
        used = self.demo.chunks_of(self.demo.owned(self.id))
        if used >= limits.chunks_per_visitor:
            raise self.demo.refuse(
                self.id,
                QuotaExceeded(
                    msg(
                        "Your knowledge bases hold {used:,} chunks, this demo's limit per visitor ({limit:,}); delete "
                        "documents or a knowledge base to import more.",
                        used=used, limit=limits.chunks_per_visitor,
                    ),
                    details={"limit": limits.chunks_per_visitor, "used": used},
                ),
            )
        self.demo.start_import(self.id)
        return ImportAllowance(
            limits.max_file_bytes,
            limits.chunks_per_visitor - used,
            msg("this demo's limit of {limit:,} chunks per visitor", limit=limits.chunks_per_visitor),
        )

    def import_finished(self) -> None:
        self.demo.end_import(self.id)

    def check_search(self) -> None:
        self.demo.rate(self.id, "searches")

    def check_evaluation(self, folder: Path, queries: int | None, builds_corpus: bool) -> None:
        if builds_corpus:
            raise self.demo.refuse(
                self.id, PermissionDenied(msg("Building a knowledge base from a corpus is off in this demo."))
            )
        self._check_folder(folder)
        if queries is None:  # the folder is not read yet
            return
        limit = self.demo.limits.evaluation_queries
        if queries > limit:
            raise self.demo.refuse(
                self.id,
                QuotaExceeded(
                    msg(
                        "This demo evaluates at most {limit} judged queries at a time; these judgments hold {queries}. "
                        "Set Max queries, or upload fewer.",
                        limit=limit, queries=queries,
                    ),
                    details={"limit": limit},
                ),
            )
        self.demo.rate(self.id, "searches")

    def check_import_database(self) -> None:
        raise self.demo.refuse(
            self.id,
            PermissionDenied(
                msg(
                    "Merging an export file is off for visitors of this demo; create a knowledge base and import "
                    "documents instead."
                )
            ),
        )

    def evaluation_runs_home(self) -> Path | None:
        return self.demo.ledger.folder / "visitors" / self.id

    def status(self) -> dict[str, Any]:
        ledger = self.demo.ledger.read()
        mine = self.demo.owned(self.id)
        return {
            "kind": self.kind,
            "tag": self.tag,
            "limits": self.demo.limits.to_json(),
            "knowledge_bases": [
                {"name": r.name, "expires_at": ledger.owners[r.id].expires_at} for r in mine if r.id in ledger.owners
            ],
            "chunks_used": self.demo.chunks_of(mine),
        }


class Operator(_DemoPrincipal):
    kind = "operator"

    def check_create(self, embedding_model: str | None, embedding_endpoint: str | None) -> None:
        self._check_endpoint(embedding_endpoint)

    def deleted(self, record: KnowledgeBaseRecord) -> None:
        self.demo.ledger.forget([record.id])

    def check_evaluation(self, folder: Path, queries: int | None, builds_corpus: bool) -> None:
        if builds_corpus:
            raise PermissionDenied(msg("Building a knowledge base from a corpus is off in this demo."))
        self._check_folder(folder)

    def publish(self, record: KnowledgeBaseRecord, published: bool) -> None:
        self.demo.ledger.publish(record.id, published)

    def status(self) -> dict[str, Any]:
        ledger = self.demo.ledger.read()
        return {
            "kind": self.kind,
            "limits": self.demo.limits.to_json(),
            "published": sorted(ledger.published),
            "visitor_kbs": {kb_id: claim.visitor for kb_id, claim in ledger.owners.items()},
            "usage": self.demo.usage(),
        }
