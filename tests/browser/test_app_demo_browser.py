"""The demo KB in real headless Chromium with the real all-MiniLM-L6-v2 model: the weights a user sets are the
weights the hits use, the Evaluate page's weight sweep becomes the KB default that the CLI then searches with, and
two kept runs compare query by query. One app serves the whole module; the first test's visit builds the demo."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kb_core import KnowledgeBaseService
from kb_core.edges.envelopes import Enveloped
from kb_core.features.results import SearchRequest
from kb_core.session.demo import DEMO_KB_NAME
from kb_core.session.evaluation import best_sweep_setting

pytestmark = [pytest.mark.browser, pytest.mark.model]

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"
QUERY = "hybrid search weights"  # its top 5 differ between vector weight 0.7 and 0.2 with the real model


@pytest.fixture
def demo_page(request: pytest.FixtureRequest, demo_served, pages):  # type: ignore[no-untyped-def]
    """A new browser session on the demo KB (the first one waits while the app builds the demo)."""
    page = pages()
    page.goto(demo_served.url)
    page.get_by_role("heading", name="Knowledge bases", exact=True).wait_for(timeout=300_000)
    wait_idle(page)
    assert page.get_by_role("combobox", name="Current knowledge base").input_value() == DEMO_KB_NAME
    yield page
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        ARTIFACTS.mkdir(exist_ok=True)
        shutil.copy(demo_served.log_path, ARTIFACTS / f"{request.node.name}-streamlit.log")


def wait_idle(page) -> None:  # type: ignore[no-untyped-def]
    page.wait_for_timeout(300)
    page.locator('[data-testid="stStatusWidget"]').wait_for(state="hidden", timeout=300_000)


def go_to(page, title: str) -> None:  # type: ignore[no-untyped-def]
    page.locator('[data-testid="stSidebarNav"]').get_by_role("link", name=title).click()
    page.get_by_role("heading", level=1).filter(has_text=re.compile(title.split()[0], re.I)).wait_for()
    wait_idle(page)


def metric_value(page, label: str) -> str:  # type: ignore[no-untyped-def]
    box = page.locator('[data-testid="stMetric"]').filter(
        has=page.locator('[data-testid="stMetricLabel"]', has_text=label)
    ).first
    return box.locator('[data-testid="stMetricValue"]').inner_text().strip()


def card_chunk_ids(page) -> list[str]:  # type: ignore[no-untyped-def]
    """The result cards' chunk ids, top first (each card's caption ends with ``chunk chk_…``)."""
    captions = page.locator('[data-testid="stCaptionContainer"]').filter(has_text=re.compile(r"chunk chk_"))
    return [re.search(r"chk_[0-9a-f]+", text).group(0) for text in captions.all_inner_texts()]  # type: ignore[union-attr]


def home_session(app):  # type: ignore[no-untyped-def]
    session = Enveloped(KnowledgeBaseService(app.home).session())
    session.select_knowledge_base(DEMO_KB_NAME)
    return session


def run_evaluation(page) -> str:  # type: ignore[no-untyped-def]
    """Press Run evaluation and return the id of the run the page says it kept."""
    kept = page.get_by_text(re.compile(r"^Kept as run run_"))
    before = kept.inner_text() if kept.count() else ""
    page.get_by_role("button", name="Run evaluation").click()
    page.wait_for_function(
        "(before) => [...document.querySelectorAll('[data-testid=\"stAlertContentSuccess\"] p')]"
        ".some(e => e.innerText.startsWith('Kept as run ') && e.innerText !== before)",
        arg=before, timeout=300_000,
    )
    wait_idle(page)
    return re.search(r"run_\d{8}-\d{6}_[0-9a-f]{6}", kept.inner_text()).group(0)  # type: ignore[union-attr]


# Whether the "Weights asked" metric shows the given pair.
ASKED_IS = """(want) => [...document.querySelectorAll('[data-testid="stMetric"]')].some(box =>
  box.querySelector('[data-testid="stMetricLabel"]').innerText.trim().startsWith('Weights asked')
  && box.querySelector('[data-testid="stMetricValue"]').innerText.trim() === want)"""


def service_counters(page) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    """The app's service counters the search lab shows: searches run, query vectors computed (by the model)."""
    line = page.locator('[data-testid="stCaptionContainer"]').filter(has_text="this app's service:").inner_text()
    found = re.search(r"this app's service: (\d+) search(?:es)?, (\d+) query vectors? computed", line)
    assert found is not None, line
    return int(found.group(1)), int(found.group(2))


def press_on_slider(page, slider, key: str, weight: float) -> None:  # type: ignore[no-untyped-def]
    """One notch of the vector-weight slider (one interaction), then until the page shows ``weight``."""
    slider.focus()
    slider.press(key)
    page.wait_for_function(ASKED_IS, arg=f"{weight:.2f} / {1 - weight:.2f}")
    wait_idle(page)


def test_moving_the_vector_weight_slider_reorders_the_hits_and_their_breakdowns_one_search_a_notch(  # type: ignore[no-untyped-def]
    demo_served, demo_page
) -> None:
    page = demo_page
    go_to(page, "Search lab")
    page.get_by_label("Query", exact=True).fill(QUERY)
    page.get_by_test_id("stBaseButton-primaryFormSubmit").filter(has_text="Search").click()
    page.get_by_text("Score breakdown —").wait_for()
    wait_idle(page)
    assert metric_value(page, "Weights used · vector / keyword") == "0.70 / 0.30"
    assert metric_value(page, "Keyword weight") == "0.30"
    at_07 = card_chunk_ids(page)
    # the top hit's breakdown, drawn when unfolded; it stays open (and recomputes) as the slider moves
    page.locator('[data-testid="stExpander"] summary').filter(has_text="Score breakdown").first.click()
    top_breakdown = page.locator('[data-testid="stExpander"]').first
    top_breakdown.get_by_text(re.compile(r"^fused: ")).wait_for()
    wait_idle(page)
    steps_07 = top_breakdown.inner_text()
    searches, vectors = service_counters(page)

    slider = page.get_by_role("slider", name="Vector weight").first
    assert slider.input_value() == "0.7"
    for notch in range(1, 11):  # 0.05 a step, as a person would with the arrow keys
        press_on_slider(page, slider, "ArrowLeft", round(0.7 - 0.05 * notch, 2))
        # each notch ran one search, and no model call: the query's vector is remembered
        assert service_counters(page) == (searches + notch, vectors), notch
    assert slider.input_value() == "0.2"
    assert metric_value(page, "Keyword weight") == "0.80"
    assert metric_value(page, "Weights used · vector / keyword") == "0.20 / 0.80"
    assert metric_value(page, "Weights asked") == "0.20 / 0.80"
    at_02 = card_chunk_ids(page)
    steps_02 = top_breakdown.inner_text()

    # the hits shown are the engine's, in its order, for each setting; and the order moved
    session = home_session(demo_served)
    for shown, weight in ((at_07, 0.7), (at_02, 0.2)):
        expected = session.search(SearchRequest(QUERY, vector_weight=weight))["data"]["chunks"]
        assert shown == [c["id"] for c in expected], weight
    assert at_07 != at_02

    # the top hit's breakdown recomputed with the weights used
    assert steps_02 != steps_07
    top = session.search(SearchRequest(QUERY, vector_weight=0.2))["data"]["chunks"][0]["breakdown"]
    assert f"fused: 0.20 × {top['vector_normalized']:.4f} + 0.80 × {top['keyword_normalized']:.4f} = " in steps_02
    assert f"{top['final_score']:.4f}" in steps_02 and "1 − exp(−" in steps_02

    # a notch back to a weight searched before runs no search at all
    press_on_slider(page, slider, "ArrowRight", 0.25)
    assert service_counters(page) == (searches + 10, vectors)
    assert page.locator('[data-testid="stCaptionContainer"]').filter(has_text="from memory").count() == 1


def test_evaluate_demo_sweep_then_save_best_as_default_for_the_cli(demo_served, demo_page) -> None:  # type: ignore[no-untyped-def]
    # Start from the worst sweep point as the saved default, so saving the best visibly changes it.
    assert home_session(demo_served).save_search_settings(vector_weight=1.0, keyword_weight=0.0)["success"]
    page = demo_page
    go_to(page, "Evaluate")
    assert page.get_by_role("radiogroup", name="Judgments from").get_by_label("Demo judgments").is_checked()
    run_id = run_evaluation(page)

    run = KnowledgeBaseService(demo_served.home).evaluation_runs.load(run_id)
    assert run.kb_name == DEMO_KB_NAME and run.query_count == 24
    swept = run.metrics[run.metrics["setting"].str.match(r"hybrid \d")]
    assert len(swept) == 11 and swept["ndcg@10"].nunique() > 1, swept  # the sweep is not flat
    assert {"hybrid auto", "hybrid rrf"} <= set(run.metrics["setting"])
    best = best_sweep_setting(run.metrics)
    assert (best["vector_weight"], best["keyword_weight"]) != (1.0, 0.0)
    page.get_by_text(
        f"Best sweep point: vector {best['vector_weight']:.2f} / keyword {best['keyword_weight']:.2f} · "
        f"nDCG@10 {best['ndcg@10']:.4f}"
    ).wait_for()
    page.get_by_text("best nDCG@10").first.wait_for()

    page.get_by_role("button", name="Save best as KB default").click()
    page.get_by_text(f"Saved search defaults for '{DEMO_KB_NAME}'").wait_for()
    saved = KnowledgeBaseService(demo_served.home).find_kb(DEMO_KB_NAME).search_settings
    assert saved["vector_weight"] == best["vector_weight"] and saved["keyword_weight"] == best["keyword_weight"]
    assert (saved["mode"], saved["weighting"], saved["fusion"]) == ("hybrid", "fixed", "weighted")

    # a later search from the CLI, with no settings given, uses them
    cli = subprocess.run(
        [sys.executable, "-m", "kb_core.edges.cli", "--home", str(demo_served.home), "--json", "search",
         "How are keyword and vector scores combined?", "--kb", DEMO_KB_NAME],
        cwd=REPO, capture_output=True, text=True, encoding="utf-8", timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
    )
    assert cli.returncode == 0, cli.stderr
    weights = json.loads(cli.stdout)["data"]["weights"]
    assert weights["used"] == pytest.approx({"vector": best["vector_weight"], "keyword": best["keyword_weight"]})
    assert weights["requested"] == weights["used"] and weights["weighting"] == "fixed"


def test_two_kept_runs_compare_per_query_in_the_app(demo_served, demo_page) -> None:  # type: ignore[no-untyped-def]
    session = home_session(demo_served)
    page = demo_page
    go_to(page, "Evaluate")
    page.get_by_text("Sweep the vector weight", exact=True).click()
    page.get_by_text("Compare fusion", exact=True).click()
    wait_idle(page)
    assert session.save_search_settings(vector_weight=0.2, keyword_weight=0.8)["success"]
    first = run_evaluation(page)
    assert session.save_search_settings(vector_weight=0.9, keyword_weight=0.1)["success"]
    second = run_evaluation(page)

    # the newest run is B, the one before it A, each on its first setting: hybrid with the KB default of its time
    assert first in page.get_by_role("combobox", name="Run A").input_value()
    assert second in page.get_by_role("combobox", name="Run B").input_value()
    expected = session.compare_evaluation_runs(first, second)["data"]
    assert expected["setting_a"] == expected["setting_b"] == "hybrid (default)"
    assert metric_value(page, "Wins (B better)") == str(expected["wins"])
    assert metric_value(page, "Losses (B worse)") == str(expected["losses"])
    assert metric_value(page, "Ties") == str(expected["ties"])
    assert expected["wins"] + expected["losses"] + expected["ties"] == 24
    assert metric_value(page, "Mean nDCG@10: A → B") == f"{expected['mean_a']:.4f} → {expected['mean_b']:.4f}"
    assert not expected["warnings"]
    if expected["wins"] or expected["losses"]:
        page.get_by_text("B − A per query (nDCG@10)").first.wait_for()  # plotly may draw it twice while redrawing
