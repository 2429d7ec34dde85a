"""MCP tools that move knowledge between homes and files: export_database, import_database, and knowledge
bundles (get_knowledge_schema, import_knowledge_bundle)."""

from __future__ import annotations

from typing import Annotated

from mcp.server.fastmcp import Context
from mcp.types import CallToolResult
from pydantic import Field

from kb_core.edges.mcp.context import call
from kb_core.edges.mcp.models import BundleImported, Exported, ImportedDatabase, KnowledgeSchema, ToolEnvelope
from kb_core.edges.mcp.paths import relative_path_refusal
from kb_core.edges.mcp.results import schema_text
from kb_core.session.operations import Operations


async def export_database(
    export_path: Annotated[str, Field(description="absolute path of the file to write")],
    ctx: Context,
    overwrite: Annotated[
        bool, Field(description="replace a file already at export_path (default false: such a file is refused)")
    ] = False,
) -> Annotated[CallToolResult, ToolEnvelope[Exported]]:
    r"""Export every knowledge base this session can see (documents, chunks, vectors, original files and
    knowledge-bundle graphs) to one portable file at the specified path; import_database reads it. API keys are never
    exported.

    Parameters:
    - export_path: Export path (absolute path, required; a relative path is refused), e.g. /backups/kb.kbx
    - overwrite: Replace a file that already exists at export_path (optional, default false). Without it an existing
      file is refused with FILE_EXISTS and left unchanged.

    data: source_path (the home), export_path.\
    Over HTTP this tool needs a token with the write capability. Over HTTP the path must lie inside the folders the
    server was started with (--allow-dir).

    将本会话可见的所有知识库（文档、chunks、向量、原始文件和知识包图谱）导出到指定路径的一个可移植文件；
    import_database 可以读取该文件。API Key 永远不会被导出。

    参数说明：
    - export_path：导出路径（绝对路径，必填），例如 /backups/kb.kbx
    - overwrite：是否覆盖 export_path 上已存在的文件（可选，默认 false）。不传时，已存在的文件会被拒绝（FILE_EXISTS）
      且保持不变。

    返回值 data：source_path（导出来源的主目录）、export_path。通过 HTTP 调用时需要具有写权限的令牌。通过 HTTP 调用时
    ，路径必须位于服务器启动时指定的目录（--allow-dir）之内。
    """
    refusal = relative_path_refusal(export_path, "export_path")
    return await call(ctx, Operations.export_database, export_path, overwrite=overwrite, refusal=refusal)


async def import_database(
    source_db_path: Annotated[str, Field(description="absolute path of a file written by export_database")],
    ctx: Context,
) -> Annotated[CallToolResult, ToolEnvelope[ImportedDatabase]]:
    r"""Import a file written by export_database and merge its knowledge bases into this home, all or nothing. Name
    conflicts are resolved by adding a timestamp to knowledge base names.

    Parameters:
    - source_db_path: Source file path (absolute path, required; a relative path is refused)

    data: source_path, imported_kb_count, imported_doc_count.\
    Over HTTP this tool needs a token with the write capability. Over HTTP the path must lie inside the folders the
    server was started with (--allow-dir). Tokens scoped to specific knowledge bases cannot import.

    导入一个由 export_database 写出的文件，将其中的知识库合并到当前主目录：要么全部导入，要么完全不变。重名冲突会自动
    处理，为知识库名称添加时间戳。

    参数说明：
    - source_db_path：源文件路径（绝对路径，必填）

    返回值 data：source_path、imported_kb_count、imported_doc_count。通过 HTTP 调用时需要具有写权限的令牌。通
    过 HTTP 调用时，路径必须位于服务器启动时指定的目录（--allow-dir）之内。限定了知识库范围的令牌不能导入。
    """
    refusal = relative_path_refusal(source_db_path, "source_db_path")
    return await call(ctx, Operations.import_database, source_db_path, refusal=refusal)


async def get_knowledge_schema(ctx: Context) -> Annotated[CallToolResult, ToolEnvelope[KnowledgeSchema]]:
    r"""Get the knowledge base validation schema. Returns the complete validation rules (JSON Schema Draft 7) of the
    currently selected knowledge base, generated from its ontology, used to validate the input of
    import_knowledge_bundle: the whole YAML file is an array of knowledge items.

    Parameters: none

    data: full_bundle_schema (type array; items is a oneOf over the node and edge types; every item has a const 'type'
    and an 'action' upsert | delete, default upsert; nodes require their identity fields, edges require 'source' and
    'target' objects with the identity fields of their endpoint types; a delete needs only the identity; no other
    fields are allowed) and example_yaml (an example bundle that validates). The text content is the same JSON.

    获取知识库校验 Schema。返回当前选中知识库的完整校验规则（JSON Schema Draft 7），由其本体（ontology）生成，用于校
    验 import_knowledge_bundle 的输入：整个 YAML 文件是一个知识条目数组。

    参数说明：无参数

    返回值 data：full_bundle_schema（type 为 array；items 是各节点类型和边类型的 oneOf；每个条目都有常
    量 type 和 action（upsert 或 delete，默认 upsert）；节点必须包含其 identity 字段，边必须包含 source 和 target 对象
    ，其中是端点类型的 identity 字段；delete 只需要 identity；不允许其他字段）和 example_yaml（一个能通过校验的示例知
    识包）。文本内容是同样的 JSON。
    """
    return await call(ctx, Operations.get_knowledge_schema, text=schema_text)


async def import_knowledge_bundle(
    temp_file_path: Annotated[
        str, Field(description="absolute path of the YAML bundle file; deleted after a successful import")
    ],
    ctx: Context,
) -> Annotated[CallToolResult, ToolEnvelope[BundleImported]]:
    r"""Import a knowledge bundle. Imports data from a YAML file into the currently selected knowledge base. The file
    is an array; each element contains:
    - type: entity type (a node or edge type name)
    - action: upsert | delete, default upsert
    - nodes: their identity fields (and other properties)
    - edges: source and target objects (the identity fields of the endpoint nodes)

    Before anything changes the whole file is validated against the schema returned by get_knowledge_schema; it is
    then applied as one transaction, all or nothing. Upsert inserts or replaces by type plus identity; deleting a node
    deletes its edges. Indexed text fields (Document.content by default) become searchable documents (source
    'bundle').

    Parameters:
    - temp_file_path: absolute path of the temporary YAML file (required)

    On success the file is deleted and data is {status: 'success', stats: {nodes_upserted, nodes_deleted,
    edges_upserted, edges_deleted, edges_cascaded, chunks_indexed, ...}}. On a refusal the file is kept so you can fix
    it and retry: the error BUNDLE_INVALID lists every problem with its exact place, e.g. 'Validation error at
    [4].doc_uri: "doc_uri" is required' or "Entity type 'Human' is not defined. Did you mean 'Person'?", and
    error.details.errors holds them as objects (index, path, message).\
    Over HTTP this tool needs a token with the write capability. Over HTTP the path must lie inside the folders the
    server was started with (--allow-dir).

    导入知识包。从 YAML 文件导入数据到当前选中的知识库。文件格式为数组，每个元素包含：
    - type：实体类型（节点类型或边类型名称）
    - action：操作类型（upsert 或 delete），默认 upsert
    - 节点：identity 字段（以及其他属性）
    - 边：source 和 target 对象（端点节点的 identity 字段）

    导入前会使用 get_knowledge_schema 返回的 Schema 对整个文件进行完整校验，然后作为一个事务整体应用：要么全部成功，要
    么完全不变。upsert 按类型加 identity 插入或替换；删除节点会同时删除它的边。被索引的文本字段（默认
    是 Document.content）会成为可检索的文档（来源为 bundle）。

    参数说明：
    - temp_file_path：临时 YAML 文件的绝对路径（必填）

    成功后文件会被删除，data 为 {status: 'success', stats: {nodes_upserted, nodes_deleted, edges_upserted,
    edges_deleted, edges_cascaded, chunks_indexed, ...}}。被拒绝时文件会保留，便于修改后重试：错误 BUNDLE_INVALID 列出
    每个问题及其确切位置，例如 'Validation error at [4].doc_uri: "doc_uri" is required' 或 "Entity type 'Human' is not
    defined. Did you mean 'Person'?"，error.details.errors 以对象形式（index、path、message）给出这些问题。通
    过 HTTP 调用时需要具有写权限的令牌。通过 HTTP 调用时，路径必须位于服务器启动时指定的目录（--allow-dir）之内。
    """
    return await call(ctx, Operations.import_knowledge_bundle, temp_file_path, delete_file=True)
