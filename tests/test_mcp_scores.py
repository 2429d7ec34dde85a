"""MCP: agents read [0, 1] scores, choose weights and weighting, get a hit's breakdown from explain_search, and a
KB default saved elsewhere (CLI, app) changes what the MCP tools do."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from mcp import ClientSession

from kb_core import KnowledgeBaseService
from kb_core.edges.envelopes import Enveloped
from tests.test_mcp_server import call, ok, rpc_error, run_stdio, tool_error

TEXTS = {
    "hybrid.txt": "Hybrid retrieval combines keyword search with dense vector search and fuses their scores.",
    "bm25.txt": "BM25 ranks documents by term frequency and inverse document frequency of the query terms.",
    "faiss.txt": "FAISS performs fast similarity search over dense embeddings stored in a vector index.",
    "chunks.txt": "Chunking splits long documents into passages of limited length before embedding them.",
    "混合检索.txt": "混合检索结合了关键词检索和向量检索，并按权重融合两者的分数。",
    "分词.txt": "中文分词使用结巴分词和二元组，关键词检索因此能匹配中文词语。",
}
SCORE = re.compile(r"^\d+\. \((-?\d+\.\d+)\) ", re.MULTILINE)


def make_home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    files = tmp_path / "files"
    files.mkdir()
    for name, text in TEXTS.items():
        (files / name).write_text(text, encoding="utf-8")
    session = Enveloped(KnowledgeBaseService(home).session())
    assert session.create_knowledge_base("scores", 64, "hashing")["success"]
    assert session.create_knowledge_base("other", 64, "hashing")["success"]
    paths = [str(files / name) for name in TEXTS]
    assert session.import_document(paths, kb_name="scores")["success"]
    assert session.import_document(paths[:3], kb_name="other")["success"]
    return home


def recompute(b: dict) -> float:
    fused = b["vector_weight"] * b["vector_normalized"] + b["keyword_weight"] * b["keyword_normalized"]
    return (1 - b["jaccard_weight"]) * fused + b["jaccard_weight"] * b["jaccard"]


def test_agents_read_zero_one_scores_choose_weights_and_get_explanations(tmp_path: Path) -> None:
    home = make_home(tmp_path)

    async def scenario(s: ClientSession) -> None:
        for mode in ("hybrid", "semantic", "keyword"):
            for query in ("dense vector search", "关键词检索 中文", "term frequency of query terms"):
                result = await call(s, "search_knowledge_base", query=query, mode=mode, limit=10)
                assert not result.isError, result.content[0].text
                printed = [float(x) for x in SCORE.findall(result.content[0].text)]
                hits = result.structuredContent["data"]["hits"]
                assert printed and len(printed) == len(hits)
                assert all(0.0 <= x <= 1.0 for x in printed), (mode, query, printed)
                assert all(0.0 <= h["score"] <= 1.0 for h in hits)
                assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)
                # hits of both KBs share one scale; the same text in both is listed once, the copy counted (#25)
                snippets = [h["snippet"] for h in hits]
                assert len(snippets) == len(set(snippets))
                assert result.structuredContent["data"]["duplicates_dropped"] > 0 or mode != "hybrid" or "中" in query

        await ok(s, "select_knowledge_base", kb_name="scores")
        rag = await ok(s, "rag_search", keywords=["dense", "vector"], top_k=5)
        assert rag["chunks"] and all(0.0 <= c["score"] <= 1.0 for c in rag["chunks"])

        asked = await ok(s, "search", query="dense vector search", top_k=4, vector_weight=0.2)
        weights = asked["data"]["weights"]
        assert weights["used"] == pytest.approx({"vector": 0.2, "keyword": 0.8})
        assert weights["requested"] == pytest.approx({"vector": 0.2, "keyword": 0.8})
        assert set(weights["auto"]) == {"vector", "keyword"}
        for chunk in asked["data"]["chunks"]:
            b = chunk["breakdown"]
            assert (b["vector_weight"], b["keyword_weight"]) == pytest.approx((0.2, 0.8))
            assert chunk["score"] == pytest.approx(recompute(b))
        auto = await ok(s, "search", query="dense vector search", top_k=4, weighting="auto")
        assert auto["data"]["weights"]["weighting"] == "auto"
        assert auto["data"]["weights"]["used"] == pytest.approx(auto["data"]["weights"]["auto"])

        second = asked["data"]["chunks"][1]
        explained = await call(
            s, "explain_search", query="dense vector search", chunk_id=second["id"], vector_weight=0.2
        )
        assert not explained.isError, explained.content[0].text
        data = explained.structuredContent["data"]
        assert data["rank"] == 2 and data["score"] == pytest.approx(second["score"])
        for key, value in second["breakdown"].items():
            expected = pytest.approx(value) if isinstance(value, float) else value
            assert data["breakdown"][key] == expected, key
        assert data["above"]["id"] == asked["data"]["chunks"][0]["id"]
        text = explained.content[0].text
        assert text.startswith("Ranked 2 of ") and "Weights used: vector 0.20, keyword 0.80" in text
        await tool_error(s, "explain_search", "ITEM_NOT_FOUND", query="x", chunk_id="chk_missing")
        await rpc_error(s, "search", -32602, query="x", vector_weight=1.5)
        await rpc_error(s, "search", -32602, query="x", weighting="adaptive")

        # a default saved by another process (the CLI or the app) applies on the next call
        saved = Enveloped(KnowledgeBaseService(home).session()).save_search_settings(
            kb_name="scores", vector_weight=0.4, keyword_weight=0.6
        )
        assert saved["success"]
        later = await ok(s, "search", query="dense vector search", top_k=3)
        assert later["data"]["weights"]["used"] == pytest.approx({"vector": 0.4, "keyword": 0.6})
        again = await ok(s, "explain_search", query="dense vector search", chunk_id=later["data"]["chunks"][0]["id"])
        assert again["data"]["rank"] == 1 and again["data"]["settings"]["vector_weight"] == pytest.approx(0.4)

    run_stdio(home, scenario, tmp_path / "server.log")
