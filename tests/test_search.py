"""Search through the service: BM25 exactness after imports and deletions, breakdowns, modes, filters."""

from __future__ import annotations

import math
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from kb_core.edges.envelopes import Enveloped
from kb_core.engines.keyword_index import BM25Parameters
from kb_core.features.results import SearchRequest

ENGLISH = [
    "Hybrid retrieval combines keyword search with dense vectors.",
    "BM25 ranks documents by term frequency and inverse document frequency.",
    "FAISS performs fast similarity search over dense embeddings.",
    "Chunking splits long documents into passages of limited length.",
    "The knowledge base stores documents, chunks and vectors on disk.",
    "Score breakdowns explain why a chunk ranks where it does.",
]
CHINESE = [
    "混合检索结合了关键词检索和向量检索。",
    "知识库把文档切分成片段并计算向量。",
    "分数解释说明每个结果为什么排在这个位置。",
    "中文分词使用结巴分词和二元组。",
]


@pytest.fixture
def kb(session, tmp_path: Path):
    session.create_knowledge_base("s", 64, embedding_model="hashing")
    session.select_knowledge_base("s")
    for i, text in enumerate(ENGLISH + CHINESE):
        path = tmp_path / f"doc{i}.txt"
        path.write_text(text + "\n\n" + text.replace(".", " again."), encoding="utf-8")
        session.import_document([str(path)])
    docx = tmp_path / "extra.docx"
    import docx as python_docx

    document = python_docx.Document()
    document.add_heading("Retrieval", level=1)
    document.add_paragraph("Keyword search and vector search in one DOCX file.")
    document.save(docx)
    session.import_document([str(docx)])
    return session


def reference_match_bm25(query_terms: list[str], texts: list[list[str]]) -> float:
    """The BM25 of a chunk of average length holding each query term once: Σ idf over the terms some chunk holds."""
    n = len(texts)
    df = Counter(term for tokens in texts for term in set(tokens))
    return sum(math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5)) for t in dict.fromkeys(query_terms) if df[t])


def reference_bm25(query_terms: list[str], texts: list[list[str]], k1: float, b: float) -> list[float]:
    """BM25 from scratch, written from the formula (Lucene idf), over exactly the given token lists."""
    n = len(texts)
    avgdl = sum(len(t) for t in texts) / n
    df = Counter(term for tokens in texts for term in set(tokens))
    scores = []
    for tokens in texts:
        tf = Counter(tokens)
        score = 0.0
        for term in dict.fromkeys(query_terms):
            if tf[term]:
                idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
                score += idf * tf[term] * (k1 + 1) / (tf[term] + k1 * (1 - b + b * len(tokens) / avgdl))
        scores.append(score)
    return scores


def live_chunks(service, session) -> list[dict]:
    snapshot = service.reader(session.operations.current_kb().id).snapshot()
    rows = []
    for index, segment in enumerate(snapshot.segments):
        mask = snapshot.live_mask(index)
        rows += [row for row, alive in zip(segment.chunks.to_pylist(), mask, strict=True) if alive]
    return rows


def test_bm25_scores_equal_a_from_scratch_index_after_imports_and_deletions(kb, service) -> None:
    kb.delete_document("doc1.txt")
    kb.delete_document("doc7.txt")
    chunks = live_chunks(service, kb)
    analyzer = service.analyzer
    params = BM25Parameters()
    for query in ("keyword search vectors", "检索 向量", "documents chunks", "BM25 ranks"):
        texts = [analyzer.tokens(c["content"]) for c in chunks]
        expected = reference_bm25(analyzer.tokens(query), texts, params.k1, params.b)
        reference = reference_match_bm25(analyzer.tokens(query), texts)
        by_id = {c["chunk_id"]: s for c, s in zip(chunks, expected, strict=True)}
        hits = kb.search(SearchRequest(query, mode="keyword", top_k=100))["data"]["chunks"]
        assert hits, query
        for hit in hits:
            # the raw BM25 is exact; the score measures it in units of the query's reference match
            assert hit["breakdown"]["keyword_score"] == pytest.approx(by_id[hit["id"]], abs=1e-6)
            assert hit["breakdown"]["keyword_reference"] == pytest.approx(reference, abs=1e-6)
            assert hit["score"] == pytest.approx(1 - math.exp(-by_id[hit["id"]] / reference), abs=1e-6)
            assert 0 < hit["score"] < 1
        assert len(hits) == sum(1 for s in expected if s > 0) or len(hits) <= 100
        assert all(h["doc_name"] not in ("doc1.txt", "doc7.txt") for h in hits)


def test_every_breakdown_recomputes_its_final_score(kb) -> None:
    for mode in ("hybrid", "semantic", "keyword"):
        for query in ("dense vector search", "知识库 向量", "why a chunk ranks"):
            for hit in kb.search(SearchRequest(query, mode=mode, top_k=8, jaccard_weight=0.2))["data"]["chunks"]:
                b = hit["breakdown"]
                assert b["vector_contribution"] == pytest.approx(b["vector_weight"] * b["vector_normalized"])
                assert b["keyword_contribution"] == pytest.approx(b["keyword_weight"] * b["keyword_normalized"])
                fused = b["vector_contribution"] + b["keyword_contribution"]
                assert b["fused_score"] == pytest.approx(fused)
                final = (1 - b["jaccard_weight"]) * fused + b["jaccard_weight"] * b["jaccard"]
                assert b["final_score"] == pytest.approx(final) == pytest.approx(hit["score"])


def test_jaccard_and_matched_terms_agree_with_the_chunk_text(kb, service) -> None:
    # Both come from the keyword index's postings, not from re-analysing the text: check them against the text. The
    # matched terms are the query's words as written (``dense``, not the stem ``dens``) whose terms the chunk holds.
    kb.delete_document("doc2.txt")
    analyzer = service.analyzer
    for mode in ("hybrid", "semantic", "keyword"):
        for query in ("dense vector search", "知识库 向量 检索", "documents and chunks on disk"):
            hits = kb.search(SearchRequest(query, mode=mode, top_k=8, jaccard_weight=0.2))["data"]["chunks"]
            assert hits, (mode, query)
            words = analyzer.query_terms(query)
            query_terms = set(words.terms)  # the terms searched: stop words and bigrams that are no word left out
            for hit in hits:
                chunk_terms = set(analyzer.tokens(hit["content"]))
                expected = len(query_terms & chunk_terms) / len(query_terms | chunk_terms)
                assert hit["breakdown"]["jaccard"] == pytest.approx(expected)
                assert hit["matched_terms"] == words.words_held(sorted(set(words.terms) & chunk_terms))
                assert all(word in query for word in hit["matched_terms"])


def test_chunk_rows_are_memory_mapped_not_loaded(kb, service) -> None:
    import pyarrow as pa

    from kb_core.store.reader import LoadedSegment

    folder = service.reader(kb.operations.current_kb().id).snapshot().segments[0].folder
    before = pa.total_allocated_bytes()
    table = LoadedSegment(folder).chunks
    assert table.num_rows > 0 and table.get_total_buffer_size() > 0
    assert pa.total_allocated_bytes() - before < table.get_total_buffer_size()


def test_segments_written_without_a_row_store_search_the_same(kb, home: Path) -> None:
    from kb_core import KnowledgeBaseService

    queries = ("keyword search vectors", "检索 向量", "why a chunk ranks")
    def top5(q: str) -> list[tuple[str, str]]:
        return [(h["id"], h["content"]) for h in kb.search(SearchRequest(q, top_k=5))["data"]["chunks"]]

    before = [top5(q) for q in queries]
    removed = list(home.glob("kbs/*/segments/*/chunks.arrow"))
    assert removed
    for path in removed:
        path.unlink()
    for other in home.glob("kbs/*/segments/*/chunks.arrow"):  # whichever segment the hits come from
        other.write_bytes(b"not arrow")
    fresh = Enveloped(KnowledgeBaseService(home).session())
    fresh.select_knowledge_base("s")
    after = [
        [(h["id"], h["content"]) for h in fresh.search(SearchRequest(q, top_k=5))["data"]["chunks"]] for q in queries
    ]
    assert after == before


def test_hits_have_the_spec_fields_and_are_sorted(kb) -> None:
    result = kb.search(SearchRequest("hybrid retrieval", top_k=3))
    # only chunks with evidence are hits (#25): at most top_k
    assert result["success"] and 1 <= result["data"]["count"] == len(result["data"]["chunks"]) <= 3
    chunks = result["data"]["chunks"]
    assert {"id", "doc_id", "content", "tokens", "chunk_index", "doc_name", "score"} <= set(chunks[0])
    assert [c["score"] for c in chunks] == sorted((c["score"] for c in chunks), reverse=True)


@pytest.mark.parametrize("query", ["search over dense vectors", "keyword search"])
def test_weights_one_zero_reproduce_the_pure_orderings(kb, query: str) -> None:
    def ranking(**settings: object) -> list[tuple[str, float]]:
        return [(h["id"], h["score"]) for h in kb.search(SearchRequest(query, top_k=8, **settings))["data"]["chunks"]]

    semantic, keyword = ranking(mode="semantic"), ranking(mode="keyword")
    # For these queries the two pure orderings differ, so each check below can tell the weights apart.
    assert len(semantic) >= 2 and len(keyword) >= 3 and [i for i, _ in semantic] != [i for i, _ in keyword]
    vector_only = ranking(mode="hybrid", vector_weight=1.0, keyword_weight=0.0, language_guard=False)
    keyword_only = ranking(mode="hybrid", vector_weight=0.0, keyword_weight=1.0, language_guard=False)
    assert [i for i, _ in vector_only] == [i for i, _ in semantic]
    assert [i for i, _ in keyword_only] == [i for i, _ in keyword]
    assert [s for _, s in vector_only] == pytest.approx([s for _, s in semantic], abs=1e-9)
    assert [s for _, s in keyword_only] == pytest.approx([s for _, s in keyword], abs=1e-9)


def test_filters_by_document_name_and_file_type(kb) -> None:
    hits = kb.search(SearchRequest("keyword search", file_types=["docx"], top_k=5))["data"]["chunks"]
    assert hits and {h["doc_name"] for h in hits} == {"extra.docx"}
    assert hits[0]["chapter"] == "Retrieval"
    hits = kb.search(SearchRequest("search", doc_names=["DOC0.txt"], top_k=5))["data"]["chunks"]
    assert {h["doc_name"] for h in hits} == {"doc0.txt"}


def test_search_across_several_kbs(kb, tmp_path: Path) -> None:
    kb.create_knowledge_base("other", 64, embedding_model="hashing")
    path = tmp_path / "o.txt"
    path.write_text("Keyword search lives in the other knowledge base too.", encoding="utf-8")
    kb.import_document([str(path)], kb_name="other")
    hits = kb.search(SearchRequest("keyword search", kb_names=["s", "other"], top_k=20))["data"]["chunks"]
    assert {h["kb_name"] for h in hits} == {"s", "other"}


def test_saved_settings_apply_when_a_call_gives_none(kb) -> None:
    saved = kb.save_search_settings(mode="keyword", top_k=2)
    assert saved["success"] and saved["data"]["search_settings"] == {"mode": "keyword", "top_k": 2}
    result = kb.search(SearchRequest("documents"))["data"]
    assert result["settings"]["mode"] == "keyword" and result["count"] <= 2
    assert kb.search(SearchRequest("documents", mode="hybrid", top_k=4))["data"]["settings"]["mode"] == "hybrid"
    assert kb.save_search_settings(vector_weight=3)["error"]["code"] == "INVALID_ARGUMENT"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"mode": "fuzzy"}, "mode"), ({"top_k": 0}, "top_k"), ({"vector_weight": -1}, "vector_weight")],
)
def test_bad_search_arguments_name_the_field(kb, kwargs: dict, field: str) -> None:
    result = kb.search(SearchRequest("x", **kwargs))
    assert result["error"]["code"] == "INVALID_ARGUMENT" and field in result["message"]


def test_empty_query_is_refused(kb) -> None:
    assert kb.search(SearchRequest("   "))["error"]["code"] == "INVALID_ARGUMENT"


def test_chinese_query_on_english_model_warns(kb) -> None:
    result = kb.search(SearchRequest("混合检索", top_k=3))
    assert result["data"]["chunks"][0]["content"].startswith("混合检索")
    assert not result["data"]["warnings"]  # the hashing embedder is not an English-only model


def test_rag_search_ranks_chunks_with_all_keywords_first(kb) -> None:
    result = kb.rag_search(["向量", "检索"], top_k=3)
    assert result["success"] and result["degraded"] is False and result["total_results"] == len(result["chunks"])
    first = result["chunks"][0]
    assert "向量" in first["chunk_text"] and "检索" in first["chunk_text"]
    assert set(first["metadata"]) == {"source", "chapter", "page"}
    assert [c["matched_keywords"] for c in result["chunks"]] == sorted(
        (c["matched_keywords"] for c in result["chunks"]), reverse=True
    )


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"keywords": []}, "at least one"),
        ({"keywords": ["a"], "top_k": 11}, "top_k"),
        ({"keywords": ["a"], "timeout": 0.01}, "timeout"),
        ({"keywords": ["a", " "]}, "non-empty"),
    ],
)
def test_rag_search_validates(kb, kwargs: dict, fragment: str) -> None:
    result = kb.rag_search(**kwargs)
    assert result["error"]["code"] == "INVALID_ARGUMENT" and fragment in result["message"]


def test_rag_search_degrades_on_timeout(kb, service, monkeypatch) -> None:
    original = service.search_kb

    def slow(*args, **kwargs):
        time.sleep(0.5)
        return original(*args, **kwargs)

    monkeypatch.setattr(service, "search_kb", slow)
    result = kb.rag_search(["vectors"], timeout=0.1)
    assert result["success"] is True and result["degraded"] is True and result["chunks"] == []


def test_get_item_returns_documents_and_chunks_with_neighbours(kb, tmp_path: Path) -> None:
    path = tmp_path / "long.txt"
    path.write_text("\n\n".join(f"Paragraph {i} is about subject {i * 3}. " * 4 for i in range(12)), encoding="utf-8")
    kb.import_document([str(path)])
    hit = kb.search(SearchRequest("subject 18", mode="keyword", top_k=1))["data"]["chunks"][0]
    item = kb.get_item(hit["id"])["data"]
    assert item["type"] == "chunk" and item["chunk"]["content"] == hit["content"]
    assert item["previous"] or item["next"]
    document = kb.get_item(hit["doc_id"])["data"]
    assert document["type"] == "document" and "Paragraph 11" in document["text"]
    assert kb.get_item("chk_nope")["error"]["code"] == "ITEM_NOT_FOUND"


def test_get_document_info(kb) -> None:
    doc_id = kb.list_documents()["data"]["documents"][0]["id"]
    result = kb.get_document_info([doc_id, "doc_missing"])
    assert result["success"] and result["data"]["total_docs"] == 1 and result["data"]["requested"] == 2
    info = result["data"]["documents"][0]
    assert info["size_human"].endswith("B") and info["parse_status"] == "ready" and info["source"] == "path"
    assert result["data"]["errors"][0]["id"] == "doc_missing"
    assert "at least one" in kb.get_document_info([])["message"]
    assert "at most 10" in kb.get_document_info([str(i) for i in range(11)])["message"]


@pytest.mark.model
def test_real_model_semantic_search_and_language_warning(session, tmp_path: Path) -> None:
    session.create_knowledge_base("real", 128, "all-MiniLM-L6-v2")
    session.select_knowledge_base("real")
    for i, text in enumerate(ENGLISH + CHINESE):
        path = tmp_path / f"r{i}.txt"
        path.write_text(text, encoding="utf-8")
    session.import_document([str(tmp_path / f"r{i}.txt") for i in range(len(ENGLISH + CHINESE))])
    hits = session.search(SearchRequest("nearest neighbour lookup of embeddings", mode="semantic", top_k=2))["data"][
        "chunks"
    ]
    assert "FAISS" in hits[0]["content"]
    result = session.search(SearchRequest("向量检索", top_k=3))
    assert result["data"]["warnings"] and "does not cover" in result["data"]["warnings"][0]
    assert any("向量检索" in h["content"] for h in result["data"]["chunks"][:2])
    assert result["data"]["chunks"][0]["breakdown"]["vector_weight"] == 0.0


def test_verify_reports_a_damaged_row_store(kb, service, home: Path) -> None:
    from kb_core.store.verify import verify_home

    assert verify_home(service.home) == []
    row_store = sorted(home.glob("kbs/*/segments/*/chunks.arrow"))[0]
    row_store.write_bytes(row_store.read_bytes()[:100])
    problems = verify_home(service.home)
    assert len(problems) == 1 and "chunks.arrow unreadable" in problems[0]
    from kb_core import KnowledgeBaseService

    for other in home.glob("kbs/*/segments/*/chunks.arrow"):  # whichever segment the hits come from
        other.write_bytes(b"not arrow")
    fresh = Enveloped(KnowledgeBaseService(home).session())
    fresh.select_knowledge_base("s")
    failed = fresh.search(SearchRequest("keyword search vectors", top_k=3))
    assert failed["success"] is False and failed["error"]["code"] == "STORE_ERROR"
    assert "unreadable" in failed["message"]


NEAR_DUPLICATE = "Signatures for near duplicate detection are computed once when a segment is written, not per query."


@pytest.fixture
def kb_with_copies(kb, tmp_path: Path):
    """The KB plus three near-identical documents: search keeps the best-ranked of them only."""
    for i, text in enumerate((NEAR_DUPLICATE, NEAR_DUPLICATE.upper(), NEAR_DUPLICATE.replace("query.", "query!"))):
        path = tmp_path / f"copy{i}.txt"
        path.write_text(text, encoding="utf-8")
        kb.import_document([str(path)])
    return kb


def _results(session, queries: tuple[str, ...]) -> list[list[tuple]]:
    out = []
    for query in queries:
        for mode in ("hybrid", "semantic", "keyword"):
            chunks = session.search(SearchRequest(query, top_k=8, mode=mode))["data"]["chunks"]
            out.append([(h["id"], h["score"], h["breakdown"]) for h in chunks])
    return out


SIGNATURE_QUERIES = ("near duplicate detection signatures", "检索 向量", "keyword search vectors")


def test_segments_store_signatures_so_search_never_shingles_text(kb_with_copies, service, monkeypatch) -> None:
    import kb_core.store.reader
    from kb_core.engines.near_duplicates import text_signatures
    from kb_core.store import catalog

    for segment in service.reader(kb_with_copies.operations.current_kb().id).snapshot().segments:
        stored = catalog.signatures_of(segment.row_store)
        assert stored is not None
        expected = text_signatures(segment.chunks.column("content").to_pylist())
        assert stored.text_hash.tolist() == expected.text_hash.tolist()
        assert stored.sketch.tolist() == expected.sketch.tolist()

    def refuse(texts):
        raise AssertionError("a search computed signatures that the segment stores")

    monkeypatch.setattr(kb_core.store.reader, "text_signatures", refuse)
    hits = kb_with_copies.search(SearchRequest(NEAR_DUPLICATE, top_k=5, mode="keyword"))["data"]["chunks"]
    assert sum("signatures for near duplicate" in h["content"].casefold() for h in hits) == 1


def test_a_kb_written_before_signatures_were_stored_searches_the_same(kb_with_copies, home: Path) -> None:
    """Segments of older versions have no signature columns: their signatures are computed at query time."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from kb_core import KnowledgeBaseService
    from kb_core.store import catalog
    from kb_core.store.reader import LoadedSegment

    before = _results(kb_with_copies, SIGNATURE_QUERIES)
    hits = kb_with_copies.search(SearchRequest(NEAR_DUPLICATE, top_k=5, mode="keyword"))["data"]["chunks"]
    assert sum("signatures for near duplicate" in h["content"].casefold() for h in hits) == 1
    folders = [path.parent for path in home.glob("kbs/*/segments/*/chunks.arrow")]
    assert folders
    for folder in folders:  # rewrite the row store as the previous version wrote it
        rows = pq.read_table(folder / "chunks.parquet").cast(catalog.CHUNK_FIELDS_SCHEMA)
        with (
            pa.OSFile(str(folder / "old.arrow"), "wb") as sink,
            pa.ipc.new_file(sink, catalog.CHUNK_FIELDS_SCHEMA) as writer,
        ):
            writer.write_table(rows)
        (folder / "old.arrow").replace(folder / catalog.CHUNK_ROWS_FILE)
        assert catalog.signatures_of(LoadedSegment(folder).row_store) is None
    old = KnowledgeBaseService(home)
    session = Enveloped(old.session())
    session.select_knowledge_base("s")
    assert _results(session, SIGNATURE_QUERIES) == before
    # Compaction writes the merged segment with its signatures.
    assert session.compact()["success"]
    segments = old.reader(session.operations.current_kb().id).snapshot().segments
    assert all(catalog.signatures_of(segment.row_store) is not None for segment in segments)
    assert _results(session, SIGNATURE_QUERIES) == before


def test_a_repeated_query_costs_no_model_call_on_any_search_path(kb, service, monkeypatch) -> None:
    """The app re-runs its script on every widget change; the CLI, MCP and the app all call the session."""
    record = kb.operations.current_kb()
    inner = service.embedder(record).inner
    calls: list[str] = []
    original = inner.embed_query
    query = "keyword search 向量"
    service.semantic_scale(record, query)  # measured once per process and model (calibration texts), not per query
    monkeypatch.setattr(inner, "embed_query", lambda text: calls.append(text) or original(text))
    first = kb.search(SearchRequest(query, top_k=5))["data"]["chunks"]
    assert calls == [query]
    assert kb.search(SearchRequest(query, top_k=5))["data"]["chunks"] == first
    kb.search(SearchRequest(query, top_k=3, mode="semantic", vector_weight=0.2))
    kb.search(SearchRequest(query, top_k=5, weighting="auto", fusion="rrf"))
    assert kb.explain_search(SearchRequest(query), first[0]["id"])["success"]
    assert kb.search(SearchRequest(query, kb_names=["s"]))["success"]
    assert calls == [query]  # one model call for all of them
    kb.rag_search(["keyword", "向量"])  # rag_search embeds its keywords joined: one new query, then remembered
    kb.rag_search(["keyword", "向量"])
    assert len(calls) == 2


def test_keyword_search_fetches_only_the_rows_it_can_return_with_the_same_hits(kb, service, monkeypatch) -> None:
    """Keyword-only search (Jaccard weight 0, no filter) asks BM25 for top_k + the dedup margin rows instead of
    over-fetching 10 × top_k; its hits, scores and breakdowns equal those of the full over-fetch (which explaining
    a row still takes)."""
    from kb_core.engines.keyword_index import KeywordSearcher
    from kb_core.features.retrieval.search import SearchFilters, SearchSettings

    fetched: list[int] = []
    original = KeywordSearcher.search_terms_arrays

    def spy(self, terms, k, support=()):  # type: ignore[no-untyped-def]
        fetched.append(k)
        return original(self, terms, k, support)

    monkeypatch.setattr(KeywordSearcher, "search_terms_arrays", spy)
    record = kb.operations.current_kb()
    compared = 0
    for query in ("dense vector search", "知识库 向量 检索", "documents chunks search again", "search"):
        for top_k in (1, 3, 6):
            settings = SearchSettings(mode="keyword", top_k=top_k)
            fetched.clear()
            short = service.search_kb(record, query, settings, SearchFilters())
            assert fetched == [top_k + min(top_k, 10)]
            if not short.hits:
                continue
            full = service.search_kb(record, query, settings, SearchFilters(), explain_chunk_ids=[short.hits[0].id])
            assert fetched[-1] == 100
            assert [hit.to_json() for hit in short.hits] == [hit.to_json() for hit in full.hits]
            compared += 1
    assert compared >= 9


def test_a_hits_json_is_the_callers_copy_with_the_fields_in_order(kb, service) -> None:
    """``SearchHit.to_json`` (what the CLI, MCP and the app print) lists the hit's fields in declaration order with
    the breakdown last, leaves out the internal location, and gives the caller a copy: changing the JSON's
    matched terms or breakdown notes changes neither the hit nor another hit's JSON."""
    import dataclasses

    from kb_core.features.results import SearchHit, SearchRequest

    outcome = kb.operations.search_chunks(SearchRequest("检索 retrieval", top_k=5, mode="hybrid"))
    assert len(outcome.hits) >= 2
    names = [f.name for f in dataclasses.fields(SearchHit) if f.name not in ("location", "breakdown")]
    for hit in outcome.hits:
        value = hit.to_json()
        assert list(value) == [*names, "breakdown"]
        assert list(hit.to_json(explain=False)) == names
        assert value["breakdown"] == hit.breakdown and value["matched_terms"] == hit.matched_terms
        value["matched_terms"].append("changed")
        value["breakdown"]["notes"].append("changed")
        value["breakdown"]["final_score"] = -1.0
        assert "changed" not in hit.matched_terms and "changed" not in hit.breakdown["notes"]
        assert hit.breakdown["final_score"] == hit.score
    first, second = (hit.to_json() for hit in outcome.hits[:2])
    first["breakdown"]["notes"].append("only here")
    assert "only here" not in second["breakdown"]["notes"]


def test_semantic_search_fetches_only_the_rows_it_can_return_with_the_same_hits(
    kb, service, tmp_path: Path, monkeypatch
) -> None:
    """Semantic search (Jaccard weight 0, no filter, exact flat vector segments) asks for top_k + the dedup margin
    rows (+ 1 to see a tie) instead of 10 × top_k; its hits, scores and breakdowns equal those of the full
    over-fetch. Where the last wanted row ties with the next one (here: two copies of one document, so equal
    vectors), a longer search could break the tie differently, so it over-fetches."""
    from kb_core.engines.vector_index import VectorSearcher
    from kb_core.features.retrieval.search import SearchFilters, SearchSettings
    from kb_core.store.folder import FolderSearcher

    for name in ("twin-a.txt", "twin-b.txt"):
        (tmp_path / name).write_text("Twin documents hold exactly the same words about vector search.", "utf-8")
        kb.import_document([str(tmp_path / name)])
    fetched: list[int] = []
    original = VectorSearcher.search_arrays

    def spy(self, query, k):  # type: ignore[no-untyped-def]
        fetched.append(k)
        return original(self, query, k)

    monkeypatch.setattr(VectorSearcher, "search_arrays", spy)
    record = kb.operations.current_kb()
    short_paths = tie_fallbacks = found = 0
    for query in ("dense vector search", "知识库 向量 检索", "twin documents vector search", "search"):
        for top_k in range(1, 8):
            settings = SearchSettings(mode="semantic", top_k=top_k)
            fetched.clear()
            short = service.search_kb(record, query, settings, SearchFilters())
            wanted = top_k + min(top_k, 10)
            assert fetched in ([wanted + 1], [wanted + 1, 100])
            short_paths += fetched == [wanted + 1]
            tie_fallbacks += fetched == [wanted + 1, 100]
            with monkeypatch.context() as patch:  # the reference: the full over-fetch
                patch.setattr(FolderSearcher, "_semantic_prefix", lambda *args: (np.empty(0),) * 3)
                full = service.search_kb(record, query, settings, SearchFilters())
            assert fetched[-1] == 100
            assert [hit.to_json() for hit in short.hits] == [hit.to_json() for hit in full.hits]
            found += bool(short.hits)
    assert short_paths >= 20 and tie_fallbacks >= 1 and found >= 14


def test_explain_search_refuses_what_a_search_request_sets_that_it_cannot_use(kb) -> None:
    """One SearchRequest serves search and explain_search (#38); explain_search scores one chunk with the query and the
    scoring settings, searching its KB 1,000 deep, so a request that sets top_k, min_score, filters or KBs is refused
    by name instead of being silently half used; the scoring settings it takes are used."""
    from kb_core.features.results import SearchRequest

    chunk = kb.search(SearchRequest("keyword search", top_k=1, mode="keyword"))["data"]["chunks"][0]["id"]
    for given, field in (
        ({"top_k": 3}, "top_k"),
        ({"min_score": 0.5}, "min_score"),
        ({"doc_names": ["a.txt"]}, "doc_names"),
        ({"kb_names": ["s"]}, "kb_names"),
        ({"expand_graph": True}, "expand_graph"),
    ):
        refused = kb.explain_search(SearchRequest("keyword search", **given), chunk)
        assert refused["error"]["code"] == "INVALID_ARGUMENT" and refused["error"]["details"]["field"] == field
        assert field in refused["message"]
    explained = kb.explain_search(SearchRequest("keyword search", mode="keyword"), chunk)
    assert explained["success"] and explained["data"]["settings"]["mode"] == "keyword"


def test_a_search_request_takes_lists_and_says_which_settings_were_given() -> None:
    from kb_core.features.results import SearchRequest

    request = SearchRequest("q", 3, "keyword", doc_names=["a.txt"], kb_names=None)  # type: ignore[arg-type]
    assert request.doc_names == ("a.txt",) and request.kb_names == ()
    assert request.filters.doc_names == ("a.txt",)
    assert request.settings["top_k"] == 3 and request.settings["mode"] == "keyword"
    assert request.settings["min_score"] is None  # not given: the KB's saved default applies
