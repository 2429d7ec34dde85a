"""Where the home is, and defaults that several modules share."""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_HOME = PROJECT_ROOT / "data" / "home"
HOME_ENVIRONMENT_VARIABLE = "KB_HOME"


def resolve_home(home: str | os.PathLike[str] | None = None) -> Path:
    """``home`` if given, else ``$KB_HOME``, else ``data/home`` inside the project."""
    if home:
        return Path(home).expanduser()
    from_env = os.environ.get(HOME_ENVIRONMENT_VARIABLE)
    if from_env:
        return Path(from_env).expanduser()
    return DEFAULT_HOME
