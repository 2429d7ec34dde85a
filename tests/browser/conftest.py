"""Fixtures for browser tests: the app served as scripts/run.sh serves it (scripts/serve.sh) on a free loopback port,
and Debian's Chromium driven by Playwright (never a downloaded browser). A failing test leaves a screenshot under
test-artifacts/."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"
CHROMIUM = os.environ.get("KB_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class RunningApp:
    """The app over ``home``, served the one way it is served (``scripts/serve.sh``: what ``scripts/run.sh`` runs after
    installing; ``root``: this checkout, or another one a benchmark compares). A checkout older than serve.sh is
    served as its run.sh served it (Streamlit's file watcher on: what its users got). With ``public`` (environment
    variables such as ``KB_DEMO_OPERATOR_TOKEN``) the app is a public demo started as the README starts one:
    ``scripts/run.sh --demo``."""

    def __init__(
        self,
        home: Path,
        *,
        demo: bool = False,
        log: Path | None = None,
        root: Path = REPO,
        allow_dirs: tuple[Path, ...] = (),
        public: dict[str, str] | None = None,
        environment: dict[str, str] | None = None,
    ) -> None:
        self.home = home
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.environment = {
            **os.environ,
            "KB_HOME": str(home),
            "PYTHONPATH": str(root),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "PORT": str(self.port),
            "ADDRESS": "127.0.0.1",
            "PYTHON": sys.executable,
            **(environment or {}),
        }
        if allow_dirs:  # files on the server, as `KB_ALLOW_DIRS=… bash scripts/run.sh` allows them
            self.environment["KB_ALLOW_DIRS"] = os.pathsep.join(str(d) for d in allow_dirs)
        if demo:  # unset: the private workbench, which builds the demo KB (KB_DEMO=1 is a public demo)
            self.environment.pop("KB_DEMO", None)
        else:
            self.environment["KB_DEMO"] = "0"
        serve = root / "scripts" / "serve.sh"
        if public is not None:
            self.environment.pop("KB_DEMO", None)  # run.sh --demo sets it
            self.environment.update(public)
            command = ["bash", str(root / "scripts" / "run.sh"), "--demo"]
        elif serve.exists():
            command = ["bash", str(serve)]
        else:
            command = [
                sys.executable, "-m", "streamlit", "run", str(root / "app.py"), "--server.port", str(self.port),
                "--server.address", "127.0.0.1", "--server.headless", "true", "--browser.gatherUsageStats", "false",
                "--client.toolbarMode", "viewer",
            ]
        self.log_path = log or home.parent / f"streamlit-{self.port}.log"
        self.log = open(self.log_path, "w", encoding="utf-8")  # noqa: SIM115 - closed in stop()
        # serve.sh (and run.sh) exec the server: this process is the server, and a signal sent to it reaches the server
        self.process = subprocess.Popen(command, cwd=root, env=self.environment, stdout=self.log,
                                        stderr=subprocess.STDOUT)

    def wait(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"streamlit exited: {self.log_path.read_text(encoding='utf-8')[-2000:]}")
            try:
                if httpx.get(f"{self.url}/_stcore/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise TimeoutError(f"the app did not answer on {self.url} within {timeout:.0f} s")

    def stop(self) -> float | None:
        """SIGTERM, as a service manager stops it; the seconds it took to exit (None: killed after 20 s)."""
        started = time.monotonic()
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
            took: float | None = time.monotonic() - started
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            took = None
        self.log.close()
        return took


# Module scope, not session: Playwright's sync API keeps an asyncio loop running in the main thread while
# it is open, and later tests that start their own loop (the MCP client tests) would fail.
@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is missing: run scripts/install.sh --browser (Debian's chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[RunningApp]:
    """The app over a fresh home; its server-side files (Import's paths, Evaluate's folder) inside tmp_path/server."""
    (tmp_path / "server").mkdir()
    app = RunningApp(tmp_path / "home", allow_dirs=(tmp_path / "server",))
    try:
        app.wait()
        yield app
    finally:
        app.stop()


@pytest.fixture(scope="module")
def demo_served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningApp]:
    """One app per test module over a fresh home with the demo KB: the first page visit builds it with the real
    model (tests that use it are marked ``model``)."""
    app = RunningApp(tmp_path_factory.mktemp("demo") / "home", demo=True)
    try:
        app.wait()
        yield app
    finally:
        app.stop()


@pytest.fixture
def pages(request: pytest.FixtureRequest, browser: object) -> Iterator[list]:
    """New pages (each in its own browser context, i.e. its own session); screenshots on failure."""
    contexts: list = []
    opened: list = []

    def factory():
        context = browser.new_context(viewport={"width": 1400, "height": 1000}, locale="en-US")  # type: ignore[attr-defined]
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(30_000)
        opened.append(page)
        return page

    yield factory  # type: ignore[misc]
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        ARTIFACTS.mkdir(exist_ok=True)
        for index, page in enumerate(opened):
            target = ARTIFACTS / f"{request.node.name}-{index}.png"
            try:
                page.screenshot(path=str(target), full_page=True)
            except Exception as error:  # the page may be gone; the test's own error matters more
                print(f"screenshot failed: {error}")
    for context in contexts:
        context.close()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):  # type: ignore[no-untyped-def]
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


def copy_log_on_failure(app: RunningApp, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    shutil.copy(app.log_path, ARTIFACTS / f"{name}-streamlit.log")
