"""Query length limits: a query over 4,000 characters, more than 32 rag_search keywords or a keyword over 100
characters is INVALID_ARGUMENT (−32602 over MCP) on every front end, before any work is done. Four 1 MB Chinese
queries from a read token once cost 26-29 s of CPU each and slowed every other search."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
from mcp import ClientSession

from kb_core import KnowledgeBaseService
from kb_core.base.validation import QUERY_MAX_CHARS, RAG_KEYWORD_MAX_CHARS, RAG_MAX_KEYWORDS
from kb_core.edges.cli.main import main
from kb_core.edges.envelopes import Enveloped
from kb_core.features.results import SearchRequest

REPO = Path(__file__).resolve().parents[1]
LONG = "检索" * (QUERY_MAX_CHARS // 2) + "!"  # one character over the limit
TOO_MANY = ["词"] * (RAG_MAX_KEYWORDS + 1)
TOO_LONG = ["fine", "k" * (RAG_KEYWORD_MAX_CHARS + 1)]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    session = Enveloped(KnowledgeBaseService(tmp_path / "home").session("cli"))
    assert session.create_knowledge_base("k", 64, embedding_model="hashing")["success"]
    assert session.select_knowledge_base("k")["success"]
    (tmp_path / "a.txt").write_text("检索 retrieval and search 搜索", encoding="utf-8")
    assert session.import_document([str(tmp_path / "a.txt")])["success"]
    return tmp_path / "home"


def test_the_session_refuses_long_queries_and_keywords_at_once(home: Path) -> None:
    session = Enveloped(KnowledgeBaseService(home).session("cli"))
    chunk = session.search(SearchRequest("检索"))["data"]["chunks"][0]["id"]
    started = time.perf_counter()
    for envelope in (
        session.search(SearchRequest(LONG)),
        session.explain_search(SearchRequest(LONG), chunk),
        session.rag_search(TOO_MANY),
        session.rag_search(TOO_LONG),
    ):
        assert envelope["error"]["code"] == "INVALID_ARGUMENT", envelope
        assert "at most" in envelope["message"] and envelope["error"]["details"]["field"] in ("query", "keywords")
    assert time.perf_counter() - started < 2  # refused before any embedding
    assert session.search(SearchRequest(LONG[:-1]))["success"]  # exactly the limit is accepted
    assert session.rag_search(["词"] * RAG_MAX_KEYWORDS)["success"]
    assert session.rag_search(["k" * RAG_KEYWORD_MAX_CHARS])["success"]


def test_the_cli_refuses_a_long_query(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--home", str(home), "--json", "search", LONG]) == 1
    answer = json.loads(capsys.readouterr().out)
    assert answer["error"]["code"] == "INVALID_ARGUMENT" and f"at most {QUERY_MAX_CHARS:,}" in answer["message"]


def test_mcp_answers_minus_32602(home: Path, tmp_path: Path) -> None:
    from tests.test_mcp_server import rpc_error, run_stdio

    async def scenario(s: ClientSession) -> None:
        await s.call_tool("select_knowledge_base", {"kb_name": "k"})
        for name, arguments in (
            ("search", {"query": LONG}),
            ("search_knowledge_base", {"query": LONG}),
            ("explain_search", {"query": LONG, "chunk_id": "chk_x"}),
            ("rag_search", {"keywords": TOO_MANY}),
            ("rag_search", {"keywords": TOO_LONG}),
        ):
            error = await rpc_error(s, name, -32602, **arguments)
            assert "at most" in error.error.message, (name, error.error.message)

    run_stdio(home, scenario, tmp_path / "stderr.log")


def test_the_app_shows_the_refusal(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("KB_HOME", str(home))
    monkeypatch.setenv("KB_DEMO", "0")
    test = AppTest.from_file(str(REPO / "app.py"), default_timeout=60)
    test.run()
    test.switch_page("pages/search_lab.py").run()
    test.text_input(key="lab_query").input(LONG)
    test.button(key="FormSubmitter:lab_form-Search").click().run()
    assert not test.exception
    assert any("INVALID_ARGUMENT" in str(e.value) and "at most" in str(e.value) for e in test.error), test.error
