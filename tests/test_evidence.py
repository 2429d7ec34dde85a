"""What a hit shows a person or an agent (#35): matched terms that are the query's words, highlights of whole words,
the passage around the evidence, and no title chunk without text (hashing embedder: no model)."""

from __future__ import annotations

from pathlib import Path

import pytest
from docx import Document

from kb_core import KnowledgeBaseService
from kb_core.edges.envelopes import Enveloped
from kb_core.engines.analysis import default_analyzer
from kb_core.engines.chunking import chunk_document
from kb_core.engines.parsing import parse_file
from kb_core.features.results import SearchRequest
from kb_core.features.retrieval.highlight import highlight_spans, passage

QUERY = "保险理赔需要哪些材料？"
# Written so that the bigrams straddling the query's words (险理, 赔需) occur in the text too: 风险理念, 索赔需知.
FILLER = "本公司坚持以客户为中心的风险理念，服务网点遍布全国，客服热线全天开放。" * 8
CLAIM = "申请保险理赔需要准备以下材料：保单、身份证、事故证明和维修发票。"
TEXTS = {
    "理赔指南.txt": FILLER + CLAIM + "处理赔偿的时间一般为十个工作日。" + "其他说明：请妥善保管原件。" * 20,
    "索赔需知.txt": "索赔需知：风险理念与公司文化介绍。",  # only the straddling bigrams, no word of the query
    "城市交通.txt": "城市交通高峰期地铁很拥挤，需要提前出门。",  # 需要 only
}


@pytest.fixture
def insurance(tmp_path: Path):
    session = Enveloped(KnowledgeBaseService(tmp_path / "home").session())
    assert session.create_knowledge_base("保险", 512, "hashing")["success"]
    session.select_knowledge_base("保险")
    paths = []
    for name, text in TEXTS.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
        paths.append(str(tmp_path / name))
    assert session.import_document(paths)["data"]["failed_count"] == 0
    return session


def test_matched_terms_are_the_querys_words_never_a_bigram_across_two_of_them(insurance) -> None:
    words = default_analyzer().query_terms(QUERY)
    assert words.shown_words == ("保险", "理赔", "需要", "材料")
    assert {"险理", "赔需"} <= set(words.support) and not {"险理", "赔需"} & set(words.terms)
    for mode in ("keyword", "hybrid"):
        result = insurance.search(SearchRequest(QUERY, mode=mode, top_k=10))
        hits = {hit["doc_name"]: hit for hit in result["data"]["chunks"]}
        assert hits["理赔指南.txt"]["matched_terms"] == ["保险", "理赔", "需要", "材料"], mode
        assert hits["城市交通.txt"]["matched_terms"] == ["需要"], mode
        # a chunk holding only 险理 and 赔需 (风险理念, 索赔需知) holds no word of the query: never a keyword hit
        assert "索赔需知.txt" not in hits or (mode == "hybrid" and not hits["索赔需知.txt"]["matched_terms"]), mode
        shown = result["message"] + " ".join(result["data"]["warnings"])
        assert not {"险理", "赔需", "要哪", "些材"} & set(shown.replace("，", " ").split()), shown
        assert "险理" not in shown and "赔需" not in shown and "Stop words left out of the keyword query: 哪些" in shown
    best = insurance.search(SearchRequest(QUERY, mode="keyword", top_k=1))["data"]["chunks"][0]
    explained = " ".join(
        insurance.explain_search(SearchRequest(QUERY, mode="keyword"), best["id"])["data"]["explanation"]
    )
    assert "matched words: 保险, 理赔, 需要, 材料" in explained and "险理" not in explained and "赔需" not in explained


def test_highlights_mark_whole_words_as_jieba_cuts_them_from_the_text() -> None:
    analyzer = default_analyzer()
    text = TEXTS["理赔指南.txt"]
    marked = [text[a:b] for a, b in highlight_spans(text, ["保险", "理赔", "需要", "材料"], analyzer)]
    assert marked == ["保险", "理赔", "需要", "材料"]  # not 理赔 across 处理|赔偿, not 险理 in 风险理念
    english = "Configuring hybrid search: the configuration sets weights; reconfigure is not a word here."
    marked = [english[a:b] for a, b in highlight_spans(english, ["configuring", "weights"], analyzer)]
    assert marked == ["Configuring", "configuration", "weights"]


def test_a_hit_shows_the_passage_around_its_evidence_and_all_of_it_on_demand(insurance) -> None:
    hit = next(
        h
        for h in insurance.search(SearchRequest(QUERY, mode="keyword", top_k=5))["data"]["chunks"]
        if h["doc_name"] == "理赔指南.txt"
    )
    text, window = hit["content"], hit["passage"]
    assert 0 < window["start"] < text.index(CLAIM) + 1 and window["end"] < len(text)
    assert text[window["start"] :].startswith(CLAIM)  # the sentence that holds the words, from its start
    assert hit["snippet"].startswith("…" + CLAIM) and hit["snippet"].endswith("…")
    assert [text[a:b] for a, b in window["marks"]] == ["保险", "理赔", "需要", "材料"]
    # the whole chunk is still there (the card's "show all", the agent's content)
    assert hit["content"] in TEXTS["理赔指南.txt"] and len(hit["snippet"]) < len(hit["content"])
    # a short hit is its own passage; a hit found by meaning alone starts at its beginning
    analyzer = default_analyzer()
    assert passage("短文本。", ["保险"], analyzer) == passage("短文本。", [], analyzer)
    assert passage(text, [], analyzer).start == 0


def test_mcp_search_and_search_knowledge_base_give_the_passage(insurance) -> None:

    listed = insurance.search_knowledge_base(QUERY, 5, "keyword")["data"]["hits"]
    guide = next(h for h in listed if h["title"] == "理赔指南.txt")
    assert guide["snippet"].startswith("…" + CLAIM)


def test_a_title_and_a_heading_without_text_go_with_the_text_under_them(tmp_path: Path) -> None:
    document = Document()
    document.add_heading("保险理赔指南", 0)  # the Title style
    document.add_heading("一、报案", 1)
    document.add_paragraph("车辆出险后应当在48小时内报案，并保留现场照片。")
    document.add_heading("二、材料", 1)
    document.add_heading("2.1 基本材料", 2)  # a heading followed at once by a sub-heading
    document.add_paragraph("申请理赔需要准备保单、身份证和事故证明。")
    path = tmp_path / "guide.docx"
    document.save(str(path))
    parsed = parse_file(path)
    assert [b.heading for b in parsed.blocks] == [True, True, False, True, True, False]
    from kb_core.engines.embedding.hashing import HashingTokenizer

    chunks = chunk_document(parsed, HashingTokenizer(), 512)
    assert [(c.content, c.chapter) for c in chunks] == [
        ("保险理赔指南\n\n一、报案\n\n车辆出险后应当在48小时内报案，并保留现场照片。", "一、报案"),
        ("二、材料\n\n2.1 基本材料\n\n申请理赔需要准备保单、身份证和事故证明。", "二、材料 > 2.1 基本材料"),
    ]
    # a heading with nothing after it stays a chunk: nothing to join it to
    document = Document()
    document.add_paragraph("正文在前。")
    document.add_heading("附录", 1)
    document.save(str(path))
    assert [c.content for c in chunk_document(parse_file(path), HashingTokenizer(), 512)] == ["正文在前。", "附录"]
