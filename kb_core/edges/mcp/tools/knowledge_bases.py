"""MCP tools for knowledge bases: create, delete, list and select."""

from __future__ import annotations

from typing import Annotated

from mcp.server.fastmcp import Context
from mcp.types import CallToolResult
from pydantic import Field

from kb_core.edges.mcp.context import call
from kb_core.edges.mcp.models import KBCreated, KBList, KBNamed, KBSelected, ToolEnvelope
from kb_core.session.operations import Operations


async def create_knowledge_base(
    kb_name: Annotated[str, Field(description="unique name, 1-64 characters, case-insensitive")],
    chunk_size: Annotated[int, Field(description="chunk size in tokens, 32-8192, e.g. 512")],
    ctx: Context,
    embedding_model: Annotated[
        str | None,
        Field(
            description="local model: multilingual-e5-small (default; Chinese, English and ~100 languages) or "
            "all-MiniLM-L6-v2 (English only), or a local model folder; with embedding_endpoint, the model the endpoint "
            "serves"
        ),
    ] = None,
    embedding_endpoint: Annotated[str | None, Field(description="OpenAI-compatible endpoint URL")] = None,
    embedding_api_key: Annotated[str | None, Field(description="API key for the endpoint")] = None,
) -> Annotated[CallToolResult, ToolEnvelope[KBCreated]]:
    r"""Create a new knowledge base. A knowledge base is a container for documents, and each knowledge base can have
    its own chunk_size and embedding configuration. After creation, you need to call select_knowledge_base to select
    this knowledge base before using it.

    Parameters:
    - kb_name: Knowledge base name (required, must be unique, 1-64 characters, case-insensitive)
    - chunk_size: Chunk size in tokens (required, 32-8192, e.g. 512, 1024)
    - embedding_model: Embedding model name (optional). Built-in local models, offline: multilingual-e5-small (the
      default; reads Chinese, English and about 100 other languages) and all-MiniLM-L6-v2 (reads English only;
      imports about 2x faster on a CPU). A local model folder works too; with embedding_endpoint, the model name
      the endpoint serves. Without an endpoint
      the model must be available offline, else the call fails with INVALID_ARGUMENT, whose message lists the
      models available offline.
    - embedding_endpoint: OpenAI-compatible embedding service endpoint URL (optional)
    - embedding_api_key: Embedding service API key (optional, only with embedding_endpoint)

    data: kb_id, kb_name, chunk_size.\
    Over HTTP this tool needs a token with the write capability. Tokens scoped to specific knowledge bases cannot
    create new ones.

    创建一个新的知识库。知识库是文档的容器，每个知识库可以有自己的 chunk_size 和 embedding 配置。创建后需要调
    用 select_knowledge_base 选择该知识库才能使用。

    参数说明：
    - kb_name：知识库名称（必填，必须唯一，1-64 个字符，不区分大小写）
    - chunk_size：chunk 大小，单位 token（必填，32-8192，例如 512、1024）
    - embedding_model：向量化模型名称（可选）。内置本地模型，无需联网：multilingual-e5-small（默认；读中文、英文及约
      100 种其他语言）和 all-MiniLM-L6-v2（只读英文；在 CPU 上导入约快 2 倍）。也可以是本地模型目录；
      与 embedding_endpoint 一起使用时，为该端点提供的模型名称。不使用 endpoint 时，模型必须可离线
      使用，否则返回 INVALID_ARGUMENT 并列出可离线使用的模型。
    - embedding_endpoint：OpenAI 兼容的向量化服务端点 URL（可选）
    - embedding_api_key：向量化服务 API Key（可选，仅与 embedding_endpoint 一起使用）

    返回值 data：kb_id、kb_name、chunk_size。通过 HTTP 调用时需要具有写权限的令牌。限定了知识库范围的令牌不能创建新知
    识库。
    """
    return await call(
        ctx,
        Operations.create_knowledge_base,
        kb_name,
        chunk_size,
        embedding_model,
        embedding_endpoint,
        embedding_api_key,
    )


async def delete_knowledge_base(
    kb_name: Annotated[str, Field(description="knowledge base name")], ctx: Context
) -> Annotated[CallToolResult, ToolEnvelope[KBNamed]]:
    r"""Delete the specified knowledge base. Cannot delete the currently active knowledge base. Deleting a knowledge
    base will cascade delete all documents and chunks under it.

    Parameters:
    - kb_name: Knowledge base name (required)

    data: kb_name (the deleted knowledge base).\
    Over HTTP this tool needs a token with the write capability.

    删除指定的知识库。不能删除当前正在使用的知识库。删除知识库会级联删除该知识库下的所有文档和 chunks。

    参数说明：
    - kb_name：知识库名称（必填）

    返回值 data：kb_name（已删除的知识库名称）。通过 HTTP 调用时需要具有写权限的令牌。
    """
    return await call(ctx, Operations.delete_knowledge_base, kb_name)


async def list_knowledge_bases(ctx: Context) -> Annotated[CallToolResult, ToolEnvelope[KBList]]:
    r"""List all available knowledge bases. Returns detailed information about all knowledge bases, including the
    currently selected one.

    Parameters: none

    data: knowledge_bases (each: id, name, chunk_size, embedding_model, created_at, is_current, document_count
    (documents imported), chunk_count, failed_document_count (files whose import failed)), count, current_kb_id.

    列出所有可用的知识库。返回所有知识库的详细信息，包括当前选中的知识库。

    参数说明：无参数

    返回值 data：knowledge_bases（每个知识库包含 id、name、chunk_size、embedding_model、created_at、is_current、
    document_count（已导入的文档数）、chunk_count、failed_document_count（导入失败的文件数））、count（知识库数量）、
    current_kb_id（当前选中的知识库 ID）。
    """
    return await call(ctx, Operations.list_knowledge_bases)


async def select_knowledge_base(
    kb_name: Annotated[str, Field(description="knowledge base name")], ctx: Context
) -> Annotated[CallToolResult, ToolEnvelope[KBSelected]]:
    r"""Select a knowledge base as the currently active one for this MCP session. After selection, subsequent
    operations such as document import and search will be performed in this knowledge base.

    Parameters:
    - kb_name: Knowledge base name (required)

    data: kb_id, kb_name, document_count.

    为当前 MCP 会话选择一个知识库作为当前使用的知识库。选择后，后续的文档导入、查询等操作都会在该知识库中进行。

    参数说明：
    - kb_name：知识库名称（必填）

    返回值 data：kb_id、kb_name、document_count（该知识库下的文档数量）。
    """
    return await call(ctx, Operations.select_knowledge_base, kb_name)
