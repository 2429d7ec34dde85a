"""The documents a knowledge bundle's graph indexes, shared by the folder store's sync
(:mod:`kb_core.features.bundles.indexing`) and the PostgreSQL one (:mod:`kb_core.features.bundles.postgres`): each
node's indexed text, its display name, which nodes a sync must (re-)index or drop, and their chunks and vectors."""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from kb_core.engines.embedding.base import embed_with_token_ids
from kb_core.features.bundles.graph import GraphState

if TYPE_CHECKING:
    from kb_core.engines.embedding.base import Embedder

BUNDLE_SOURCE = "bundle"
EMBED_BATCH = 256


def node_text(state: GraphState, node: dict[str, Any]) -> str:
    node_type = state.ontology.nodes.get(node["type"])
    if node_type is None:
        return ""
    parts = [node["properties"].get(f) for f in node_type.indexed]
    return "\n\n".join(p for p in parts if isinstance(p, str) and p.strip())


def node_display_name(node: dict[str, Any]) -> str:
    identity = node["identity"]
    if len(identity) == 1:
        name = str(next(iter(identity.values())))
    else:
        name = ", ".join(f"{k}={v}" for k, v in identity.items())
    name = " ".join(name.split())[:200]
    return name or node["id"]


@dataclass
class NewBundleDocument:
    node_id: str
    doc_id: str
    name: str
    text: str
    sha256: str
    chunks: list[Any]


def diff_bundle_documents(
    state: GraphState, live: dict[str, dict[str, Any]]
) -> tuple[list[str], list[tuple[dict[str, Any], str, str]]]:
    """What a sync changes, given the KB's live bundle documents by doc_id: the doc_ids to remove and the nodes
    to (re-)index with their text and its SHA-256. Nodes without indexed text, and unchanged ones, are updated."""
    keep: set[str] = set()
    pending: list[tuple[dict[str, Any], str, str]] = []
    for node_id in sorted(state.nodes):
        node = state.nodes[node_id]
        text = node_text(state, node)
        if not text:
            node.update(doc_id=None, doc_name=None, text_sha256=None)
            continue
        sha = hashlib.sha256(text.encode("utf-8")).hexdigest()
        old = live.get(node.get("doc_id") or "")
        if old is not None and old["sha256"] == sha:
            keep.add(old["doc_id"])
            node.update(doc_name=old["name"], text_sha256=sha)
            continue
        pending.append((node, text, sha))
    return sorted(set(live) - keep), pending


def chunk_and_embed(
    pending: list[tuple[dict[str, Any], str, str]], embedder: Embedder, chunk_size: int
) -> tuple[list[NewBundleDocument], list[np.ndarray]]:
    """The new bundle documents of ``pending`` (a node whose text gives no chunk gets none) and one vector per
    chunk, in order."""
    from kb_core.engines.chunking import chunk_document
    from kb_core.engines.parsing.base import ParsedDocument
    from kb_core.engines.parsing.txt_parser import split_paragraphs

    new_docs: list[NewBundleDocument] = []
    for node, text, sha in pending:
        blocks = tuple(b for b in split_paragraphs(text) if b.text.strip())
        chunks = chunk_document(ParsedDocument("txt", blocks), embedder.tokenizer, chunk_size) if blocks else []
        if not chunks:
            node.update(doc_id=None, doc_name=None, text_sha256=None)
            continue
        doc_id = f"doc_{uuid.uuid4().hex[:16]}"
        new_docs.append(NewBundleDocument(node["id"], doc_id, node_display_name(node), text, sha, chunks))
    contents = [c.content for d in new_docs for c in d.chunks]
    token_ids = [c.token_ids for d in new_docs for c in d.chunks]
    vectors: list[np.ndarray] = []
    for start in range(0, len(contents), EMBED_BATCH):
        end = start + EMBED_BATCH
        vectors.extend(embed_with_token_ids(embedder, contents[start:end], token_ids[start:end]))
    return new_docs, vectors
