"""Search results as HTML: a hit's text with its query words marked (document text made inert: it can start no
markup), result cards that unfold the whole chunk, and the stacked score bars of the search lab."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from kb_core.features.retrieval.narrative import PARTS, contribution_parts, part_names, parts_sum
from pages._i18n import say, t
from pages._service import service


def highlight(text: str, words: Sequence[str]) -> str:
    """HTML of ``text`` with the query's ``words`` marked as whole words where the analyzer finds them: Latin words by
    stem (``configuring`` marks configure and configuration, never the inside of another word), Chinese words where
    jieba cuts them from the text; never stop words or one-letter words (:mod:`kb_core.features.retrieval.highlight`).
    Safe in ``st.markdown(..., unsafe_allow_html=True)``: the text can neither inject HTML nor be read as Markdown."""
    from kb_core.features.retrieval.highlight import highlight_spans

    return _marked(text, highlight_spans(text, words, service().analyzer))


def _marked(text: str, marks: Sequence[Sequence[int]], start: int = 0, end: int | None = None) -> str:
    """HTML of ``text[start:end]`` with the character spans ``marks`` (of the whole text) marked."""
    end = len(text) if end is None else end
    out: list[str] = []
    position = start
    for a, b in marks:
        a, b = max(int(a), start), min(int(b), end)
        if b <= a:
            continue
        out.append(_inert(text[position:a]))
        out.append(f"<mark>{_inert(text[a:b])}</mark>")
        position = b
    out.append(_inert(text[position:end]))
    return "".join(out)


def query_terms(text: str) -> list[str]:
    """The words a query is searched with (stop words left out), e.g. to highlight rag_search's keywords."""
    return list(service().analyzer.query_terms(text).shown_words)


# Characters HTML or Markdown (with GitHub's autolinks) give meaning to: written as character references they are
# shown as themselves and start nothing, so document text never becomes markup, an image (a tracking pixel), a link
# or a heading.
_SIGNIFICANT = re.compile(r"[&<>\"'\\`*_{}\[\]()#+\-.!|~:@=]")


# Where GitHub's autolink literals start (``https://…``, ``www.…``, ``name@host``): the Markdown renderer finds them in
# text *after* character references are decoded (#37: ``https&#58;//evil.example`` still became a link), so an
# empty element goes there, splitting the text the renderer searches.
_AUTOLINK = re.compile(r"(?i)(?<=www)(?=\.)|(?=://)|(?=@)")


def inert(text: str) -> str:
    """``text`` as HTML that Markdown renders as exactly that text, line breaks kept: no markup, image, heading or
    link (an autolinked bare URL or e-mail address included). For document text, names and chapters."""
    return "<wbr>".join(
        _SIGNIFICANT.sub(lambda m: f"&#{ord(m.group())};", part) for part in _AUTOLINK.split(text)
    ).replace("\n", "<br>")


_inert = inert


def passage_card(text: str, passage: dict[str, Any] | None) -> str:
    """A result card's text: the hit's passage (the window around its best-matching words that the search chose,
    ``{start, end, marks}``) with its words marked, and "show all" / "show less" to unfold the whole text in the
    browser (an HTML ``details`` element: no rerun; search_lab.py styles it). A text that fits is shown whole."""
    if passage is None:
        return f"<div class='kb-chunk-text'>{_inert(text)}</div>"
    marks = passage.get("marks") or []
    start, end = int(passage["start"]), int(passage["end"])
    if start <= 0 and end >= len(text):
        return f"<div class='kb-chunk-text'>{_marked(text, marks)}</div>"
    window = ("… " if start > 0 else "") + _marked(text, marks, start, end) + (" …" if end < len(text) else "")
    return (
        "<details class='kb-chunk'><summary><div class='kb-chunk-text'>"
        f"<span class='kb-passage'>{window}</span><span class='kb-full'>{_marked(text, marks)}</span></div>"
        f"<span class='kb-more'><span class='kb-show-all'>{t('show all ▾')}</span>"
        f"<span class='kb-show-less'>{t('show less ▴')}</span></span></summary></details>"
    )


PART_COLOURS = dict(zip(PARTS, ("#4C78A8", "#F58518", "#54A24B"), strict=True))


def score_bars(chunks: Sequence[dict[str, Any]]) -> str:
    """HTML of one stacked bar per hit on the whole 0–1 score scale (semantic + keyword + Jaccard = final), with a
    legend and an axis; each part's value shows on hover. Drawn as plain HTML, not a chart: the search lab redraws it
    on every slider notch, and a plotly chart cost the browser ~0.1 s of CPU each time (app.py styles it)."""
    names = {part: say(name) for part, name in part_names().items()}
    legend = "".join(
        f"<span><i style='background:{colour}'></i>{names[part]}</span>" for part, colour in PART_COLOURS.items()
    ) + f"<span><i class='kb-bars-final'></i>{t('final score')}</span>"
    rows = []
    for i, chunk in enumerate(chunks):
        breakdown = chunk.get("breakdown") or {}
        parts = contribution_parts(breakdown)
        final = float(breakdown.get("final_score", chunk.get("score", 0.0)))
        label = _inert(f"#{i + 1} {chunk['doc_name']}"[:48])
        segments = "".join(
            f"<i style='width:{100 * max(0.0, min(1.0, value)):.2f}%;background:{PART_COLOURS[part]}' "
            f"title='{names[part]}: {value:.4f}'></i>"
            for part, value in parts.items() if value > 0
        )
        summary = say(parts_sum(parts, final))
        final_title = t("final score {value}", value=f"{final:.4f}")
        rows.append(
            f"<div class='kb-bars-row' role='img' aria-label='{label}: {summary}'>"
            f"<span class='kb-bars-label' title='{label}'>{label}</span><span class='kb-bars-track'>{segments}"
            f"<b style='left:{100 * max(0.0, min(1.0, final)):.2f}%' title='{final_title}'>"
            f"{final:.3f}</b></span></div>"
        )
    ticks = "".join(f"<span style='left:{100 * step / 5:.0f}%'>{step / 5:.1f}</span>" for step in range(6))
    axis = (f"<div class='kb-bars-row'><span class='kb-bars-label'></span><span class='kb-bars-axis'>{ticks}</span>"
            f"</div><div class='kb-bars-title'>{t('score (0–1 scale)')}</div>")
    return f"<div class='kb-bars'><div class='kb-bars-legend'>{legend}</div>{''.join(rows)}{axis}</div>"


def weight_pair(weights: dict[str, Any] | None) -> str:
    """``"0.70 / 0.30"`` for ``{"vector": 0.7, "keyword": 0.3}`` (vector first), or a dash."""
    if not weights:
        return "–"
    return f"{float(weights['vector']):.2f} / {float(weights['keyword']):.2f}"


def table_height(rows: int) -> int:
    """Pixels for a st.dataframe that shows ``rows`` rows and its header without scrolling."""
    return 35 * (rows + 1) + 3
