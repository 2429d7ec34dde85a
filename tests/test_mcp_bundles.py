"""The knowledge-bundle MCP tools end to end: an agent fetches the schema, writes a YAML bundle, imports it,
searches it, follows its edges, and gets exact error paths for a broken bundle (the SDK's client over stdio).

HTTP (read tokens cannot import bundles, path confinement) is tested with the module's server in
tests/test_mcp_server.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from jsonschema import Draft7Validator
from mcp import ClientSession

from kb_core.features.bundles.validation import node_id
from tests.test_mcp_server import call, ok, rpc_error, run_stdio, tool_error

BUNDLE = """\
- type: Document
  doc_uri: "doc-001"
  title: "Lighthouses"
  content: "A lighthouse keeper trims the wick and winds the clockwork every evening."
- type: Document
  doc_uri: "doc-002"
  content: "长城是中国古代的军事防御工程，东起山海关，西至嘉峪关。"
- type: Document
  doc_uri: "doc-003"
  content: "Harbour pilots guide ships past the rocks when fog hides the beam."
- type: Document
  action: delete
  doc_uri: "doc-old"
- type: REFERENCES
  source: { doc_uri: "doc-001" }
  target: { doc_uri: "doc-002" }
  ref_type: "citation"
- type: REFERENCES
  source: { doc_uri: "doc-003" }
  target: { doc_uri: "doc-001" }
"""


def test_stdio_schema_bundle_import_search_and_exact_errors(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle.yaml"
    bundle.write_text(BUNDLE, encoding="utf-8")

    async def scenario(s: ClientSession) -> None:
        tools = {t.name: t for t in (await s.list_tools()).tools}
        assert tools["get_knowledge_schema"].outputSchema and tools["import_knowledge_bundle"].outputSchema
        assert tools["import_knowledge_bundle"].inputSchema["required"] == ["temp_file_path"]
        assert "Validation error at [4].doc_uri" in (tools["import_knowledge_bundle"].description or "")
        assert tools["search"].inputSchema["properties"]["expand_graph"]["default"] is False

        await tool_error(s, "get_knowledge_schema", "NO_CURRENT_KB")
        await ok(s, "create_knowledge_base", kb_name="graph", chunk_size=64, embedding_model="hashing")
        await ok(s, "select_knowledge_base", kb_name="graph")

        # contract one: the schema, as structured content and as JSON text
        result = await call(s, "get_knowledge_schema")
        data = result.structuredContent["data"]
        assert json.loads(result.content[0].text) == data
        schema = data["full_bundle_schema"]
        assert schema["$schema"] == "http://json-schema.org/draft-07/schema#" and schema["type"] == "array"
        titles = {option["title"] for option in schema["items"]["oneOf"]}
        assert {"Document Node", "REFERENCES Edge"} <= titles
        validator = Draft7Validator(schema)
        assert not list(validator.iter_errors(yaml.safe_load(data["example_yaml"])))
        assert not list(validator.iter_errors(yaml.safe_load(BUNDLE)))  # incl. the spec's delete by identity

        # contract two: the bundle, applied as a unit; the temp file is deleted after success
        imported = await ok(s, "import_knowledge_bundle", temp_file_path=str(bundle))
        assert imported["data"]["status"] == "success"
        stats = imported["data"]["stats"]
        assert (stats["nodes_upserted"], stats["edges_upserted"], stats["nodes_total"]) == (3, 2, 3)
        assert stats["chunks_indexed"] >= 3
        assert not bundle.exists()

        documents = (await ok(s, "list_documents"))["data"]["documents"]
        assert sorted(d["name"] for d in documents) == ["doc-001", "doc-002", "doc-003"]
        assert {d["source"] for d in documents} == {"bundle"}

        found = await call(s, "search_knowledge_base", query="lighthouse keeper wick", mode="keyword", limit=1)
        hits = found.structuredContent["data"]["hits"]
        assert hits[0]["title"] == "doc-001" and found.content[0].text.startswith("1. (")
        chinese = (await ok(s, "search_knowledge_base", query="长城 防御", mode="keyword", limit=1))["data"]["hits"]
        assert chinese[0]["title"] == "doc-002"

        # graph expansion: the hit on doc-001 brings the documents it is linked with
        expanded = await call(
            s, "search_knowledge_base", query="lighthouse keeper wick", mode="keyword", limit=1, expand_graph=True
        )
        rows = expanded.structuredContent["data"]["hits"]
        assert rows[0]["title"] == "doc-001" and not rows[0]["expanded"]
        assert {r["title"] for r in rows[1:]} == {"doc-002", "doc-003"} and all(r["expanded"] for r in rows[1:])
        assert all(r["via"].startswith("REFERENCES ") for r in rows[1:])
        assert "[via REFERENCES" in expanded.content[0].text
        searched = await ok(s, "search", query="lighthouse keeper wick", top_k=1, expand_graph=True)
        chunks = searched["data"]["chunks"]
        assert chunks[0]["graph"]["node_id"] == node_id("Document", {"doc_uri": "doc-001"})
        assert [c.get("expanded", False) for c in chunks] == [False, True, True]
        assert chunks[1]["breakdown"]["graph_expansion"]["edge_type"] == "REFERENCES"
        plain = await ok(s, "search", query="lighthouse keeper wick", top_k=1)
        assert len(plain["data"]["chunks"]) == 1

        node = await ok(s, "get_item", id=node_id("Document", {"doc_uri": "doc-001"}))
        assert node["data"]["properties"]["title"] == "Lighthouses"
        assert sorted(n["direction"] for n in node["data"]["neighbours"]) == ["in", "out"]

        # a broken bundle: refused as a whole with exact paths, nothing changed, the file kept
        broken = tmp_path / "broken.yaml"
        broken.write_text(
            '- type: Document\n  doc_uri: "doc-004"\n  content: "fine"\n'
            '- type: Document\n  content: "no identity"\n'
            '- type: Documnet\n  doc_uri: "doc-005"\n'
            '- type: REFERENCES\n  source: { doc_uri: "doc-001" }\n  target: { doc_uri: "doc-002" }\n  weight: 3\n',
            encoding="utf-8",
        )
        refused = await tool_error(s, "import_knowledge_bundle", "BUNDLE_INVALID", temp_file_path=str(broken))
        text = refused.content[0].text
        assert 'Validation error at [1].doc_uri: "doc_uri" is required' in text
        assert "Entity type 'Documnet' is not defined. Did you mean 'Document'?" in text
        assert "[3].weight" in text
        paths = [e["path"] for e in refused.structuredContent["error"]["details"]["errors"]]
        assert paths == ["[1].doc_uri", "[2].type", "[3].weight"]
        assert broken.exists()

        orphan = tmp_path / "orphan.yaml"
        orphan.write_text(
            '- type: REFERENCES\n  source: { doc_uri: "doc-001" }\n  target: { doc_uri: "doc-404" }\n',
            encoding="utf-8",
        )
        refused = await tool_error(s, "import_knowledge_bundle", "BUNDLE_INVALID", temp_file_path=str(orphan))
        assert (
            """Cannot create 'REFERENCES' relation: Target 'Document' with identity {doc_uri: "doc-404"} not found."""
            in refused.content[0].text
        )
        assert orphan.exists()
        assert (await ok(s, "list_documents"))["data"]["count"] == 3

        await tool_error(s, "import_knowledge_bundle", "FILE_NOT_FOUND", temp_file_path=str(tmp_path / "gone.yaml"))
        (tmp_path / "bad.yaml").write_text("- type: Document\n  doc_uri: [unclosed\n", encoding="utf-8")
        await tool_error(s, "import_knowledge_bundle", "BUNDLE_INVALID", temp_file_path=str(tmp_path / "bad.yaml"))
        await rpc_error(s, "import_knowledge_bundle", -32602, temp_file_path="  ")
        await rpc_error(s, "import_knowledge_bundle", -32602)

        # fixed and retried: deleting a node deletes its edges
        broken.write_text('- type: Document\n  action: delete\n  doc_uri: "doc-001"\n', encoding="utf-8")
        fixed = await ok(s, "import_knowledge_bundle", temp_file_path=str(broken))
        assert fixed["data"]["stats"]["nodes_deleted"] == 1 and fixed["data"]["stats"]["edges_cascaded"] == 2
        assert (await ok(s, "list_documents"))["data"]["count"] == 2 and not broken.exists()

    run_stdio(tmp_path / "home", scenario, tmp_path / "stderr.log")
