"""Who may call which MCP tool: the one table of access rules, and the check the server runs before a tool.

stdio is local and trusted: none of these rules apply there. Over HTTP the caller's bearer token decides:
a read token cannot call a tool that writes; a token scoped to some knowledge bases cannot call a tool that
adds new ones; path arguments must resolve inside the ``--allow-dir`` folders (see :mod:`kb_core.edges.mcp.paths`).
"""

from __future__ import annotations

from dataclasses import dataclass

from mcp.types import ToolAnnotations

from kb_core.base.errors import PermissionDenied
from kb_core.store.tokens import TokenRecord

READS = ToolAnnotations(readOnlyHint=True)
WRITES = ToolAnnotations(readOnlyHint=False, destructiveHint=False)
DESTROYS = ToolAnnotations(readOnlyHint=False, destructiveHint=True)


@dataclass(frozen=True)
class Access:
    """How one tool may be called over HTTP."""

    annotations: ToolAnnotations  # what clients are told: reads, writes, or destroys
    adds_knowledge_bases: str | None = None  # "create new ones" / "import new ones": needs a token of scope all
    paths: tuple[str, ...] = ()  # arguments that name files on the server; confined to --allow-dir

    @property
    def writes(self) -> bool:
        return not self.annotations.readOnlyHint


ACCESS: dict[str, Access] = {
    "create_knowledge_base": Access(WRITES, adds_knowledge_bases="create new ones"),
    "delete_knowledge_base": Access(DESTROYS),
    "list_knowledge_bases": Access(READS),
    "select_knowledge_base": Access(READS),
    "import_document": Access(WRITES, paths=("file_paths",)),
    "search": Access(READS),
    "explain_search": Access(READS),
    "list_documents": Access(READS),
    "delete_document": Access(DESTROYS),
    "update_document": Access(WRITES),
    "rag_search": Access(READS),
    "search_knowledge_base": Access(READS),
    "get_item": Access(READS),
    "get_document_info": Access(READS),
    "export_database": Access(WRITES, paths=("export_path",)),
    "import_database": Access(WRITES, adds_knowledge_bases="import new ones", paths=("source_db_path",)),
    "get_knowledge_schema": Access(READS),
    "import_knowledge_bundle": Access(WRITES, paths=("temp_file_path",)),
    "start_import": Access(WRITES, paths=("file_paths",)),
    "get_import_job": Access(READS),
    "cancel_import": Access(WRITES),
}
WRITE_TOOLS = frozenset(name for name, access in ACCESS.items() if access.writes)


def check_token(tool: str, token: TokenRecord, *, after_validation: bool) -> None:
    """Raise PermissionDenied when ``token`` may not call ``tool``. The capability is checked before the
    arguments are validated, the scope after (the order clients have always seen)."""
    access = ACCESS[tool]
    if not after_validation:
        if access.writes and not token.can_write:
            raise PermissionDenied(f"{tool} changes knowledge bases and needs a write token; this one is read-only.")
        return
    if access.adds_knowledge_bases and token.scope is not None:
        raise PermissionDenied(
            f"This token is limited to specific knowledge bases and cannot {access.adds_knowledge_bases}; "
            "use a token created with --scope all."
        )
