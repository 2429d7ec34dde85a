"""Paths that name no regular file: FIFOs, devices, sockets, dangling links and loops.

Import (service, CLI, MCP stdio), bundle import and database import say what the path is instead of
"does not exist", and never block on opening a FIFO. Real FIFOs, sockets, devices and symlinks.
"""

from __future__ import annotations

import functools
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp import ClientSession

from kb_core.edges.cli.main import main
from kb_core.edges.envelopes import Enveloped
from tests.parser_hooks import fifo_after_the_type_check

FIFO = "is a FIFO (named pipe), not a regular file"
CHAR_DEVICE = "is a character device, not a regular file"


@pytest.fixture
def kb(session):
    assert session.create_knowledge_base("docs", 64, embedding_model="hashing")["success"]
    session.select_knowledge_base("docs")
    return session


@pytest.fixture
def specials(tmp_path: Path) -> Iterator[dict[str, tuple[Path, str]]]:
    """name -> (path, the reason the error must give)."""
    folder = tmp_path / "specials"
    folder.mkdir()
    os.mkfifo(folder / "pipe.txt")
    (folder / "zero.txt").symlink_to("/dev/zero")
    (folder / "dangling.txt").symlink_to(folder / "gone.txt")
    (folder / "loop.txt").symlink_to(folder / "loop.txt")
    (folder / "folder.txt").mkdir()
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(folder / "sock.txt"))
    try:
        yield {
            "fifo": (folder / "pipe.txt", FIFO),
            "link to /dev/zero": (folder / "zero.txt", f"is a symbolic link to '/dev/zero', which {CHAR_DEVICE}"),
            "device": (Path("/dev/null"), CHAR_DEVICE),
            "socket": (folder / "sock.txt", "is a socket, not a regular file"),
            "dangling link": (
                folder / "dangling.txt",
                f"is a symbolic link to '{folder / 'gone.txt'}', which does not",
            ),
            "link loop": (folder / "loop.txt", "is a symbolic link that loops"),
            "folder": (folder / "folder.txt", "is a folder, not a file"),
            "missing": (folder / "missing.txt", "does not exist"),
        }
    finally:
        listener.close()


@pytest.mark.timeout(60)
def test_import_says_what_each_path_is_and_never_blocks(kb, specials: dict[str, tuple[Path, str]]) -> None:
    result = kb.import_document([str(path) for path, _ in specials.values()])
    assert result["data"]["failed_count"] == len(specials)
    errors = {f["file_path"]: f["error"] for f in result["data"]["failed_files"]}
    for name, (path, reason) in specials.items():
        assert reason in errors[str(path)], (name, errors[str(path)])
        if name not in ("dangling link", "missing"):
            assert "does not exist" not in errors[str(path)], name


@pytest.mark.timeout(60)
def test_a_fifo_swapped_in_after_the_check_does_not_block(kb, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The file passes the type check, then becomes a FIFO before it is opened: the open must not wait. (The parser
    process checks, opens and copies the file: the swap happens there, tests/parser_hooks.py.)"""
    import kb_core.engines.parsing

    path = tmp_path / "notes.txt"
    path.write_text("a regular file at first", encoding="utf-8")
    real = kb_core.engines.parsing.parse_and_chunk_files

    def swap_in_the_parser(*args: object, stages: object = None, **kwargs: object) -> object:
        assert stages is not None
        return real(*args, stages=[functools.partial(fifo_after_the_type_check, s) for s in stages], **kwargs)

    monkeypatch.setattr(kb_core.engines.parsing, "parse_and_chunk_files", swap_in_the_parser)
    result = kb.import_document([str(path)])
    assert result["data"]["failed_count"] == 1
    assert "FIFO" in result["data"]["failed_files"][0]["error"]


@pytest.mark.timeout(60)
def test_cli_import_shows_the_reason_of_every_failed_file(
    capsys: pytest.CaptureFixture[str], home: Path, specials: dict[str, tuple[Path, str]]
) -> None:
    assert main(["--home", str(home), "create", "docs", "--chunk-size", "64", "--embedding-model", "hashing"]) == 0
    assert main(["--home", str(home), "select", "docs"]) == 0
    capsys.readouterr()
    fifo, zero = specials["fifo"][0], specials["link to /dev/zero"][0]
    assert main(["--home", str(home), "import", str(fifo), str(zero)]) == 1
    err = capsys.readouterr().err
    assert FIFO in err and CHAR_DEVICE in err and "does not exist" not in err, err


@pytest.mark.timeout(60)
def test_bundle_and_database_imports_say_what_the_path_is(kb, specials: dict[str, tuple[Path, str]]) -> None:
    for name in ("fifo", "link to /dev/zero", "socket"):
        path, reason = specials[name]
        bundle = kb.import_knowledge_bundle(str(path))
        assert not bundle["success"] and reason in bundle["message"], (name, bundle["message"])
        database = kb.import_database(str(path))
        assert not database["success"] and reason in database["message"], (name, database["message"])
    exported = kb.export_database(str(specials["folder"][0]))
    assert not exported["success"] and "is a folder" in exported["message"]


@pytest.mark.timeout(120)
def test_mcp_stdio_import_of_a_fifo_is_a_clear_tool_error(tmp_path: Path) -> None:
    from tests.test_mcp_server import run_stdio, tool_error

    fifo = tmp_path / "pipe.docx"
    os.mkfifo(fifo)

    async def scenario(s: ClientSession) -> None:
        await s.call_tool("create_knowledge_base", {"kb_name": "k", "chunk_size": 64, "embedding_model": "hashing"})
        await s.call_tool("select_knowledge_base", {"kb_name": "k"})
        failed = await tool_error(s, "import_document", "IMPORT_FAILED", file_paths=[str(fifo)])
        assert FIFO in failed.structuredContent["data"]["failed_files"][0]["error"]
        refused = await tool_error(s, "import_knowledge_bundle", "FILE_NOT_FOUND", temp_file_path=str(fifo))
        assert FIFO in refused.content[0].text

    run_stdio(tmp_path / "home", scenario, tmp_path / "stderr.log")


def test_a_confined_session_never_reads_or_writes_inside_the_home(tmp_path: Path) -> None:
    """An allowed folder that holds the home (``--allow-dir /srv`` with the home in /srv/kb) still keeps the home's
    API keys, tokens and store out of reach: of an import, a bundle, an export file read or written."""
    from kb_core import KnowledgeBaseService

    home = tmp_path / "srv" / "kb"
    service = KnowledgeBaseService(home)
    assert Enveloped(service.session()).create_knowledge_base("k", 64, "hashing")["success"]
    secret = home / "secrets" / "planted.key"
    secret.write_text("sk-never-read-me", encoding="utf-8")
    confined = Enveloped(service.session(allowed_dirs=[tmp_path / "srv"]))
    assert confined.select_knowledge_base("k")["success"]
    imported = confined.import_document([str(secret), str(home / "tokens.json")])
    assert imported["data"]["success_count"] == 0
    assert all("inside the knowledge-base home" in f["error"] for f in imported["data"]["failed_files"]), imported
    for envelope in (
        confined.import_knowledge_bundle(str(secret), delete_file=True),
        confined.import_database(str(secret)),
        confined.export_database(str(home / "stolen.kbx")),
    ):
        assert not envelope["success"] and "knowledge-base home" in envelope["message"], envelope
    assert secret.read_text(encoding="utf-8") == "sk-never-read-me" and not (home / "stolen.kbx").exists()
    (tmp_path / "srv" / "notes.txt").write_text("notes beside the home", encoding="utf-8")
    assert confined.import_document([str(tmp_path / "srv" / "notes.txt")])["data"]["success_count"] == 1
