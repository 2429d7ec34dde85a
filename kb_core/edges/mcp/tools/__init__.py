"""The MCP tools: module-level functions, one module per group; each docstring is the tool's description.

A description is its docstring read like Markdown text: a line continues the one before (joined by a space,
or by nothing next to Chinese text) unless it is blank, starts a list item (``- ``) or follows a line that
ends in a backslash (a hard line break). Each gives the English text, then the Chinese.
"""

from __future__ import annotations

import inspect
import itertools
import unicodedata
from collections.abc import Callable
from typing import Any

from mcp.server.fastmcp.tools import Tool

from kb_core.edges.mcp.access import ACCESS
from kb_core.edges.mcp.tools.documents import (
    delete_document,
    get_document_info,
    get_item,
    import_document,
    list_documents,
    update_document,
)
from kb_core.edges.mcp.tools.jobs import cancel_import, get_import_job, start_import
from kb_core.edges.mcp.tools.knowledge_bases import (
    create_knowledge_base,
    delete_knowledge_base,
    list_knowledge_bases,
    select_knowledge_base,
)
from kb_core.edges.mcp.tools.search import explain_search, rag_search, search, search_knowledge_base
from kb_core.edges.mcp.tools.transfer import (
    export_database,
    get_knowledge_schema,
    import_database,
    import_knowledge_bundle,
)

# In the order tools/list gives them.
TOOL_FUNCTIONS: tuple[Callable[..., Any], ...] = (
    create_knowledge_base,
    delete_knowledge_base,
    list_knowledge_bases,
    select_knowledge_base,
    import_document,
    search,
    explain_search,
    list_documents,
    delete_document,
    update_document,
    rag_search,
    search_knowledge_base,
    get_item,
    get_document_info,
    export_database,
    import_database,
    get_knowledge_schema,
    import_knowledge_bundle,
    start_import,
    get_import_job,
    cancel_import,
)


def _wide(character: str) -> bool:
    return unicodedata.east_asian_width(character) in ("W", "F")


def description_of(function: Callable[..., Any]) -> str:
    """The tool description written as ``function``'s docstring (see the module docstring for the rules)."""
    lines = inspect.cleandoc(function.__doc__ or "").split("\n")
    text = lines[0]
    for previous, line in itertools.pairwise(lines):
        if previous.endswith("\\"):
            text = text[:-1] + "\n" + line
        elif not line or not previous or line.startswith("- "):
            text += "\n" + line
        elif _wide(previous[-1]) or _wide(line[0]):
            text += line
        else:
            text += " " + line
    return text


def build_tools() -> list[Tool]:
    """The tools with their descriptions, output schemas and annotations (from the access table)."""
    return [
        Tool.from_function(
            function,
            description=description_of(function),
            annotations=ACCESS[function.__name__].annotations,
            structured_output=True,
        )
        for function in TOOL_FUNCTIONS
    ]
