"""The ``kb`` command at its edges (#37): bytes that are not UTF-8 in a query, exit statuses a script can act on,
and a reader that goes away (rows 10, 12, 13)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kb_core.edges.cli.main import main

REPO_ROOT = Path(__file__).resolve().parents[1]


def _kb(home: Path, *args: str | bytes, close_stdout: bool = False) -> subprocess.CompletedProcess[bytes]:
    command: list[str | bytes] = [sys.executable, "-m", "kb_core.edges.cli", "--home", str(home), *args]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO_ROOT)}
    if not close_stdout:
        return subprocess.run(command, capture_output=True, timeout=120, cwd=REPO_ROOT, env=env)
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO_ROOT, env=env)
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # the reader is gone before the first line (as `| head -0`, or head after its lines)
    stderr = process.stderr.read()
    process.wait(120)
    return subprocess.CompletedProcess(command, process.returncode, b"", stderr)


@pytest.fixture
def kb_home(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    home = tmp_path / "home"
    assert main(["--home", str(home), "create", "notes", "--chunk-size", "64", "--embedding-model", "hashing"]) == 0
    assert main(["--home", str(home), "select", "notes"]) == 0
    for number in range(3):
        (tmp_path / f"n{number}.txt").write_text(f"apples and pears, note {number}", encoding="utf-8")
    assert main(["--home", str(home), "import", *(str(tmp_path / f"n{n}.txt") for n in range(3))]) == 0
    capsys.readouterr()
    return home


def test_a_query_in_latin1_bytes_is_an_invalid_argument(kb_home: Path) -> None:
    done = _kb(kb_home, "search", b"caf\xe9")  # a Latin-1 terminal's "café"
    stderr = done.stderr.decode("utf-8", "replace")
    assert done.returncode == 1
    assert "not valid UTF-8" in stderr and "0xE9" in stderr
    assert "Traceback" not in stderr
    done = _kb(kb_home, "--json", "search", b"caf\xe9")
    assert json.loads(done.stdout)["error"]["code"] == "INVALID_ARGUMENT"


def test_an_import_where_some_files_failed_exits_3(
    tmp_path: Path, kb_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = tmp_path / "good.txt"
    good.write_text("plums", encoding="utf-8")
    (tmp_path / "binary.txt").write_bytes(bytes(range(256)) * 64)
    paths = [str(good), str(tmp_path / "missing.txt"), str(tmp_path / "binary.txt")]
    code = main(["--home", str(kb_home), "import", *paths])
    out = capsys.readouterr()
    assert code == 3, out
    assert "Imported 1 of 3" in out.out
    # all failed: 1; all imported: 0
    assert main(["--home", str(kb_home), "import", str(tmp_path / "missing.txt")]) == 1
    (tmp_path / "fresh.txt").write_text("cherries", encoding="utf-8")
    assert main(["--home", str(kb_home), "import", str(tmp_path / "fresh.txt")]) == 0


@pytest.mark.parametrize("command", [("docs",), ("search", "apples"), ("list",), ("--json", "docs")])
def test_a_closed_pipe_ends_quietly(kb_home: Path, command: tuple[str, ...]) -> None:
    done = _kb(kb_home, *command, close_stdout=True)
    stderr = done.stderr.decode("utf-8", "replace")
    assert "Traceback" not in stderr and "BrokenPipe" not in stderr, stderr
    assert done.returncode == 141
