"""A home whose scratch folders are symbolic links: nothing outside the home is ever deleted (#37, row 1).

Moving ``trash`` or ``staging`` to a bigger disk with a link is a normal thing to do; the start-up clean-up once
deleted every sub-folder of such a link's target. Every deletion now goes through
:func:`kb_core.base.removal.remove_tree`, which never follows a link below the folder it cleans.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kb_core.edges.cli.main import main
from kb_core.features.ingest.files import wait_for_staging_removals


def _plant(folder: Path) -> list[Path]:
    """Files a clean-up could take: a folder no process owns, one named like a dead process's staging folder
    (pid 2**22 + 1 is above any Linux pid), and a plain file."""
    planted = []
    for sub in ("precious", f"{2**22 + 1}-seg_x", "removing-0123"):
        (folder / sub).mkdir(parents=True)
        (folder / sub / "keep.txt").write_text("keep", encoding="utf-8")
        planted.append(folder / sub / "keep.txt")
    (folder / "notes.txt").write_text("keep", encoding="utf-8")
    planted.append(folder / "notes.txt")
    return planted


def _cli(capsys: pytest.CaptureFixture[str], home: Path, *args: str) -> tuple[int, dict]:
    code = main(["--home", str(home), "--json", *args])
    out = capsys.readouterr().out
    return code, json.loads(out) if out.strip() else {}


def test_linked_trash_and_staging_keep_every_file_outside_the_home(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    home = tmp_path / "home"
    outside = tmp_path / "bigger-disk"
    assert _cli(capsys, home, "create", "notes", "--chunk-size", "64", "--embedding-model", "hashing")[0] == 0
    assert _cli(capsys, home, "select", "notes")[0] == 0
    (kb_id,) = os.listdir(home / "kbs")
    planted: list[Path] = []
    # every folder the home's clean-up and a KB's clean-up visit, as a link to a folder holding files
    for link in (home / "trash", home / "staging", home / "kbs" / kb_id / "staging"):
        target = outside / link.name / link.parent.name
        planted += _plant(target)
        if link.exists():
            link.rmdir()
        link.symlink_to(target, target_is_directory=True)
    document = tmp_path / "doc.txt"
    document.write_text("apples and pears in the orchard", encoding="utf-8")

    assert _cli(capsys, home, "list")[0] == 0
    assert _cli(capsys, home, "docs")[0] == 0
    code, imported = _cli(capsys, home, "import", str(document))
    wait_for_staging_removals()
    assert _cli(capsys, home, "verify")[0] == 0
    assert _cli(capsys, home, "create", "gone", "--chunk-size", "64", "--embedding-model", "hashing")[0] == 0
    assert _cli(capsys, home, "delete", "gone")[0] == 0  # a KB deleted while the trash is a link

    missing = [str(p.relative_to(outside)) for p in planted if not p.exists()]
    assert missing == [], f"files outside the home were deleted: {missing}"
    # an import that would stage through a link is refused with a reason naming it, never half-done
    assert code != 0 and imported["error"]["code"] == "SCRATCH_IS_LINK"
    assert "symbolic link" in imported["message"] and "staging" in imported["message"]
    assert any("deletes nothing through a link" in r.getMessage() for r in caplog.records)


def test_a_linked_kbs_folder_is_not_swept(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``HOME/kbs`` as a link: the clean-up removes KB folders no registry entry owns, but never through a link
    (its target may hold folders that are not knowledge bases)."""
    home = tmp_path / "home"
    assert _cli(capsys, home, "list")[0] == 0
    target = tmp_path / "elsewhere"
    planted = _plant(target)
    (home / "kbs").rmdir()
    (home / "kbs").symlink_to(target, target_is_directory=True)
    assert _cli(capsys, home, "list")[0] == 0
    assert all(p.exists() for p in planted)


def test_remove_tree_refuses_links_and_paths_outside(tmp_path: Path) -> None:
    from kb_core.base.removal import remove_tree

    inside = tmp_path / "home"
    outside = tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    (outside / "deep" / "f").write_text("x", encoding="utf-8")
    (inside / "real" / "sub").mkdir(parents=True)
    (inside / "real" / "sub" / "f").write_text("x", encoding="utf-8")
    (inside / "link").symlink_to(outside, target_is_directory=True)
    (inside / "real" / "inner-link").symlink_to(outside, target_is_directory=True)

    assert not remove_tree(inside / "link" / "deep", within=inside)  # through a link
    assert not remove_tree(outside / "deep", within=inside)  # outside
    assert not remove_tree(inside / ".." / "outside" / "deep", within=inside)
    assert (outside / "deep" / "f").exists()
    assert remove_tree(inside / "real", within=inside)  # a link inside the tree is removed as a link
    assert not (inside / "real").exists() and (outside / "deep" / "f").exists()
    assert remove_tree(inside / "link", within=inside)  # a link itself: only the link goes
    assert not (inside / "link").is_symlink() and (outside / "deep" / "f").exists()
    assert remove_tree(inside / "never-there", within=inside)
