"""MCP tools for import jobs (#34): start an import that the server runs on its own threads, poll it, cancel it.
``import_document`` stays synchronous (the seed contract); these are for clients that would rather not hold a call
open for a long import, or want its progress."""

from __future__ import annotations

from typing import Annotated

from mcp.server.fastmcp import Context
from mcp.types import CallToolResult
from pydantic import Field

from kb_core.edges.mcp.context import call
from kb_core.edges.mcp.models import ImportJob, ToolEnvelope
from kb_core.session.operations import Operations

JOB_ID = "the job's id (job_…), as start_import returned it"


async def start_import(
    file_paths: Annotated[list[str], Field(description="absolute paths of .txt/.docx/.doc files, 1..n")],
    ctx: Context,
    chunk_size: Annotated[int | None, Field(description="tokens per chunk; default: the KB's")] = None,
) -> Annotated[CallToolResult, ToolEnvelope[ImportJob]]:
    r"""Start importing documents into the currently selected knowledge base as a job the server runs, and return
    at once with the job (data.job_id). Poll it with get_import_job until data.state is finished, cancelled or
    failed; stop it with cancel_import. The files, formats and results are those of import_document, which does the
    same in one call.

    Parameters:
    - file_paths: List of file paths (absolute paths), 1..n files (required)
    - chunk_size: Chunk size in tokens (optional, defaults to the knowledge base's chunk_size)

    data: the job: job_id, kb_name, state (running, cancelling, finished, cancelled, failed), phase and phase_text
    (what it does now), files_total, files_done, chunks_total, chunks_embedded, chunks_per_second, seconds_left,
    summary, files (each: name, file, status, chunks_total, chunks_embedded, error, doc_name), and once it ended:
    message, report (import_document's data) and error.\
    Over HTTP this tool needs a token with the write capability, and the paths must lie inside the folders the
    server was started with (--allow-dir).

    将文档导入当前选中的知识库，作为服务器运行的任务启动，并立即返回该任务（data.job_id）。
    用 get_import_job 查询，直到 data.state 为 finished、cancelled 或 failed；用 cancel_import 取消。
    文件、格式和结果与 import_document 相同（后者在一次调用中完成导入）。

    参数说明：
    - file_paths：文件路径列表（绝对路径），支持 1~n 个文件（必填）
    - chunk_size：chunk 大小，单位 token（可选，默认使用知识库的 chunk_size）

    返回值 data：任务：job_id、kb_name、state（running、cancelling、finished、cancelled、failed）、
    phase 与 phase_text（当前在做什么）、files_total、files_done、chunks_total、chunks_embedded、
    chunks_per_second、seconds_left、summary、files（每个文件：name、file、status、chunks_total、
    chunks_embedded、error、doc_name），结束后还有 message、report（即 import_document 的 data）和 error。
    通过 HTTP 调用时需要具有写权限的令牌，且路径必须位于服务器启动时指定的目录（--allow-dir）之内。
    """
    return await call(ctx, Operations.start_import, file_paths, chunk_size)


async def get_import_job(
    job_id: Annotated[str, Field(description=JOB_ID)], ctx: Context
) -> Annotated[CallToolResult, ToolEnvelope[ImportJob]]:
    r"""The state and progress of an import job started with start_import; once it ended, its report (the files
    imported and those that failed, each with its reason). Jobs are kept while the server runs (the newest finished
    ones).

    Parameters:
    - job_id: The job's id (required)

    data: the job, as start_import describes it.

    查询由 start_import 启动的导入任务的状态和进度；任务结束后还包含其报告（已导入的文件和失败的文件及原因）。
    任务在服务器运行期间保留（保留最新结束的若干个）。

    参数说明：
    - job_id：任务 ID（必填）

    返回值 data：任务信息，与 start_import 的说明相同。
    """
    return await call(ctx, Operations.import_job, job_id)


async def cancel_import(
    job_id: Annotated[str, Field(description=JOB_ID)], ctx: Context
) -> Annotated[CallToolResult, ToolEnvelope[ImportJob]]:
    r"""Cancel an import job: its parsing and embedding stop within seconds; documents committed before stay, the
    other files fail as cancelled. A job that ended already is left as it is.

    Parameters:
    - job_id: The job's id (required)

    data: the job (state cancelling until it has stopped; poll get_import_job).\
    Over HTTP this tool needs a token with the write capability.

    取消导入任务：其解析和向量化在数秒内停止；取消前已提交的文档保留，其余文件以 cancelled 失败。已结束的任务保持不变。

    参数说明：
    - job_id：任务 ID（必填）

    返回值 data：任务信息（停止前 state 为 cancelling；请用 get_import_job 查询）。
    通过 HTTP 调用时需要具有写权限的令牌。
    """
    return await call(ctx, Operations.cancel_import, job_id)
