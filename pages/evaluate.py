"""Evaluate: BEIR judgments (the demo judgments, a folder on the server, or uploaded queries.jsonl + qrels.tsv)
against the current KB, or against a cached KB built from the folder's corpus.jsonl; the modes, auto and RRF
fusion, a weight sweep whose best point can become the KB default, worst queries, CSV; every run is kept, and two
kept runs (or two settings of one run) compare query by query."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from kb_core import KBError
from kb_core.base.config import DEFAULT_VECTOR_WEIGHT, SEARCH_MODES
from kb_core.features.beir import confine_folder
from kb_core.features.retrieval.search import saved_search_settings
from kb_core.session import evaluation
from kb_core.session.demo import DEMO_KB_NAME, demo_judgments_folder
from pages import _service
from pages._cards import table_height
from pages._errors import attempt
from pages._i18n import mode_label, mode_labels, say, t
from pages._paths import server_path_session
from pages._picker import current_kb_name

DEMO = "Demo judgments"
FOLDER = "Folder on the server"
UPLOAD = "Upload files"
METRIC_NAMES = {"ndcg@10": "nDCG@10", "recall@100": "Recall@100", "mrr@10": "MRR@10"}
METRIC_COLOURS = {"ndcg@10": "#1f4e9c", "recall@100": "#7fb3e6", "mrr@10": "#e07b39"}

session = _service.session()
st.title(t("Evaluate retrieval"))


# Option labels are looked up in dicts made as the page runs: a widget's format_func may also be called outside the
# script run (AppTest does), where the session's language cannot be read.
def source_labels() -> dict[str, str]:
    """Where judgments come from (the option values) as a person reads it."""
    return {DEMO: t("Demo judgments"), FOLDER: t("Folder on the server"), UPLOAD: t("Upload files")}


def table_columns() -> dict[str, Any]:
    """Headers, in the session's language, of the metrics and per-query tables' columns (their names stay)."""
    return {
        "setting": st.column_config.TextColumn(t("setting")),
        "mode": st.column_config.TextColumn(t("mode")),
        "weighting": st.column_config.TextColumn(t("weighting")),
        "fusion": st.column_config.TextColumn(t("fusion")),
        "queries": st.column_config.NumberColumn(t("queries")),
        "seconds": st.column_config.NumberColumn(t("seconds"), format="%.1f"),
        "query_id": st.column_config.TextColumn(t("query id")),
        "query": st.column_config.TextColumn(t("query")),
    }


@dataclass
class Outcome:
    """One finished evaluation, kept in the browser session."""

    report: Any
    run_id: str
    kb_name: str
    user_kb: bool  # the user's own KB (its default may be set), not one built from a corpus
    dataset: str
    sweep_labels: list[str]


kb_name = current_kb_name(session)
demo_folder = demo_judgments_folder()
st.caption(
    t("Judgments in BEIR format: `queries.jsonl` ({fields}) and `qrels.tsv` (query-id, corpus-id, score). Against "
      "the current knowledge base, corpus ids are document names (e.g. `guide.docx`). Every run is kept in this "
      "home, so runs can be compared query by query below (and with `kb eval-compare`).", fields='{"_id", "text"}')
)

# a public demo has no server folders (the session refuses them too)
sources = ([DEMO] if demo_folder is not None else []) + ([] if _service.public_demo_enabled() else [FOLDER]) + [UPLOAD]
default_source = (
    DEMO if demo_folder is not None and kb_name == DEMO_KB_NAME else FOLDER if FOLDER in sources else UPLOAD
)
source = st.radio(t("Judgments from"), sources, index=sources.index(default_source), horizontal=True,
                  key="eval_source", format_func=source_labels().__getitem__)
folder: Path | None = None
reader = session  # the session the judgments are read through: confined to KB_ALLOW_DIRS for a server folder
build_corpus = False
uploaded: dict[str, bytes] = {}
dataset_name = "judgments"
if source == DEMO:
    folder = demo_folder
    dataset_name = "demo judgments"
    st.caption(t(
        "24 questions about the demo documents, 12 in English and 12 in Chinese, each judged by hand (grade 2: "
        "about what the question asks; 1: part of it, or the other language's version); `data/demo/eval`."
    ))
    if kb_name != DEMO_KB_NAME:
        st.warning(t("These judgments name the documents of the demo knowledge base “{name}”; select it in the "
                     "sidebar to evaluate it.", name=DEMO_KB_NAME), icon=":material/info:")
elif source == FOLDER:
    # Inside the KB_ALLOW_DIRS folders only (as Import and Export / import), never the home; nothing is looked at
    # before the check, so a refusal does not say whether a path exists (#37).
    confined = server_path_session(session)
    text = st.text_input(t("BEIR folder"), key="eval_folder", placeholder="/data/beir/scifact",
                         disabled=confined is None)
    if confined is not None and text.strip():
        try:
            folder = confine_folder(text.strip(), confined.allowed_dirs)
        except KBError as error:
            st.error(say(error.message), icon=":material/lock:")
        else:
            reader = confined
            dataset_name = folder.name or "judgments"
    if folder is not None and (folder / "corpus.jsonl").is_file():
        build_corpus = st.toggle(
            t("Search a knowledge base built from this folder's corpus.jsonl (built once, then cached)"),
            value=True, key="eval_build",
        )
else:
    c1, c2 = st.columns(2)
    queries_file = c1.file_uploader("queries.jsonl", type=["jsonl", "json"], key="eval_queries")
    qrels_file = c2.file_uploader("qrels.tsv", type=["tsv", "txt"], key="eval_qrels")
    dataset_name = "uploaded judgments"
    if queries_file is not None and qrels_file is not None:
        uploaded = {"queries.jsonl": queries_file.getvalue(), "qrels.tsv": qrels_file.getvalue()}

can_run = build_corpus or kb_name is not None
if not can_run:
    st.info(t("Select a knowledge base in the sidebar to evaluate it, or give a BEIR folder with a corpus."))
elif build_corpus:
    st.caption(t("Evaluating a KB built from the corpus."))
else:
    st.caption(t("Evaluating knowledge base **{name}**.", name=kb_name))

with st.expander(t("Settings"), expanded=True):
    s1, s2, s3 = st.columns([1.8, 1.2, 1.3])
    modes = s1.multiselect(t("Modes"), list(SEARCH_MODES), default=list(SEARCH_MODES), key="eval_modes",
                           format_func=mode_labels().get,
                           help=t("Each mode with the KB's saved settings (its defaults)."))
    compare_fusion = s2.toggle(
        t("Compare fusion"), value=True, key="eval_compare_fusion",
        help=t("Also hybrid with auto weighting and hybrid with reciprocal rank fusion (RRF)."),
    )
    max_queries = s3.number_input(t("Max queries (0 = all)"), min_value=0, value=0, step=50, key="eval_max")
    w1, w2, w3 = st.columns([1.8, 1.2, 1.3])
    sweep = w1.toggle(t("Sweep the vector weight"), value=True, key="eval_sweep",
                      help=t("Hybrid at vector weights 0 … 1 (keyword weight 1 − it), fixed weights, weighted "
                             "fusion; the KB's other saved settings (language guard, Jaccard weight) as they are."))
    steps = w2.slider(t("Sweep steps"), 2, 20, 10, key="eval_steps", disabled=not sweep)
    sweep_recall = w3.toggle(
        t("Recall@100 in sweep"), value=True, key="eval_sweep_recall", disabled=not sweep,
        help=t("Rank 100 documents deep at each sweep point (about twice the time); off: 10 deep, nDCG@10 and "
               "MRR@10."),
    )

ready = can_run and ((folder is not None) or bool(uploaded)) and bool(modes)
if st.button(t("Run evaluation"), type="primary", disabled=not ready, key="eval_run"):
    request = evaluation.EvaluationRequest(
        folder=folder or Path(), build_corpus=build_corpus, modes=tuple(modes), compare_fusion=compare_fusion,
        sweep_steps=steps if sweep else None, sweep_full_depth=sweep_recall, max_queries=int(max_queries) or None,
        dataset_name=dataset_name,
    )
    planned, swept = evaluation.planned_settings(request)
    everything = planned + swept  # the progress bar's settings, in running order
    bar = st.progress(0.0, text=t("Starting…"))
    seen: list[str] = []

    def progress(stage: str, done: int, total: int) -> None:
        if stage == "import":
            bar.progress(done / total if total else 1.0,
                         text=t("Building the corpus KB: {done} of {total} documents", done=done, total=total))
            return
        if stage not in seen:
            seen.append(stage)
        fraction = (len(seen) - 1 + (done / total if total else 1.0)) / len(everything)
        bar.progress(min(1.0, fraction), text=t("{setting}: {done} of {total} queries (setting {at} of {count})",
                                                 setting=stage, done=done, total=total, at=len(seen),
                                                 count=len(everything)))

    try:
        with tempfile.TemporaryDirectory(prefix="kb-eval-upload-", dir=session.scratch_root) as scratch:
            if uploaded:
                for name, content in uploaded.items():
                    (Path(scratch) / name).write_bytes(content)
                request = replace(request, folder=Path(scratch))
            # a corpus is built into the service's evaluation home, <home>/cache/eval, out of the user's KB list
            finished = evaluation.run_evaluation(reader, request, progress=progress)
        bar.progress(1.0, text=t("Done"))
        st.session_state["eval_outcome"] = Outcome(
            finished.report, finished.run.id, str(finished.report.kb_name), finished.user_kb, finished.dataset_name,
            [s.label for s in finished.swept],
        )
        st.session_state.pop("eval_saved", None)
    except KBError as error:
        bar.empty()
        st.error(say(error.message), icon=":material/error:")
    except (OSError, ValueError) as error:
        bar.empty()
        st.error(t("Could not read the judgments: {error}", error=error), icon=":material/error:")


def sweep_figure(swept: pd.DataFrame, best: dict[str, Any]) -> go.Figure:
    figure = go.Figure()
    for metric in ("ndcg@10", "recall@100", "mrr@10"):
        if swept[metric].notna().any():
            figure.add_scatter(
                x=swept["vector_weight"], y=swept[metric], mode="lines+markers", name=METRIC_NAMES[metric],
                customdata=swept["keyword_weight"], line={"color": METRIC_COLOURS[metric]},
                hovertemplate=t("vector {vector} / keyword {keyword}", vector="%{x:.2f}", keyword="%{customdata:.2f}")
                + f": {METRIC_NAMES[metric]} %{{y:.4f}}<extra></extra>",
            )
    figure.add_scatter(
        x=[best["vector_weight"]], y=[best["ndcg@10"]], mode="markers", name=t("best nDCG@10"),
        marker={"symbol": "star", "size": 17, "color": "#ffd400", "line": {"color": "black", "width": 1}},
        hoverinfo="skip",
    )
    low = float(swept[["ndcg@10", "mrr@10"]].min().min())
    figure.update_layout(
        # two lines: in half of a 1280 px page one line was cut (#34)
        title=t("Weight sweep") + "<br><sub>" + t(
            "best nDCG@10 {score} at vector {vector} / keyword {keyword}", score=f"{best['ndcg@10']:.4f}",
            vector=f"{best['vector_weight']:.2f}", keyword=f"{best['keyword_weight']:.2f}",
        ) + "</sub>",
        xaxis={"title": t("vector weight (keyword weight = 1 − it)"), "tickvals": list(swept["vector_weight"]),
               "tickformat": ".2f"},
        yaxis={"range": [max(0.0, low - 0.1), 1.02], "title": t("metric")}, height=360,
        margin={"l": 10, "r": 10, "t": 64, "b": 10},
        legend={"orientation": "h", "yanchor": "bottom", "y": -0.45, "x": 0},
    )
    return figure


def save_best(outcome: Outcome, best: dict[str, Any]) -> None:
    """The best sweep point as the evaluated KB's default: hybrid, those weights, fixed weighting, weighted fusion
    (the point's own settings); its other saved settings stay."""
    record = session.find_kb(outcome.kb_name)
    current = saved_search_settings(record.search_settings)
    settings = ", ".join([
        mode_label(str(current["mode"])),
        t("vector {vector} / keyword {keyword}", vector=f"{float(current['vector_weight']):.2f}",
          keyword=f"{float(current['keyword_weight']):.2f}"),
        t("fixed weighting") if current["weighting"] == "fixed" else t("auto weighting"),
        t("RRF fusion") if current["fusion"] == "rrf" else t("weighted fusion"),
    ])
    guard = t("language guard on") if current["language_guard"] else t("language guard off")
    st.caption(t("Default of **{name}** now: {settings}, {guard} (the sweep ran with it; saving keeps it).",
                 name=outcome.kb_name, settings=settings, guard=guard))
    refusal = session.change_refusal(outcome.kb_name)  # a shared KB of a public demo: read-only to its visitors
    if st.button(t("Save best as KB default"), key="eval_save_best", type="primary", disabled=refusal is not None,
                 help=say(refusal) if refusal else
                 t("Hybrid search with these weights (fixed, weighted fusion) becomes the KB's default: the "
                   "Search lab, the CLI and MCP searches that give no settings use it.")):
        saved = attempt(lambda: evaluation.save_best(session, outcome.kb_name, best))
        if saved is not None:
            st.session_state["eval_saved"] = t(
                "{message} Vector {vector} / keyword {keyword}, fixed weighting, weighted fusion.",
                message=say(saved.message), vector=f"{best['vector_weight']:.2f}",
                keyword=f"{best['keyword_weight']:.2f}",
            )
            st.rerun()


def show_outcome(outcome: Outcome) -> None:
    report = outcome.report
    metrics = report.metrics
    st.subheader(t("Results · {name}", name=outcome.kb_name))
    st.success(t("Kept as run {run} ({dataset}, {n} settings).", run=outcome.run_id, dataset=outcome.dataset,
                 n=len(metrics)), icon=":material/inventory_2:")
    if report.warnings:
        st.warning("\n".join(f"- {say(w)}" for w in report.warnings), icon=":material/translate:")
    number = {m: st.column_config.NumberColumn(METRIC_NAMES[m], format="%.4f") for m in evaluation.METRICS}
    weight = {"vector_weight": st.column_config.TextColumn(t("vector weight")),
              "keyword_weight": st.column_config.TextColumn(t("keyword weight"))}
    shown = metrics.assign(  # blank, not "None", where a setting has no weights (semantic, keyword)
        **{w: metrics[w].map(lambda v: "" if pd.isna(v) else f"{float(v):.2f}") for w in weight},
        **{c: metrics[c].fillna("") for c in ("weighting", "fusion")},
    )
    st.dataframe(shown, hide_index=True, width="stretch", column_config={**table_columns(), **number, **weight},
                 height=table_height(len(metrics)))

    swept = metrics[metrics["setting"].isin(outcome.sweep_labels)].sort_values("vector_weight")
    by_mode = metrics[~metrics["setting"].isin(outcome.sweep_labels)]
    chart_col, sweep_col = st.columns(2)
    with chart_col:
        figure = go.Figure()
        for metric in evaluation.METRICS:
            figure.add_bar(name=METRIC_NAMES[metric], x=by_mode["setting"], y=by_mode[metric],
                           marker_color=METRIC_COLOURS[metric])
        figure.update_layout(title=t("Modes and fusion"), barmode="group", height=360, yaxis={"range": [0, 1]},
                             margin={"l": 10, "r": 10, "t": 50, "b": 10},
                             legend={"orientation": "h", "yanchor": "bottom", "y": -0.45, "x": 0})
        st.plotly_chart(figure, key="eval_modes_chart", width="stretch")
    best = None
    with sweep_col:
        if len(swept) > 1:
            best = evaluation.best_sweep_setting(metrics)
            st.plotly_chart(sweep_figure(swept, best), key="eval_sweep_chart", width="stretch")
        else:
            st.caption(t("Turn on the weight sweep to see nDCG@10 and Recall@100 against the vector weight."))

    if best is not None:
        ties = int((swept["ndcg@10"] >= best["ndcg@10"] - 1e-12).sum())
        point = {"vector": f"{best['vector_weight']:.2f}", "keyword": f"{best['keyword_weight']:.2f}",
                 "ndcg": f"{best['ndcg@10']:.4f}", "low": f"{swept['ndcg@10'].min():.4f}",
                 "high": f"{swept['ndcg@10'].max():.4f}"}
        if ties > 1:
            st.markdown(t("**Best sweep point:** vector **{vector}** / keyword **{keyword}** · nDCG@10 **{ndcg}** "
                          "(sweep from {low} to {high}); {ties} sweep points tie at this nDCG@10, and the one "
                          "closest to the default {default} is chosen.", ties=ties, default=DEFAULT_VECTOR_WEIGHT,
                          **point))
        else:
            st.markdown(t("**Best sweep point:** vector **{vector}** / keyword **{keyword}** · nDCG@10 **{ndcg}** "
                          "(sweep from {low} to {high}).", **point))
        saved_message = st.session_state.get("eval_saved")
        if saved_message:
            st.success(saved_message, icon=":material/check_circle:")
        if outcome.user_kb:
            save_best(outcome, best)
        else:
            st.info(
                t("These weights are not offered as a default: the sweep searched a knowledge base built from the "
                  "folder's corpus (kept in the evaluation home, out of your list), not one of your knowledge "
                  "bases. To tune your own KB, evaluate it with judgments that name its documents."),
                icon=":material/info:",
            )

    st.subheader(t("Per query, worst first"))
    chosen = st.selectbox(t("Setting"), list(metrics["setting"]), key="eval_setting")
    worst = report.per_query[report.per_query["setting"] == chosen].sort_values(
        ["ndcg@10", "recall@100", "query_id"]
    )
    st.dataframe(
        worst, hide_index=True, width="stretch",
        column_config={**table_columns(), **{
            m: st.column_config.NumberColumn(METRIC_NAMES[m], format="%.3f") for m in evaluation.METRICS
        }},
    )
    d1, d2 = st.columns(2)
    d1.download_button(t("Download metrics (CSV)"), metrics.to_csv(index=False).encode("utf-8"), "metrics.csv",
                       "text/csv", key="eval_dl_metrics")
    d2.download_button(t("Download per-query results (CSV)"), report.per_query.to_csv(index=False).encode("utf-8"),
                       "per_query.csv", "text/csv", key="eval_dl_per_query")


def run_label(run: dict[str, Any]) -> str:
    return t("{id} · {dataset} · {kb} · {n} queries", id=run["id"], dataset=run["dataset"], kb=run["kb_name"],
             n=run["query_count"])


def delta_figure(moved: pd.DataFrame, metric: str) -> go.Figure:
    colours = ["#2ca02c" if d > 0 else "#d62728" if d < 0 else "#9e9e9e" for d in moved["delta"]]
    figure = go.Figure(go.Bar(
        x=moved["query_id"], y=moved["delta"], marker_color=colours, customdata=moved["query"],
        hovertemplate="%{x}: %{customdata}<br>B − A %{y:+.4f}<extra></extra>",
    ))
    figure.update_layout(
        height=260, margin={"l": 10, "r": 10, "t": 30, "b": 10},
        title=t("B − A per query ({metric})", metric=METRIC_NAMES[metric]),
        yaxis={"title": "B − A", "zeroline": True}, xaxis={"title": None, "type": "category"},
    )
    return figure


def compare_section() -> None:
    st.subheader(t("Compare runs"))
    listing = attempt(lambda: session.list_evaluation_runs())
    if listing is None:
        return
    runs = {r["id"]: r for r in listing.runs}
    if not runs:
        st.caption(t("No runs are kept yet: every evaluation run here or with `kb eval` is kept for comparison."))
        return
    st.caption(t("Set one setting of a run against one setting of another run, or of the same run, on the queries "
                 "both judged. A win is a query that scores higher with B."))
    ids = list(runs)  # newest first
    # Keyed by the newest run: a new run starts the comparison over as B against the run before it. Full width, so a
    # run's label (id · judgments · knowledge base · queries) is read whole.
    shown = {r: run_label(runs[r]) for r in ids}
    run_a = st.selectbox(t("Run A"), ids, index=min(1, len(ids) - 1), format_func=shown.__getitem__,
                         key=f"cmp_run_a_{ids[0]}")
    run_b = st.selectbox(t("Run B"), ids, index=0, format_func=shown.__getitem__,
                         key=f"cmp_run_b_{ids[0]}")
    col_a, col_b = st.columns(2)
    settings_a = list(runs[run_a]["settings"])
    settings_b = list(runs[run_b]["settings"])
    setting_a = col_a.selectbox(t("Setting of A"), settings_a, key=f"cmp_setting_a_{run_a}")
    default_b = 1 if run_a == run_b and len(settings_b) > 1 else 0
    setting_b = col_b.selectbox(t("Setting of B"), settings_b, index=default_b, key=f"cmp_setting_b_{run_b}")
    metric = st.radio(t("Metric"), list(evaluation.METRICS), horizontal=True, format_func=METRIC_NAMES.get,
                      key="cmp_metric")
    compared = attempt(lambda: session.compare_evaluation_runs(
        run_a, run_b, setting_a=setting_a, setting_b=setting_b, metric=metric, top=1000
    ))
    if compared is None:
        return
    data = compared.data
    for warning in data["warnings"]:
        st.warning(say(warning), icon=":material/warning:")
    wins, losses, ties, mean = st.columns([1, 1, 1, 2.2])
    wins.metric(t("Wins (B better)"), data["wins"])
    losses.metric(t("Losses (B worse)"), data["losses"])
    ties.metric(t("Ties"), data["ties"])
    mean.metric(t("Mean {metric}: A → B", metric=METRIC_NAMES[metric]), f"{data['mean_a']:.4f} → {data['mean_b']:.4f}",
                delta=f"{data['mean_delta']:+.4f} (B − A)" if abs(data["mean_delta"]) > 1e-12 else None)
    moved = pd.DataFrame(data["moved_most"], columns=["query_id", "query", "a", "b", "delta"])
    if len(moved) < data["queries"]:
        st.caption(t("{n} queries compared; the {moved} that moved most are listed, largest move first.",
                     n=data["queries"], moved=len(moved)))
    else:
        st.caption(t("{n} queries compared, largest move first.", n=data["queries"]))
    if data["wins"] or data["losses"]:
        st.plotly_chart(delta_figure(moved, metric), key="cmp_chart", width="stretch")
    else:
        st.caption(t("No query moved: every {metric} is the same in A and B.", metric=METRIC_NAMES[metric]))
    st.dataframe(
        moved.rename(columns={"query_id": "query id", "a": "A", "b": "B", "delta": "B − A"}),
        hide_index=True, width="stretch",
        column_config={"query id": st.column_config.TextColumn(t("query id")),
                       "query": st.column_config.TextColumn(t("query")),
                       **{c: st.column_config.NumberColumn(c, format="%.4f") for c in ("A", "B", "B − A")}},
    )


outcome = st.session_state.get("eval_outcome")
if outcome is not None:
    show_outcome(outcome)
compare_section()
