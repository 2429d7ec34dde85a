"""Search lab: settings (one vector-weight slider, weighting, language guard, fusion, Jaccard, mode, top_k), the
weights used beside the weights asked, ranked chunk cards with highlights, score breakdowns on the 0–1 scale and
per-hit explanations, rank movement across modes, an A/B comparison, saving settings as the KB default, and
multi-keyword (rag_search) search.

One search per interaction: every search is remembered under the KB's version, its saved defaults, the query and
the settings (moving a slider back costs nothing; an import or deletion by any process makes a new version), and
the tabs and score breakdowns run only when shown (their ``open`` state reruns the page)."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from kb_core import KBError
from kb_core.config import (
    DEFAULT_KEYWORD_WEIGHT,
    DEFAULT_VECTOR_WEIGHT,
    FUSION_METHODS,
    RRF_K,
    SEARCH_MODES,
    WEIGHTINGS,
)
from kb_core.retrieval.query import arithmetic_steps
from pages import _shared as ui
from pages._i18n import language, say, t

MODES = list(SEARCH_MODES)
MULTI = "multi-keyword"
DEFAULTS: dict[str, Any] = {
    "mode": "hybrid", "top_k": 5, "vector_weight": DEFAULT_VECTOR_WEIGHT, "keyword_weight": DEFAULT_KEYWORD_WEIGHT,
    "jaccard_weight": 0.0,
    "fusion": "weighted", "weighting": "fixed", "language_guard": True, "min_score": 0.0,
}
CONTROL_COLUMNS = [1.1, 1.3, 2.4, 1.3]

session = ui.session()
kb_name = ui.require_current_kb(session)
record = session.current_kb()
saved = {**DEFAULTS, **{k: v for k, v in record.search_settings.items() if k in DEFAULTS}}
key = f"{record.id}_{st.session_state.get('lab_saved_round', 0)}"  # widgets reset to the KB's defaults
version = session.kb_version()  # what is remembered for this KB holds while this stays


def vector_share(settings: dict[str, Any]) -> float:
    """The vector weight as a share of both weights (what the fusion uses), on the slider's 0.05 grid."""
    total = float(settings["vector_weight"]) + float(settings["keyword_weight"])
    share = float(settings["vector_weight"]) / total if total > 0 else DEFAULT_VECTOR_WEIGHT
    return round(round(share / 0.05) * 0.05, 2)


# Option labels are looked up in dicts made as the page runs: a widget's format_func may also be called outside the
# script run (AppTest does), where the session's language cannot be read.
def mode_labels() -> dict[str, str]:
    """The search modes (option values) as a person reads them."""
    return {"hybrid": t("hybrid"), "semantic": t("semantic"), "keyword": t("keyword")}


def mode_label(mode: str) -> str:
    return mode_labels().get(mode, mode)


def weighting_labels() -> dict[str, str]:
    return {"fixed": t("fixed"), "auto": t("auto")}


def weighting_label(weighting: str) -> str:
    return weighting_labels().get(weighting, weighting)


def fusion_labels() -> dict[str, str]:
    return {"weighted": t("weighted sum"), "rrf": "RRF"}


def fusion_label(fusion: str) -> str:
    return fusion_labels().get(fusion, fusion)


def joined(parts: list[str]) -> str:
    """A list of settings, separated as the session's language writes a list."""
    return ("，" if language() == "zh" else ", ").join(parts)


def describe(settings: dict[str, Any]) -> str:
    parts = [mode_label(settings["mode"]), t("top {k}", k=settings["top_k"])]
    if settings["mode"] == "hybrid":
        total = float(settings["vector_weight"]) + float(settings["keyword_weight"]) or 1.0
        parts += [
            t("vector {vector} / keyword {keyword}", vector=f"{float(settings['vector_weight']) / total:.2f}",
              keyword=f"{float(settings['keyword_weight']) / total:.2f}"),
            t("fixed weighting") if settings["weighting"] == "fixed" else t("auto weighting"),
            t("RRF fusion") if settings["fusion"] == "rrf" else t("weighted fusion"),
            t("language guard on") if settings["language_guard"] else t("language guard off"),
        ]
    parts.append(t("Jaccard {weight}", weight=f"{float(settings['jaccard_weight']):.2f}"))
    if float(settings.get("min_score") or 0):
        parts.append(t("min score {score}", score=f"{float(settings['min_score']):.2f}"))
    return joined(parts)


st.title(t("Search lab"))
st.caption(t("Knowledge base **{name}** · {model} · saved defaults: {settings}", name=kb_name,
             model=record.embedding_model, settings=describe(saved)))
flash = st.session_state.pop("lab_flash", None)
if flash:
    st.success(say(flash), icon=":material/check_circle:")


def memo_key(kind: str, query: str, params: dict[str, Any], *extra: Any) -> str:
    """Everything a search's envelope depends on: the KB, its version and saved defaults, the query, the settings."""
    return json.dumps([kind, record.id, version, record.search_settings, query, params, *extra], sort_keys=True)


def run_search(query: str, params: dict[str, Any]) -> ui.Remembered:
    return ui.remembered(memo_key("search", query, params), lambda: session.search(
        query,
        top_k=int(params["top_k"]),
        mode=params["mode"],
        vector_weight=float(params["vector_weight"]),
        keyword_weight=float(params["keyword_weight"]),
        jaccard_weight=float(params["jaccard_weight"]),
        fusion=params["fusion"],
        weighting=params["weighting"],
        language_guard=bool(params["language_guard"]),
        min_score=float(params.get("min_score") or 0.0),
    ))


def settings_controls(prefix: str, initial: dict[str, Any]) -> dict[str, Any]:
    """The search settings as widgets; they apply as soon as they change. The keyword weight is 1 − the vector
    weight, shown beside its slider."""
    top = st.columns(CONTROL_COLUMNS, vertical_alignment="bottom")
    mode = top[0].selectbox(t("Mode"), MODES, index=MODES.index(initial["mode"]), key=f"{prefix}_mode",
                            format_func=mode_labels().__getitem__)
    hybrid = mode == "hybrid"
    top_k = top[1].slider(t("top_k"), 1, 50, int(initial["top_k"]), key=f"{prefix}_top_k",
                          help=t("How many hits to show at most."))
    vector = top[2].slider(
        t("Vector weight"), 0.0, 1.0, vector_share(initial), 0.05, key=f"{prefix}_vw", disabled=not hybrid,
        help=t("Share of the semantic (cosine) score in hybrid search. The keyword (BM25) weight is 1 − it."),
    )
    top[3].metric(t("Keyword weight"), f"{1 - vector:.2f}" if hybrid else "–",
                  help=t("1 − vector weight: the two weights sum to 1. They apply to hybrid search only."))
    bottom = st.columns(CONTROL_COLUMNS, vertical_alignment="bottom")
    weighting = bottom[0].radio(
        t("Weighting"), list(WEIGHTINGS), index=WEIGHTINGS.index(initial["weighting"]), key=f"{prefix}_weighting",
        horizontal=True, disabled=not hybrid, format_func=weighting_labels().__getitem__,
        help=t("fixed: exactly the weights above. auto: each weight scaled, per query, by how clearly its signal's "
               "top candidates stand out from the rest; the weights used are shown with the results."),
    )
    fusion = bottom[1].radio(
        t("Fusion"), list(FUSION_METHODS), index=FUSION_METHODS.index(initial["fusion"]), key=f"{prefix}_fusion",
        horizontal=True, disabled=not hybrid, format_func=fusion_labels().__getitem__,
        help=t("weighted sum: the weights times each signal's 0–1 score. RRF: reciprocal rank fusion, the weights "
               "times {top} / ({k} + rank) of each signal.", top=RRF_K + 1, k=RRF_K),
    )
    jaccard = bottom[2].slider(
        t("Jaccard weight"), 0.0, 1.0, float(initial["jaccard_weight"]), 0.05, key=f"{prefix}_jw",
        help=t("Final score = (1 − Jaccard weight) × fused score + Jaccard weight × the query/chunk term overlap."),
    )
    guard = bottom[3].toggle(
        t("Language guard"), bool(initial["language_guard"]), key=f"{prefix}_guard", disabled=not hybrid,
        help=t("When the embedding model does not cover the query's language (all-MiniLM-L6-v2 is English-only: a "
               "Chinese query), give the vector signal weight 0 and say so. Off: the weights above are used as they "
               "are."),
    )
    min_score = st.slider(
        t("Minimum score"), 0.0, 1.0, float(initial.get("min_score") or 0.0), 0.05, key=f"{prefix}_min_score",
        help=t("Hide hits whose final score (0–1) is below this; the results say how many were hidden. Chunks with "
               "no evidence (no query term, a cosine no better than unrelated text) are never shown, whatever this "
               "is."),
    )
    return {
        "mode": mode, "top_k": int(top_k), "vector_weight": round(float(vector), 4),
        "keyword_weight": round(1.0 - float(vector), 4), "jaccard_weight": float(jaccard), "fusion": fusion,
        "weighting": weighting, "language_guard": bool(guard), "min_score": float(min_score),
    }


def place(chunk: dict[str, Any]) -> str:
    """Where the chunk is from, as Markdown that may hold HTML: the document's own text can start no HTML tag."""
    parts = [f"**{ui.inert(chunk['doc_name'])}**"]
    if chunk.get("chapter"):
        parts.append(t("chapter: {chapter}", chapter=ui.inert(chunk["chapter"])))
    if chunk.get("page") is not None:
        parts.append(t("page {page}", page=chunk["page"]))
    return " · ".join(parts)


def number(value: Any, digits: int = 4) -> str:
    return "–" if value is None else f"{float(value):.{digits}f}"


def normalization_label(normalization: str) -> str:
    return {
        "calibrated": t("calibrated normalisation"),
        "reciprocal rank": t("reciprocal rank normalisation"),
        "absolute": t("absolute normalisation"),
    }.get(normalization, t("{name} normalisation", name=normalization))


def breakdown_table(b: dict[str, Any]) -> pd.DataFrame:
    rank_based = b.get("normalization") == "reciprocal rank"
    rows = [
        (t("raw cosine (semantic)"), number(b.get("vector_score"))),
        (t("this model's scale: unrelated text → 0 / near-identical → 1"),
         f"{number(b.get('semantic_zero'))} / {number(b.get('semantic_top'))}"),
        (t("the model's floor: a cosine must exceed it to count"), number(b.get("semantic_floor"))),
        (t("semantic, 0–1 (from its rank)") if rank_based
         else t("semantic, 0–1: the cosine on that scale, clipped to 0–1"), number(b["vector_normalized"])),
        (t("raw BM25 (keyword)"), number(b.get("keyword_score"))),
        (t("keyword reference: BM25 of a reference match"), number(b.get("keyword_reference"))),
        (t("keyword, 0–1 (from its rank)") if rank_based else t("keyword, 0–1: 1 − exp(−BM25 / reference)"),
         number(b["keyword_normalized"])),
        (t("rank in semantic list"), str(b.get("vector_rank") or "–")),
        (t("rank in keyword list"), str(b.get("keyword_rank") or "–")),
        (t("weights used (vector / keyword)"), f"{b['vector_weight']:.3f} / {b['keyword_weight']:.3f}"),
        (t("weights asked (vector / keyword)"),
         f"{b['requested_vector_weight']:.3f} / {b['requested_keyword_weight']:.3f}"),
        (t("weighting"), weighting_label(str(b.get("weighting", "fixed")))),
        (t("semantic contribution"), number(b["vector_contribution"])),
        (t("keyword contribution"), number(b["keyword_contribution"])),
        (t("fused score"), number(b["fused_score"])),
        (t("Jaccard overlap × weight"), f"{b['jaccard']:.4f} × {b['jaccard_weight']:.2f}"),
        (t("final score (0–1)"), number(b["final_score"])),
        (t("fusion"), f"{fusion_label(b['fusion_method'])} · "
         f"{normalization_label(str(b.get('normalization', 'absolute')))}"),
    ]
    return pd.DataFrame({t("part"): [r[0] for r in rows], t("value"): [r[1] for r in rows]})


def explanation(query: str, chunk_id: str, params: dict[str, Any]) -> None:
    result = ui.remembered(memo_key("explain", query, params, chunk_id), lambda: session.explain_search(
        query, chunk_id, mode=params["mode"], vector_weight=params["vector_weight"],
        keyword_weight=params["keyword_weight"], jaccard_weight=params["jaccard_weight"], fusion=params["fusion"],
        weighting=params["weighting"], language_guard=params["language_guard"],
    )).value
    data = ui.data_or_error(result)
    if data is not None:
        st.markdown("\n".join(f"- {say(line)}" for line in data["explanation"]))


def chunk_cards(chunks: list[dict[str, Any]], query: str, params: dict[str, Any]) -> None:
    for rank, chunk in enumerate(chunks, start=1):
        with st.container(border=True):
            # One element, the score floated right (app.py): each element drawn costs the browser on every notch.
            score = t("score **{score}** on a 0–1 scale", score=f"{chunk['score']:.3f}")
            st.markdown(f"**#{rank}** · {place(chunk)}<span class='kb-card-score'>{score}</span>",
                        unsafe_allow_html=True)
            st.markdown(ui.passage_card(chunk["content"], chunk.get("passage")), unsafe_allow_html=True)
            terms = chunk.get("matched_terms") or []
            found = (t("Matched terms: {terms}", terms=", ".join(f"`{term}`" for term in terms)) if terms
                     else t("No query term"))
            st.caption(found + " · " + t("chunk `{id}`", id=chunk["id"]))
            breakdown = chunk.get("breakdown")
            # Keyed by rank: an open breakdown stays open, and recomputes, as the ranking moves.
            box = (st.expander(t("Score breakdown"), key=f"lab_breakdown_{rank}", on_change="rerun") if breakdown
                   else None)
            if box is not None and box.open:
                with box:
                    parts = ui.contribution_parts(breakdown)
                    st.markdown(ui.score_bars([chunk]), unsafe_allow_html=True)
                    st.caption(ui.parts_sum(parts, float(breakdown["final_score"])))
                    # the steps are kb_core's sentences (said in this language once kb_core marks them)
                    st.markdown("\n".join(f"- {say(step)}" for step in arithmetic_steps(breakdown)))
                    table = breakdown_table(breakdown)
                    st.table(table, hide_index=True)  # static HTML: a data grid costs the browser far more
                    for note in breakdown.get("notes") or []:
                        st.caption(t("Note: {note}", note=say(note)))
            if st.toggle(t("Explain this rank"), key=f"lab_explain_{chunk['id']}",
                         help=t("Where this chunk ranks among all candidates and why, step by step "
                                "(explain_search).")):
                explanation(query, chunk["id"], params)


def weights_panel(data: dict[str, Any], params: dict[str, Any]) -> None:
    """The weights hybrid search used, beside the ones asked and what auto weighting would choose."""
    weights = data.get("weights")
    if not weights:
        st.caption(ui.score_scale(data["settings"]))
        return
    used, asked, auto = st.columns(3)
    used.metric(t("Weights used · vector / keyword"), ui.weight_pair(weights.get("used")),
                help=t("The weights the fusion applied to this query's hits."))
    asked.metric(t("Weights asked"), ui.weight_pair(weights.get("requested")),
                 help=t("The weights set above (or saved as the KB's defaults)."))
    auto.metric(t("Auto weighting would use"), ui.weight_pair(weights.get("auto")),
                help=t("What weighting = auto chooses for this query; shown whichever weighting is set."))
    for note in weights.get("notes") or []:
        st.caption(t("Why the weights used differ from the weights asked: {note}", note=say(note)))
    if params["weighting"] == "fixed" and weights.get("auto_notes"):
        # each note starts "auto weights: " (自动权重：), which the caption says once for all of them
        said = [say(n).removeprefix("auto weights: ").removeprefix("自动权重：") for n in weights["auto_notes"]]
        notes = " ".join(said)
        st.caption(t("Auto weighting: {notes}", notes=notes))


kinds = {"single query": t("Query (hybrid / semantic / keyword)"), MULTI: t("Multi-keyword (rag_search)")}
kind = st.radio(t("Search type"), list(kinds), horizontal=True, key="lab_kind", format_func=kinds.__getitem__)

if kind == MULTI:
    with st.form("lab_multi"):
        words = st.text_input(t("Keywords (comma separated)"), key="lab_keywords",
                              placeholder=t("hybrid, BM25, 权重"))
        c1, c2 = st.columns(2)
        rag_top_k = c1.slider(t("top_k"), 1, 10, 5, key="lab_rag_top_k", help=t("How many hits to show at most."))
        timeout = c2.slider(t("Timeout (seconds)"), 0.1, 10.0, 3.0, 0.1, key="lab_rag_timeout")
        go_multi = st.form_submit_button(t("Search"), type="primary")
    keywords = [w.strip() for w in words.replace("，", ",").split(",") if w.strip()]
    if go_multi or st.session_state.get("lab_multi_done"):
        st.session_state["lab_multi_done"] = True
        result = session.rag_search(keywords, top_k=rag_top_k, timeout=timeout)
        if not result["success"]:
            ui.show_error(result)
            st.stop()
        if result["data"]["degraded"]:
            st.warning(say(result["message"]), icon=":material/timer_off:")
        st.caption(t("{n} chunk(s); chunks related to all keywords rank first. Scores are hybrid scores on the 0–1 "
                     "scale, with the KB's saved weights.", n=result["data"]["total_results"]))
        for rank, chunk in enumerate(result["data"]["chunks"], start=1):
            meta = chunk["metadata"]
            with st.container(border=True):
                where = " · ".join(
                    p for p in (f"**{ui.inert(meta['source'])}**",
                                t("chapter: {chapter}", chapter=ui.inert(meta["chapter"])) if meta.get("chapter")
                                else "",
                                t("page {page}", page=meta["page"]) if meta.get("page") is not None else "") if p
                )
                found = t("{matched} of {total} keywords", matched=chunk["matched_keywords"], total=len(keywords))
                score = t("score {score}", score=f"{chunk['score']:.3f}")
                st.markdown(f"**#{rank}** · {where} · {found} · {score}", unsafe_allow_html=True)  # where: inert
                st.markdown(ui.highlight(chunk["chunk_text"], ui.query_terms(" ".join(keywords))),
                            unsafe_allow_html=True)
    st.stop()

with st.form("lab_form"):
    typed = st.text_input(
        t("Query"), value=st.session_state.get("lab_query_run", ""), key="lab_query",
        placeholder=t("How does hybrid search combine scores? / 混合检索如何计算得分？"),
    )
    if st.form_submit_button(t("Search"), type="primary"):
        st.session_state["lab_query_run"] = typed
def rank_movement(query: str, params: dict[str, Any], chunks: list[dict[str, Any]]) -> None:
    depth = max(int(params["top_k"]), 10)
    ranks: dict[str, dict[str, int]] = {}
    labels: dict[str, str] = {}
    failures = []
    for mode in MODES:
        result = run_search(query, {**params, "mode": mode, "top_k": depth}).value
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
        st.caption(t("Rank of each chunk in the top {depth} of each mode (None: not in that top {depth}). "
                     "The hybrid column uses the settings above.", depth=depth))
        table = pd.DataFrame(
            {
                "Chunk": [labels.get(i, i) for i in ids],
                **{m: pd.array([ranks.get(i, {}).get(m) for i in ids], dtype="Int64") for m in MODES},
            }
        )
        table["hybrid − semantic"] = table["semantic"] - table["hybrid"]
        table["hybrid − keyword"] = table["keyword"] - table["hybrid"]
        figure = go.Figure()
        for i in ids[: int(params["top_k"])]:
            figure.add_scatter(
                x=[mode_label(m) for m in MODES], y=[ranks.get(i, {}).get(m) for m in MODES], mode="lines+markers",
                name=labels.get(i, i)[:40], connectgaps=False,
            )
        figure.update_layout(yaxis={"autorange": "reversed", "title": t("rank"), "dtick": 1}, height=360,
                             margin={"l": 10, "r": 10, "t": 20, "b": 10}, legend={"font": {"size": 10}})
        st.plotly_chart(figure, key="lab_moves_chart", width="stretch")
        st.dataframe(table, hide_index=True, width="stretch", column_config={
            "Chunk": st.column_config.TextColumn(t("Chunk")),
            **{m: st.column_config.NumberColumn(mode_label(m), format="%d") for m in MODES},
            "hybrid − semantic": st.column_config.NumberColumn(t("hybrid − semantic")),
            "hybrid − keyword": st.column_config.NumberColumn(t("hybrid − keyword")),
        })


def ab_comparison(query: str, params: dict[str, Any], main: dict[str, Any], chunks: list[dict[str, Any]]) -> None:
    st.caption(t("A is the settings above; set B here (it applies as you change it). Chunks found by both are "
                 "marked ●."))
    # B's settings outlive the tab: its widgets are not drawn while another tab is shown, which forgets their state.
    kept = f"lab_b_values_{record.id}"
    b_mode = "semantic" if params["mode"] == "keyword" else "keyword"
    b_initial = st.session_state.get(kept) or {**params, "mode": b_mode}
    b_params = settings_controls(f"lab_b_{record.id}", b_initial)
    st.session_state[kept] = b_params
    other = run_search(query, b_params).value
    if not other["success"]:
        ui.show_error(other)
        return
    a_ids = [c["id"] for c in chunks]
    b_chunks = other["data"]["chunks"]
    b_ids = [c["id"] for c in b_chunks]
    shared = set(a_ids) & set(b_ids)
    union = set(a_ids) | set(b_ids)
    m1, m2, m3 = st.columns(3)
    m1.metric(t("Shared chunks"), t("{shared} of {most}", shared=len(shared), most=max(len(a_ids), len(b_ids))))
    m2.metric(t("Overlap (Jaccard)"), f"{len(shared) / len(union):.2f}" if union else "–")
    m3.metric(t("Only in A / only in B"), f"{len(set(a_ids) - shared)} / {len(set(b_ids) - shared)}")
    # A above B, each the page's width: side by side, at 1280 px the chunk column showed 4-5 characters (#34).
    for column, label, side, found in ((st.container(), "A", main, chunks), (st.container(), "B", other, b_chunks)):
        with column:
            side_settings = {**side["data"]["settings"]}
            used = (side["data"].get("weights") or {}).get("used")
            line = describe(side_settings)
            if used is not None:
                line = t("{settings} · weights used {weights}", settings=line, weights=ui.weight_pair(used))
            st.markdown(f"**{label}**")
            # The score comes right after the rank, so it stays in view however narrow the window.
            st.dataframe(
                pd.DataFrame({
                    "#": range(1, len(found) + 1),
                    "score (0–1)": [round(c["score"], 4) for c in found],
                    "both": ["●" if c["id"] in shared else "" for c in found],
                    "document": [c["doc_name"] for c in found],
                    "chunk": [c["content"][:80] for c in found],
                }),
                hide_index=True, width="stretch",
                column_config={
                    "#": st.column_config.NumberColumn("#", width=36),
                    "score (0–1)": st.column_config.NumberColumn(t("score (0–1)"), format="%.4f", width=92),
                    "both": st.column_config.TextColumn(t("both"), width=44),
                    "document": st.column_config.TextColumn(t("document"), width=150),
                    "chunk": st.column_config.TextColumn(t("chunk"), width="large"),
                },
            )
            st.caption(f"{label}: {line}")
            for warning in side["data"]["warnings"] if label == "B" else []:
                st.caption(f"B: {say(warning)}")


@st.fragment
def lab_view() -> None:
    """The settings and what they find. A setting changed reruns only this fragment, not the app around it (the
    sidebar, the query form); the Search button and "Save as KB default" rerun the whole page."""
    global record, version
    try:
        record = session.current_kb()  # as of now: another session may have saved new defaults
    except KBError as exc:
        st.info(say(exc.message))
        return
    version = session.kb_version()  # another process may have imported or deleted since the page ran
    params = settings_controls(f"lab_{key}", saved)
    query = str(st.session_state.get("lab_query_run") or "")
    if not query.strip():
        st.info(t("Type a query and press **Search**. The settings start from the KB's saved defaults and apply as "
                  "soon as you change them."))
        return

    searched = run_search(query, params)
    main = searched.value
    if not main["success"]:
        ui.show_error(main)
        return
    for warning in main["data"]["warnings"]:
        st.warning(say(warning), icon=":material/translate:")
    weights_panel(main["data"], params)

    save_col, info_col = st.columns([1, 4], vertical_alignment="center")
    refusal = session.change_refusal()  # a shared KB of a public demo: read-only to its visitors
    if save_col.button(t("Save as KB default"), key="lab_save", disabled=refusal is not None,
                       help=say(refusal) if refusal else
                       t("Searches that give no settings (CLI, MCP, this app's next visit) use these.")):
        result = session.save_search_settings(**params)
        if result["success"]:
            st.session_state["lab_flash"] = result["message"]
            st.session_state["lab_saved_round"] = st.session_state.get("lab_saved_round", 0) + 1
            st.rerun()
        ui.show_error(result)
    info_line = info_col.empty()  # written last, with the searches this view ran
    facts = main["data"]
    if facts.get("below_min_score"):
        st.caption(t("{n} hit(s) below {score} not shown.", n=facts["below_min_score"],
                     score=f"{float(facts['min_score']):.2f}"))
    terms = facts.get("query_terms") or {}
    if terms.get("stop_words") and not terms.get("only_stop_words"):  # only stop words: a warning above says so
        st.caption(t("Stop words left out of the keyword query: {words}", words=", ".join(terms["stop_words"])))
    if facts.get("without_evidence") and facts["count"] + facts.get("below_min_score", 0) < params["top_k"]:
        floor = facts.get("semantic_floor")
        if floor is None:
            st.caption(t("{n} candidate(s) had no evidence and are not shown: no query term.",
                         n=facts["without_evidence"]))
        else:
            st.caption(t("{n} candidate(s) had no evidence and are not shown: no query term, and a cosine no higher "
                         "than {floor} (what unrelated text scores for this model).", n=facts["without_evidence"],
                         floor=f"{floor:.3f}"))
    results_tab, moves_tab, ab_tab = st.tabs(
        [t("Results"), t("Rank movement across modes"), t("A/B comparison")], key="lab_tabs", on_change="rerun"
    )
    chunks = main["data"]["chunks"]
    if results_tab.open:
        with results_tab:
            if not chunks:
                st.info(t("No chunks matched."))
            else:
                st.markdown(t("**Score breakdown** — stacked contributions add up to each hit's final score (0–1 "
                              "scale)"))
                st.caption(ui.score_scale(main["data"]["settings"]))
                st.markdown(ui.score_bars(chunks), unsafe_allow_html=True)
                chunk_cards(chunks, query, params)
    if moves_tab.open:
        with moves_tab:
            rank_movement(query, params, chunks)
    if ab_tab.open:
        with ab_tab:
            ab_comparison(query, params, main, chunks)

    counters = ui.service().counters.snapshot()
    took = f"{searched.seconds * 1000:.0f}"
    timing = (t("searched in {ms} ms", ms=took) if searched.fresh
              else t("from memory (the search took {ms} ms)", ms=took))
    searches, vectors = counters["searches"], counters["query_vectors"]
    work = t("{searches}, {vectors} computed",
             searches=t("{n} search", n=searches) if searches == 1 else t("{n} searches", n=searches),
             vectors=t("{n} query vector", n=vectors) if vectors == 1 else t("{n} query vectors", n=vectors))
    info_line.caption(
        t("{count} chunk(s) · {timing} · this app's service: {work}", count=main["data"]["count"], timing=timing,
          work=work),
        help=t("Every search is remembered for this knowledge base version, query and settings, so the same search "
               "again (a slider moved back, another tab) runs nothing; an import or deletion makes a new version."),
    )


lab_view()
