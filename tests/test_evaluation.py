"""Evaluation on BEIR folders: loading, cached KB builds, metrics per mode and weight, the CLI and the notebook.

The logic tests use a tiny bilingual BEIR folder written here and the model-free "hashing" embedder; one test
runs the real model on the same folder.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from kb_core import KnowledgeBaseService
from kb_core.base.errors import InvalidArgument
from kb_core.edges.cli.main import main as cli_main
from kb_core.edges.envelopes import Enveloped
from kb_core.features.beir import load_beir, load_beir_queries_qrels
from kb_core.session.evaluation import (
    METRICS,
    EvaluationRequest,
    EvaluationSetting,
    build_eval_kb,
    evaluate_kb,
    language_warning,
    run_evaluation,
    score_run,
    settings_for,
    sweep_weights,
)
from kb_core.session.service import open_eval_service

REPO_ROOT = Path(__file__).resolve().parents[1]

CORPUS = {
    "en-volcano": ("Volcanoes", "Magma rises through the crust and erupts as lava, ash and volcanic gas."),
    "en-photosynthesis": ("Photosynthesis", "Green plants capture sunlight in chloroplasts and make sugar from CO2."),
    "en-bees": ("Honey bees", "Worker bees collect nectar and pollen; the colony stores honey in wax combs."),
    "en-tides": ("Ocean tides", "The gravitational pull of the moon raises tides twice a day along coasts."),
    "en-vaccines": ("Vaccines", "A vaccine trains the immune system to recognise a pathogen without disease."),
    "en-glaciers": ("Glaciers", "Compacted snow turns into ice that slowly flows downhill and carves valleys."),
    "en-bread": ("Bread", "Yeast ferments dough, releasing carbon dioxide that makes the loaf rise in the oven."),
    "en-chess": ("Chess", "Each player starts with sixteen pieces; checkmate of the king ends the game."),
    "en-rust": ("Rust", "Iron reacts with oxygen and water, forming reddish iron oxide on steel bridges."),
    "en-comets": ("Comets", "Icy comets grow bright tails of dust when their orbit brings them near the sun."),
    "zh-panda": ("大熊猫", "大熊猫主要生活在四川的竹林里，每天要吃很多竹子。"),
    "zh-tea": ("茶叶", "绿茶不经过发酵，红茶需要完全发酵，乌龙茶属于半发酵茶。"),
    "zh-greatwall": ("长城", "长城是古代修建的军事防御工程，东起山海关，西至嘉峪关。"),
    "zh-dumpling": ("饺子", "春节的时候，北方人家常常包饺子，馅料有猪肉和白菜。"),
    "zh-silk": ("丝绸", "蚕吐丝结茧，人们把蚕茧煮过以后抽出丝线织成丝绸。"),
    "zh-yangtze": ("长江", "长江是中国最长的河流，流经重庆、武汉和南京，最后注入东海。"),
    "zh-calligraphy": ("书法", "书法家用毛笔和墨在宣纸上写字，楷书和草书风格不同。"),
    "zh-compass": ("指南针", "指南针利用磁石指示南北方向，古代航海时非常重要。"),
    "zh-rice": ("水稻", "南方的农民在水田里种植水稻，秋天收割稻谷。"),
    "zh-kite": ("风筝", "潍坊每年举办国际风筝节，人们用竹子和纸制作风筝。"),
}
QUERIES = {
    "q-en-1": "Why does bread dough rise when yeast ferments it?",
    "q-en-2": "How do bees make and store honey?",
    "q-en-3": "What causes ocean tides?",
    "q-zh-1": "大熊猫吃什么？",
    "q-zh-2": "长江流经哪些城市？",
    "q-zh-3": "红茶和绿茶有什么不同？",
    "q-unjudged": "This query has no judgment and must not be run.",
}
QRELS = {
    "q-en-1": {"en-bread": 1},
    "q-en-2": {"en-bees": 2, "en-photosynthesis": 0},
    "q-en-3": {"en-tides": 1},
    "q-zh-1": {"zh-panda": 1},
    "q-zh-2": {"zh-yangtze": 1},
    "q-zh-3": {"zh-tea": 1},
}
JUDGED = [q for q in QUERIES if q in QRELS]


def write_beir(folder: Path, *, qrels_name: str = "qrels.tsv") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "corpus.jsonl", "w", encoding="utf-8") as handle:
        for doc_id, (title, text) in CORPUS.items():
            handle.write(json.dumps({"_id": doc_id, "title": title, "text": text}, ensure_ascii=False) + "\n")
    with open(folder / "queries.jsonl", "w", encoding="utf-8") as handle:
        for query_id, text in QUERIES.items():
            handle.write(json.dumps({"_id": query_id, "text": text}, ensure_ascii=False) + "\n")
    (folder / qrels_name).parent.mkdir(parents=True, exist_ok=True)
    with open(folder / qrels_name, "w", encoding="utf-8") as handle:
        handle.write("query-id\tcorpus-id\tscore\n")
        for query_id, judged in QRELS.items():
            for doc_id, grade in judged.items():
                handle.write(f"{query_id}\t{doc_id}\t{grade}\n")
    return folder


@pytest.fixture
def beir(tmp_path: Path) -> Path:
    return write_beir(tmp_path / "tiny-beir")


@pytest.fixture
def eval_service(tmp_path: Path):
    return open_eval_service(tmp_path / "home")


# -- loading --------------------------------------------------------------------------------------
def test_load_beir_reads_corpus_and_keeps_only_judged_queries(beir: Path) -> None:
    dataset = load_beir(beir)
    assert dataset.name == "tiny-beir"
    assert len(dataset.corpus) == 20
    assert dataset.corpus["zh-panda"] == {"title": "大熊猫", "text": CORPUS["zh-panda"][1]}
    assert list(dataset.queries) == JUDGED
    assert dataset.qrels["q-en-2"] == {"en-bees": 2, "en-photosynthesis": 0}
    queries, qrels = load_beir_queries_qrels(beir)
    assert queries == dataset.queries and qrels == dataset.qrels


def test_load_beir_accepts_the_original_qrels_layout_and_splits(tmp_path: Path) -> None:
    folder = write_beir(tmp_path / "nested", qrels_name="qrels/test.tsv")
    assert len(load_beir(folder).queries) == 6
    (folder / "qrels.dev.tsv").write_text("query-id\tcorpus-id\tscore\nq-zh-1\tzh-panda\t1\n", encoding="utf-8")
    queries, qrels = load_beir_queries_qrels(folder, split="dev")
    assert queries == {"q-zh-1": QUERIES["q-zh-1"]} and qrels == {"q-zh-1": {"zh-panda": 1}}


def test_load_beir_names_what_is_missing(tmp_path: Path, beir: Path) -> None:
    with pytest.raises(InvalidArgument, match="not a folder"):
        load_beir(tmp_path / "nowhere")
    (beir / "qrels.tsv").unlink()
    with pytest.raises(InvalidArgument, match=r"qrels\.tsv"):
        load_beir(beir)
    (beir / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\nother\ten-bees\t1\n", encoding="utf-8")
    with pytest.raises(InvalidArgument, match=r"No query .* has a relevance judgment"):
        load_beir(beir)
    (beir / "corpus.jsonl").write_text("{not json\n", encoding="utf-8")
    with pytest.raises(InvalidArgument, match="line 1: not valid JSON"):
        load_beir(beir)


MALFORMED = {
    "a line nested 100,000 deep": ("queries.jsonl", b"[" * 100_000 + b"]" * 100_000 + b"\n", 1, "nests deeper"),
    "a lone surrogate in a query": ("queries.jsonl", b'{"_id": "q-en-1", "text": "bees \\ud800"}\n', 1, "surrogate"),
    "a lone surrogate in a title": ("corpus.jsonl", b'{"_id": "d", "title": "\\udc00", "text": "x"}\n', 1, "surrogate"),
    "a score of 1e29": ("qrels.tsv", b"query-id\tcorpus-id\tscore\nq-en-1\ten-bees\t1e29\n", 2, "whole number"),
    "a score of inf": ("qrels.tsv", b"query-id\tcorpus-id\tscore\nq-en-1\ten-bees\tinf\n", 2, "whole number"),
    "binary qrels": ("qrels.tsv", b"\x89PNG\r\n\x1a\n" + bytes(range(128, 256)) * 8, 1, "not UTF-8"),
    "a NUL byte": ("qrels.tsv", b"query-id\tcorpus-id\tscore\nq-en-1\ten-bees\x00\t1\n", 2, "NUL"),
    # #37: csv's field limit (131,072 characters) once made this an INTERNAL_ERROR
    "a 200,000-character field": ("qrels.tsv", b"query-id\tcorpus-id\tscore\nq-en-1\t" + b"x" * 200_000 + b"\t1\n", 2,
                                  "not a tab-separated line"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_beir_lines_are_named_not_internal_errors(
    tmp_path: Path, case: str, capsys: pytest.CaptureFixture[str]
) -> None:
    name, data, line, fragment = MALFORMED[case]
    folder = write_beir(tmp_path / "bad")
    (folder / name).write_bytes(data)
    code = cli_main(["--home", str(tmp_path / "home"), "--json", "eval", str(folder), "--model", "hashing",
                     "--mode", "keyword"])  # fmt: skip
    answer = json.loads(capsys.readouterr().out)
    assert code == 1 and answer["error"]["code"] == "INVALID_ARGUMENT", answer
    assert f"{name}, line {line}:" in answer["message"] and fragment in answer["message"], answer["message"]


def test_a_byte_order_mark_before_the_first_line_is_read_past(tmp_path: Path) -> None:
    folder = write_beir(tmp_path / "bom")
    for name in ("qrels.tsv", "queries.jsonl", "corpus.jsonl"):
        (folder / name).write_bytes(b"\xef\xbb\xbf" + (folder / name).read_bytes())
    dataset = load_beir(folder)
    assert list(dataset.queries) == JUDGED and dataset.qrels["q-en-2"] == {"en-bees": 2, "en-photosynthesis": 0}


# -- metrics --------------------------------------------------------------------------------------
def test_score_run_matches_the_textbook_values() -> None:
    qrels = {"a": {"d1": 1}, "b": {"d2": 1}, "c": {"d3": 1}}
    run = {"a": {"d1": 2.0, "x": 1.0}, "b": {"x": 2.0, "d2": 1.0}, "c": {}}
    values = score_run(run, qrels)
    assert values["a"] == {"ndcg@10": 1.0, "recall@100": 1.0, "mrr@10": 1.0}
    assert values["b"]["mrr@10"] == pytest.approx(0.5)
    assert values["b"]["ndcg@10"] == pytest.approx(1 / 1.5849625007211563)  # 1 / log2(3)
    assert values["c"] == dict.fromkeys(METRICS, 0.0)  # no results still counts, as zero


def test_score_run_keeps_our_order_when_scores_tie() -> None:
    # trec_eval alone would order ties by document id ("z" before "a"); our ranking puts "a" first.
    values = score_run({"q": {"a": 1.0, "z": 1.0}}, {"q": {"a": 1}})
    assert values["q"]["mrr@10"] == 1.0


def test_queries_the_model_cannot_read_are_named_once_with_the_first_few_ids() -> None:
    many = language_warning("all-MiniLM-L6-v2", [f"zh-{i}" for i in range(1, 13)], 24)
    assert many.startswith("The embedding model all-MiniLM-L6-v2 does not cover the language of 12 of 24 queries "
                           "(zh-1, zh-2, zh-3, zh-4, zh-5 and 7 more): ")
    assert "(q7)" in language_warning("m", ["q7"], 3)


def test_settings_for_modes_weights_and_sweeps() -> None:
    assert [s.label for s in settings_for()] == ["hybrid (default)", "semantic", "keyword"]
    chosen = settings_for(("hybrid",), [0.0, 0.5, 1.0], vector_weight=0.4)
    assert chosen[0] == EvaluationSetting("hybrid", 0.4, 0.6)
    assert [(s.vector_weight, s.keyword_weight) for s in chosen[1:]] == [(0.0, 1.0), (0.5, 0.5), (1.0, 0.0)]
    assert sweep_weights(4) == [0.0, 0.25, 0.5, 0.75, 1.0]
    with pytest.raises(InvalidArgument, match="mode 'fuzzy'"):
        settings_for(("fuzzy",))


# -- building and evaluating ------------------------------------------------------------------------
def test_build_eval_kb_names_documents_by_corpus_id_and_is_reused(eval_service, beir: Path) -> None:
    dataset = load_beir(beir)
    seen: list[tuple[str, int, int]] = []
    record = build_eval_kb(eval_service, dataset, embedding_model="hashing", progress=lambda *a: seen.append(a))
    assert seen[0] == ("import", 0, 20) and seen[-1] == ("import", 20, 20)
    documents = Enveloped(eval_service.session()).list_documents(kb_name=record.name)["data"]["documents"]
    assert sorted(d["name"] for d in documents) == sorted(CORPUS)
    assert record.embedding_model == "hashing" and record.chunk_size == 512

    again: list[tuple[str, int, int]] = []
    reused = build_eval_kb(eval_service, dataset, embedding_model="hashing", progress=lambda *a: again.append(a))
    assert reused.id == record.id
    assert again == [("import", 20, 20)]  # nothing imported the second time

    other = build_eval_kb(eval_service, dataset, chunk_size=64, embedding_model="hashing")
    assert other.id != record.id and other.chunk_size == 64


def test_interrupted_build_resumes_with_the_missing_documents(eval_service, beir: Path) -> None:
    dataset = load_beir(beir)
    record = build_eval_kb(eval_service, dataset, embedding_model="hashing")
    session = Enveloped(eval_service.session())
    assert session.delete_document("zh-panda", kb_name=record.name)["success"]
    resumed = build_eval_kb(eval_service, dataset, embedding_model="hashing")
    assert resumed.id == record.id
    names = {d["name"] for d in session.list_documents(kb_name=record.name)["data"]["documents"]}
    assert names == set(CORPUS)


def test_evaluate_kb_reports_each_mode_and_per_query_results(eval_service, beir: Path) -> None:
    dataset = load_beir(beir)
    record = build_eval_kb(eval_service, dataset, embedding_model="hashing")
    progress: list[tuple[str, int, int]] = []
    report = evaluate_kb(
        eval_service.session(), QUERIES, QRELS, kb_name=record.name, progress=lambda *a: progress.append(a)
    )
    metrics = report.metrics.set_index("setting")
    assert list(metrics.index) == ["hybrid (default)", "semantic", "keyword"]
    assert list(report.metrics.columns[:10]) == [
        "setting",
        "mode",
        "vector_weight",
        "keyword_weight",
        "weighting",
        "fusion",
        *METRICS,
        "queries",
    ]
    assert (metrics["queries"] == 6).all()  # the unjudged query is not run
    assert metrics.loc["hybrid (default)", "vector_weight"] == pytest.approx(0.7)
    assert metrics.loc["keyword", "ndcg@10"] >= 0.8  # each query shares distinctive words with its document
    for metric in METRICS:
        assert ((metrics[metric] >= 0) & (metrics[metric] <= 1)).all()
    assert ("keyword", 6, 6) in progress

    # runs hold documents (corpus ids), and re-scoring them reproduces the reported figures
    assert set(report.runs) == set(metrics.index)
    assert all(doc in CORPUS for run in report.runs.values() for docs in run.values() for doc in docs)
    for label, run in report.runs.items():
        values = score_run(run, QRELS)
        assert metrics.loc[label, "ndcg@10"] == pytest.approx(sum(v["ndcg@10"] for v in values.values()) / 6)

    assert len(report.per_query) == 18 and set(report.per_query["query_id"]) == set(JUDGED)
    worst = report.worst_queries("keyword", 3)
    assert list(worst["ndcg@10"]) == sorted(worst["ndcg@10"])
    assert report.to_json()["metrics"][0]["setting"] == "hybrid (default)"


def test_weight_sweep_runs_hybrid_at_each_weight(eval_service, beir: Path) -> None:
    dataset = load_beir(beir)
    record = build_eval_kb(eval_service, dataset, embedding_model="hashing")
    report = evaluate_kb(
        eval_service.session(),
        dataset.queries,
        dataset.qrels,
        modes=(),
        vector_weights=[0.0, 0.5, 1.0],
        kb_name=record.name,
        top_k=10,
    )
    assert list(report.metrics["vector_weight"]) == [0.0, 0.5, 1.0]
    assert list(report.metrics["keyword_weight"]) == [1.0, 0.5, 0.0]
    assert (report.metrics["mode"] == "hybrid").all()


def test_the_evaluation_home_embeds_each_query_once_across_settings(
    eval_service, beir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every judged query runs under each mode and sweep point; the evaluation home's embedders remember its vector,
    so the model computes it once (the figures are those of embedding it each time)."""
    from collections import Counter

    from kb_core.engines.embedding.hashing import HashingEmbedder

    dataset = load_beir(beir)
    record = build_eval_kb(eval_service, dataset, embedding_model="hashing")
    embedded: Counter[str] = Counter()
    original = HashingEmbedder.embed_query

    def counted(self: HashingEmbedder, text: str):  # type: ignore[no-untyped-def]
        embedded[text] += 1
        return original(self, text)

    monkeypatch.setattr(HashingEmbedder, "embed_query", counted)
    evaluate_kb(eval_service.session(), QUERIES, QRELS, vector_weights=[0.0, 0.5, 1.0], kb_name=record.name)
    assert {QUERIES[q] for q in JUDGED} <= set(embedded)
    assert set(embedded.values()) == {1}, embedded


def test_an_evaluation_of_a_corpus_limits_queries(tmp_path: Path, beir: Path) -> None:
    session = KnowledgeBaseService(tmp_path / "home").session()
    request = EvaluationRequest(beir, build_corpus=True, modes=("keyword",), embedding_model="hashing", max_queries=2)
    outcome = run_evaluation(session, request)
    assert outcome.queries == 2 and outcome.documents == len(load_beir(beir).corpus)
    assert outcome.report.metrics.loc[0, "queries"] == 2
    with pytest.raises(InvalidArgument, match="max-queries"):
        run_evaluation(session, replace(request, max_queries=0))


# -- CLI ------------------------------------------------------------------------------------------
def test_cli_eval_prints_the_envelope_and_keeps_eval_kbs_out_of_the_user_list(
    tmp_path: Path, beir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "cli-home"
    code = cli_main(["--home", str(home), "--json", "eval", str(beir), "--model", "hashing", "--mode", "keyword"])
    envelope = json.loads(capsys.readouterr().out)
    assert code == 0 and envelope["success"], envelope
    data = envelope["data"]
    assert data["dataset"] == "tiny-beir" and data["queries"] == 6 and data["documents"] == 20
    assert [m["setting"] for m in data["metrics"]] == ["keyword"]
    assert data["eval_home"] == str((home / "cache" / "eval").resolve())
    assert len(data["worst_queries"]) == 6

    assert cli_main(["--home", str(home), "--json", "list"]) == 0
    assert json.loads(capsys.readouterr().out)["data"]["count"] == 0

    code = cli_main(
        ["--home", str(home), "eval", str(beir), "--model", "hashing", "--vector-weight", "0.4", "--max-queries", "3"]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "nDCG@10" in out and "hybrid 0.40/0.60" in out


def test_cli_eval_sweep_adds_hybrid_weights_ten_deep(
    tmp_path: Path, beir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--home", str(tmp_path / "h"), "--json", "eval", str(beir), "--model", "hashing", "--mode", "keyword"]
    assert cli_main([*argv, "--sweep", "--max-queries", "2"]) == 0
    metrics = json.loads(capsys.readouterr().out)["data"]["metrics"]
    assert [m["setting"] for m in metrics[:3]] == ["keyword", "hybrid 0.00/1.00", "hybrid 0.10/0.90"]
    assert len(metrics) == 12
    assert metrics[0]["recall@100"] is not None
    assert all(m["recall@100"] is None and m["ndcg@10"] is not None for m in metrics[1:])


def test_cli_eval_split_scores_other_judgments_on_the_same_cached_kb(
    tmp_path: Path, beir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (beir / "qrels.train.tsv").write_text("query-id\tcorpus-id\tscore\nq-zh-1\tzh-panda\t1\n", encoding="utf-8")
    argv = ["--home", str(tmp_path / "h"), "--json", "eval", str(beir), "--model", "hashing", "--mode", "keyword"]
    assert cli_main(argv) == 0
    default = json.loads(capsys.readouterr().out)["data"]
    assert cli_main([*argv, "--split", "train"]) == 0
    train = json.loads(capsys.readouterr().out)["data"]
    assert default["queries"] == 6 and train["queries"] == 1
    assert train["kb_name"] == default["kb_name"]
    assert cli_main([*argv, "--split", "dev"]) == 1
    assert "qrels.dev.tsv" in json.loads(capsys.readouterr().out)["message"]


def test_cli_eval_reports_a_bad_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli_main(["--home", str(tmp_path / "h"), "eval", str(tmp_path / "missing")])
    assert code == 1
    assert "is not a folder" in capsys.readouterr().err


# -- notebook -------------------------------------------------------------------------------------
def test_notebook_runs_on_a_small_dataset(tmp_path: Path, beir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    path = REPO_ROOT / "notebooks" / "retrieval_evaluation.ipynb"
    monkeypatch.setenv("KB_EVAL_DATASET", str(beir))
    monkeypatch.setenv("KB_EVAL_MODEL", "hashing")
    monkeypatch.setenv("KB_EVAL_HOME", str(tmp_path / "nb-home"))
    monkeypatch.setenv("KB_EVAL_SWEEP_STEPS", "2")
    notebook = nbformat.read(path, as_version=4)
    nbclient.NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    text = json.dumps(outputs, ensure_ascii=False)
    assert "ndcg@10" in text and "application/vnd.plotly.v1+json" in text
    assert "q-zh-" in text  # the worst-queries table lists queries
    assert "hybrid auto" in text and "hybrid rrf" in text  # auto weights and RRF next to the fixed default
    from kb_core import KnowledgeBaseService

    runs = Enveloped(KnowledgeBaseService(tmp_path / "nb-home").session()).list_evaluation_runs()["data"]["runs"]
    assert len(runs) == 1 and f"kept as run {runs[0]['id']}" in text


def test_notebook_runs_on_a_fresh_clone_without_shared_on_the_demo_judgments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A clone has no ../shared: the notebook says so and evaluates the demo documents with data/demo/eval (#34)."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    clone = tmp_path / "clone" / "notebooks"  # ../../shared from here does not exist
    clone.mkdir(parents=True)
    shutil.copy(REPO_ROOT / "notebooks" / "retrieval_evaluation.ipynb", clone)
    assert not (clone / "../../shared").exists()
    monkeypatch.delenv("KB_EVAL_DATASET", raising=False)
    monkeypatch.setenv("KB_EVAL_MODEL", "hashing")  # the fallback's own model is the demo's; hashing keeps CI quick
    monkeypatch.setenv("KB_EVAL_HOME", str(tmp_path / "nb-home"))
    monkeypatch.setenv("KB_EVAL_SWEEP_STEPS", "2")
    notebook = nbformat.read(clone / "retrieval_evaluation.ipynb", as_version=4)
    nbclient.NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(clone)}}
    ).execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    text = json.dumps(outputs, ensure_ascii=False)
    assert "is not here" in text and "data/demo/eval" in text  # it says what it evaluates instead
    assert "demo: 10 documents, 24 judged queries" in text
    assert "ndcg@10" in text and "application/vnd.plotly.v1+json" in text
    assert re.search(r"(en|zh)\d\d", text)  # the worst-queries table lists the demo's questions


# -- the real model ----------------------------------------------------------------------------------
@pytest.mark.model
def test_real_model_evaluation_flags_chinese_and_finds_english_paraphrases(tmp_path: Path, beir: Path) -> None:
    session = KnowledgeBaseService(tmp_path / "home").session()
    request = EvaluationRequest(beir, build_corpus=True, depth=10, embedding_model="all-MiniLM-L6-v2")
    report = run_evaluation(session, request).report
    assert report.per_query["query_id"].nunique() == 6
    metrics = report.metrics.set_index("setting")
    semantic = report.per_query[report.per_query["setting"] == "semantic"].set_index("query_id")
    # all-MiniLM-L6-v2 understands the English questions...
    assert semantic.loc[["q-en-1", "q-en-2", "q-en-3"], "mrr@10"].mean() >= 0.8
    # ...and the user is told once that it does not cover Chinese, which queries, and what that means; the hybrid
    # must not fall below keyword search there
    about_language = [w for w in report.warnings if "does not cover" in w]
    assert about_language == [
        "The embedding model all-MiniLM-L6-v2 does not cover the language of 3 of 6 queries (q-zh-1, q-zh-2, "
        "q-zh-3): their semantic scores carry little meaning, and with the language guard on (the default) hybrid "
        "search gives their vector signal weight 0, ranking them by keywords."
    ], report.warnings
    hybrid = report.per_query[report.per_query["setting"] == "hybrid (default)"].set_index("query_id")
    keyword = report.per_query[report.per_query["setting"] == "keyword"].set_index("query_id")
    zh = ["q-zh-1", "q-zh-2", "q-zh-3"]
    assert hybrid.loc[zh, "ndcg@10"].mean() >= keyword.loc[zh, "ndcg@10"].mean() - 1e-9
    assert metrics.loc["hybrid (default)", "ndcg@10"] >= 0.8
    assert os.environ.get("HF_HUB_OFFLINE") == "1"
