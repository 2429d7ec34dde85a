from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED = REPO_ROOT.parent / "shared"


def shared_path(*parts: str) -> Path:
    """A path under ../shared, or a skip with the reason when it is absent."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} is absent: the shared fixtures/datasets live in ../shared beside the repository")
    return path


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def service(home: Path):
    from kb_core import KnowledgeBaseService

    return KnowledgeBaseService(home)


@pytest.fixture
def session(service):
    return service.session()
