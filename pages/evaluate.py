"""Evaluate: BEIR judgments (a folder on the server, or uploaded queries.jsonl + qrels.tsv) against the current
KB, or against a cached KB built from the folder's corpus.jsonl; three modes, a weight sweep, worst queries, CSV."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
import streamlit as st

from kb_core import KBError
from pages import _shared as ui

try:
    from kb_core import evaluation
except ImportError:  # the module is optional for the rest of the app
    evaluation = None  # type: ignore[assignment]

session = ui.session()
st.title("Evaluate retrieval")
if evaluation is None:
    st.error("The evaluation module (kb_core.evaluation) is not available in this installation.")
    st.stop()


@st.cache_resource(show_spinner="Opening the evaluation home…")
def eval_service(home: str) -> Any:
    # Evaluation KBs built from a corpus live in <home>/cache/eval, out of the user's KB list.
    return evaluation.open_eval_service(home)


kb_name = ui.current_kb_name(session)
st.caption(
    "Judgments in BEIR format: `queries.jsonl` ({\"_id\", \"text\"}) and `qrels.tsv` (query-id, corpus-id, score). "
    "Against the current knowledge base, corpus ids are document names (e.g. `guide.docx`)."
)

source = st.radio("Judgments from", ["Folder on the server", "Upload files"], horizontal=True, key="eval_source")
folder: Path | None = None
build_corpus = False
uploaded: dict[str, bytes] = {}
if source == "Folder on the server":
    text = st.text_input("BEIR folder", key="eval_folder", placeholder="/data/beir/scifact")
    if text.strip():
        folder = Path(text.strip()).expanduser()
        if (folder / "corpus.jsonl").is_file():
            build_corpus = st.toggle(
                "Search a knowledge base built from this folder's corpus.jsonl (built once, then cached)",
                value=True, key="eval_build",
            )
else:
    c1, c2 = st.columns(2)
    queries_file = c1.file_uploader("queries.jsonl", type=["jsonl", "json"], key="eval_queries")
    qrels_file = c2.file_uploader("qrels.tsv", type=["tsv", "txt"], key="eval_qrels")
    if queries_file is not None and qrels_file is not None:
        uploaded = {"queries.jsonl": queries_file.getvalue(), "qrels.tsv": qrels_file.getvalue()}

if not build_corpus and kb_name is None:
    st.info("Select a knowledge base in the sidebar to evaluate it, or give a BEIR folder with a corpus.")
    st.stop()
target = "a KB built from the corpus" if build_corpus else f"knowledge base **{kb_name}**"
st.caption(f"Evaluating {target}.")

with st.expander("Settings", expanded=False):
    modes = st.multiselect("Modes", list(evaluation.MODES), default=list(evaluation.MODES), key="eval_modes")
    s1, s2, s3 = st.columns(3)
    sweep = s1.toggle("Sweep the vector weight", value=True, key="eval_sweep")
    steps = s2.slider("Sweep steps", 2, 20, 10, key="eval_steps", disabled=not sweep)
    max_queries = s3.number_input("Max queries (0 = all)", min_value=0, value=0, step=50, key="eval_max")

ready = (folder is not None) or bool(uploaded)
if st.button("Run evaluation", type="primary", disabled=not ready or not modes, key="eval_run"):
    bar = st.progress(0.0, text="Starting…")
    weights = evaluation.sweep_weights(steps) if sweep else None
    planned = evaluation.settings_for(modes, weights)
    seen: list[str] = []

    def progress(stage: str, done: int, total: int) -> None:
        if stage == "import":
            bar.progress(done / total if total else 1.0, text=f"Building the corpus KB: {done} of {total} documents")
            return
        if stage not in seen:
            seen.append(stage)
        fraction = (len(seen) - 1 + (done / total if total else 1.0)) / len(planned)
        bar.progress(min(1.0, fraction), text=f"{stage}: {done} of {total} queries "
                     f"(setting {len(seen)} of {len(planned)})")

    try:
        with tempfile.TemporaryDirectory(prefix="kb-eval-upload-") as scratch:
            if uploaded:
                for name, content in uploaded.items():
                    (Path(scratch) / name).write_bytes(content)
                folder = Path(scratch)
            assert folder is not None
            if build_corpus:
                _, report = evaluation.evaluate_folder(
                    eval_service(str(ui.service().home.root)), folder, settings=planned,
                    max_queries=int(max_queries) or None, progress=progress,
                )
            else:
                queries, qrels = evaluation.load_beir_queries_qrels(folder)
                if max_queries:
                    queries = dict(list(queries.items())[: int(max_queries)])
                report = evaluation.evaluate_kb(session, queries, qrels, settings=planned, progress=progress)
        bar.progress(1.0, text="Done")
        st.session_state["eval_report"] = report
    except KBError as error:
        bar.empty()
        st.error(error.message, icon=":material/error:")
    except (OSError, ValueError) as error:
        bar.empty()
        st.error(f"Could not read the judgments: {error}", icon=":material/error:")

report = st.session_state.get("eval_report")
if report is None:
    st.stop()

for warning in report.warnings:
    st.warning(warning, icon=":material/translate:")
metrics = report.metrics
st.subheader(f"Results · {report.kb_name}")
st.dataframe(
    metrics, hide_index=True, width="stretch",
    column_config={m: st.column_config.NumberColumn(m, format="%.4f") for m in evaluation.METRICS},
)

chart_col, sweep_col = st.columns(2)
with chart_col:
    by_mode = metrics[~metrics["setting"].str.match(r"hybrid \d")]
    figure = go.Figure()
    for metric in evaluation.METRICS:
        figure.add_bar(name=metric, x=by_mode["setting"], y=by_mode[metric])
    figure.update_layout(title="Modes", barmode="group", height=340, yaxis={"range": [0, 1]},
                         margin={"l": 10, "r": 10, "t": 40, "b": 10})
    st.plotly_chart(figure, key="eval_modes_chart", width="stretch")
with sweep_col:
    swept = metrics[metrics["setting"].str.match(r"hybrid \d")].sort_values("vector_weight")
    if len(swept) > 1:
        figure = go.Figure()
        for metric, name in (("ndcg@10", "nDCG@10"), ("recall@100", "Recall@100")):
            figure.add_scatter(x=swept["vector_weight"], y=swept[metric], mode="lines+markers", name=name)
        best = swept.loc[swept["ndcg@10"].idxmax()]
        figure.update_layout(
            title=f"Weight sweep (best nDCG@10 {best['ndcg@10']:.3f} at vector weight {best['vector_weight']:.2f})",
            xaxis={"title": "vector weight (keyword weight = 1 − it)"}, yaxis={"range": [0, 1]}, height=340,
            margin={"l": 10, "r": 10, "t": 40, "b": 10},
        )
        st.plotly_chart(figure, key="eval_sweep_chart", width="stretch")
    else:
        st.caption("Turn on the weight sweep to see nDCG@10 and Recall@100 against the vector weight.")

st.subheader("Per query, worst first")
settings_list = list(metrics["setting"])
chosen = st.selectbox("Setting", settings_list, key="eval_setting")
worst = report.per_query[report.per_query["setting"] == chosen].sort_values(["ndcg@10", "recall@100", "query_id"])
st.dataframe(
    worst, hide_index=True, width="stretch",
    column_config={m: st.column_config.NumberColumn(m, format="%.3f") for m in evaluation.METRICS},
)
d1, d2 = st.columns(2)
d1.download_button("Download metrics (CSV)", metrics.to_csv(index=False).encode("utf-8"), "metrics.csv",
                   "text/csv", key="eval_dl_metrics")
d2.download_button("Download per-query results (CSV)", report.per_query.to_csv(index=False).encode("utf-8"),
                   "per_query.csv", "text/csv", key="eval_dl_per_query")
