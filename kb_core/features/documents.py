"""A knowledge base's documents as front ends show them: rows, chunk rows, item lookup and document info.

Features over the store protocol (:mod:`kb_core.store.base`); they take the process's resources and KB records,
raise KBError and return plain JSON-ready data (the session's operations return it in typed results).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

from kb_core.base.errors import ItemNotFound
from kb_core.base.validation import ITEM_ID
from kb_core.store.registry import KnowledgeBaseRecord

if TYPE_CHECKING:
    from kb_core.features.seams import Resources


def find_item(
    service: Resources, item_id: str, records: Sequence[KnowledgeBaseRecord], neighbours: int
) -> dict[str, Any]:
    """A document (``doc_`` id, with its full text) or a live chunk with ``neighbours`` chunks either side."""
    if not ITEM_ID.match(item_id):
        raise ItemNotFound(f"No document or chunk with id {item_id!r} exists.", details={"id": item_id})
    for record in records:
        found = service.store.kb(record).find_item(item_id, neighbours)
        if found is None:
            continue
        if found["type"] == "document":
            row = document_row(found["row"])
            return {"type": "document", "kb_name": record.name, **row, "text": found["text"] or ""}
        return {
            "type": "chunk",
            "kb_name": record.name,
            "doc_name": found["doc_name"],
            "chunk": chunk_json(found["chunk"]),
            "previous": [chunk_json(r) for r in found["previous"]],
            "next": [chunk_json(r) for r in found["next"]],
        }
    raise ItemNotFound(f"No document or chunk with id {item_id!r} exists.", details={"id": item_id})


def document_info(service: Resources, doc_id: str, records: Sequence[KnowledgeBaseRecord]) -> dict[str, Any]:
    """One document's metadata as get_document_info shows it; ``{id, error}`` when no KB has it."""
    for record in records if ITEM_ID.match(doc_id) else ():
        document = service.store.kb(record).document(doc_id)
        if document is not None:
            row = document_row(document)
            return {
                "id": row["id"],
                "name": row["name"],
                "file_name": original_file_name(document),
                "kb_name": record.name,
                "file_type": row["file_type"],
                "size_bytes": row["size_bytes"],
                "size_human": human_size(row["size_bytes"]),
                "source": row["source"],
                "source_label": source_label(row["source"], row["file_path"]),
                "parse_status": row["status"],
                "status_text": status_text(row["status"], row["error"]),
                "parse_error": row["error"],
                "chunk_count": row["chunk_count"],
                "created_at": row["created_at"],
                "updated_at": row["updated_at"],
            }
    return {"id": doc_id, "error": f"Document {doc_id!r} not found."}


def document_info_text(documents: Sequence[dict[str, Any]], errors: Sequence[dict[str, Any]], requested: int) -> str:
    """get_document_info's text: each found document's fields, then the ids not found."""
    lines = []
    for doc in documents:
        lines += [
            "",
            f"📄 {doc['name']}",
            f"   ID: {doc['id']}",
            f"   Knowledge base: {doc['kb_name']}",
            f"   Original file: {doc['file_name'] or '(none: not imported from a file)'}",
            f"   Type: {doc['file_type']}",
            f"   Size: {doc['size_human']} ({doc['size_bytes']} bytes)",
            f"   Source: {doc['source_label']}",
            f"   Status: {doc['status_text']}",
            f"   Chunks: {doc['chunk_count']}",
            f"   Created: {doc['created_at']}",
            f"   Updated: {doc['updated_at']}",
        ]
    if errors:
        lines += ["", "Not found:"] + [f"- {e['id']}: {e['error']}" for e in errors]
    return f"Document info for {len(documents)} of {requested} id(s):\n" + "\n".join(lines)


def document_row(document: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": document["doc_id"],
        "name": document["name"],
        "file_path": document["file_path"],
        "file_type": document["file_type"],
        "chunk_size": int(document["chunk_size"]),
        "created_at": document["created_at"],
        "updated_at": document["updated_at"],
        "status": document["status"],
        "chunk_count": int(document["chunk_count"]),
        "size_bytes": int(document["size_bytes"]),
        "source": document["source"],
        "error": document["error"] if isinstance(document["error"], str) else None,
        "language": document.get("language") if isinstance(document.get("language"), str) else None,
    }


def original_file_name(document: dict[str, Any]) -> str | None:
    """The name the file had when it was imported (clash renaming and re-chunking keep it); None for bundles."""
    if document["source"] == "bundle":
        return None
    # file_path is what the importer was given (an upload's temporary path ends in the browser's file name);
    # the catalog's file_name is the kept copy's after update_document.
    path, kept = document.get("file_path"), document.get("file_name")
    if isinstance(path, str) and PurePath(path).name:
        return PurePath(path).name
    return kept if isinstance(kept, str) else None


def source_label(source: str, file_path: str | None) -> str:
    """A readable source, worded as the specification's formatSource gives it (文件上传, 本地文件: …, 知识包: …)."""
    if source == "upload":
        return "文件上传"
    if source == "bundle":
        where = (file_path or "").removeprefix("bundle:")
        return f"知识包: {where}" if where else "知识包"
    return f"本地文件: {file_path}"


def status_text(status: str, error: str | None) -> str:
    """A readable parse status, worded as the specification's formatParseStatus gives it (✅ 已完成, ❌ 失败)."""
    if status == "ready":
        return "✅ 已完成"
    if status == "failed":
        return f"❌ 失败: {error}" if error else "❌ 失败"
    return f"⏳ 处理中 ({status})"


def chunk_json(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": row["chunk_id"],
        "doc_id": row["doc_id"],
        "chunk_index": row["chunk_index"],
        "content": row["content"],
        "tokens": row["tokens"],
        "chapter": row["chapter"],
        "page": row["page"],
        "start_char": row["start_char"],
        "end_char": row["end_char"],
    }


def human_size(size: int) -> str:
    """1024-based: 1536 → '1.5 KB'."""
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TB"
