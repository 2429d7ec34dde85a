"""The home directory and its registry of knowledge bases.

Layout of a home (everything addressed by KB id, never by name)::

    HOME/
      home.json                 format version
      registry.json             the knowledge bases (atomic replace; the commit point of create/delete)
      knowledge_bases.parquet   the same rows for analysts (pandas/duckdb), rewritten with the registry
      registry.lock             writers of the registry serialise here
      secrets/KB_ID.key         embedding API keys, mode 0600 in a 0700 folder
      sessions/cli.json         the CLI's current KB
      kbs/KB_ID/                one knowledge base (see kb_store.py)
      cache/embeddings.sqlite   embedding cache shared by all KBs and processes
      trash/                    KB folders being deleted
      .transfer-PID-HEX/        an import-db's staging folder; .transfer-PID-HEX.lock beside it is locked while
                                its import runs, so a later open removes it only once its owner is gone
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from filelock import FileLock

from kb_core.base.atomic import (
    owner_pid,
    pid_is_alive,
    read_json,
    remove_abandoned_folders,
    remove_stale_temporaries,
    write_atomically,
    write_bytes_atomically,
    write_json_atomically,
)
from kb_core.base.errors import KBNotFound, StoreError
from kb_core.base.locking import lock_if_free, try_writer_lock, writer_lock
from kb_core.base.redaction import shown_endpoint
from kb_core.base.removal import remove_tree, report_link, symlink_in_path
from kb_core.base.safe_files import path_name_problem, shown_path

logger = logging.getLogger(__name__)

HOME_FORMAT_VERSION = 1
TRANSFER_STAGING_PREFIX = ".transfer-"


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:16]}"


@dataclass(frozen=True)
class KnowledgeBaseRecord:
    id: str
    name: str
    chunk_size: int
    embedding_model: str
    embedding_endpoint: str | None
    has_api_key: bool
    created_at: str
    search_settings: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> KnowledgeBaseRecord:
        return cls(
            id=value["id"],
            name=value["name"],
            chunk_size=int(value["chunk_size"]),
            embedding_model=value["embedding_model"],
            embedding_endpoint=value.get("embedding_endpoint"),
            has_api_key=bool(value.get("has_api_key", False)),
            created_at=value["created_at"],
            search_settings=dict(value.get("search_settings") or {}),
        )


# The columns of knowledge_bases.parquet (all strings but chunk_size, an int64).
KNOWLEDGE_BASES_COLUMNS = ("id", "name", "chunk_size", "embedding_model", "embedding_endpoint", "created_at")


@dataclass
class TransferStaging:
    """A private folder in the home where an import-db extracts and builds; :meth:`close` removes it."""

    path: Path
    lock: FileLock  # held until close: tells other processes that this folder is in use

    def close(self) -> None:
        remove_tree(self.path, within=self.path.parent)
        remove_tree(self.path.with_name(f"{self.path.name}.lock"), within=self.path.parent)
        self.lock.release()


class Home:
    """A KB home folder. Cheap to construct; safe to share between processes."""

    def __init__(self, root: Path) -> None:
        self.root = root.expanduser().resolve()
        problem = path_name_problem(str(self.root))  # $KB_HOME / --home come from outside: checked once, here
        if problem is not None:
            raise StoreError(f"Cannot use {shown_path(str(self.root))} as a KB home: it {problem}.")
        try:
            for sub in ("kbs", "cache", "sessions", "trash"):
                (self.root / sub).mkdir(parents=True, exist_ok=True)
            secrets = self.root / "secrets"
            secrets.mkdir(exist_ok=True)
            os.chmod(secrets, 0o700)
        except OSError as exc:
            raise StoreError(f"Cannot use {self.root} as a KB home: {exc.strerror or exc}") from exc
        if not (self.root / "home.json").exists():
            with self.registry_lock():
                if not (self.root / "home.json").exists():
                    self._write_registry([])
                    write_json_atomically(self.root / "home.json", {"format_version": HOME_FORMAT_VERSION})
        self.clean_up()

    # -- paths ---------------------------------------------------------------------------------
    @property
    def registry_path(self) -> Path:
        return self.root / "registry.json"

    def kb_dir(self, kb_id: str) -> Path:
        return self.root / "kbs" / kb_id

    @property
    def embedding_cache_path(self) -> Path:
        return self.root / "cache" / "embeddings.sqlite"

    @contextmanager
    def registry_lock(self) -> Iterator[None]:
        with writer_lock(self.root / "registry.lock"):
            yield

    # -- registry ------------------------------------------------------------------------------
    def knowledge_bases(self) -> list[KnowledgeBaseRecord]:
        try:
            document = read_json(self.registry_path)
        except FileNotFoundError:
            return []
        except ValueError as exc:
            raise StoreError(f"The registry {self.registry_path} is unreadable: {exc}") from exc
        return [KnowledgeBaseRecord.from_json(item) for item in document.get("knowledge_bases", [])]

    def get(self, kb_id: str) -> KnowledgeBaseRecord:
        for record in self.knowledge_bases():
            if record.id == kb_id:
                return record
        raise KBNotFound(f"Knowledge base id '{kb_id}' does not exist.", details={"kb_id": kb_id})

    def _write_registry(self, records: list[KnowledgeBaseRecord]) -> None:
        write_json_atomically(
            self.registry_path,
            {"format_version": HOME_FORMAT_VERSION, "knowledge_bases": [r.to_json() for r in records]},
        )
        # Imported here: reading the registry (kb list, every page) needs neither pandas nor pyarrow.
        import pandas as pd
        import pyarrow as pa
        import pyarrow.parquet as pq

        schema = pa.schema(
            [(name, pa.int64() if name == "chunk_size" else pa.string()) for name in KNOWLEDGE_BASES_COLUMNS]
        )
        table = pa.Table.from_pandas(
            pd.DataFrame(
                [
                    {k: shown_endpoint(r.embedding_endpoint) if k == "embedding_endpoint" else getattr(r, k)
                     for k in KNOWLEDGE_BASES_COLUMNS}
                    for r in records
                ],
                columns=schema.names,
            ),
            schema=schema,
            preserve_index=False,
        )
        write_atomically(self.root / "knowledge_bases.parquet", lambda tmp: pq.write_table(table, tmp))

    def add(self, record: KnowledgeBaseRecord) -> None:
        """Append a record. The caller holds the registry lock and has created the KB folder."""
        records = self.knowledge_bases()
        records.append(record)
        self._write_registry(records)

    def update(self, record: KnowledgeBaseRecord) -> None:
        with self.registry_lock():
            records = [record if r.id == record.id else r for r in self.knowledge_bases()]
            self._write_registry(records)

    def update_search_settings(self, kb_id: str, settings: dict[str, Any]) -> KnowledgeBaseRecord:
        with self.registry_lock():
            records = self.knowledge_bases()
            for index, record in enumerate(records):
                if record.id == kb_id:
                    records[index] = replace(record, search_settings=dict(settings))
                    self._write_registry(records)
                    return records[index]
        raise KBNotFound(f"Knowledge base id '{kb_id}' does not exist.", details={"kb_id": kb_id})

    def remove(self, kb_id: str) -> None:
        """Drop a KB: the registry write is the commit point; the folder goes to trash, then away."""
        records = self.knowledge_bases()
        self._write_registry([r for r in records if r.id != kb_id])
        self._discard_folder(self.kb_dir(kb_id))
        remove_tree(self.secret_path(kb_id), within=self.root)

    def _discard_folder(self, folder: Path) -> None:
        if not folder.exists():
            return
        trash = self.root / "trash"
        if symlink_in_path(trash, within=self.root) is not None:
            # Nothing goes through a linked trash (it could not be removed there): the folder goes in place. A
            # process killed meanwhile leaves a folder no registry entry owns, which the next clean-up removes.
            report_link(trash)
            remove_tree(folder, within=self.root)
            return
        target = trash / f"{folder.name}-{uuid.uuid4().hex[:8]}"
        os.replace(folder, target)
        remove_tree(target, within=self.root)

    # -- secrets -------------------------------------------------------------------------------
    def secret_path(self, kb_id: str) -> Path:
        return self.root / "secrets" / f"{kb_id}.key"

    def store_api_key(self, kb_id: str, api_key: str) -> None:
        write_bytes_atomically(self.secret_path(kb_id), api_key.encode("utf-8"), mode=0o600)

    def api_key(self, kb_id: str) -> str | None:
        try:
            return self.secret_path(kb_id).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None

    # -- sessions ------------------------------------------------------------------------------
    def read_session(self, name: str) -> dict[str, Any]:
        try:
            return dict(read_json(self.root / "sessions" / f"{name}.json"))
        except (FileNotFoundError, ValueError):
            return {}

    def write_session(self, name: str, value: dict[str, Any]) -> None:
        write_json_atomically(self.root / "sessions" / f"{name}.json", value)

    # -- import-db staging -----------------------------------------------------------------------
    def open_transfer_staging(self) -> TransferStaging:
        """A new staging folder for an import-db; its lock file is created and locked before the folder exists."""
        name = f"{TRANSFER_STAGING_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:8]}"
        lock = try_writer_lock(self.root / f"{name}.lock")
        if lock is None:
            raise StoreError(f"Cannot lock a new staging folder {name} in {self.root}.")
        staging = TransferStaging(self.root / name, lock)
        try:
            staging.path.mkdir()
        except BaseException:
            staging.close()
            raise
        return staging

    def abandoned_transfer_staging(self, *, remove: bool = False) -> list[Path]:
        """Staging folders of import-db runs that died (SIGKILL, power loss); removed with ``remove``.

        The owner holds ``NAME.lock`` for as long as it runs (the kernel releases it when the process dies), so
        a live import's folder is never taken, even when a dead owner's pid has been reused. Folders from before
        staging had a lock are judged by their pid.
        """
        found: list[Path] = []
        for entry in sorted(self.root.glob(f"{TRANSFER_STAGING_PREFIX}*")):
            folder = entry.with_name(entry.name.removesuffix(".lock"))
            lock_path = folder.with_name(f"{folder.name}.lock")
            if entry == lock_path and folder.exists():
                continue  # seen with its folder
            if not lock_path.exists():
                pid = owner_pid(folder.name[len(TRANSFER_STAGING_PREFIX) :])
                if not entry.is_dir() or (pid is not None and pid_is_alive(pid)):
                    continue
                found.append(folder)
                if remove:
                    remove_tree(folder, within=self.root)
                continue
            with lock_if_free(lock_path) as abandoned:
                if not abandoned:
                    continue
                if folder.is_dir():
                    found.append(folder)
                if remove:
                    remove_tree(folder, within=self.root)
                    remove_tree(lock_path, within=self.root)
        if remove and found:
            logger.info("Removed %d staging folder(s) of import-db runs that did not finish", len(found))
        return found

    # -- recovery ------------------------------------------------------------------------------
    def clean_up(self) -> None:
        """Remove what crashed writers left behind. Skipped when another writer is active."""
        self.abandoned_transfer_staging(remove=True)  # guarded by each staging folder's own lock
        lock = try_writer_lock(self.root / "registry.lock")
        if lock is None:
            return
        try:
            remove_stale_temporaries(self.root, within=self.root)
            remove_stale_temporaries(self.root / "secrets", within=self.root)
            remove_stale_temporaries(self.root / "sessions", within=self.root)
            trash = self.root / "trash"
            if symlink_in_path(trash, within=self.root) is not None:
                report_link(trash)
            else:
                for leftover in trash.iterdir():
                    remove_tree(leftover, within=self.root)
            # An import's staging copies on a PostgreSQL home (its KBs have no folder of their own): a dead
            # process's, or a removal (``removing-…``, no owner) its process did not finish.
            remove_abandoned_folders(self.root / "staging", within=self.root)
            known = {r.id for r in self.knowledge_bases()}
            kbs = self.root / "kbs"
            linked = symlink_in_path(kbs, within=self.root) is not None
            if linked:  # its target may hold folders that are not ours
                report_link(kbs)
            for folder in () if linked else kbs.iterdir():
                if folder.name not in known:
                    logger.info("Removing %s: a knowledge base folder that no registry entry owns", folder)
                    self._discard_folder(folder)
            for secret in (self.root / "secrets").glob("*.key"):
                if secret.stem not in known:
                    remove_tree(secret, within=self.root)
        finally:
            lock.release()
