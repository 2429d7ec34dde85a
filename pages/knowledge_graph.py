"""Knowledge graph: the KB's typed nodes and edges drawn with plotly, YAML bundle import (paste or upload)
with every refusal shown against its item, the ontology (view, edit, validate and save) and the bundle schema."""

from __future__ import annotations

import json
import math
import os
import tempfile
from typing import Any

import pandas as pd
import plotly.graph_objects as go
import streamlit as st
import yaml

from kb_core import KBError
from kb_core.features.bundles.loading import load_bundle_text
from kb_core.features.results import BundleImported
from pages import _service
from pages._errors import attempt, show_error
from pages._i18n import say, t
from pages._picker import require_current_kb

GRAPH_LIMIT = 500  # nodes drawn at most
LABELS_UP_TO = 60  # nodes get a text label when there are at most this many
ARROWS_UP_TO = 200  # edges get an arrowhead when there are at most this many
TYPE_COLOURS = ["#4C78A8", "#F58518", "#54A24B", "#E45756", "#72B7B2", "#B279A2", "#FF9DA6", "#9D755D"]

session = _service.session()
kb_name = require_current_kb(session)
state_key = session.current_kb_id or kb_name  # results and edit rounds belong to one KB

st.title(t("Knowledge graph"))
header = st.empty()  # filled at the end, after any change this run made


def to_yaml(value: Any) -> str:
    return yaml.safe_dump(value, allow_unicode=True, sort_keys=False, width=100)


def short(value: Any, limit: int = 80) -> str:
    if isinstance(value, dict):
        value = ", ".join(f"{k}: {v}" for k, v in value.items())
    text = value if isinstance(value, str) else yaml.safe_dump(value, allow_unicode=True, default_flow_style=True)
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def identity_text(identity: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in identity.items())


def write_temp_yaml(text: str | bytes) -> str:
    handle, path = tempfile.mkstemp(prefix="kb-bundle-", suffix=".yaml", dir=session.scratch_root)
    with os.fdopen(handle, "wb") as out:
        out.write(text.encode("utf-8") if isinstance(text, str) else text)
    return path


def import_bundle(text: str | bytes, source: str) -> None:
    """The bundle goes to a temp file the service deletes after success; after a refusal we delete it."""
    path = write_temp_yaml(text)
    try:
        with st.spinner(t("Validating the bundle and indexing its documents…")):
            imported: BundleImported | KBError = session.import_knowledge_bundle(path, delete_file=True)
    except KBError as error:
        imported = error
    finally:
        if os.path.exists(path):
            os.unlink(path)
    raw = text.decode("utf-8", errors="replace") if isinstance(text, bytes) else text
    st.session_state[f"bundle_result_{state_key}"] = {"result": imported, "text": raw, "source": source}
    st.rerun()  # the sidebar counts and the graph show the new state


def paste_example() -> None:
    st.session_state["bundle_text"] = st.session_state.get("bundle_example", "")


def offending_items(text: str, indexes: list[int]) -> dict[int, Any]:
    """The items the errors point at, parsed with the same limited loader the service uses."""
    try:
        data = load_bundle_text(text)
    except Exception:  # the service already reported why the file cannot be read
        return {}
    if not isinstance(data, list):
        return {}
    return {i: data[i] for i in indexes if 0 <= i < len(data)}


def show_refusal(refusal: KBError, text: str) -> None:
    errors = (refusal.details or {}).get("errors") or []
    st.error(
        t("The bundle was refused and nothing was changed: {n} error(s). Fix them and import it again.", n=len(errors))
        + "  \n`BUNDLE_INVALID`",
        icon=":material/error:",
    )
    table = pd.DataFrame(
        {
            "Item": [e.get("index") for e in errors],
            "Path": [e.get("path", "") for e in errors],
            "Kind": [e.get("kind", "") for e in errors],
            "Message": [say(e.get("message", "")) for e in errors],
        }
    )
    st.dataframe(
        table, hide_index=True, width="stretch",
        column_config={
            "Item": st.column_config.NumberColumn(t("Item"), format="%d", help=t("0-based, as in the path"),
                                                  width="small"),
            "Path": st.column_config.TextColumn(t("Path"), width="medium"),
            "Kind": st.column_config.TextColumn(t("Kind"), width="small"),
            "Message": st.column_config.TextColumn(t("Message"), width="large"),
        },
    )
    indexes = sorted({int(e["index"]) for e in errors if isinstance(e.get("index"), int)})
    items = offending_items(text, indexes[:20])
    if items:
        with st.expander(t("Offending items ({n})", n=len(items)), expanded=len(items) <= 3):
            for index, item in items.items():
                messages = [say(e["message"]) for e in errors if e.get("index") == index]
                st.markdown(t("**Item [{index}]** — {messages}", index=index, messages="; ".join(messages)))
                st.code(to_yaml(item), language="yaml", wrap_lines=True)


def show_success(imported: BundleImported) -> None:
    stats = imported.stats
    st.success(say(imported.message), icon=":material/check_circle:")
    cols = st.columns(5)
    cols[0].metric(t("Nodes upserted"), stats.get("nodes_upserted", 0))
    cols[1].metric(t("Nodes deleted"), stats.get("nodes_deleted", 0))
    cols[2].metric(t("Edges upserted"), stats.get("edges_upserted", 0))
    cols[3].metric(t("Edges deleted"), stats.get("edges_deleted", 0) + stats.get("edges_cascaded", 0),
                   help=t("Including edges removed with their deleted nodes."))
    cols[4].metric(t("Chunks indexed"), stats.get("chunks_indexed", 0))


# -- layout --------------------------------------------------------------------------------------------
@st.cache_data(max_entries=32, show_spinner=False)  # the page shows its own spinner, in the session's language
def layout(ids: tuple[str, ...], links: tuple[tuple[str, str], ...]) -> dict[str, tuple[float, float]]:
    """A spring layout (networkx, seeded so the picture is stable), else a circle; cached per graph."""
    try:
        import networkx as nx

        graph = nx.Graph()
        graph.add_nodes_from(ids)
        graph.add_edges_from(links)
        rounds = 50 if len(ids) <= 150 else 25  # a 500-node layout stays around a second
        placed = nx.spring_layout(graph, seed=7, k=1.5 / math.sqrt(max(len(ids), 1)), iterations=rounds)
        return {n: (float(x), float(y)) for n, (x, y) in placed.items()}
    except ImportError:  # networkx comes with torch; the circle keeps the page working without it
        count = max(len(ids), 1)
        return {n: (math.cos(2 * math.pi * i / count), math.sin(2 * math.pi * i / count)) for i, n in enumerate(ids)}


def positions(nodes: list[dict[str, Any]], edges: list[dict[str, Any]]) -> dict[str, tuple[float, float]]:
    return layout(tuple(n["id"] for n in nodes), tuple((e["source"], e["target"]) for e in edges))


def graph_figure(nodes: list[dict[str, Any]], edges: list[dict[str, Any]]) -> go.Figure:
    where = positions(nodes, edges)
    names = {n["id"]: f"{n['type']} {identity_text(n['identity'])}" for n in nodes}
    figure = go.Figure()
    edge_types = sorted({e["type"] for e in edges})
    for number, edge_type in enumerate(edge_types):
        xs: list[float | None] = []
        ys: list[float | None] = []
        mid_x, mid_y, hover = [], [], []
        for edge in (e for e in edges if e["type"] == edge_type):
            (x0, y0), (x1, y1) = where[edge["source"]], where[edge["target"]]
            xs += [x0, x1, None]
            ys += [y0, y1, None]
            mid_x.append(x0 + 0.5 * (x1 - x0))
            mid_y.append(y0 + 0.5 * (y1 - y0))
            props = "<br>".join(f"{k}: {short(v)}" for k, v in (edge.get("properties") or {}).items())
            hover.append(f"<b>{edge_type}</b><br>{names[edge['source']]} → {names[edge['target']]}"
                         + (f"<br>{props}" if props else ""))
        colour = "#8a8f98" if number == 0 else TYPE_COLOURS[(number + 3) % len(TYPE_COLOURS)]
        figure.add_scatter(x=xs, y=ys, mode="lines", line={"width": 1.2, "color": colour}, hoverinfo="skip",
                           name=t("{type} (edge)", type=edge_type), legendgroup=edge_type)
        if len(edges) <= ARROWS_UP_TO:  # arrowheads show direction; hundreds of annotations get slow
            for edge in (e for e in edges if e["type"] == edge_type):
                (x0, y0), (x1, y1) = where[edge["source"]], where[edge["target"]]
                figure.add_annotation(x=x1, y=y1, ax=x0, ay=y0, xref="x", yref="y", axref="x", ayref="y", text="",
                                      showarrow=True, arrowhead=2, arrowsize=1.3, arrowwidth=1.2, arrowcolor=colour,
                                      standoff=8)
        # a marker halfway: the place to hover for the edge's type and properties
        figure.add_scatter(x=mid_x, y=mid_y, mode="markers", marker={"symbol": "diamond", "size": 7, "color": colour},
                           hovertext=hover, hoverinfo="text", showlegend=False, legendgroup=edge_type)
    node_types = sorted({n["type"] for n in nodes})
    for number, node_type in enumerate(node_types):
        members = [n for n in nodes if n["type"] == node_type]
        hover = []
        for node in members:
            props = "<br>".join(f"{k}: {short(v)}" for k, v in (node.get("properties") or {}).items())
            hover.append(f"<b>{node_type}</b> {identity_text(node['identity'])}<br>id: {node['id']}<br>{props}")
        figure.add_scatter(
            x=[where[n["id"]][0] for n in members],
            y=[where[n["id"]][1] for n in members],
            mode="markers+text" if len(nodes) <= LABELS_UP_TO else "markers",
            text=[short(", ".join(str(v) for v in n["identity"].values()), 28) for n in members],
            textposition="top center",
            textfont={"size": 11},
            marker={"size": 14 if len(nodes) <= 100 else 8, "color": TYPE_COLOURS[number % len(TYPE_COLOURS)],
                    "line": {"width": 1, "color": "white"}},
            hovertext=hover,
            hoverinfo="text",
            name=node_type,
        )
    figure.update_layout(
        height=560,
        margin={"l": 10, "r": 10, "t": 30, "b": 10},
        xaxis={"visible": False},
        yaxis={"visible": False, "scaleanchor": "x"},
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.0, "x": 0},
        hoverlabel={"align": "left"},
        plot_bgcolor="white",
    )
    return figure


graph_tab, bundle_tab, ontology_tab, schema_tab = st.tabs(
    [t("Graph"), t("Import bundle"), t("Ontology"), t("Schema")]
)

# -- schema (read first: the bundle tab offers its example) -----------------------------------------------
with schema_tab:
    schema = attempt(lambda: session.get_knowledge_schema())
    if schema is not None:
        st.session_state["bundle_example"] = schema.example_yaml
        st.caption(t(
            "A bundle is a YAML list of items; each item is one node or edge of a type below. This JSON Schema "
            "(draft-07) is generated from the ontology; a delete needs only the identity fields."
        ))
        left, right = st.columns(2, gap="large")
        with left:
            st.markdown(t("**Example bundle**"))
            st.code(schema.example_yaml, language="yaml", wrap_lines=True)
            st.download_button(t("Download {file}", file="example.yaml"), schema.example_yaml,
                               file_name="example.yaml", mime="application/yaml", key="schema_download_example",
                               icon=":material/download:")
        with right:
            st.markdown(t("**Full bundle schema**"))
            st.json(schema.full_bundle_schema, expanded=3)
            st.download_button(
                t("Download {file}", file="bundle-schema.json"),
                json.dumps(schema.full_bundle_schema, indent=2, ensure_ascii=False),
                file_name="bundle-schema.json", mime="application/json", key="schema_download_json",
                icon=":material/download:",
            )

# -- bundle import -------------------------------------------------------------------------------------------
with bundle_tab:
    st.caption(t(
        "Import typed nodes and edges into **{name}**. The whole bundle is validated first and applied as one "
        "unit; a refusal changes nothing and lists every error against its item. Indexed fields (e.g. "
        "`Document.content`) become searchable documents.", name=kb_name
    ))
    stored = st.session_state.get(f"bundle_result_{state_key}")
    if stored:
        imported = stored["result"]
        if not isinstance(imported, KBError):
            show_success(imported)
        elif imported.code == "BUNDLE_INVALID":
            show_refusal(imported, stored["text"])
        else:
            show_error(imported, multiline=True)
    paste_tab, upload_tab = st.tabs([t("Paste YAML"), t("Upload a file")])
    with paste_tab:
        st.button(t("Paste the example bundle"), key="bundle_use_example", on_click=paste_example,
                  icon=":material/content_paste:")
        text = st.text_area(t("Bundle (YAML)"), height=260, key="bundle_text",
                            placeholder="- type: Document\n  doc_uri: doc-001\n  content: …")
        if st.button(t("Import pasted bundle"), type="primary", key="bundle_import_text"):
            if text.strip():
                import_bundle(text, "pasted")
            else:
                st.warning(t("Paste a YAML bundle first."))
    with upload_tab:
        upload = st.file_uploader(t("Bundle file"), type=["yaml", "yml", "json"], key="bundle_upload")
        if st.button(t("Import uploaded bundle"), type="primary", disabled=upload is None, key="bundle_import_file"):
            import_bundle(upload.getvalue(), upload.name)  # type: ignore[union-attr]

# -- ontology ------------------------------------------------------------------------------------------------
with ontology_tab:
    current = attempt(lambda: session.get_ontology())
    if current is not None:
        ontology = current.ontology
        flash = st.session_state.pop(f"ontology_flash_{state_key}", None)
        if flash:
            st.success(say(flash), icon=":material/check_circle:")
        node_rows = [
            {t("Node type"): name, t("Identity"): ", ".join(spec.get("identity", [])),
             t("Indexed"): ", ".join(spec.get("indexed", [])),
             t("Properties"): ", ".join((spec.get("json_schema") or {}).get("properties", {})),
             t("Required"): ", ".join((spec.get("json_schema") or {}).get("required", [])),
             t("Description"): spec.get("description", "")}
            for name, spec in ontology.get("nodes", {}).items()
        ]
        edge_rows = [
            {t("Edge type"): name, t("From"): spec.get("from"), t("To"): spec.get("to"),
             t("Properties"): ", ".join((spec.get("json_schema") or {}).get("properties", {})),
             t("Description"): spec.get("description", "")}
            for name, spec in ontology.get("edges", {}).items()
        ]
        st.dataframe(pd.DataFrame(node_rows), hide_index=True, width="stretch")
        if edge_rows:
            st.dataframe(pd.DataFrame(edge_rows), hide_index=True, width="stretch")
        round_ = st.session_state.get(f"ontology_round_{state_key}", 0)
        edited = st.text_area(
            t("Ontology (YAML or JSON) — edit and save to replace it"),
            value=to_yaml(ontology),
            height=360,
            key=f"ontology_text_{state_key}_{round_}",  # a new key after a save shows the saved ontology
            help=t("Refused, with nothing changed, if it is invalid or existing nodes and edges would not fit it."),
        )
        if st.button(t("Validate & save"), type="primary", key="ontology_save"):
            # A one-line text would be read as a file path by set_ontology; a newline keeps it text.
            try:
                saved = session.set_ontology(edited if "\n" in edited else edited + "\n")
            except KBError as error:
                show_error(error, multiline=True)
            else:
                st.session_state[f"ontology_flash_{state_key}"] = saved.message
                st.session_state[f"ontology_round_{state_key}"] = round_ + 1
                st.rerun()

# -- graph ---------------------------------------------------------------------------------------------------
with graph_tab:
    view = attempt(lambda: session.graph_view(limit=GRAPH_LIMIT))
    if view is not None:
        nodes, edges = view.nodes, view.edges
        if not nodes:
            st.info(t("This knowledge base has no nodes yet. Import a YAML bundle on the **{tab}** tab "
                      "(**{button}** is a quick start).", tab=t("Import bundle"), button=t("Paste the example bundle")))
        else:
            if view.truncated:
                st.caption(t("Showing {shown} of {total} nodes and the edges between them.", shown=len(nodes),
                             total=view.node_total))
            with st.spinner(t("Laying out the graph…")):
                figure = graph_figure(nodes, edges)
            st.plotly_chart(figure, key="graph_chart", width="stretch")
            st.caption(t("Hover a node for its type, identity and properties; hover the diamond halfway along an "
                         "edge for its type and properties; arrows point from source to target. Drag to pan, scroll "
                         "to zoom."))
            labels = {n["id"]: f"{n['type']}: {identity_text(n['identity'])}" for n in nodes}
            choice = st.selectbox(t("Inspect a node"), list(labels), format_func=labels.__getitem__, index=None,
                                  placeholder=t("Choose a node to see its properties and neighbours"),
                                  key="graph_node")
            if choice is not None:
                found = attempt(lambda: session.get_item(choice))
                if found is not None:
                    item = found.data
                    left, right = st.columns(2, gap="large")
                    with left:
                        st.markdown(t("**Properties**"))
                        st.code(to_yaml({"identity": item["identity"], **item["properties"]}), language="yaml",
                                wrap_lines=True)
                        if item.get("doc_name"):
                            st.caption(t("Indexed as document **{name}**.", name=item["doc_name"]))
                    with right:
                        st.markdown(t("**Neighbours** ({n})", n=len(item["neighbours"])))
                        st.dataframe(
                            pd.DataFrame(
                                {
                                    t("Direction"): [t("→ out") if n["direction"] == "out" else t("← in")
                                                     for n in item["neighbours"]],
                                    t("Edge"): [n["edge_type"] for n in item["neighbours"]],
                                    t("Node"): [f"{n['node']['type']}: {identity_text(n['node']['identity'])}"
                                                for n in item["neighbours"]],
                                    t("Edge properties"): [short(n["properties"]) if n["properties"] else ""
                                                           for n in item["neighbours"]],
                                }
                            ),
                            hide_index=True, width="stretch",
                        )
        header.caption(t(
            "Knowledge base **{name}** · {nodes} node(s) · {edges} edge(s). Nodes and edges come from YAML knowledge "
            "bundles; their indexed text fields are searchable documents.", name=kb_name, nodes=view.node_total,
            edges=view.edge_total,
        ))
