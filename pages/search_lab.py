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
from kb_core.base.config import DEFAULT_VECTOR_WEIGHT, FUSION_METHODS, RRF_K, SEARCH_MODES, WEIGHTINGS
from kb_core.features.results import SearchReport, SearchRequest
from kb_core.features.retrieval import narrative
from kb_core.features.retrieval.search import saved_search_settings
from pages import _service
from pages._cards import highlight, inert, passage_card, query_terms, score_bars, weight_pair
from pages._errors import attempt, show_error
from pages._i18n import language, mode_label, mode_labels, say, t
from pages._memo import Remembered, remembered
from pages._picker import require_current_kb

MULTI = "multi-keyword"
CONTROL_COLUMNS = [1.1, 1.3, 2.4, 1.3]

session = _service.session()
kb_name = require_current_kb(session)
record = session.current_kb()
saved = saved_search_settings(record.search_settings)
key = f"{record.id}_{st.session_state.get('lab_saved_round', 0)}"  # widgets reset to the KB's defaults
version = session.kb_version()  # what is remembered for this KB holds while this stays


def vector_share(settings: dict[str, Any]) -> float:
    """The vector weight as a share of both weights (what the fusion uses), on the slider's 0.05 grid."""
    total = float(settings["vector_weight"]) + float(settings["keyword_weight"])
    share = float(settings["vector_weight"]) / total if total > 0 else DEFAULT_VECTOR_WEIGHT
    return round(round(share / 0.05) * 0.05, 2)


# Option labels are looked up in dicts made as the page runs: a widget's format_func may also be called outside the
# script run (AppTest does), where the session's language cannot be read.
def weighting_labels() -> dict[str, str]:
    return {weighting: say(narrative.weighting_label(weighting)) for weighting in WEIGHTINGS}


def fusion_labels() -> dict[str, str]:
    return {fusion: say(narrative.fusion_label(fusion)) for fusion in FUSION_METHODS}


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
    """Everything a search's result depends on: the KB, its version and saved defaults, the query, the settings."""
    return json.dumps([kind, record.id, version, record.search_settings, query, params, *extra], sort_keys=True)


def run_search(query: str, params: dict[str, Any]) -> Remembered[SearchReport]:
    """The search's report (remembered); raises the search's KBError."""
    return remembered(memo_key("search", query, params), lambda: session.search(SearchRequest(
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
    )))


def settings_controls(prefix: str, initial: dict[str, Any]) -> dict[str, Any]:
    """The search settings as widgets; they apply as soon as they change. The keyword weight is 1 − the vector
    weight, shown beside its slider."""
    top = st.columns(CONTROL_COLUMNS, vertical_alignment="bottom")
    mode = top[0].selectbox(t("Mode"), SEARCH_MODES, index=SEARCH_MODES.index(initial["mode"]), key=f"{prefix}_mode",
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
    parts = [f"**{inert(chunk['doc_name'])}**"]
    if chunk.get("chapter"):
        parts.append(t("chapter: {chapter}", chapter=inert(chunk["chapter"])))
    if chunk.get("page") is not None:
        parts.append(t("page {page}", page=chunk["page"]))
    return " · ".join(parts)


def breakdown_table(b: dict[str, Any]) -> pd.DataFrame:
    rows = narrative.breakdown_rows(b)
    return pd.DataFrame({t("part"): [say(part) for part, _ in rows], t("value"): [say(value) for _, value in rows]})


def explanation(query: str, chunk_id: str, params: dict[str, Any]) -> None:
    explained = attempt(lambda: remembered(memo_key("explain", query, params, chunk_id), lambda: (
        session.explain_search(
            SearchRequest(
                query, mode=params["mode"], vector_weight=params["vector_weight"],
                keyword_weight=params["keyword_weight"], jaccard_weight=params["jaccard_weight"],
                fusion=params["fusion"], weighting=params["weighting"], language_guard=params["language_guard"],
            ),
            chunk_id,
        )
    )).value)
    if explained is not None:
        st.markdown("\n".join(f"- {say(line)}" for line in explained.data["explanation"]))


def chunk_cards(chunks: list[dict[str, Any]], query: str, params: dict[str, Any]) -> None:
    for rank, chunk in enumerate(chunks, start=1):
        with st.container(border=True):
            # One element, the score floated right (app.py): each element drawn costs the browser on every notch.
            score = t("score **{score}** on a 0–1 scale", score=f"{chunk['score']:.3f}")
            st.markdown(f"**#{rank}** · {place(chunk)}<span class='kb-card-score'>{score}</span>",
                        unsafe_allow_html=True)
            st.markdown(passage_card(chunk["content"], chunk.get("passage")), unsafe_allow_html=True)
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
                    parts = narrative.contribution_parts(breakdown)
                    st.markdown(score_bars([chunk]), unsafe_allow_html=True)
                    st.caption(say(narrative.parts_sum(parts, float(breakdown["final_score"]))))
                    # the steps are kb_core's sentences (said in this language once kb_core marks them)
                    st.markdown("\n".join(f"- {say(step)}" for step in narrative.arithmetic_steps(breakdown)))
                    table = breakdown_table(breakdown)
                    st.table(table, hide_index=True)  # static HTML: a data grid costs the browser far more
                    for note in breakdown.get("notes") or []:
                        st.caption(t("Note: {note}", note=say(note)))
            if st.toggle(t("Explain this rank"), key=f"lab_explain_{chunk['id']}",
                         help=t("Where this chunk ranks among all candidates and why, step by step "
                                "(explain_search).")):
                explanation(query, chunk["id"], params)


def score_scale(report: SearchReport) -> str:
    return say(narrative.score_scale(str(report.settings["mode"]), str(report.settings["fusion"])))


def weights_panel(report: SearchReport, params: dict[str, Any]) -> None:
    """The weights hybrid search used, beside the ones asked and what auto weighting would choose."""
    weights = report.weights
    if not weights:
        st.caption(score_scale(report))
        return
    used, asked, auto = st.columns(3)
    used.metric(t("Weights used · vector / keyword"), weight_pair(weights.get("used")),
                help=t("The weights the fusion applied to this query's hits."))
    asked.metric(t("Weights asked"), weight_pair(weights.get("requested")),
                 help=t("The weights set above (or saved as the KB's defaults)."))
    auto.metric(t("Auto weighting would use"), weight_pair(weights.get("auto")),
                help=t("What weighting = auto chooses for this query; shown whichever weighting is set."))
    for note in weights.get("notes") or []:
        st.caption(t("Why the weights used differ from the weights asked: {note}", note=say(note)))
    if params["weighting"] == "fixed" and weights.get("auto_notes"):
        # the caption says the notes' common lead-in ("auto weights: ") once for all of them
        reasons = narrative.auto_weight_reasons(weights["auto_notes"])
        st.caption(t("Auto weighting: {notes}", notes=" ".join(say(reason) for reason in reasons)))


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
        found = attempt(lambda: session.rag_search(keywords, top_k=rag_top_k, timeout=timeout))
        if found is None:
            st.stop()
        if found.degraded:
            st.warning(say(found.message), icon=":material/timer_off:")
        st.caption(t("{n} chunk(s); chunks related to all keywords rank first. Scores are hybrid scores on the 0–1 "
                     "scale, with the KB's saved weights.", n=found.total_results))
        for rank, chunk in enumerate(found.chunks, start=1):
            meta = chunk["metadata"]
            with st.container(border=True):
                where = " · ".join(
                    p for p in (f"**{inert(meta['source'])}**",
                                t("chapter: {chapter}", chapter=inert(meta["chapter"])) if meta.get("chapter")
                                else "",
                                t("page {page}", page=meta["page"]) if meta.get("page") is not None else "") if p
                )
                found = t("{matched} of {total} keywords", matched=chunk["matched_keywords"], total=len(keywords))
                score = t("score {score}", score=f"{chunk['score']:.3f}")
                st.markdown(f"**#{rank}** · {where} · {found} · {score}", unsafe_allow_html=True)  # where: inert
                st.markdown(highlight(chunk["chunk_text"], query_terms(" ".join(keywords))),
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
    failures: list[KBError] = []
    for mode in SEARCH_MODES:
        try:
            result = run_search(query, {**params, "mode": mode, "top_k": depth}).value
        except KBError as error:
            failures.append(error)
            continue
        for position, chunk in enumerate(result.chunks, start=1):
            ranks.setdefault(chunk["id"], {})[mode] = position
            labels[chunk["id"]] = f"{chunk['doc_name']} #{chunk['chunk_index'] + 1}: {chunk['content'][:60]}"
    for failure in failures:
        show_error(failure)
    ids = [c["id"] for c in chunks] + [i for i in ranks if i not in {c["id"] for c in chunks}]
    if ids:
        st.caption(t("Rank of each chunk in the top {depth} of each mode (None: not in that top {depth}). "
                     "The hybrid column uses the settings above.", depth=depth))
        table = pd.DataFrame(
            {
                "Chunk": [labels.get(i, i) for i in ids],
                **{m: pd.array([ranks.get(i, {}).get(m) for i in ids], dtype="Int64") for m in SEARCH_MODES},
            }
        )
        table["hybrid − semantic"] = table["semantic"] - table["hybrid"]
        table["hybrid − keyword"] = table["keyword"] - table["hybrid"]
        figure = go.Figure()
        for i in ids[: int(params["top_k"])]:
            figure.add_scatter(
                x=[mode_label(m) for m in SEARCH_MODES], y=[ranks.get(i, {}).get(m) for m in SEARCH_MODES],
                mode="lines+markers",
                name=labels.get(i, i)[:40], connectgaps=False,
            )
        figure.update_layout(yaxis={"autorange": "reversed", "title": t("rank"), "dtick": 1}, height=360,
                             margin={"l": 10, "r": 10, "t": 20, "b": 10}, legend={"font": {"size": 10}})
        st.plotly_chart(figure, key="lab_moves_chart", width="stretch")
        st.dataframe(table, hide_index=True, width="stretch", column_config={
            "Chunk": st.column_config.TextColumn(t("Chunk")),
            **{m: st.column_config.NumberColumn(mode_label(m), format="%d") for m in SEARCH_MODES},
            "hybrid − semantic": st.column_config.NumberColumn(t("hybrid − semantic")),
            "hybrid − keyword": st.column_config.NumberColumn(t("hybrid − keyword")),
        })


def ab_comparison(query: str, params: dict[str, Any], main: SearchReport, chunks: list[dict[str, Any]]) -> None:
    st.caption(t("A is the settings above; set B here (it applies as you change it). Chunks found by both are "
                 "marked ●."))
    # B's settings outlive the tab: its widgets are not drawn while another tab is shown, which forgets their state.
    kept = f"lab_b_values_{record.id}"
    b_mode = "semantic" if params["mode"] == "keyword" else "keyword"
    b_initial = st.session_state.get(kept) or {**params, "mode": b_mode}
    b_params = settings_controls(f"lab_b_{record.id}", b_initial)
    st.session_state[kept] = b_params
    searched = attempt(lambda: run_search(query, b_params))
    if searched is None:
        return
    other = searched.value
    a_ids = [c["id"] for c in chunks]
    b_chunks = other.chunks
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
            side_settings = {**side.settings}
            used = (side.weights or {}).get("used")
            line = describe(side_settings)
            if used is not None:
                line = t("{settings} · weights used {weights}", settings=line, weights=weight_pair(used))
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
            for warning in side.warnings if label == "B" else []:
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

    try:
        searched = run_search(query, params)
    except KBError as error:
        show_error(error)
        return
    main = searched.value
    for warning in main.warnings:
        st.warning(say(warning), icon=":material/translate:")
    weights_panel(main, params)

    save_col, info_col = st.columns([1, 4], vertical_alignment="center")
    refusal = session.change_refusal()  # a shared KB of a public demo: read-only to its visitors
    if save_col.button(t("Save as KB default"), key="lab_save", disabled=refusal is not None,
                       help=say(refusal) if refusal else
                       t("Searches that give no settings (CLI, MCP, this app's next visit) use these.")):
        saved_now = attempt(lambda: session.save_search_settings(**params))
        if saved_now is not None:
            st.session_state["lab_flash"] = saved_now.message
            st.session_state["lab_saved_round"] = st.session_state.get("lab_saved_round", 0) + 1
            st.rerun()
    info_line = info_col.empty()  # written last, with the searches this view ran
    for note in main.notes:  # the narrative's: what min_score hid, what was left out and why
        st.caption(say(note.text))
    results_tab, moves_tab, ab_tab = st.tabs(
        [t("Results"), t("Rank movement across modes"), t("A/B comparison")], key="lab_tabs", on_change="rerun"
    )
    chunks = main.chunks
    if results_tab.open:
        with results_tab:
            if not chunks:
                st.info(t("No chunks matched."))
            else:
                st.markdown(t("**Score breakdown** — stacked contributions add up to each hit's final score (0–1 "
                              "scale)"))
                st.caption(score_scale(main))
                st.markdown(score_bars(chunks), unsafe_allow_html=True)
                chunk_cards(chunks, query, params)
    if moves_tab.open:
        with moves_tab:
            rank_movement(query, params, chunks)
    if ab_tab.open:
        with ab_tab:
            ab_comparison(query, params, main, chunks)

    counters = _service.service().counters.snapshot()
    took = f"{searched.seconds * 1000:.0f}"
    timing = (t("searched in {ms} ms", ms=took) if searched.fresh
              else t("from memory (the search took {ms} ms)", ms=took))
    searches, vectors = counters["searches"], counters["query_vectors"]
    work = t("{searches}, {vectors} computed",
             searches=t("{n} search", n=searches) if searches == 1 else t("{n} searches", n=searches),
             vectors=t("{n} query vector", n=vectors) if vectors == 1 else t("{n} query vectors", n=vectors))
    info_line.caption(
        t("{count} chunk(s) · {timing} · this app's service: {work}", count=main.count, timing=timing,
          work=work),
        help=t("Every search is remembered for this knowledge base version, query and settings, so the same search "
               "again (a slider moved back, another tab) runs nothing; an import or deletion makes a new version."),
    )


lab_view()
