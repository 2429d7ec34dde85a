"""The smoke set: what must work on every Python the project allows (3.11 to 3.13).

``scripts/test.sh`` runs the whole suite on Python 3.11 and then this file alone on 3.12 and 3.13
(``scripts/smoke_pythons.sh``), each in a virtual environment of its own. Those environments hold every dependency
but the torch stack: PyPI's torch for Python 3.12/3.13 is a multi-GB CUDA build (only 3.11's CPU build lies on
this machine), so this set embeds with the deterministic ``hashing`` embedder and never loads a local model. On 3.11
the same tests run in the main suite, beside everything else.

It covers one path through each front end: install (the ``kb`` entry point and its help), the CLI (create, import
of TXT, DOCX and legacy DOC, documents, search), an MCP call over stdio, and an app page driven by AppTest.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
DEMO = REPO_ROOT / "data" / "demo"


def kb(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "kb_core.edges.cli", "--home", str(home), *args],
        capture_output=True, text=True, encoding="utf-8", timeout=300, env=env, check=False,
    )


def ok_json(home: Path, *args: str) -> dict[str, Any]:
    done = kb(home, "--json", *args)
    assert done.returncode == 0, done.stdout + done.stderr
    envelope = json.loads(done.stdout)
    assert envelope["success"], envelope
    return envelope["data"]


@pytest.fixture(scope="module")
def filled_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home with one hashing KB holding a Chinese text, an English DOCX and a Chinese legacy DOC from the demo."""
    home = tmp_path_factory.mktemp("smoke") / "home"
    ok_json(home, "create", "烟雾测试", "--chunk-size", "128", "--embedding-model", "hashing")
    ok_json(home, "select", "烟雾测试")
    files = [DEMO / "知识库工作台概述.txt", DEMO / "hybrid_search.docx", DEMO / "知识库管理.doc"]
    data = ok_json(home, "import", *map(str, files))
    assert data["failed_count"] == 0 and len(data["success_files"]) == 3, data
    return home


def test_the_command_line_is_installed_and_documents_itself() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "kb_core.edges.cli", "--help"],
        capture_output=True,
        text=True,
        encoding="utf-8",
        check=False,
    )
    assert done.returncode == 0 and "import" in done.stdout and "search" in done.stdout


def test_cli_imports_the_three_formats_and_finds_them(filled_home: Path) -> None:
    documents = ok_json(filled_home, "docs")["documents"]
    assert {d["name"] for d in documents} == {"知识库工作台概述.txt", "hybrid_search.docx", "知识库管理.doc"}
    assert all(d["status"] == "ready" and d["chunk_count"] > 0 for d in documents), documents
    hits = ok_json(filled_home, "search", "混合检索", "--mode", "keyword")["chunks"]
    assert hits and all("混合" in h["content"] or "检索" in h["content"] for h in hits), hits
    english = ok_json(filled_home, "search", "hybrid search weights")["chunks"]
    assert english[0]["doc_name"] == "hybrid_search.docx", [h["doc_name"] for h in english]
    assert all(0.0 <= h["score"] <= 1.0 for h in english)


def test_an_mcp_client_lists_and_searches_over_stdio(filled_home: Path) -> None:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "kb_core.edges.cli", "--home", str(filled_home), "mcp"],
        cwd=str(REPO_ROOT),
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
    )
    seen: dict[str, Any] = {}

    async def main() -> None:
        with open(filled_home.parent / "mcp.log", "w", encoding="utf-8") as log:
            async with stdio_client(params, errlog=log) as (read, write):  # noqa: SIM117
                async with ClientSession(read, write) as client:
                    await client.initialize()
                    seen["tools"] = {tool.name for tool in (await client.list_tools()).tools}
                    await client.call_tool("select_knowledge_base", {"kb_name": "烟雾测试"})
                    seen["search"] = await client.call_tool("search", {"query": "知识库管理", "top_k": 3})

    anyio.run(main)
    assert {"search", "import_document", "list_knowledge_bases"} <= seen["tools"]
    result = seen["search"]
    assert not result.isError, result.content[0].text
    assert result.structuredContent["success"] and result.structuredContent["data"]["chunks"]


def test_an_app_page_renders_the_knowledge_bases(filled_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("KB_HOME", str(filled_home))
    monkeypatch.setenv("KB_DEMO", "0")
    monkeypatch.chdir(REPO_ROOT)
    app = AppTest.from_file(str(REPO_ROOT / "app.py"), default_timeout=120).run()
    assert not app.exception, app.exception
    shown = " ".join(str(element.value) for element in app.markdown) + " ".join(str(t.value) for t in app.title)
    assert "烟雾测试" in shown or any("烟雾测试" in str(df.value) for df in app.dataframe), shown[:2000]
