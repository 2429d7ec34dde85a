"""MCP tools for documents: import, list, delete, re-chunk, and fetch items and document metadata."""

from __future__ import annotations

from typing import Annotated

from mcp.server.fastmcp import Context
from mcp.types import CallToolResult
from pydantic import Field

from kb_core.edges.mcp.context import call, progress_reporter
from kb_core.edges.mcp.models import (
    DocNamed,
    DocumentInfoResult,
    DocumentList,
    DocUpdated,
    ImportResult,
    Item,
    ToolEnvelope,
)
from kb_core.session.operations import Operations


async def import_document(
    file_paths: Annotated[list[str], Field(description="absolute paths of .txt/.docx/.doc files, 1..n")],
    ctx: Context,
    chunk_size: Annotated[int | None, Field(description="tokens per chunk; default: the KB's")] = None,
) -> Annotated[CallToolResult, ToolEnvelope[ImportResult]]:
    r"""Import documents into the currently selected knowledge base (supports concurrent import of multiple files).
    Supports TXT, DOCX, and DOC formats. Documents are parsed, split into chunks and embedded. If the document name
    already exists, a timestamp is added to avoid conflicts; a file whose name and content are those of a document
    already there is skipped (re-running an interrupted import does not import anything twice).

    Parameters:
    - file_paths: List of file paths (absolute paths), 1..n files (required)
    - chunk_size: Chunk size in tokens (optional, defaults to the knowledge base's chunk_size)

    success is true if any file was imported. data: total, success_count, failed_count, success_files (file_path,
    doc_name, chunk_count, and already_imported: true for a skipped file already there), failed_files (file_path,
    error), and warnings when there are any (said once: documents in a language the knowledge base's embedding model
    does not read, and the built-in model that reads it). Each path is judged alone: a relative path, one outside
    the allowed folders or one that cannot be read is listed in failed_files with its reason, and the other files are
    imported.\
    Over HTTP this tool needs a token with the write capability. Over HTTP the paths must lie inside the folders the
    server was started with (--allow-dir).

    导入文档到当前选中的知识库（支持多文件并发导入）。支持 TXT、DOCX、DOC 格式。文档会被解析、切分为 chunks 并生成向量
    。如果文档名称已存在，会自动添加时间戳避免冲突；名称和内容都与知识库中已有文档相同的文件会被跳过（重新运行被中断的
    导入不会重复导入）。

    参数说明：
    - file_paths：文件路径列表（绝对路径），支持 1~n 个文件（必填）
    - chunk_size：chunk 大小，单位 token（可选，默认使用知识库的 chunk_size）

    只要有文件导入成功，success 即为 true。返回值 data：total、success_count、failed_count、success_files（file_path、
    doc_name、chunk_count；已存在而被跳过的文件另有 already_imported: true）、failed_files（file_path、error），
    有提示时还有 warnings（只提示一次：文档的语言是知识库的
    向量模型读不懂的，并给出能读懂它的内置模型）。每个路径单独判断：相对路径、不在允许目录内或无法读取的文件会连同原因列
    在 failed_files 中，其余文件照常导入。通过 HTTP 调用时需要具有写权限的令牌。
    通过 HTTP 调用时，路径必须位于服务器启动时指定的目录（--allow-dir）之内。
    """
    report = progress_reporter(ctx)
    return await call(ctx, Operations.import_document, file_paths, chunk_size, progress=report)


async def list_documents(ctx: Context) -> Annotated[CallToolResult, ToolEnvelope[DocumentList]]:
    r"""List all documents in the currently selected knowledge base. Documents still being imported are listed too,
    with id null and their current status.

    Parameters: none

    data: documents (each: id, name, file_path, file_type, chunk_size, created_at, updated_at, status, chunk_count,
    size_bytes, language: the detected language, e.g. zh or en), count.

    查看当前选中的知识库下的所有文档列表。正在导入的文档也会列出，其 id 为 null，status 为当前进度。

    参数说明：无参数

    返回值 data：documents（每个文档包含 id、name、file_path、file_type、chunk_size、created_at、updated_at、status、
    chunk_count、size_bytes、language：检测到的语言，如 zh、en）、count（文档数量）。
    """
    return await call(ctx, Operations.list_documents)


async def delete_document(
    doc_name: Annotated[str, Field(description="document name")], ctx: Context
) -> Annotated[CallToolResult, ToolEnvelope[DocNamed]]:
    r"""Delete the specified document from the currently selected knowledge base. Deleting a document will cascade
    delete all chunks of that document.

    Parameters:
    - doc_name: Document name (required)

    data: doc_name.\
    Over HTTP this tool needs a token with the write capability.

    删除当前选中的知识库下的指定文档。删除文档会级联删除该文档的所有 chunks。

    参数说明：
    - doc_name：文档名称（必填）

    返回值 data：doc_name（已删除的文档名称）。通过 HTTP 调用时需要具有写权限的令牌。
    """
    return await call(ctx, Operations.delete_document, doc_name)


async def update_document(
    doc_name: Annotated[str, Field(description="document name")],
    chunk_size: Annotated[int, Field(description="new chunk size in tokens, 32-8192")],
    ctx: Context,
) -> Annotated[CallToolResult, ToolEnvelope[DocUpdated]]:
    r"""Update the document's chunk_size and re-parse the document: existing chunks are replaced by chunks of the new
    size, embedded again.

    Parameters:
    - doc_name: Document name (required)
    - chunk_size: New chunk size in tokens (required, 32-8192)

    data: doc_id, doc_name, chunk_count, chunk_size.\
    Over HTTP this tool needs a token with the write capability.

    修改文档的 chunk_size 并重新解析文档：原有的 chunks 会被按新大小切分的 chunks 替换，并重新生成向量。

    参数说明：
    - doc_name：文档名称（必填）
    - chunk_size：新的 chunk 大小，单位 token（必填，32-8192）

    返回值 data：doc_id、doc_name、chunk_count、chunk_size。通过 HTTP 调用时需要具有写权限的令牌。
    """
    report = progress_reporter(ctx)
    return await call(ctx, Operations.update_document, doc_name, chunk_size, progress=report)


async def get_item(
    id: Annotated[str, Field(description="chunk id (chk_...), document id (doc_...) or node id (node_...)")],
    ctx: Context,
    neighbours: Annotated[int, Field(ge=0, le=10, description="chunks before/after a chunk")] = 1,
) -> Annotated[CallToolResult, ToolEnvelope[Item]]:
    r"""Fetch the full content of a search hit: a chunk id (chk_...) gives the chunk with its neighbouring chunks; a
    document id (doc_...) gives the document's metadata and full parsed text; a knowledge-bundle node id (node_...)
    gives the node's properties and its neighbours via edges.

    Parameters:
    - id: chunk or document id (required)
    - neighbours: chunks to include before and after a chunk, 0-10, default 1.

    获取检索命中结果的完整内容：chunk id（chk_...）返回该 chunk 及其相邻的 chunks；文档 id（doc_...）返回文档的元数据
    和完整解析文本；知识包节点 id（node_...）返回节点的属性及其通过边相连的邻居。

    参数说明：
    - id：chunk、文档或节点的 id（必填）
    - neighbours：在 chunk 前后各包含的 chunk 数量，0-10，默认 1。
    """
    return await call(ctx, Operations.get_item, id, neighbours=neighbours)


async def get_document_info(
    knowledge_ids: Annotated[
        list[str],
        Field(description="1-10 document ids (doc_...)", json_schema_extra={"minItems": 1, "maxItems": 10}),
    ],
    ctx: Context,
) -> Annotated[CallToolResult, ToolEnvelope[DocumentInfoResult]]:
    r"""Metadata of up to 10 documents by id, looked up concurrently: name, original file name (file_name), file type,
    size in bytes and human-readable (1024-based), source (upload, path, bundle) with a readable source_label (e.g.
    '文件上传'), parse status with a readable status_text (e.g. '✅ 已完成', '❌ 失败: reason'; labels as the tool's
    specification words them), chunk count, created and updated times. Ids that cannot be found are listed in errors;
    success is true when any id was found.

    Parameters:
    - knowledge_ids: list of 1-10 document ids (doc_...), e.g. the doc_id of search hits.

    按 id 批量获取最多 10 个文档的元数据（并发查询）：名称、原始文件名（file_name）、文件类型、文件大小（字节数
    及 1024 进制的可读格式）、来源（source：upload、path、bundle）及可读的来源说明（source_label）、解析状态（
    parse_status）及可读的状态说明（status_text，例如 '✅ 已完成'、'❌ 失败: 原因'）、chunk 数量、创建和更新时间
    。找不到的 id 列在 errors 中；只要有一个 id 找到，success 即为 true。

    参数说明：
    - knowledge_ids：1-10 个文档 id（doc_...）的列表，例如检索结果中的 doc_id。
    """
    return await call(ctx, Operations.get_document_info, knowledge_ids, text=lambda e: e["message"])
