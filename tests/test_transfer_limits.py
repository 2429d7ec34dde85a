"""An export file's member checks are linear in its size, and its member limit comes before any work that grows
with it (#37, row 6): 50,001 empty members with one repeated name once took ~41 s of CPU to refuse (``names.count``
per name), 500,000 over an hour."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from kb_core import KnowledgeBaseService
from kb_core.edges.envelopes import Enveloped
from kb_core.features.transfer import archive
from kb_core.features.transfer.format import TransferLimits
from tests.bounded import run_bounded


def _members(path: Path, count: int, repeat: bool) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as out:
        for number in range(count):
            out.writestr(f"kb/0000/seg/0000/files/d{number}.txt", b"")
        if repeat:
            out.writestr("kb/0000/seg/0000/files/d0.txt", b"")
    return path


@pytest.mark.filterwarnings("ignore:Duplicate name")
def test_a_repeated_member_name_among_50001_is_refused_in_bounded_time(tmp_path: Path) -> None:
    bad = _members(tmp_path / "repeat.kbx", 50_000, repeat=True)
    out = run_bounded(
        f"""
        from pathlib import Path
        from kb_core import KnowledgeBaseService
        from kb_core.edges.envelopes import Enveloped
        session = Enveloped(KnowledgeBaseService(Path({str(tmp_path / "home")!r})).session())
        envelope = session.import_database({str(bad)!r})
        print(envelope["error"]["code"], envelope["message"])
        """,
        memory_mb=2048,
        timeout_s=30,  # the quadratic check took ~41 s of CPU here; linear, ~1 s
    )
    assert "INVALID_IMPORT_FILE" in out and "occur more than once" in out and "d0.txt" in out, out


def test_the_member_limit_comes_before_the_directory_is_parsed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = _members(tmp_path / "many.kbx", 101, repeat=False)

    def parsed(*args: object, **kwargs: object) -> None:
        raise AssertionError("the member directory was parsed before the member limit was applied")

    session = Enveloped(KnowledgeBaseService(tmp_path / "home").session())
    monkeypatch.setattr(archive.zipfile, "ZipFile", parsed)
    envelope = session.import_database(str(bad), limits=TransferLimits(max_members=100))
    assert envelope["error"]["code"] == "INVALID_IMPORT_FILE", envelope
    assert "101 members; at most 100" in envelope["message"]
