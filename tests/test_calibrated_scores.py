"""Scores that mean the same on every model (#35), with both real models.

The semantic part of a score is the cosine on the model's measured scale (unrelated text 0, a near-identical text 1;
:mod:`kb_core.engines.embedding.calibration`), so on a KB with multilingual-e5-small and on one with all-MiniLM-L6-v2
holding the same Chinese and English documents, one ``min_score`` separates answers from questions no document answers.
"""

from __future__ import annotations

import pytest

from kb_core import KnowledgeBaseService
from kb_core.edges.envelopes import Enveloped
from kb_core.features.results import SearchRequest

pytestmark = pytest.mark.model

MODELS = ("multilingual-e5-small", "all-MiniLM-L6-v2")
DOCUMENTS = {
    "tea.txt": "Green tea is brewed with water at about 80 °C for two to three minutes; boiling water makes it bitter. "
    "Use about two grams of leaves for a cup of 150 ml.",
    "insurance.txt": "To file an insurance claim after a car accident, report it to the insurer within 48 hours and "
    "send the policy number, a police report, photos of the damage and the repair invoice.",
    "traffic.txt": "The city's metro runs every three minutes at rush hour; buses on the ring road are often late "
    "because of traffic jams near the station.",
    "garden.txt": "In spring, sow tomato and pepper seeds indoors six weeks before the last frost, then plant the "
    "seedlings out in a sunny bed.",
    "茶.txt": "绿茶用八十度左右的水冲泡两到三分钟，沸水会让茶变苦。一杯一百五十毫升的水放两克茶叶。",
    "保险.txt": "车辆出险后申请保险理赔，需要在四十八小时内报案，"
    "并提交保单号、交警事故认定书、损失照片和维修发票等材料。",
    "交通.txt": "早高峰时地铁每三分钟一班；环路上的公交车常因车站附近堵车而晚点。",
    "园艺.txt": "春天在最后一次霜冻前六周在室内播下番茄和辣椒种子，然后把幼苗移栽到向阳的苗床。",
}
ANSWERED = {
    "What do I need to send for a car insurance claim?": "insurance.txt",
    "保险理赔需要哪些材料？": "保险.txt",
    "How hot should the water be for green tea?": "tea.txt",
    "绿茶用多少度的水冲泡？": "茶.txt",
}
UNANSWERED = ("How do I bake sourdough bread?", "如何烤制酸面包", "的 是 什么")
SEPARATING = 0.3  # one min_score for both models


@pytest.fixture(scope="module")
def sessions(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    root = tmp_path_factory.mktemp("calibrated")
    paths = []
    for name, text in DOCUMENTS.items():
        (root / name).write_text(text, encoding="utf-8")
        paths.append(str(root / name))
    found = {}
    for model in MODELS:
        session = Enveloped(KnowledgeBaseService(root / model).session())
        assert session.create_knowledge_base("kb", 128, model)["success"]
        session.select_knowledge_base("kb")
        assert session.import_document(paths)["data"]["failed_count"] == 0
        found[model] = session
    return found


@pytest.mark.parametrize("model", MODELS)
def test_a_question_a_document_answers_gets_it_first_with_a_score_of_at_least_one_half(sessions, model: str) -> None:
    session = sessions[model]
    for query, answer in ANSWERED.items():
        hits = session.search(SearchRequest(query, top_k=3))["data"]["chunks"]
        assert hits and hits[0]["doc_name"] == answer and hits[0]["score"] >= 0.5, (query, hits[:1])
        kept = session.search(SearchRequest(query, top_k=3, min_score=SEPARATING))["data"]["chunks"]
        assert kept and kept[0]["doc_name"] == answer, query


@pytest.mark.parametrize("model", MODELS)
def test_off_topic_and_function_word_queries_get_no_hit_scoring_three_tenths(sessions, model: str) -> None:
    session = sessions[model]
    for query in UNANSWERED:
        for mode in ("hybrid", "keyword"):
            hits = session.search(SearchRequest(query, mode=mode, top_k=5))["data"]["chunks"]
            assert all(hit["score"] < SEPARATING for hit in hits), (query, mode, hits)
            assert (
                session.search(SearchRequest(query, mode=mode, top_k=5, min_score=SEPARATING))["data"]["chunks"] == []
            )
    # semantic mode scores the semantic part alone: a chunk just above the floor (the tail of unrelated text, a hit
    # there by #25's rule) scores less than any answer does
    answers = [session.search(SearchRequest(query, mode="semantic", top_k=10))["data"]["chunks"] for query in ANSWERED]
    weakest = min(
        next(h["score"] for h in hits if h["doc_name"] == answer)
        for hits, answer in zip(answers, ANSWERED.values(), strict=True)
    )
    for query in UNANSWERED:
        hits = session.search(SearchRequest(query, mode="semantic", top_k=5))["data"]["chunks"]
        assert all(hit["score"] < weakest for hit in hits), (query, weakest, hits)


def test_the_scale_is_measured_per_model_and_stated_in_every_breakdown(sessions) -> None:
    """Raw cosines differ by model (e5 gives unrelated text ~0.8); on the scale, what unrelated text scores is 0 for
    both and the breakdown says how the cosine was read: 'cosine 0.9063 → 0.5606 on this model's scale'."""
    scales = {}
    for model, session in sessions.items():
        data = session.search(SearchRequest("保险理赔需要哪些材料？", top_k=1))["data"]
        b = data["chunks"][0]["breakdown"]
        zero, top, floor = b["semantic_zero"], b["semantic_top"], b["semantic_floor"]
        assert data["semantic_scale"] == {"zero": zero, "floor": floor, "top": top, "measured": True}
        assert zero < floor < top <= 1.0
        expected = min(1.0, max(0.0, (b["vector_score"] - zero) / (top - zero)))
        assert b["vector_normalized"] == pytest.approx(expected)
        explained = session.explain_search(SearchRequest("保险理赔需要哪些材料？"), data["chunks"][0]["id"])["data"][
            "explanation"
        ]
        assert any(
            f"cosine {b['vector_score']:.4f} → {expected:.4f} on this model's scale" in line for line in explained
        ), explained
        scales[model] = (zero, top)
    assert scales["multilingual-e5-small"][0] > 0.7 and scales["all-MiniLM-L6-v2"][1] == pytest.approx(1.0)
