"""Kept evaluation runs: recorded by every `kb eval`, listed, compared query by query; the sweep's best weights saved
as a KB default change later searches."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from kb_core.edges.cli.main import main as cli_main
from kb_core.edges.envelopes import Enveloped
from kb_core.features.results import SearchRequest
from kb_core.session.evaluation import (
    EvaluationReport,
    EvaluationRunStore,
    EvaluationSetting,
    best_sweep_setting,
    compare_runs,
    kb_fingerprint,
)
from kb_core.session.service import KnowledgeBaseService
from tests.test_evaluation import CORPUS, QRELS, QUERIES, write_beir


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:
    code = cli_main(["--json", *argv])
    out = capsys.readouterr().out
    return code, json.loads(out)


@pytest.fixture
def judged_kb(tmp_path: Path) -> tuple[Path, Path]:
    """A user KB holding the tiny corpus as files named by corpus id, and judgments naming those documents."""
    home = tmp_path / "home"
    session = Enveloped(KnowledgeBaseService(home).session("cli"))
    assert session.create_knowledge_base("judged", 64, embedding_model="hashing")["success"]
    files = tmp_path / "files"
    files.mkdir()
    for doc_id, (title, text) in CORPUS.items():
        (files / f"{doc_id}.txt").write_text(f"{title}\n\n{text}", encoding="utf-8")
    assert session.import_document([str(p) for p in sorted(files.iterdir())], kb_name="judged")["success"]
    folder = tmp_path / "judgments"
    folder.mkdir()
    with open(folder / "queries.jsonl", "w", encoding="utf-8") as handle:
        for query_id, text in QUERIES.items():
            handle.write(json.dumps({"_id": query_id, "text": text}, ensure_ascii=False) + "\n")
    with open(folder / "qrels.tsv", "w", encoding="utf-8") as handle:
        handle.write("query-id\tcorpus-id\tscore\n")
        for query_id, judged in QRELS.items():
            for doc_id, grade in judged.items():
                handle.write(f"{query_id}\t{doc_id}.txt\t{grade}\n")
    return home, folder


def test_every_eval_is_kept_and_two_runs_compare_query_by_query(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    beir = write_beir(tmp_path / "tiny-beir")
    home = tmp_path / "home"
    base = ["--home", str(home), "eval", str(beir), "--model", "hashing", "--depth", "10"]
    code, first = run_cli(capsys, *base, "--mode", "keyword")
    assert code == 0 and first["data"]["run_id"].startswith("run_")
    code, second = run_cli(capsys, *base, "--mode", "semantic")
    assert code == 0
    code, listed = run_cli(capsys, "--home", str(home), "eval-runs")
    assert [r["id"] for r in listed["data"]["runs"]] == [second["data"]["run_id"], first["data"]["run_id"]]
    assert listed["data"]["runs"][0]["kb_fingerprint"] == listed["data"]["runs"][1]["kb_fingerprint"]
    assert listed["data"]["runs"][0]["query_count"] == len(QRELS)

    code, compared = run_cli(
        capsys, "--home", str(home), "eval-compare", first["data"]["run_id"], second["data"]["run_id"]
    )
    assert code == 0
    data = compared["data"]
    assert (data["setting_a"], data["setting_b"]) == ("keyword", "semantic")
    assert data["wins"] + data["losses"] + data["ties"] == data["queries"] == len(QRELS)
    assert data["same_kb"] is True and not data["warnings"]
    moves = [abs(m["delta"]) for m in data["moved_most"]]
    assert moves == sorted(moves, reverse=True)
    # the per-query values are the ones each run measured
    per_query_a = {q["query_id"]: q["ndcg@10"] for q in first["data"]["worst_queries"]}
    for move in data["moved_most"]:
        assert move["delta"] == pytest.approx(move["b"] - move["a"])
        if move["query_id"] in per_query_a:
            assert move["a"] == pytest.approx(per_query_a[move["query_id"]])
    assert data["mean_delta"] == pytest.approx(data["mean_b"] - data["mean_a"])

    # the plain-text rendering names the counts and the queries that moved
    assert cli_main(["--home", str(home), "eval-compare", first["data"]["run_id"], second["data"]["run_id"]]) == 0
    text = capsys.readouterr().out
    assert f"{data['wins']} wins, {data['losses']} losses, {data['ties']} ties" in text


def test_two_settings_of_one_run_compare_and_unknown_settings_are_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    beir = write_beir(tmp_path / "tiny-beir")
    home = tmp_path / "home"
    code, result = run_cli(capsys, "--home", str(home), "eval", str(beir), "--model", "hashing", "--depth", "10")
    run_id = result["data"]["run_id"]
    code, compared = run_cli(
        capsys, "--home", str(home), "eval-compare", run_id, run_id, "--setting-a", "keyword", "--setting-b",
        "hybrid (default)",
    )
    assert code == 0 and compared["data"]["queries"] == len(QRELS)
    code, refused = run_cli(capsys, "--home", str(home), "eval-compare", run_id, run_id, "--setting-a", "nope")
    assert code == 1 and "has no setting 'nope'" in refused["message"] and "keyword" in refused["message"]
    code, missing = run_cli(capsys, "--home", str(home), "eval-compare", run_id, "run_20260101-000000_abcdef")
    assert code == 1 and missing["error"]["code"] == "RUN_NOT_FOUND"


def test_save_best_sets_the_kb_default_that_later_searches_use(
    judged_kb: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    home, judgments = judged_kb
    session = Enveloped(KnowledgeBaseService(home).session("cli"))
    # a default the sweep must replace (no sweep point has vector weight 0.93, nor auto weighting)
    assert session.save_search_settings(kb_name="judged", vector_weight=0.93, weighting="auto")["success"]
    code, result = run_cli(
        capsys, "--home", str(home), "eval", str(judgments), "--kb", "judged", "--mode", "hybrid", "--save-best",
        "--depth", "10",
    )
    assert code == 0, result["message"]
    chosen = result["data"]["saved_default"]
    swept = {m["setting"]: m for m in result["data"]["metrics"] if m["setting"][:8] in ("hybrid 0", "hybrid 1")}
    assert len(swept) == 11 and chosen["ndcg@10"] == pytest.approx(max(m["ndcg@10"] for m in swept.values()))
    assert swept[chosen["setting"]]["vector_weight"] == pytest.approx(chosen["vector_weight"])
    # the sweep points ran with fixed weights even though the KB's saved weighting was auto
    assert {m["weighting"] for m in swept.values()} == {"fixed"}
    record = session.operations.find_kb("judged")
    assert record.search_settings["vector_weight"] == pytest.approx(chosen["vector_weight"])
    assert record.search_settings["weighting"] == "fixed"
    # a later search without weights uses the saved ones, exactly
    assert session.select_knowledge_base("judged")["success"]
    searched = session.search(SearchRequest("How do bees make honey?"))["data"]
    assert searched["settings"]["vector_weight"] == pytest.approx(chosen["vector_weight"])
    assert searched["weights"]["used"]["vector"] == pytest.approx(chosen["vector_weight"])


def test_save_best_needs_the_kb_it_saves_to(judged_kb: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    home, judgments = judged_kb
    code, result = run_cli(capsys, "--home", str(home), "eval", str(judgments), "--save-best")
    assert code == 1 and "--save-best needs --kb" in result["message"]


def test_the_fingerprint_follows_the_documents_chunking_and_model(tmp_path: Path) -> None:
    documents = pd.DataFrame(
        {"sha256": ["a" * 64, "b" * 64], "chunk_size": [128, 128], "status": ["ready", "failed"]}
    )
    base = kb_fingerprint(documents, 128, "all-MiniLM-L6-v2")
    assert kb_fingerprint(documents.iloc[::-1], 128, "all-MiniLM-L6-v2") == base  # order does not matter
    assert kb_fingerprint(documents.iloc[:1], 128, "all-MiniLM-L6-v2") != base
    assert kb_fingerprint(documents.assign(chunk_size=[256, 128]), 128, "all-MiniLM-L6-v2") != base
    assert kb_fingerprint(documents, 128, "hashing") != base


def _report(values: dict[str, float], setting: str = "hybrid (default)") -> EvaluationReport:
    per_query = pd.DataFrame(
        [{"setting": setting, "query_id": q, "query": f"text {q}", "ndcg@10": v, "recall@100": None, "mrr@10": v}
         for q, v in values.items()]
    )
    metrics = pd.DataFrame(
        [{"setting": setting, "mode": "hybrid", "vector_weight": 0.7, "keyword_weight": 0.3, "weighting": "fixed",
          "fusion": "weighted", "ndcg@10": sum(values.values()) / len(values), "recall@100": None,
          "mrr@10": 0.0, "queries": len(values), "seconds": 0.1}]
    )
    return EvaluationReport(metrics, per_query, {}, kb_name="kb")


def test_compare_counts_wins_losses_ties_and_warns_across_different_kbs(tmp_path: Path) -> None:
    store = EvaluationRunStore(tmp_path)
    settings = [EvaluationSetting("hybrid")]
    a = store.save(_report({"q1": 0.5, "q2": 1.0, "q3": 0.2, "q4": 0.3}), dataset="d", kb_id="kb_1",
                   kb_fingerprint="f1", embedding_model="m", chunk_size=128, settings=settings)
    b = store.save(_report({"q1": 0.9, "q2": 1.0, "q3": 0.0, "q5": 1.0}), dataset="d", kb_id="kb_1",
                   kb_fingerprint="f2", embedding_model="m", chunk_size=128, settings=settings)
    comparison = compare_runs(store.load(a.id), store.load(b.id))
    assert (comparison.wins, comparison.losses, comparison.ties) == (1, 1, 1)
    assert list(comparison.per_query["query_id"]) == ["q1", "q3", "q2"]  # |+0.4|, |−0.2|, 0
    assert not comparison.same_kb and "different knowledge bases" in comparison.warnings[0]
    assert "1 query(ies)" in comparison.warnings[1]


def test_a_half_written_or_damaged_run_is_not_listed(tmp_path: Path) -> None:
    store = EvaluationRunStore(tmp_path)
    kept = store.save(_report({"q1": 0.5}), dataset="d", kb_id="kb_1", kb_fingerprint="f", embedding_model="m",
                      chunk_size=128, settings=[EvaluationSetting("hybrid")])
    (store.root / ".writing-x1y2").mkdir()  # a writer killed before its rename
    damaged = store.root / "run_20260101-000000_abcdef"
    damaged.mkdir()
    (damaged / "run.json").write_text("{not json", encoding="utf-8")
    assert [r["id"] for r in store.list()] == [kept.id]


def test_best_sweep_setting_prefers_the_default_weight_on_ties() -> None:
    rows = [
        {"setting": f"hybrid {w:.2f}/{1 - w:.2f}", "mode": "hybrid", "vector_weight": w, "keyword_weight": 1 - w,
         "ndcg@10": 0.8 if w in (0.3, 0.6) else 0.5}
        for w in (0.0, 0.3, 0.6, 1.0)
    ] + [{"setting": "hybrid (default)", "mode": "hybrid", "vector_weight": 0.7, "keyword_weight": 0.3,
          "ndcg@10": 0.9}]
    best = best_sweep_setting(pd.DataFrame(rows))
    assert best["vector_weight"] == 0.6 and best["ndcg@10"] == 0.8  # the default row is not a sweep point


def _kept(store: EvaluationRunStore) -> str:
    return store.save(_report({"q1": 0.5}), dataset="d", kb_id="kb_1", kb_fingerprint="f", embedding_model="m",
                      chunk_size=128, settings=[EvaluationSetting("hybrid")]).id


def test_deleting_a_run_deletes_its_own_folder_whatever_run_json_names(tmp_path: Path) -> None:
    home = tmp_path / "home"
    store = EvaluationRunStore(home)
    planted, kept = _kept(store), _kept(store)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("not the home's", encoding="utf-8")
    meta = json.loads((store.root / planted / "run.json").read_text(encoding="utf-8"))
    meta["id"] = f"../../{victim.name}"  # HOME/evaluations/../../victim
    (store.root / planted / "run.json").write_text(json.dumps(meta), encoding="utf-8")
    session = Enveloped(KnowledgeBaseService(home).session())
    assert session.delete_evaluation_run(planted)["success"]
    assert (victim / "keep.txt").is_file()
    assert not (store.root / planted).exists() and (store.root / kept).is_dir()
    for bad in ("../victim", f"{kept}/..", "run_20260101-000000_abcdef"):
        refused = session.delete_evaluation_run(bad)
        assert refused["error"]["code"] == "RUN_NOT_FOUND", refused
    assert (victim / "keep.txt").is_file() and (store.root / kept).is_dir()


@pytest.mark.parametrize(
    "content",
    ["[1, 2]", '"text"', '{"settings": 5}', '{"created_at": 5}', "[" * 100_000 + "]" * 100_000],
)
def test_one_malformed_run_json_never_hides_the_other_runs(
    tmp_path: Path, content: str, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"
    store = EvaluationRunStore(home)
    kept, damaged = _kept(store), _kept(store)
    meta = json.loads((store.root / damaged / "run.json").read_text(encoding="utf-8"))
    if content.startswith("{"):
        (store.root / damaged / "run.json").write_text(json.dumps({**meta, **json.loads(content)}), encoding="utf-8")
    else:
        (store.root / damaged / "run.json").write_text(content, encoding="utf-8")
    code, listed = run_cli(capsys, "--home", str(home), "eval-runs")
    assert code == 0 and [r["id"] for r in listed["data"]["runs"]] == [kept], listed
    session = Enveloped(KnowledgeBaseService(home).session())
    shown = session.compare_evaluation_runs(kept, damaged)
    assert shown["error"]["code"] == "STORE_ERROR" and damaged in shown["message"], shown
    assert session.delete_evaluation_run(damaged)["success"]  # a damaged run can still be removed


def test_one_run_evaluation_keeps_the_run_and_save_best_sets_hybrid_unless_told_to_keep_the_mode(
    judged_kb: tuple[Path, Path],
) -> None:
    """The orchestration the CLI and the app share: the sweep 10 deep (no Recall@100) or, as the app may ask, 100
    deep; the run kept in the user's home; the best point saved with mode hybrid, or with the saved mode kept."""
    from kb_core.session.evaluation import EvaluationRequest, run_evaluation, save_best

    home, judgments = judged_kb
    session = Enveloped(KnowledgeBaseService(home).session("cli"))
    assert session.save_search_settings(kb_name="judged", mode="keyword")["success"]

    def no_eval_home() -> KnowledgeBaseService:
        raise AssertionError("the user's KB needs no evaluation home")

    request = EvaluationRequest(judgments, build_corpus=False, kb_name="judged", modes=("hybrid",), sweep_steps=4)
    shallow = run_evaluation(session.operations, request, eval_service=no_eval_home)
    deep = run_evaluation(session.operations, replace(request, sweep_full_depth=True), eval_service=no_eval_home)
    for outcome, recall_in_sweep in ((shallow, False), (deep, True)):
        metrics = outcome.report.metrics.set_index("setting")
        assert [s.label for s in outcome.swept] == ["hybrid 0.00/1.00", "hybrid 0.25/0.75", "hybrid 0.50/0.50",
                                                    "hybrid 0.75/0.25", "hybrid 1.00/0.00"]
        assert metrics.loc[[s.label for s in outcome.swept], "recall@100"].notna().all() == recall_in_sweep
        assert outcome.user_kb and outcome.dataset_name == "judgments" and outcome.documents is None
        kept = session.operations.service.evaluation_runs.load(outcome.run.id)
        assert list(kept.metrics["setting"]) == [s.label for s in outcome.settings]
    best = best_sweep_setting(shallow.report)
    # a typed result (#28); KBError on failure
    assert save_best(session.operations, "judged", best, mode=None).kb_name == "judged"
    assert session.operations.find_kb("judged").search_settings["mode"] == "keyword"
    assert save_best(session.operations, "judged", best).search_settings["mode"] == "hybrid"
    saved = session.operations.find_kb("judged").search_settings
    assert saved == {"mode": "hybrid", "vector_weight": best["vector_weight"],
                     "keyword_weight": best["keyword_weight"], "weighting": "fixed", "fusion": "weighted"}
