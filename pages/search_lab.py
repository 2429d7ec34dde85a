"""Search lab: settings, ranked chunk cards with highlights and score breakdowns, rank movement across
modes, an A/B comparison, saving settings as the KB default, and multi-keyword (rag_search) search."""

from __future__ import annotations

from typing import Any

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from pages import _shared as ui

MODES = ["hybrid", "semantic", "keyword"]
MULTI = "multi-keyword"
DEFAULTS = {"mode": "hybrid", "top_k": 5, "vector_weight": 0.7, "keyword_weight": 0.3, "jaccard_weight": 0.0,
            "fusion": "weighted"}

session = ui.session()
kb_name = ui.require_current_kb(session)
record = session.current_kb()
saved = {**DEFAULTS, **{k: v for k, v in record.search_settings.items() if k in DEFAULTS}}
key = f"{record.id}_{st.session_state.get('lab_saved_round', 0)}"  # widgets reset to the KB's defaults

st.title("Search lab")
st.caption(
    f"Knowledge base **{kb_name}** · {record.embedding_model} · saved defaults: {saved['mode']}, "
    f"top {saved['top_k']}, vector {saved['vector_weight']:.2f} / keyword {saved['keyword_weight']:.2f}, "
    f"Jaccard {saved['jaccard_weight']:.2f}"
)
flash = st.session_state.pop("lab_flash", None)
if flash:
    st.success(flash, icon=":material/check_circle:")


def run_search(query: str, params: dict[str, Any]) -> dict[str, Any]:
    return session.search(
        query,
        top_k=int(params["top_k"]),
        mode=params["mode"],
        vector_weight=float(params["vector_weight"]),
        keyword_weight=float(params["keyword_weight"]),
        jaccard_weight=float(params["jaccard_weight"]),
        fusion=params["fusion"],
    )


def place(chunk: dict[str, Any]) -> str:
    parts = [f"**{chunk['doc_name']}**"]
    if chunk.get("chapter"):
        parts.append(f"chapter: {chunk['chapter']}")
    if chunk.get("page") is not None:
        parts.append(f"page {chunk['page']}")
    return " · ".join(parts)


def breakdown_table(breakdown: dict[str, Any]) -> pd.DataFrame:
    rows = [
        ("raw cosine (semantic)", breakdown.get("vector_score")),
        ("raw BM25 (keyword)", breakdown.get("keyword_score")),
        ("semantic normalised", breakdown.get("vector_normalized")),
        ("keyword normalised", breakdown.get("keyword_normalized")),
        ("rank in semantic list", breakdown.get("vector_rank")),
        ("rank in keyword list", breakdown.get("keyword_rank")),
        ("vector weight (used / asked)",
         f"{breakdown.get('vector_weight', 0):.3f} / {breakdown.get('requested_vector_weight', 0):.3f}"),
        ("keyword weight (used / asked)",
         f"{breakdown.get('keyword_weight', 0):.3f} / {breakdown.get('requested_keyword_weight', 0):.3f}"),
        ("fused score", breakdown.get("fused_score")),
        ("Jaccard overlap × weight", f"{breakdown.get('jaccard', 0):.3f} × {breakdown.get('jaccard_weight', 0):.2f}"),
        ("final score", breakdown.get("final_score")),
        ("fusion", breakdown.get("fusion_method")),
    ]
    values = ["–" if v is None else (f"{v:.4f}" if isinstance(v, float) else str(v)) for _, v in rows]
    return pd.DataFrame({"part": [r[0] for r in rows], "value": values})


def chunk_cards(chunks: list[dict[str, Any]], prefix: str, with_breakdown: bool = True) -> None:
    for rank, chunk in enumerate(chunks, start=1):
        with st.container(border=True):
            head, score = st.columns([5, 1])
            head.markdown(f"**#{rank}** · {place(chunk)}")
            score.markdown(f"score **{chunk['score']:.3f}**")
            st.markdown(
                f"<div style='line-height:1.55'>{ui.highlight(chunk['content'], chunk.get('matched_terms') or [])}"
                "</div>",
                unsafe_allow_html=True,
            )
            terms = chunk.get("matched_terms") or []
            if terms:
                st.caption("Matched terms: " + ", ".join(f"`{t}`" for t in terms))
            if with_breakdown and chunk.get("breakdown"):
                with st.expander("Score breakdown", expanded=False):
                    parts = ui.contribution_parts(chunk["breakdown"])
                    st.plotly_chart(
                        ui.breakdown_figure([chunk], height=190), key=f"{prefix}_chart_{rank}", width="stretch"
                    )
                    st.caption(
                        " + ".join(f"{name} {value:.4f}" for name, value in parts.items())
                        + f" = final {chunk['breakdown']['final_score']:.4f}"
                    )
                    st.dataframe(breakdown_table(chunk["breakdown"]), hide_index=True, width="stretch")
                    for note in chunk["breakdown"].get("notes") or []:
                        st.caption(f"Note: {note}")


def settings_inputs(prefix: str, initial: dict[str, Any], columns: int = 5) -> dict[str, Any]:
    cols = st.columns(columns)
    mode = cols[0].selectbox("Mode", MODES, index=MODES.index(initial["mode"]), key=f"{prefix}_mode")
    top_k = cols[1].slider("top_k", 1, 50, int(initial["top_k"]), key=f"{prefix}_top_k")
    vector = cols[2].slider("Vector weight", 0.0, 1.0, float(initial["vector_weight"]), 0.05, key=f"{prefix}_vw")
    keyword = cols[3].slider("Keyword weight", 0.0, 1.0, float(initial["keyword_weight"]), 0.05, key=f"{prefix}_kw")
    jaccard = cols[4].slider("Jaccard weight", 0.0, 1.0, float(initial["jaccard_weight"]), 0.05, key=f"{prefix}_jw")
    return {"mode": mode, "top_k": top_k, "vector_weight": vector, "keyword_weight": keyword,
            "jaccard_weight": jaccard, "fusion": initial.get("fusion", "weighted")}


kind = st.radio("Search type", ["single query", MULTI], horizontal=True, key="lab_kind",
                format_func=lambda k: "Query (hybrid / semantic / keyword)" if k == "single query"
                else "Multi-keyword (rag_search)")

if kind == MULTI:
    with st.form("lab_multi"):
        words = st.text_input("Keywords (comma separated)", key="lab_keywords",
                              placeholder="hybrid, BM25, 权重")
        c1, c2 = st.columns(2)
        rag_top_k = c1.slider("top_k", 1, 10, 5, key="lab_rag_top_k")
        timeout = c2.slider("Timeout (seconds)", 0.1, 10.0, 3.0, 0.1, key="lab_rag_timeout")
        go_multi = st.form_submit_button("Search", type="primary")
    keywords = [w.strip() for w in words.replace("，", ",").split(",") if w.strip()]
    if go_multi or st.session_state.get("lab_multi_done"):
        st.session_state["lab_multi_done"] = True
        result = session.rag_search(keywords, top_k=rag_top_k, timeout=timeout)
        if not result["success"]:
            ui.show_error(result)
            st.stop()
        if result["data"]["degraded"]:
            st.warning(result["message"], icon=":material/timer_off:")
        st.caption(f"{result['data']['total_results']} chunk(s); chunks related to all keywords rank first.")
        for rank, chunk in enumerate(result["data"]["chunks"], start=1):
            meta = chunk["metadata"]
            with st.container(border=True):
                where = " · ".join(
                    p for p in (f"**{meta['source']}**", f"chapter: {meta['chapter']}" if meta.get("chapter") else "",
                                f"page {meta['page']}" if meta.get("page") is not None else "") if p
                )
                st.markdown(f"**#{rank}** · {where} · {chunk['matched_keywords']} of {len(keywords)} keywords · "
                            f"score {chunk['score']:.3f}")
                st.markdown(ui.highlight(chunk["chunk_text"], keywords), unsafe_allow_html=True)
    st.stop()

with st.form("lab_form"):
    query = st.text_input(
        "Query", key="lab_query", placeholder="How does hybrid search combine scores? / 混合检索如何计算得分？"
    )
    params = settings_inputs(f"lab_{key}", saved)
    submitted = st.form_submit_button("Search", type="primary")
if submitted:
    st.session_state["lab_params"] = {"query": query, **params}
current: dict[str, Any] | None = st.session_state.get("lab_params")
if not current or not current["query"].strip():
    st.info("Type a query and press **Search**. Weights, Jaccard weight and top_k start from the KB's saved defaults.")
    st.stop()

query = current["query"]
main = run_search(query, current)
if not main["success"]:
    ui.show_error(main)
    st.stop()
for warning in main["data"]["warnings"]:
    st.warning(warning, icon=":material/translate:")

save_col, info_col = st.columns([1, 4], vertical_alignment="center")
if save_col.button("Save as KB default", key="lab_save", help="CLI and MCP searches without settings use these."):
    to_save = {k: current[k] for k in DEFAULTS}
    result = session.save_search_settings(**to_save)
    if result["success"]:
        st.session_state["lab_flash"] = result["message"]
        st.session_state["lab_saved_round"] = st.session_state.get("lab_saved_round", 0) + 1
        st.rerun()
    ui.show_error(result)
used = main["data"]["settings"]
info_col.caption(
    f"{main['data']['count']} chunk(s) · {used['mode']} · vector {used['vector_weight']:.2f} / keyword "
    f"{used['keyword_weight']:.2f} · Jaccard {used['jaccard_weight']:.2f} · fusion {used['fusion']}"
)

results_tab, moves_tab, ab_tab = st.tabs(["Results", "Rank movement across modes", "A/B comparison"])
chunks = main["data"]["chunks"]
with results_tab:
    if not chunks:
        st.info("No chunks matched.")
    else:
        st.markdown("**Score breakdown** — stacked contributions add up to each hit's final score")
        st.caption(ui.score_scale(used))
        st.plotly_chart(ui.breakdown_figure(chunks), key="lab_overview_chart", width="stretch")
        chunk_cards(chunks, "main")

with moves_tab:
    depth = max(int(current["top_k"]), 10)
    ranks: dict[str, dict[str, int]] = {}
    labels: dict[str, str] = {}
    failures = []
    for mode in MODES:
        result = run_search(query, {**current, "mode": mode, "top_k": depth})
        if not result["success"]:
            failures.append(result)
            continue
        for position, chunk in enumerate(result["data"]["chunks"], start=1):
            ranks.setdefault(chunk["id"], {})[mode] = position
            labels[chunk["id"]] = f"{chunk['doc_name']} #{chunk['chunk_index'] + 1}: {chunk['content'][:60]}"
    for failure in failures:
        ui.show_error(failure)
    ids = [c["id"] for c in chunks] + [i for i in ranks if i not in {c["id"] for c in chunks}]
    if ids:
        st.caption(f"Rank of each chunk in the top {depth} of each mode (blank: not in that top {depth}). "
                   f"Current settings' weights apply to hybrid.")
        table = pd.DataFrame(
            {
                "Chunk": [labels[i] for i in ids],
                **{m: [ranks[i].get(m) for i in ids] for m in MODES},
            }
        )
        table["hybrid − semantic"] = table["semantic"] - table["hybrid"]
        table["hybrid − keyword"] = table["keyword"] - table["hybrid"]
        figure = go.Figure()
        for i in ids[: int(current["top_k"])]:
            figure.add_scatter(
                x=MODES, y=[ranks[i].get(m) for m in MODES], mode="lines+markers", name=labels[i][:40],
                connectgaps=False,
            )
        figure.update_layout(yaxis={"autorange": "reversed", "title": "rank", "dtick": 1}, height=360,
                             margin={"l": 10, "r": 10, "t": 20, "b": 10}, legend={"font": {"size": 10}})
        st.plotly_chart(figure, key="lab_moves_chart", width="stretch")
        st.dataframe(table, hide_index=True, width="stretch", column_config={
            m: st.column_config.NumberColumn(m, format="%d") for m in MODES
        })

with ab_tab:
    st.caption("A is the settings above; set B here. Chunks found by both are marked ●.")
    b_initial = st.session_state.get("lab_b_params") or {
        **current, "mode": "keyword" if current["mode"] != "keyword" else "semantic"
    }
    with st.form("lab_ab"):
        b_params = settings_inputs("lab_b", b_initial)
        st.form_submit_button("Compare")
    st.session_state["lab_b_params"] = b_params
    other = run_search(query, b_params)
    if not other["success"]:
        ui.show_error(other)
    else:
        a_ids = [c["id"] for c in chunks]
        b_chunks = other["data"]["chunks"]
        b_ids = [c["id"] for c in b_chunks]
        shared = set(a_ids) & set(b_ids)
        union = set(a_ids) | set(b_ids)
        m1, m2, m3 = st.columns(3)
        m1.metric("Shared chunks", f"{len(shared)} of {max(len(a_ids), len(b_ids))}")
        m2.metric("Overlap (Jaccard)", f"{len(shared) / len(union):.2f}" if union else "–")
        m3.metric("Only in A / only in B", f"{len(set(a_ids) - shared)} / {len(set(b_ids) - shared)}")
        col_a, col_b = st.columns(2)
        for column, label, params, found in ((col_a, "A", current, chunks), (col_b, "B", b_params, b_chunks)):
            with column:
                st.markdown(
                    f"**{label}** · {params['mode']} · vector {params['vector_weight']:.2f} / keyword "
                    f"{params['keyword_weight']:.2f} · Jaccard {params['jaccard_weight']:.2f} · top {params['top_k']}"
                )
                st.dataframe(
                    pd.DataFrame({
                        "#": range(1, len(found) + 1),
                        "both": ["●" if c["id"] in shared else "" for c in found],
                        "document": [c["doc_name"] for c in found],
                        "chunk": [c["content"][:80] for c in found],
                        "score": [round(c["score"], 4) for c in found],
                    }),
                    hide_index=True, width="stretch",
                )
