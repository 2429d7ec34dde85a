"""The weights a user sets are the weights used; scores lie in [0, 1] in every mode; the language guard and auto
weighting are visible options. Model-dependent behaviour is checked with the real all-MiniLM-L6-v2."""

from __future__ import annotations

from pathlib import Path

import pytest

from kb_core import KnowledgeBaseService
from kb_core.edges.envelopes import Enveloped
from kb_core.features.results import SearchRequest

ENGLISH = {
    "paraphrase.txt": "Driving at a steady moderate speed and keeping the tyres inflated lowers how much petrol a "
    "vehicle burns on every trip.",
    "keywords.txt": "Fuel consumption of the car industry: how to reduce the consumption of water, fuel and power "
    "in car factories, a history of manufacturing costs.",
    "unrelated.txt": "Honey bees collect nectar and pollen, and the colony stores honey in wax combs for winter.",
    "tides.txt": "The gravitational pull of the moon raises ocean tides twice a day along the coasts.",
}
CHINESE = {
    "混合检索.txt": "混合检索结合了关键词检索和向量检索，按权重融合两种分数。",
    "分词.txt": "中文分词使用结巴分词和二元组，让关键词检索能够匹配中文词语。",
}
QUERY = "how to reduce car fuel consumption"


def fill(session, files: Path, texts: dict[str, str], kb: str) -> None:
    files.mkdir(exist_ok=True)
    for name, text in texts.items():
        (files / name).write_text(text, encoding="utf-8")
    assert session.import_document([str(files / n) for n in texts], kb_name=kb)["success"]


@pytest.fixture
def hashing_kb(session, tmp_path: Path):
    session.create_knowledge_base("w", 64, embedding_model="hashing")
    session.select_knowledge_base("w")
    fill(session, tmp_path / "files", {**ENGLISH, **CHINESE}, "w")
    return session


def test_scores_lie_in_zero_one_in_every_mode_and_recompute(hashing_kb) -> None:
    for mode in ("hybrid", "semantic", "keyword"):
        for fusion in ("weighted", "rrf"):
            for query in (QUERY, "混合检索 分词", "zzzz nothing matches this"):
                data = hashing_kb.search(SearchRequest(query, mode=mode, fusion=fusion, top_k=6, jaccard_weight=0.1))[
                    "data"
                ]
                for hit in data["chunks"]:
                    b = hit["breakdown"]
                    assert 0.0 <= hit["score"] <= 1.0
                    fused = b["vector_weight"] * b["vector_normalized"] + b["keyword_weight"] * b["keyword_normalized"]
                    assert hit["score"] == pytest.approx(0.9 * fused + 0.1 * b["jaccard"])


def test_the_requested_weights_are_used_and_one_weight_alone_takes_the_complement(hashing_kb) -> None:
    data = hashing_kb.search(SearchRequest(QUERY, top_k=3))["data"]
    assert data["weights"]["used"] == pytest.approx({"vector": 0.7, "keyword": 0.3})
    assert data["weights"]["weighting"] == "fixed" and data["weights"]["notes"] == []
    alone = hashing_kb.search(SearchRequest(QUERY, top_k=3, vector_weight=0.2))["data"]
    assert alone["settings"]["keyword_weight"] == pytest.approx(0.8)
    assert alone["weights"]["used"] == pytest.approx({"vector": 0.2, "keyword": 0.8})
    assert all(h["breakdown"]["vector_weight"] == pytest.approx(0.2) for h in alone["chunks"])
    other = hashing_kb.search(SearchRequest(QUERY, top_k=3, keyword_weight=0.9))["data"]
    assert other["weights"]["used"] == pytest.approx({"vector": 0.1, "keyword": 0.9})
    # both given: their ratio is kept (normalised to sum to 1) and the request is recorded as given
    both = hashing_kb.search(SearchRequest(QUERY, top_k=3, vector_weight=0.2, keyword_weight=0.6))["data"]
    assert both["weights"]["used"] == pytest.approx({"vector": 0.25, "keyword": 0.75})
    assert both["chunks"][0]["breakdown"]["requested_vector_weight"] == pytest.approx(0.2)


def test_saved_auto_weighting_and_guard_setting_apply_until_a_call_overrides_them(hashing_kb) -> None:
    saved = hashing_kb.save_search_settings(weighting="auto", language_guard=False)
    assert saved["success"] and saved["data"]["search_settings"] == {"weighting": "auto", "language_guard": False}
    data = hashing_kb.search(SearchRequest(QUERY, top_k=3))["data"]
    assert data["settings"]["weighting"] == "auto" and data["settings"]["language_guard"] is False
    assert data["weights"]["used"] == pytest.approx(data["weights"]["auto"])
    fixed = hashing_kb.search(SearchRequest(QUERY, top_k=3, weighting="fixed"))["data"]
    assert fixed["weights"]["used"] == pytest.approx({"vector": 0.7, "keyword": 0.3})
    assert hashing_kb.save_search_settings(weighting="sometimes")["error"]["code"] == "INVALID_ARGUMENT"


def test_multi_kb_hits_merge_on_one_scale(hashing_kb, tmp_path: Path) -> None:
    """The same documents in two KBs get the same scores, so a merged list interleaves them fairly."""
    hashing_kb.create_knowledge_base("twin", 64, embedding_model="hashing")
    fill(hashing_kb, tmp_path / "twin", {**ENGLISH, **CHINESE}, "twin")
    merged = hashing_kb.search(SearchRequest(QUERY, kb_names=["w", "twin"], top_k=4))["data"]["chunks"]
    assert [h["kb_name"] for h in merged[:2]] in (["w", "twin"], ["twin", "w"])
    assert merged[0]["score"] == pytest.approx(merged[1]["score"])


@pytest.fixture(scope="module")
def model_kb(tmp_path_factory: pytest.TempPathFactory):
    """The demo documents (English and Chinese, TXT/DOCX/DOC) with the real model, as the app's demo KB holds them."""
    from kb_core.session.demo import demo_files

    root = tmp_path_factory.mktemp("weights-model")
    session = Enveloped(KnowledgeBaseService(root / "home").session())
    session.create_knowledge_base("real", 256, "all-MiniLM-L6-v2")
    session.select_knowledge_base("real")
    assert session.import_document([str(p) for p in demo_files()])["data"]["failed_count"] == 0
    fill(session, root / "files", ENGLISH, "real")
    return session


@pytest.mark.model
def test_moving_the_vector_weight_from_07_to_02_changes_the_ranking_and_breakdown(model_kb) -> None:
    # A query whose two signals disagree on some pair of hits (checked below): only then can a weight reorder them.
    # (Where they agree, as for "hybrid search weights" on the calibrated scale, every weight gives one ranking.)
    query = "how are scores explained"
    at_07 = model_kb.search(SearchRequest(query, top_k=5, vector_weight=0.7))["data"]["chunks"]
    at_02 = model_kb.search(SearchRequest(query, top_k=5, vector_weight=0.2))["data"]["chunks"]
    parts = [(h["breakdown"]["vector_normalized"], h["breakdown"]["keyword_normalized"]) for h in at_07]
    assert any(a[0] > b[0] and a[1] < b[1] for a in parts for b in parts), parts
    assert [h["id"] for h in at_07] != [h["id"] for h in at_02]
    for weight, hits in ((0.7, at_07), (0.2, at_02)):
        for hit in hits:
            b = hit["breakdown"]
            assert (b["vector_weight"], b["keyword_weight"]) == pytest.approx((weight, 1 - weight))
            fused = weight * b["vector_normalized"] + (1 - weight) * b["keyword_normalized"]
            assert hit["score"] == pytest.approx(fused)
    by_id = {h["id"]: h for h in at_02}
    for hit in at_07:
        if hit["id"] in by_id:  # the raw signals do not depend on the weights
            assert by_id[hit["id"]]["breakdown"]["vector_score"] == pytest.approx(hit["breakdown"]["vector_score"])
            assert by_id[hit["id"]]["breakdown"]["keyword_score"] == pytest.approx(hit["breakdown"]["keyword_score"])


@pytest.mark.model
def test_a_score_threshold_separates_matching_from_unrelated_queries(model_kb) -> None:
    """Absolute scales: the best hit of an unrelated query scores far below the best hit of a matching one."""
    matching = [
        model_kb.search(SearchRequest(q, top_k=1))["data"]["chunks"][0]["score"]
        for q in ("how are hybrid scores explained", "import legacy Word doc files", "what does a score breakdown show")
    ]
    # an unrelated query may find nothing at all: no query term and no cosine above the model's floor (#25)
    unrelated = [
        max((c["score"] for c in model_kb.search(SearchRequest(q, top_k=1))["data"]["chunks"]), default=0.0)
        for q in ("zebra saxophone orbit", "recipe for chocolate cake", "football match results")
    ]
    assert max(unrelated) < min(matching), (unrelated, matching)


@pytest.mark.model
def test_the_language_guard_is_visible_and_can_be_switched_off(model_kb) -> None:
    guarded = model_kb.search(SearchRequest("混合检索", top_k=3))["data"]
    assert guarded["weights"]["used"] == pytest.approx({"vector": 0.0, "keyword": 1.0})
    assert guarded["weights"]["requested"] == pytest.approx({"vector": 0.7, "keyword": 0.3})
    assert any("language guard" in w and "Switch the language guard off" in w for w in guarded["warnings"])
    # the demo's document on hybrid search among the first hits (keyword only: BM25 over the query's words 混合, 检索
    # may put another document that uses both words more densely first)
    assert "混合检索.docx" in [c["doc_name"] for c in guarded["chunks"][:3]]
    assert any("language guard" in n for n in guarded["chunks"][0]["breakdown"]["notes"])
    off = model_kb.search(SearchRequest("混合检索", top_k=3, language_guard=False))["data"]
    assert off["weights"]["used"] == pytest.approx({"vector": 0.7, "keyword": 0.3})
    assert any("requested weights are used" in w for w in off["warnings"])
    english = model_kb.search(SearchRequest(QUERY, top_k=3))["data"]
    assert english["warnings"] == [] and english["weights"]["used"] == pytest.approx({"vector": 0.7, "keyword": 0.3})
