"""A model's semantic scale: what unrelated text scores (the floor, issue #25) and what a near-identical text scores
(the top), so that a cosine means the same evidence on every model (issue #35).

Cosines are not comparable across models: all-MiniLM-L6-v2 gives unrelated English sentences about 0.0–0.2, while
e5 models give any two texts 0.7 or more, and an English-only model gives unrelated *Chinese* texts 0.3–0.6 (it
cannot read them). So the scale is measured, per model and per script of the query, never fixed:

* a small built-in set of sentences on mutually unrelated topics (cooking, tax law, volcanoes, chess …; one set in
  English, one in Chinese, written for this purpose, not taken from any evaluation set) is embedded once per
  process with the model as documents, and one question per topic as queries, the way a search embeds them;
* the cosines of every (question, sentence) pair of *different* topics are what unrelated text scores. Queries are
  what people type, questions more than statements: with the sentences themselves as queries, multilingual-e5-small
  scored two unrelated Chinese statements 0.833 ± 0.017 on average against 0.812 ± 0.017 for a question and an
  unrelated statement, a floor 0.02 higher that cut real answers (a KB's relevant chunks start around 0.85);
* the **floor** is ``mean + 2 · standard deviation`` of those cosines: a chunk must score above what all but about
  2.5 % of unrelated texts reach (the conventional one-sided 97.5 % level). Three standard deviations would drop
  real paraphrases: with all-MiniLM-L6-v2 a question that shares almost no word with its answer ("which credential
  may only read?" against a paragraph on read and write tokens) scores 0.26–0.29, while unrelated English text
  scores 0.04 ± 0.08, so 3σ (0.28) sits on top of them and 2σ (0.20) below;
* the **top** is the mean cosine of each sentence embedded as a query against itself embedded as a document: what a
  near-identical text scores in a search. It is 1 for a model without prompts and below 1 for one whose query and
  document prompts differ (multilingual-e5-small: about 0.94 for English, 0.98 for Chinese).

The semantic part of a score is the cosine on that scale, ``clip((cosine − mean) / (top − mean), 0, 1)``: what
unrelated text scores (its mean) 0, a near-identical text 1. Measured on the calibration set itself, the question that
a sentence answers then scores about 0.7 on every model that reads the script (all-MiniLM-L6-v2 0.68 on English;
multilingual-e5-small 0.71 on English, 0.68 on Chinese; all-MiniLM-L6-v2 0.37 on Chinese, which it cannot read:
its answers there are hardly above its floor), where raw cosines were 0.69, 0.88 and 0.93: a 0.7 is the same
evidence whichever model a KB uses, and ``min_score`` keeps its meaning.

Why the mean and not the floor as the zero (issue #35 asked for "floor → 0"): the scale's unit, ``top − zero``,
sets how much a cosine difference weighs against the keyword part at the fixed default weights 0.7/0.3. With the
floor as the zero the unit shrank (all-MiniLM-L6-v2: 0.81 instead of 0.97; e5: 0.15 instead of 0.20), which moved
the balance towards the vector signal and cost English hybrid search 0.004 nDCG@10 on SciFact's *train* split with
both models (the split used for such choices; README, Quality and performance); with the mean both stayed within
0.001. The floor keeps its meaning as the evidence threshold: a chunk whose cosine is not above it is never a hit on
semantic evidence alone, and the semantic part of such a chunk (a hit by its keywords) is small (at most
``2σ / (top − mean)``: 0.16 for all-MiniLM-L6-v2 on English, 0.26 and 0.20 for e5).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np

from kb_core.engines.embedding.base import Embedder

logger = logging.getLogger(__name__)

__all__ = ["CALIBRATION_QUERIES", "CALIBRATION_TEXTS", "CALIBRATION_VERSION", "SemanticScale", "measure_scale"]

# One sentence per topic; no two share a subject. "latin" and "cjk" are the scripts search.detect_language tells.
CALIBRATION_TEXTS: dict[str, tuple[str, ...]] = {
    "latin": (
        "Knead the bread dough for ten minutes and let it rise in a warm place until it doubles.",
        "The tax return must be filed by the end of April together with the receipts for deductions.",
        "Lava from the volcano reached the sea and formed a new stretch of black sand beach.",
        "In the opening, the bishop pins the knight against the queen and wins a tempo.",
        "The goalkeeper saved the penalty in the last minute of extra time.",
        "Water the tomato plants in the morning and remove the side shoots every week.",
        "The train to the airport leaves every twenty minutes from platform four.",
        "A violin is tuned in fifths, with the lowest string set to the G below middle C.",
        "The mortgage rate is fixed for five years and then follows the central bank's rate.",
        "Penguins huddle together to keep warm during the long Antarctic winter.",
        "Replace the brake pads when the wear indicator touches the disc.",
        "The museum's new wing shows oil paintings of the Dutch golden age.",
        "Children learn to read more easily when someone reads aloud with them every day.",
        "The hotel room has a balcony overlooking the harbour and a small kitchen.",
        "Knit the sleeves separately and sew them onto the body of the sweater.",
        "The court ruled that the contract was void because one party had been misled.",
    ),
    "cjk": (
        "面团揉十分钟后放在温暖的地方发酵，直到体积变成两倍。",
        "纳税申报表必须在四月底之前提交，并附上抵扣所需的发票。",
        "火山喷出的熔岩流入大海，形成了一片新的黑色沙滩。",
        "开局时白方的象牵制了黑方的马，赢得了一步先手。",
        "守门员在加时赛最后一分钟扑出了点球。",
        "番茄苗要在早上浇水，每周摘掉侧枝。",
        "开往机场的列车每二十分钟从四号站台发车一班。",
        "小提琴按五度定弦，最低的一根弦定在中央C下面的G。",
        "这笔房贷的利率前五年固定，之后跟随央行利率浮动。",
        "企鹅在漫长的南极冬季里挤在一起取暖。",
        "当磨损指示片碰到刹车盘时，就该更换刹车片了。",
        "博物馆的新展厅展出荷兰黄金时代的油画。",
        "如果每天有人陪着朗读，孩子学习识字会更容易。",
        "酒店房间有一个俯瞰港口的阳台和一个小厨房。",
        "袖子要单独织好，再缝到毛衣的身片上。",
        "法院裁定合同无效，因为其中一方受到了误导。",
    ),
}
# One question per topic above, in the same order: each is about its own sentence only.
CALIBRATION_QUERIES: dict[str, tuple[str, ...]] = {
    "latin": (
        "How long should bread dough be kneaded?",
        "When is the deadline for filing a tax return?",
        "What happens when lava reaches the sea?",
        "Why is pinning a knight with a bishop strong?",
        "Who saved the penalty in extra time?",
        "How often should tomato plants be watered?",
        "How often does the airport train leave?",
        "How is a violin tuned?",
        "How long is the mortgage rate fixed?",
        "How do penguins keep warm in winter?",
        "When should brake pads be replaced?",
        "What does the museum's new wing show?",
        "How do children learn to read more easily?",
        "Does the hotel room have a kitchen?",
        "How are sweater sleeves attached?",
        "Why did the court find the contract void?",
    ),
    "cjk": (
        "面团要揉多久？",
        "纳税申报表什么时候必须提交？",
        "熔岩流入大海会怎样？",
        "为什么用象牵制马很有利？",
        "谁在加时赛扑出了点球？",
        "番茄苗多久浇一次水？",
        "去机场的列车多久一班？",
        "小提琴怎么定弦？",
        "房贷利率固定几年？",
        "企鹅冬天怎么取暖？",
        "什么时候该换刹车片？",
        "博物馆新展厅展出什么？",
        "孩子怎样更容易学会识字？",
        "酒店房间有厨房吗？",
        "毛衣的袖子怎么缝上去？",
        "法院为什么认定合同无效？",
    ),
}
SIGMAS = 2.0


def _version() -> str:
    import hashlib

    rule = (SIGMAS, "zero: the unrelated mean; top: each sentence as a query against itself as a document")
    payload = repr((sorted(CALIBRATION_TEXTS.items()), sorted(CALIBRATION_QUERIES.items()), rule)).encode("utf-8")
    return hashlib.sha256(payload).hexdigest()[:12]


# Identifies the texts and the rule: a floor kept on disk is reused only while both are unchanged.
CALIBRATION_VERSION = _version()


@dataclass(frozen=True)
class SemanticScale:
    """A model's semantic scale for one script of query (module docstring): ``mean`` (what unrelated text scores on
    average) maps to 0 and ``top`` (a near-identical text) to 1; a cosine must exceed ``floor`` (mean + 2 standard
    deviations, ``std``, over ``pairs`` unrelated pairs) to count as evidence. ``measured`` is False for the stand-in
    used when a model could not embed the calibration texts (an endpoint down): mean and floor 0, top 1, the cosine
    itself."""

    floor: float
    top: float
    mean: float = 0.0
    std: float = 0.0
    pairs: int = 0
    measured: bool = True

    @classmethod
    def unmeasured(cls) -> SemanticScale:
        return cls(0.0, 1.0, measured=False)

    def normalized(self, cosine: float | None) -> float:
        """``cosine`` on this scale, in [0, 1] (None, no cosine, gives 0)."""
        if cosine is None or not math.isfinite(cosine):
            return 0.0
        return min(1.0, max(0.0, (float(cosine) - self.mean) / (self.top - self.mean)))

    def normalized_array(self, cosines: np.ndarray) -> np.ndarray:
        """:meth:`normalized` of each value (NaN, a missing cosine, gives 0), with the same float64 operations."""
        values = (np.asarray(cosines, dtype=np.float64) - self.mean) / (self.top - self.mean)
        return np.nan_to_num(np.minimum(1.0, np.maximum(0.0, values)), nan=0.0)

    def to_json(self) -> dict[str, float | bool]:
        return {"zero": self.mean, "floor": self.floor, "top": self.top, "measured": self.measured}


# The top must stand this far above the floor for the scale to be usable; a model whose near-identical texts score
# no better than unrelated ones (none known) gets the raw cosine above its floor instead.
MIN_SPAN = 0.01


def measure_scale(embedder: Embedder, language: str) -> SemanticScale:
    """The scale of ``embedder`` for queries in ``language`` (``"latin"`` or ``"cjk"``); module docstring."""
    texts = CALIBRATION_TEXTS.get(language)
    if texts is None:
        raise ValueError(f"no calibration texts for language {language!r}; known: {', '.join(CALIBRATION_TEXTS)}")
    questions = list(CALIBRATION_QUERIES[language]) + list(texts)
    documents = np.asarray(embedder.embed_documents(list(texts)), dtype=np.float64)
    batch = getattr(embedder, "embed_queries", None)  # one request for an endpoint instead of thirty-two
    if batch is not None:
        embedded = np.asarray(batch(questions), dtype=np.float64)
    else:
        embedded = np.stack([np.asarray(embedder.embed_query(t), dtype=np.float64) for t in questions])
    queries, statements = embedded[: len(texts)], embedded[len(texts) :]
    cosines = queries @ documents.T
    unrelated = cosines[~np.eye(len(texts), dtype=bool)]
    mean, std = float(unrelated.mean()), float(unrelated.std())
    floor = min(1.0, max(0.0, mean + SIGMAS * std))
    top = float(np.mean(np.sum(statements * documents, axis=1)))
    top = min(1.0, max(top, floor + MIN_SPAN))
    floor = min(floor, top - MIN_SPAN)
    logger.info(
        "semantic scale of %s for %s queries: floor %.4f (unrelated cosines %.4f ± %.4f over %d pairs), top %.4f",
        getattr(embedder, "model_key", type(embedder).__name__), language, floor, mean, std, len(unrelated), top,
    )
    return SemanticScale(floor, top, mean, std, len(unrelated))
