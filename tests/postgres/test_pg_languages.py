"""Each document's detected language on PostgreSQL (#24): stored in the documents table like the folder store's
documents.parquet column, listed, and a database made before the column gets it (null in its rows) on open."""

from __future__ import annotations

from pathlib import Path

import psycopg

from kb_core import KnowledgeBaseService
from kb_core.edges.envelopes import Enveloped

ENGLISH = "Hybrid search combines keyword scores with vector similarity, and the weights are shown with every hit."
CHINESE = "混合检索把关键词检索和向量检索结合起来，每个结果都会显示它的得分是怎样算出来的。"


def test_languages_are_stored_listed_and_added_to_older_databases(pg_url: str, tmp_path: Path) -> None:
    files = tmp_path / "files"
    files.mkdir()
    (files / "english.txt").write_text(ENGLISH, encoding="utf-8")
    (files / "中文.txt").write_text(CHINESE, encoding="utf-8")
    service = KnowledgeBaseService(tmp_path / "home", store=pg_url)
    try:
        session = Enveloped(service.session())
        assert session.create_knowledge_base("languages", 64, embedding_model="hashing")["success"]
        imported = session.import_document([str(files / "english.txt")], kb_name="languages")
        assert imported["data"]["success_count"] == 1
        listed = session.list_documents(kb_name="languages")["data"]["documents"]
        assert [(d["name"], d["language"]) for d in listed] == [("english.txt", "en")]
    finally:
        service.close()

    with psycopg.connect(pg_url, autocommit=True) as conn:  # a database made before the column existed
        conn.execute("ALTER TABLE kb_workbench.documents DROP COLUMN language")
    service = KnowledgeBaseService(tmp_path / "home", store=pg_url)  # the open adds it back, null in old rows
    try:
        session = Enveloped(service.session())
        assert session.import_document([str(files / "中文.txt")], kb_name="languages")["data"]["success_count"] == 1
        listed = {d["name"]: d["language"] for d in session.list_documents(kb_name="languages")["data"]["documents"]}
        assert listed == {"english.txt": None, "中文.txt": "zh"}
    finally:
        service.close()
