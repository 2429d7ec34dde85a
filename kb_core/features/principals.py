"""Who a session acts for, and what that lets it see and change: the one access mechanism every front end obeys.

A :class:`kb_core.session.operations.Operations` holds one principal and asks it before it shows or changes a knowledge
base, creates one, imports, searches or evaluates:

- :class:`Principal` (the default): a local user (the CLI, MCP over stdio, a private app) who sees and changes
  everything;
- :class:`TokenScope`: an MCP bearer token limited to some knowledge bases, which sees only those (its capability,
  read or write, is checked by the MCP server: :mod:`kb_core.edges.mcp.access`);
- a public demo's visitor and operator (:mod:`kb_core.session.public_demo`).

A knowledge base a principal does not see answers exactly like one that does not exist; one it sees but may not
change answers PERMISSION_DENIED naming what was refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kb_core.base.errors import PermissionDenied
from kb_core.base.i18n import msg

if TYPE_CHECKING:
    from kb_core.store import KnowledgeBaseRecord


@dataclass(frozen=True)
class ImportAllowance:
    """What one import may take: the largest file (bytes; None: the parser's own limit) and how many chunks it may
    add (None: no limit), with the words that name that limit in a refusal."""

    max_file_bytes: int | None = None
    chunk_budget: int | None = None
    chunk_limit: str = "the chunk quota"


class Principal:
    """A local user: sees and changes every knowledge base, no quotas."""

    kind = "local"
    # Whether results and messages leave out the server's paths (the home, where an export was read from).
    hides_server = False
    # Whether files on the server may be named by path (inside the folders a front end allows).
    server_paths = True

    def sees(self, record: KnowledgeBaseRecord) -> bool:
        return True

    def visible(self, records: list[KnowledgeBaseRecord]) -> list[KnowledgeBaseRecord]:
        """Those of ``records`` this principal sees, in order."""
        return [r for r in records if self.sees(r)]

    def change_refusal(self, record: KnowledgeBaseRecord, action: str) -> str | None:
        """Why this principal may not ``action`` (``delete``, ``import documents into`` …) ``record``; None: it may."""
        return None

    def check_change(self, record: KnowledgeBaseRecord, action: str) -> None:
        reason = self.change_refusal(record, action)
        if reason is not None:
            raise PermissionDenied(reason, details={"kb_name": record.name, "action": action})

    def name_for(self, kb_name: str) -> str:
        """The name a new knowledge base called ``kb_name`` is registered under."""
        return kb_name

    def check_create(self, embedding_model: str | None, embedding_endpoint: str | None) -> None:
        """Refuse a new knowledge base this principal may not make (too many, or a model it may not use)."""

    def created(self, record: KnowledgeBaseRecord) -> None:
        """A knowledge base this principal made."""

    def deleted(self, record: KnowledgeBaseRecord) -> None:
        """A knowledge base this principal deleted."""

    def import_allowance(self, record: KnowledgeBaseRecord, files: int) -> ImportAllowance:
        """Refuse an import of ``files`` files into ``record`` (too many at once, too often, no room left), or say
        what it may take."""
        return ImportAllowance()

    def import_finished(self) -> None:
        """The import :meth:`import_allowance` let start has ended (it may hold the principal's one import slot)."""

    def check_search(self) -> None:
        """Refuse a search (too many per minute)."""

    def check_evaluation(self, folder: Path, queries: int | None, builds_corpus: bool) -> None:
        """Refuse an evaluation: judgments from ``folder``, a KB built from its corpus or not; ``queries``: how many
        judged queries it runs, or None before the folder is read."""

    def check_import_database(self) -> None:
        """Refuse merging an export file into the home."""

    def evaluation_runs_home(self) -> Path | None:
        """The folder whose ``evaluations/`` keeps this principal's evaluation runs (None: the home's)."""
        return None

    def scratch_root(self) -> Path | None:
        """Where a front end writes the files it hands this session (uploads, downloads); None: anywhere."""
        return None

    def publish(self, record: KnowledgeBaseRecord, published: bool) -> None:
        raise PermissionDenied(msg("Publishing a knowledge base is for the operator of a public demo (KB_DEMO=1)."))

    def status(self) -> dict[str, Any]:
        """What a front end tells this principal about itself (a demo's banner); empty for a local user."""
        return {"kind": self.kind}


class TokenScope(Principal):
    """An MCP bearer token limited to some knowledge bases (ids): the others answer like nonexistent ones."""

    kind = "token"
    hides_server = True  # a token limited to some KBs learns nothing of the server (where the home is)

    def __init__(self, kb_ids: frozenset[str]) -> None:
        self.kb_ids = kb_ids

    def sees(self, record: KnowledgeBaseRecord) -> bool:
        return record.id in self.kb_ids
