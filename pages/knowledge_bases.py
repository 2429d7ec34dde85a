"""Knowledge bases: create (with the service's validation messages inline), list, select, delete; a KB whose
documents its model cannot read offers to embed them again with a model that can."""

from __future__ import annotations

import re
from contextlib import nullcontext

import pandas as pd
import streamlit as st

from kb_core import KBError
from kb_core.engines.embedding.builtin import covers_script, reader_of, unread_documents
from kb_core.engines.text_language import language_name
from pages import _service
from pages._errors import attempt, show_error
from pages._i18n import say, t
from pages._picker import kb_listing, select
from pages._progress import overall_fraction

session = _service.session()
listed_models = attempt(lambda: session.embedding_models())
DEFAULT_MODEL = listed_models.default if listed_models else None
# The built-in models, the default first; other models (a local folder, an endpoint's) are typed in.
MODELS = {
    m["name"]: m
    for m in sorted(listed_models.models if listed_models else [], key=lambda m: m["name"] != DEFAULT_MODEL)
}
demo = _service.public_demo()
if demo is not None:  # a public demo offers its models only (the session refuses others too)
    MODELS = {name: m for name, m in MODELS.items() if name in demo.models}
DEFAULT_MODEL = DEFAULT_MODEL if DEFAULT_MODEL in MODELS else next(iter(MODELS), None)
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")
st.title(t("Knowledge bases"))
try:
    device = t("Embedding device: {device}; queries on the CPU.",
               device=say(session.device_info().device["description"]))
except KBError as error:
    device = t("Embedding device: {device}", device=say(error.message))
st.caption(
    device,
    help=t("Set with KB_DEVICE (auto, cpu, cuda, cuda:N, mps) before starting the app; float16 on CUDA unless "
           "KB_PRECISION=float32."),
)

flash = st.session_state.pop("kb_flash", None)
if flash:  # a service message (said now, in the session's language) or the page's own, already said
    st.success(say(flash), icon=":material/check_circle:")

listing = attempt(lambda: kb_listing(session))  # the sidebar's: read once per run
kbs = listing.knowledge_bases if listing else []
names = [kb["name"] for kb in kbs]
current = next((kb["name"] for kb in kbs if kb["is_current"]), None)

def field_label(field: str) -> str:
    """The create form's field an error is about, as its label reads."""
    labels = {
        "kb_name": t("Kb name"),
        "chunk_size": t("Chunk size"),
        "embedding_model": t("Embedding model"),
        "embedding_endpoint": t("Embedding endpoint"),
        "embedding_api_key": t("Embedding api key"),
    }
    return labels.get(field, field.replace("_", " ").capitalize())


def reembed_offer(kb_name: str) -> None:
    """When some documents of ``kb_name`` are in a language its model does not read: say so, and offer to embed them
    again with a model that reads them, into a new KB (the service's reembed_knowledge_base says why a new one)."""
    kb = next((k for k in kbs if k["name"] == kb_name), None)
    if kb is None or not kb["document_count"] or kb["embedding_endpoint"]:
        return
    try:
        languages = {d["name"]: d.get("language") for d in session.list_documents(kb_name=kb_name).documents}
    except KBError:
        languages = {}
    unread = unread_documents(kb["embedding_model"], languages)
    reader = reader_of(set(unread.values()))
    if not unread or reader is None:
        return
    names = t(" and ").join(sorted({say(language_name(lang)) for lang in unread.values()}))
    st.warning(
        t(
            "{n} of the {total} documents of **{kb}** are in {languages}, which its model {model} does not read: "
            "search cannot find them by meaning.",
            n=len(unread), total=len(languages), kb=kb_name, languages=names, model=kb["embedding_model"],
        ),
        icon=":material/translate:",
    )
    if st.button(t("Embed them again with {model}", model=reader), key="kb_reembed",
                 help=t("Makes a new knowledge base with the same documents, chunk size and search settings; this "
                        "one stays unchanged until you delete it.")):
        bar = st.progress(0.0, text=t("Importing the documents of {kb} with {model}…", kb=kb_name, model=reader))

        def progress(state) -> None:  # type: ignore[no-untyped-def]
            bar.progress(min(1.0, overall_fraction(state)),
                         text=t("{done} of {total} files", done=state.files_done, total=state.files_total))

        made = attempt(lambda: session.reembed_knowledge_base(kb_name, reader, progress=progress))
        if made is not None and made.succeeded():
            select(session, made.kb_name)
            st.session_state["kb_flash"] = made.message
            st.session_state.pop("kb_target", None)  # the picker shows the new, current KB
            st.rerun()


# The table takes the page's width: beside the create form, at 1280 px it hid the chunk size and creation time (#34).
st.subheader(t("All knowledge bases"))
if kbs:
    # Column names are what the table's header shows: in the session's language ("Current" shows no name).
    table = pd.DataFrame(
        {
            "Current": ["●" if kb["is_current"] else "" for kb in kbs],
            t("Name"): names,
            t("Documents"): [kb["document_count"] for kb in kbs],
            t("Failed imports"): [kb.get("failed_document_count", 0) for kb in kbs],
            t("Chunks"): [kb["chunk_count"] for kb in kbs],
            t("Embedding model"): [kb["embedding_endpoint"] or kb["embedding_model"] for kb in kbs],
            t("Chunk size"): [kb["chunk_size"] for kb in kbs],
            t("Created (UTC)"): [str(kb["created_at"])[:16].replace("T", " ") for kb in kbs],
        }
    )
    st.dataframe(table, hide_index=True, width="stretch", column_config={
        "Current": st.column_config.TextColumn("", width=24, help=t("the current knowledge base")),
        t("Documents"): st.column_config.NumberColumn(help=t("documents imported")),
        t("Failed imports"): st.column_config.NumberColumn(help=t(
            "files whose import failed (the Documents page lists them with their reasons); they are no documents"
        )),
        t("Chunk size"): st.column_config.NumberColumn(help=t("tokens per chunk at most")),
    })

left, right = st.columns([3, 2], gap="large")
with left:
    if kbs:
        st.subheader(t("Select or delete"))
        st.caption(t("Current knowledge base in this browser session: **{name}**", name=current or t("none")))

        pick_col, select_col, delete_col = st.columns([3, 1, 1], vertical_alignment="bottom")
        target = pick_col.selectbox(
            t("Knowledge base"), names, index=names.index(current) if current in names else 0, key="kb_target"
        )
        if select_col.button(t("Select"), width="stretch", type="primary", key="kb_select"):
            selected = attempt(lambda: session.select_knowledge_base(target))
            if selected is not None:
                st.session_state["kb_flash"] = t("Selected knowledge base '{name}'.", name=selected.kb_name)
                st.rerun()
        read_only = session.change_refusal(target)
        if delete_col.button(t("Delete…"), width="stretch", key="kb_delete", disabled=read_only is not None,
                             help=None if read_only is None else say(read_only)):
            if target == current:
                # The service refuses and explains why; show its message rather than a dialog.
                attempt(lambda: session.delete_knowledge_base(target))
            else:
                st.session_state["kb_pending_delete"] = target

        pending = st.session_state.get("kb_pending_delete")
        if pending:
            with st.container(border=True):
                st.warning(
                    t("Delete knowledge base **{name}** with all its documents and indexes? This cannot be undone.",
                      name=pending),
                    icon=":material/warning:",
                )
                yes, no = st.columns(2)
                if yes.button(t("Yes, delete"), type="primary", key="kb_confirm_delete", width="stretch"):
                    st.session_state.pop("kb_pending_delete", None)
                    deleted = attempt(lambda: session.delete_knowledge_base(pending))
                    if deleted is not None:
                        st.session_state["kb_flash"] = deleted.message
                        st.rerun()
                if no.button(t("Cancel"), key="kb_cancel_delete", width="stretch"):
                    st.session_state.pop("kb_pending_delete", None)
                    st.rerun()
        reembed_offer(target)
    else:
        st.info(t("There are no knowledge bases yet. Create the first one with the form."))

with right:
    st.subheader(t("Create a knowledge base"))
    with st.container(border=True):
        name = st.text_input(t("Name"), placeholder=t("e.g. Product manuals · 产品手册"), key="create_name")
        chunk_size = st.number_input(
            t("Chunk size (tokens)"), min_value=1, max_value=100_000, value=512, step=64, key="create_chunk_size",
            help=t("32 to 8192 tokens per chunk, counted with the embedding model's tokenizer."),
        )
        # A radio, not a select box: each model's whole description stays readable, wrapped, at any width.
        model = st.radio(
            t("Embedding model"),
            list(MODELS),
            index=list(MODELS).index(DEFAULT_MODEL) if DEFAULT_MODEL in MODELS else 0,
            captions=[
                t("The default. Reads {reads}; {speed}.", reads=say(m["reads"]), speed=say(m["speed"]))
                if n == DEFAULT_MODEL
                else t("Reads {reads}; {speed}.", reads=say(m["reads"]), speed=say(m["speed"]))
                for n, m in MODELS.items()
            ],
            key="create_model",
            help=t("Local models run offline from installed packages."),
        )
        other = endpoint = api_key = ""
        if demo is None or demo.allowed_endpoints:  # a public demo: only the endpoints its operator lists
            with st.expander(t("Another model or an embedding endpoint (optional)")):
                other = st.text_input(
                    t("Model"), key="create_other_model",
                    placeholder=t("a local sentence-transformers folder, or the model an endpoint serves"),
                    help=t("Used instead of the choice above when given."),
                )
                endpoint = st.text_input(t("Endpoint URL"), placeholder="http://127.0.0.1:8000/v1",
                                         key="create_endpoint")
                api_key = st.text_input(t("API key"), type="password", key="create_api_key")
        chosen = other.strip() or model
        if _CJK.search(name or "") and chosen and not covers_script(chosen, "cjk"):
            reader = reader_of(["zh"])
            st.warning(
                t("The name is Chinese, and {model} does not read Chinese: choose {reader} to search Chinese "
                  "documents by meaning.", model=chosen, reader=reader)
                if reader
                else t("The name is Chinese, and {model} does not read Chinese.", model=chosen),
                icon=":material/translate:",
            )
        select_after = st.checkbox(t("Select it after creating"), value=True, key="create_select")
        submitted = st.button(t("Create"), type="primary", key="create_submit")
    if submitted:
        # Validation is the service's: its message names the bad value and what is accepted.
        first_build = not endpoint and not MODELS.get(chosen, {}).get("built", True)
        preparing = (
            st.status(t("Preparing {model} on this machine (once, about 10-20 s)…", model=chosen), expanded=True)
            if first_build
            else nullcontext()
        )
        refused: KBError | None = None
        with preparing:
            try:
                created = session.create_knowledge_base(
                    name,
                    int(chunk_size),
                    embedding_model=chosen,
                    embedding_endpoint=endpoint or None,
                    embedding_api_key=api_key or None,
                    progress=(lambda line: st.write(say(line))) if first_build else None,
                )
            except KBError as error:
                refused = error
        if refused is None:
            message = created.message
            if select_after:
                select(session, created.kb_name)
                message = t("Created and selected knowledge base '{name}'.", name=created.kb_name)
            st.session_state["kb_flash"] = message
            st.rerun()
        else:
            field = (refused.details or {}).get("field")
            show_error(refused, prefix=t("{field}: ", field=field_label(field)) if field else "")

if session.principal.kind == "operator":
    st.divider()
    st.subheader(t("Demo management"))
    found = attempt(lambda: session.demo_status())
    status = found.data if found else {}
    owners = status.get("visitor_kbs", {})
    published = set(status.get("published", []))
    st.caption(t("Published knowledge bases are shared read-only with every visitor; a visitor's own expire."))
    if kbs:
        st.dataframe(
            pd.DataFrame(
                {
                    t("Name"): names,
                    t("Owner"): [owners.get(kb["id"], t("operator")) for kb in kbs],
                    t("Shared with visitors"): [t("yes") if kb["id"] in published else "" for kb in kbs],
                    t("Chunks"): [kb["chunk_count"] for kb in kbs],
                }
            ),
            hide_index=True, width="stretch",
        )
        share_pick, share_on, share_off = st.columns([3, 1, 1], vertical_alignment="bottom")
        shared = share_pick.selectbox(t("Knowledge base"), names, key="demo_publish_target")
        if share_on.button(t("Publish"), key="demo_publish", width="stretch"):
            done = attempt(lambda: session.publish_knowledge_base(shared, True))
            if done is not None:
                st.session_state["kb_flash"] = done.message
                st.rerun()
        if share_off.button(t("Unpublish"), key="demo_unpublish", width="stretch"):
            done = attempt(lambda: session.publish_knowledge_base(shared, False))
            if done is not None:
                st.session_state["kb_flash"] = done.message
                st.rerun()
    usage = status.get("usage") or []
    st.markdown(t("**Visitors' usage** (imports, searches and refusals since the app started)"))
    if usage:
        st.dataframe(
            pd.DataFrame(
                {
                    t("Visitor"): [u["visitor"] for u in usage],
                    t("Knowledge bases"): [", ".join(u["knowledge_bases"]) for u in usage],
                    t("Chunks"): [u["chunks"] for u in usage],
                    t("Imports"): [u["imports"] for u in usage],
                    t("Searches"): [u["searches"] for u in usage],
                    t("Refused"): [u["refused"] for u in usage],
                    t("Last seen (UTC)"): [
                        "" if u["last_seen"] is None else pd.Timestamp(u["last_seen"], unit="s").strftime("%H:%M:%S")
                        for u in usage
                    ],
                    t("First expiry (UTC)"): [
                        "" if u["next_expiry"] is None
                        else pd.Timestamp(u["next_expiry"], unit="s").strftime("%Y-%m-%d %H:%M")
                        for u in usage
                    ],
                }
            ),
            hide_index=True, width="stretch",
        )
    else:
        st.caption(t("No visitor yet."))
