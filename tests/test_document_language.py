"""Each document's detected language (#24): stored with the document, listed, carried through compaction and
export files, and the one notice an import gives when the KB's model cannot read what was imported."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kb_core import KnowledgeBaseService
from kb_core.edges.cli.main import main
from kb_core.edges.envelopes import Enveloped
from kb_core.engines.embedding import HashingEmbedder
from kb_core.engines.text_language import document_language, language_name
from kb_core.store import catalog

ENGLISH = "Hybrid search combines keyword scores with vector similarity, and the weights are shown with every hit."
CHINESE = "混合检索把关键词检索和向量检索结合起来，每个结果都会显示它的得分是怎样算出来的。支持 BM25 和 FAISS。"
JAPANESE = "ハイブリッド検索はキーワード検索とベクトル検索を組み合わせます。スコアの内訳も表示されます。"
FRENCH = "La recherche hybride combine les mots-clés et les vecteurs, et les poids sont affichés pour chaque résultat."


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (ENGLISH, "en"),
        (CHINESE, "zh"),
        (JAPANESE, "ja"),
        ("한국어 문서입니다. 하이브리드 검색은 키워드와 벡터를 함께 사용합니다.", "ko"),
        (FRENCH, "latin"),
        ("Гибридный поиск объединяет ключевые слова и векторы для лучших результатов.", "cyrillic"),
        ("12345 67890 !!! ---", None),
        ("", None),
        # Chinese prose with English terms is Chinese; English prose quoting a Chinese term is English
        ("我们用 FAISS 和 BM25 做 hybrid search，再用 jieba 分词处理中文文档里的长句子。", "zh"),
        (ENGLISH + " The Chinese name is 混合检索.", "en"),
        # a long document is judged on samples of its start, middle and end
        (ENGLISH * 200 + CHINESE * 2, "en"),
        (CHINESE * 300, "zh"),
    ],
)
def test_the_language_of_a_document(text: str, expected: str | None) -> None:
    assert document_language(text) == expected


def test_language_names_for_people() -> None:
    assert language_name("zh") == "Chinese" and language_name("en") == "English" and language_name(None) == "unknown"


def _write(folder: Path, files: dict[str, str]) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    return [str(folder / name) for name in files]


def _languages(session, kb: str) -> dict[str, str | None]:
    return {d["name"]: d["language"] for d in session.list_documents(kb_name=kb)["data"]["documents"]}


def test_languages_are_stored_listed_and_survive_old_segments_compaction_and_export(tmp_path: Path, capsys) -> None:
    home = tmp_path / "home"
    service = KnowledgeBaseService(home)
    session = Enveloped(service.session())
    assert session.create_knowledge_base("docs", 64, embedding_model="hashing")["success"]
    first = _write(tmp_path / "a", {"english.txt": ENGLISH, "中文.txt": CHINESE})
    assert session.import_document(first, kb_name="docs")["data"]["success_count"] == 2
    assert _languages(session, "docs") == {"english.txt": "en", "中文.txt": "zh"}

    # a segment written before languages were stored: its documents.parquet has no language column
    record = service.find_kb("docs")
    (segment,) = service.kb_store(record.id).manifest().segments
    path = service.kb_store(record.id).segment_dir(segment.id) / "documents.parquet"
    old = pq.read_table(path)
    pq.write_table(old.drop(["language"]), path)
    service = KnowledgeBaseService(home)  # a new process reads the files again
    session = Enveloped(service.session())
    assert _languages(session, "docs") == {"english.txt": None, "中文.txt": None}

    second = _write(tmp_path / "b", {"日本語.txt": JAPANESE, "french.txt": FRENCH})
    assert session.import_document(second, kb_name="docs")["data"]["success_count"] == 2
    expected = {"english.txt": None, "中文.txt": None, "日本語.txt": "ja", "french.txt": "latin"}
    assert _languages(session, "docs") == expected
    assert session.compact(kb_name="docs")["success"]  # merges the old segment with the new one
    assert _languages(session, "docs") == expected
    merged = service.kb_store(record.id).manifest().segments
    assert len(merged) == 1
    assert pq.read_schema(service.kb_store(record.id).segment_dir(merged[0].id) / "documents.parquet").equals(
        catalog.DOCUMENTS_SCHEMA, check_metadata=False
    )

    assert main(["--home", str(home), "select", "docs"]) == 0
    assert main(["--home", str(home), "docs"]) == 0
    listing = capsys.readouterr().out
    assert "language" in listing and " ja " in listing and " latin " in listing

    # export files carry the column; an import re-detects every language from the text (older files lack it)
    exported = tmp_path / "docs.kbx"
    assert session.export_database(str(exported))["success"]
    other = Enveloped(KnowledgeBaseService(tmp_path / "other").session())
    assert other.import_database(str(exported))["success"]
    redetected = {"english.txt": "en", "中文.txt": "zh", "日本語.txt": "ja", "french.txt": "latin"}
    assert _languages(other, "docs") == redetected


def test_an_export_file_without_the_language_column_still_imports(tmp_path: Path) -> None:
    """Files written before documents stored their language (no column) import, languages detected anew."""
    import json
    import zipfile

    session = Enveloped(KnowledgeBaseService(tmp_path / "home").session())
    assert session.create_knowledge_base("docs", 64, embedding_model="hashing")["success"]
    session.import_document(_write(tmp_path / "a", {"中文.txt": CHINESE}), kb_name="docs")
    exported = tmp_path / "docs.kbx"
    assert session.export_database(str(exported))["success"]
    older = tmp_path / "older.kbx"
    with zipfile.ZipFile(exported) as source, zipfile.ZipFile(older, "w") as target:
        manifest = json.loads(source.read("manifest.json"))
        for item in source.infolist():
            data = source.read(item)
            if item.filename.endswith("documents.parquet"):
                table = pq.read_table(pa.BufferReader(data)).drop(["language"])
                sink = pa.BufferOutputStream()
                pq.write_table(table, sink)
                data = sink.getvalue().to_pybytes()
                _rechecksum(manifest, item.filename, data)
            if item.filename != "manifest.json":
                target.writestr(item, data)
        target.writestr("manifest.json", json.dumps(manifest))
    other = Enveloped(KnowledgeBaseService(tmp_path / "other").session())
    result = other.import_database(str(older))
    assert result["success"], result
    assert _languages(other, "docs") == {"中文.txt": "zh"}


def _rechecksum(manifest: dict, name: str, data: bytes) -> None:
    import hashlib

    def visit(node: object) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == name and isinstance(value, dict) and "sha256" in value:
                    value["sha256"], value["size"] = hashlib.sha256(data).hexdigest(), len(data)
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    visit(manifest)


def test_an_import_says_once_when_the_model_cannot_read_the_documents(tmp_path: Path) -> None:
    """The notice follows the KB's recorded model (here all-MiniLM-L6-v2, with hashing vectors standing in for
    its, so no model runs): Chinese documents in an English-only KB, once per import, naming the model that reads
    them; nothing for English documents, nor for a KB whose model reads Chinese."""
    service = KnowledgeBaseService(tmp_path / "home", embedder_factory=lambda record, key: HashingEmbedder(64))
    session = Enveloped(service.session())
    assert session.create_knowledge_base("english", 64, embedding_model="all-MiniLM-L6-v2")["success"]
    paths = _write(tmp_path / "a", {"中文.txt": CHINESE, "中文二.txt": CHINESE + "第二份。", "english.txt": ENGLISH})
    result = session.import_document(paths, kb_name="english")
    assert result["success"] and result["data"]["success_count"] == 3
    (warning,) = result["data"]["warnings"]
    assert "2 of the 3 imported documents" in warning and "中文.txt" in warning and "english.txt" not in warning
    assert "all-MiniLM-L6-v2 does not read" in warning and "multilingual-e5-small reads Chinese" in warning
    assert result["message"].count("multilingual-e5-small") == 1  # said once
    english_only = session.import_document(_write(tmp_path / "b", {"more.txt": ENGLISH}), kb_name="english")
    assert "warnings" not in english_only["data"] and "Note:" not in english_only["message"]
