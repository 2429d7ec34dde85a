"""Where the home is, and defaults that several modules share."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_HOME = PROJECT_ROOT / "data" / "home"
HOME_ENVIRONMENT_VARIABLE = "KB_HOME"
# Defaults the CLI's help shows; here, not in the MCP server and the token store, so `kb --help` imports neither.
DEFAULT_HTTP_PORT = 8765
DEFAULT_RATE_PER_HOUR = 1000
# The search vocabulary every layer names (ranking, CLI choices, MCP schemas, the app): defined once, here, so the
# CLI's parsers offer it without importing the ranking code and numpy.
SEARCH_MODES = ("hybrid", "semantic", "keyword")
FUSION_METHODS = ("weighted", "rrf")
WEIGHTINGS = ("fixed", "auto")  # fixed: exactly the requested weights | auto: scaled by each signal's quality
DEFAULT_VECTOR_WEIGHT = 0.7
DEFAULT_KEYWORD_WEIGHT = 0.3
RRF_K = 60  # reciprocal rank fusion's constant: a signal's rank r counts (RRF_K + 1) / (RRF_K + r)


def resolve_home(home: str | os.PathLike[str] | None = None) -> Path:
    """``home`` if given, else ``$KB_HOME``, else ``data/home`` inside the project."""
    if home:
        return Path(home).expanduser()
    from_env = os.environ.get(HOME_ENVIRONMENT_VARIABLE)
    if from_env:
        return Path(from_env).expanduser()
    return DEFAULT_HOME


# Embedding endpoints the server may send text to besides those on loopback (URL prefixes, separated by spaces or
# commas); in a public demo (KB_DEMO=1) the only ones.
ALLOW_ENDPOINTS_ENVIRONMENT_VARIABLE = "KB_ALLOW_ENDPOINTS"


def allowed_endpoints(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The URL prefixes of ``$KB_ALLOW_ENDPOINTS``, each checked (InvalidArgument names a bad one)."""
    from kb_core.base.validation import parse_endpoint_allow_list

    raw = (os.environ if environ is None else environ).get(ALLOW_ENDPOINTS_ENVIRONMENT_VARIABLE, "")
    return parse_endpoint_allow_list(raw.replace(",", " ").split(), ALLOW_ENDPOINTS_ENVIRONMENT_VARIABLE)


STORE_ENVIRONMENT_VARIABLE = "KB_STORE"
READ_STORE_ENVIRONMENT_VARIABLE = "KB_STORE_READ_URL"
FOLDER_STORE = "folder"  # the folder store named explicitly: overrides $KB_STORE
_STORE_SCHEMES = ("postgresql://", "postgres://")


def resolve_store(store: str | None = None, read_url: str | None = None) -> tuple[str | None, str | None]:
    """The PostgreSQL URLs of the store (primary, standby): ``store`` if given, else ``$KB_STORE``; the standby
    ``read_url`` if given, else ``$KB_STORE_READ_URL``. ``(None, None)`` means the folder store, the default: its
    folder is the home (:func:`resolve_home`); ``store="folder"`` chooses it whatever ``$KB_STORE`` says."""
    from kb_core.base.errors import InvalidArgument

    chosen = store if store else os.environ.get(STORE_ENVIRONMENT_VARIABLE, "")
    chosen = chosen.strip() if isinstance(chosen, str) else chosen
    if not chosen or chosen == FOLDER_STORE:
        return None, None
    if not isinstance(chosen, str) or not chosen.lower().startswith(_STORE_SCHEMES):
        raise InvalidArgument(
            f"store must be a PostgreSQL URL (postgresql://USER@HOST:PORT/DATABASE) or {FOLDER_STORE!r}, not one "
            f"starting with "
            f"{str(chosen).split(':', 1)[0][:20]!r}; the folder store is the default "
            f"(its folder: --home or ${HOME_ENVIRONMENT_VARIABLE}).",
            details={"field": "store"},
        )
    standby = read_url if read_url else os.environ.get(READ_STORE_ENVIRONMENT_VARIABLE, "").strip()
    return chosen, standby or None
