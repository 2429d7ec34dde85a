"""Issue #25 on the PostgreSQL store: stop words left out of queries, no zero-evidence hits, min_score saved in the
database and applied, the same hits as a folder store (the ranking code is shared)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kb_core import KnowledgeBaseService
from kb_core.edges.envelopes import Enveloped
from kb_core.features.results import SearchRequest
from tests.test_trusted_results import BLOG_QUERY, SUPPORT_TEXTS, TEA_QUERY, write_files

pytestmark = pytest.mark.postgres


def sessions_on_both_stores(pg_url: str, tmp_path: Path, kb: str, files: list[str]) -> tuple[Any, Any]:
    """Sessions on a PostgreSQL home and on a folder home, each with KB ``kb`` (hashing embedder) holding ``files``."""
    sessions = []
    for service in (KnowledgeBaseService(tmp_path / "pg-home", store=pg_url), KnowledgeBaseService(tmp_path / "f")):
        session = Enveloped(service.session())
        assert session.create_knowledge_base(kb, 64, "hashing")["success"]
        session.select_knowledge_base(kb)
        assert session.import_document(files)["data"]["failed_count"] == 0
        sessions.append(session)
    return sessions[0], sessions[1]


def test_stop_words_evidence_and_min_score_on_postgres(pg_url: str, tmp_path: Path) -> None:
    postgres, folder = sessions_on_both_stores(pg_url, tmp_path, "trusted 可信", write_files(tmp_path / "files"))
    for query in (BLOG_QUERY, TEA_QUERY, "mail server section notes"):
        for mode in ("hybrid", "semantic", "keyword"):
            found = postgres.search(SearchRequest(query, mode=mode, top_k=8))["data"]
            expected = folder.search(SearchRequest(query, mode=mode, top_k=8))["data"]
            assert [c["content"] for c in found["chunks"]] == [c["content"] for c in expected["chunks"]]
            assert found["query_terms"] == expected["query_terms"]
            assert found["without_evidence"] == expected["without_evidence"]
            for hit in found["chunks"]:
                assert hit["score"] > 0 and not {"how", "do", "i", "的", "用"} & set(hit["matched_terms"])
                assert hit["doc_name"] != "年会通知.docx" or mode == "semantic"
    scores = [
        c["score"]
        for c in postgres.search(SearchRequest("mail server section notes", mode="keyword"))["data"]["chunks"]
    ]
    assert len(scores) >= 2
    cut = (scores[0] + scores[1]) / 2
    assert postgres.save_search_settings(min_score=cut)["success"]
    again = Enveloped(
        KnowledgeBaseService(tmp_path / "pg-home-2", store=pg_url).session()
    )  # another host reads the default
    again.select_knowledge_base("trusted 可信")
    result = again.search(SearchRequest("mail server section notes", mode="keyword"))
    assert len(result["data"]["chunks"]) == 1 and result["data"]["below_min_score"] == len(scores) - 1
    assert "not shown" in result["message"]


def test_support_terms_on_postgres_as_on_a_folder_store(pg_url: str, tmp_path: Path) -> None:
    """The bigrams reaching into a stop word add to the BM25 of a chunk holding a query term and find none alone
    (水平.txt holds only 的水), with the same hits, scores and explanation on both stores."""
    paths = []
    for name, text in SUPPORT_TEXTS.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
        paths.append(str(tmp_path / name))
    postgres, folder = sessions_on_both_stores(pg_url, tmp_path, "support 支持", paths)
    for mode in ("keyword", "hybrid"):
        found = postgres.search(SearchRequest(TEA_QUERY, mode=mode, top_k=8))["data"]
        expected = folder.search(SearchRequest(TEA_QUERY, mode=mode, top_k=8))["data"]
        assert [c["doc_name"] for c in found["chunks"]] == ["八十度的水.txt", "八十度水.txt"], mode
        assert [c["content"] for c in found["chunks"]] == [c["content"] for c in expected["chunks"]]
        assert [c["score"] for c in found["chunks"]] == pytest.approx([c["score"] for c in expected["chunks"]])
        assert (
            found["query_terms"] == expected["query_terms"]
            and found["without_evidence"] == expected["without_evidence"]
        )
    best = postgres.search(SearchRequest(TEA_QUERY, mode="keyword", top_k=1))["data"]["chunks"][0]
    explained = postgres.explain_search(SearchRequest(TEA_QUERY, mode="keyword"), best["id"])["data"]
    assert explained["support_terms"] == ["度的", "的水"]
    level = postgres.search(SearchRequest("他说的水平", mode="keyword", top_k=1))["data"]["chunks"][0]
    assert level["doc_name"] == "水平.txt"
    alone = postgres.explain_search(SearchRequest(TEA_QUERY, mode="keyword"), level["id"])["data"]
    assert alone["evidence"] is False and alone["rank"] is None and alone["matched_terms"] == []
