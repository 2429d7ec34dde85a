"""Knowledge bases: create (with the service's validation messages inline), list, select, delete; a KB whose
documents its model cannot read offers to embed them again with a model that can."""

from __future__ import annotations

import re
from contextlib import nullcontext

import pandas as pd
import streamlit as st

from kb_core.embedding.builtin import covers_script, reader_of, unread_documents
from kb_core.text_language import language_name
from pages import _shared as ui

session = ui.session()
listed_models = session.embedding_models()
DEFAULT_MODEL = listed_models["data"]["default"] if listed_models["success"] else None
# The built-in models, the default first; other models (a local folder, an endpoint's) are typed in.
MODELS = {
    m["name"]: m
    for m in sorted(listed_models["data"]["models"] if listed_models["success"] else [],
                    key=lambda m: m["name"] != DEFAULT_MODEL)
}
demo = ui.public_demo()
if demo is not None:  # a public demo offers its models only (the session refuses others too)
    MODELS = {name: m for name, m in MODELS.items() if name in demo.models}
DEFAULT_MODEL = DEFAULT_MODEL if DEFAULT_MODEL in MODELS else next(iter(MODELS), None)
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")
st.title("Knowledge bases")
device = session.device_info()
st.caption(
    f"Embedding device: {device['data']['device']['description']}; queries on the CPU."
    if device["success"]
    else f"Embedding device: {device['message']}",
    help="Set with KB_DEVICE (auto, cpu, cuda, cuda:N, mps) before starting the app; float16 on CUDA unless "
    "KB_PRECISION=float32.",
)

flash = st.session_state.pop("kb_flash", None)
if flash:
    st.success(flash, icon=":material/check_circle:")

listing = session.list_knowledge_bases()
kbs = ui.data_or_error(listing)
kbs = kbs["knowledge_bases"] if kbs else []
names = [kb["name"] for kb in kbs]
current = next((kb["name"] for kb in kbs if kb["is_current"]), None)

def reembed_offer(kb_name: str) -> None:
    """When some documents of ``kb_name`` are in a language its model does not read: say so, and offer to embed them
    again with a model that reads them, into a new KB (the service's reembed_knowledge_base says why a new one)."""
    kb = next((k for k in kbs if k["name"] == kb_name), None)
    if kb is None or not kb["document_count"] or kb["embedding_endpoint"]:
        return
    listed = session.list_documents(kb_name=kb_name)
    languages = {d["name"]: d.get("language") for d in listed["data"]["documents"]} if listed["success"] else {}
    unread = unread_documents(kb["embedding_model"], languages)
    reader = reader_of(set(unread.values()))
    if not unread or reader is None:
        return
    names = " and ".join(sorted({language_name(lang) for lang in unread.values()}))
    st.warning(
        f"{len(unread)} of the {len(languages)} documents of **{kb_name}** are in {names}, which its model "
        f"{kb['embedding_model']} does not read: search cannot find them by meaning.",
        icon=":material/translate:",
    )
    if st.button(f"Embed them again with {reader}", key="kb_reembed",
                 help="Makes a new knowledge base with the same documents, chunk size and search settings; this "
                 "one stays unchanged until you delete it."):
        bar = st.progress(0.0, text=f"Importing the documents of {kb_name} with {reader}…")

        def progress(state) -> None:  # type: ignore[no-untyped-def]
            bar.progress(min(1.0, ui.overall_fraction(state)), text=f"{state.files_done} of {state.files_total} files")

        result = session.reembed_knowledge_base(kb_name, reader, progress=progress)
        if result["success"]:
            ui.data_or_error(session.select_knowledge_base(result["data"]["kb_name"]))
            st.session_state["kb_flash"] = result["message"]
            st.session_state.pop("kb_target", None)  # the picker shows the new, current KB
            st.rerun()
        ui.show_error(result)


# The table takes the page's width: beside the create form, at 1280 px it hid the chunk size and creation time (#34).
st.subheader("All knowledge bases")
if kbs:
    table = pd.DataFrame(
        {
            "Current": ["●" if kb["is_current"] else "" for kb in kbs],
            "Name": names,
            "Documents": [kb["document_count"] for kb in kbs],
            "Failed imports": [kb.get("failed_document_count", 0) for kb in kbs],
            "Chunks": [kb["chunk_count"] for kb in kbs],
            "Embedding model": [kb["embedding_endpoint"] or kb["embedding_model"] for kb in kbs],
            "Chunk size": [kb["chunk_size"] for kb in kbs],
            "Created": [str(kb["created_at"])[:16].replace("T", " ") for kb in kbs],
        }
    )
    st.dataframe(table, hide_index=True, width="stretch", column_config={
        "Current": st.column_config.TextColumn("", width=24, help="the current knowledge base"),
        "Documents": st.column_config.NumberColumn(help="documents imported"),
        "Failed imports": st.column_config.NumberColumn(help="files whose import failed (the Documents page lists "
                                                        "them with their reasons); they are no documents"),
        "Chunk size": st.column_config.NumberColumn(help="tokens per chunk at most"),
        "Created": st.column_config.TextColumn("Created (UTC)"),
    })

left, right = st.columns([3, 2], gap="large")
with left:
    if kbs:
        st.subheader("Select or delete")
        st.caption(f"Current knowledge base in this browser session: **{current or 'none'}**")

        pick_col, select_col, delete_col = st.columns([3, 1, 1], vertical_alignment="bottom")
        target = pick_col.selectbox(
            "Knowledge base", names, index=names.index(current) if current in names else 0, key="kb_target"
        )
        if select_col.button("Select", width="stretch", type="primary", key="kb_select"):
            data = ui.data_or_error(session.select_knowledge_base(target))
            if data:
                st.session_state["kb_flash"] = f"Selected knowledge base '{data['kb_name']}'."
                st.rerun()
        read_only = session.change_refusal(target)
        if delete_col.button("Delete…", width="stretch", key="kb_delete", disabled=read_only is not None,
                             help=read_only):
            if target == current:
                # The service refuses and explains why; show its message rather than a dialog.
                ui.show_error(session.delete_knowledge_base(target))
            else:
                st.session_state["kb_pending_delete"] = target

        pending = st.session_state.get("kb_pending_delete")
        if pending:
            with st.container(border=True):
                st.warning(
                    f"Delete knowledge base **{pending}** with all its documents and indexes? This cannot be undone.",
                    icon=":material/warning:",
                )
                yes, no = st.columns(2)
                if yes.button("Yes, delete", type="primary", key="kb_confirm_delete", width="stretch"):
                    st.session_state.pop("kb_pending_delete", None)
                    result = session.delete_knowledge_base(pending)
                    if result["success"]:
                        st.session_state["kb_flash"] = result["message"]
                        st.rerun()
                    ui.show_error(result)
                if no.button("Cancel", key="kb_cancel_delete", width="stretch"):
                    st.session_state.pop("kb_pending_delete", None)
                    st.rerun()
        reembed_offer(target)
    else:
        st.info("There are no knowledge bases yet. Create the first one with the form.")

with right:
    st.subheader("Create a knowledge base")
    with st.container(border=True):
        name = st.text_input("Name", placeholder="e.g. Product manuals · 产品手册", key="create_name")
        chunk_size = st.number_input(
            "Chunk size (tokens)", min_value=1, max_value=100_000, value=512, step=64, key="create_chunk_size",
            help="32 to 8192 tokens per chunk, counted with the embedding model's tokenizer.",
        )
        # A radio, not a select box: each model's whole description stays readable, wrapped, at any width.
        model = st.radio(
            "Embedding model",
            list(MODELS),
            index=list(MODELS).index(DEFAULT_MODEL) if DEFAULT_MODEL in MODELS else 0,
            captions=[
                f"{'The default. ' if n == DEFAULT_MODEL else ''}Reads {m['reads']}; {m['speed']}."
                for n, m in MODELS.items()
            ],
            key="create_model",
            help="Local models run offline from installed packages.",
        )
        other = endpoint = api_key = ""
        if demo is None or demo.allowed_endpoints:  # a public demo: only the endpoints its operator lists
            with st.expander("Another model or an embedding endpoint (optional)"):
                other = st.text_input(
                    "Model", key="create_other_model", placeholder="a local sentence-transformers folder, or the "
                    "model an endpoint serves", help="Used instead of the choice above when given.",
                )
                endpoint = st.text_input("Endpoint URL", placeholder="http://127.0.0.1:8000/v1", key="create_endpoint")
                api_key = st.text_input("API key", type="password", key="create_api_key")
        chosen = other.strip() or model
        if _CJK.search(name or "") and chosen and not covers_script(chosen, "cjk"):
            reader = reader_of(["zh"])
            st.warning(
                f"The name is Chinese, and {chosen} does not read Chinese"
                + (f": choose {reader} to search Chinese documents by meaning." if reader else "."),
                icon=":material/translate:",
            )
        select_after = st.checkbox("Select it after creating", value=True, key="create_select")
        submitted = st.button("Create", type="primary", key="create_submit")
    if submitted:
        # Validation is the service's: its message names the bad value and what is accepted.
        first_build = not endpoint and not MODELS.get(chosen, {}).get("built", True)
        preparing = (
            st.status(f"Preparing {chosen} on this machine (once, about 10-20 s)…", expanded=True)
            if first_build
            else nullcontext()
        )
        with preparing:
            created = session.create_knowledge_base(
                name,
                int(chunk_size),
                embedding_model=chosen,
                embedding_endpoint=endpoint or None,
                embedding_api_key=api_key or None,
                progress=st.write if first_build else None,
            )
        if created["success"]:
            message = created["message"]
            if select_after:
                ui.data_or_error(session.select_knowledge_base(created["data"]["kb_name"]))
                message = f"Created and selected knowledge base '{created['data']['kb_name']}'."
            st.session_state["kb_flash"] = message
            st.rerun()
        field = ((created.get("error") or {}).get("details") or {}).get("field")
        ui.show_error(created, prefix=f"{field.replace('_', ' ').capitalize()}: " if field else "")

if session.principal.kind == "operator":
    st.divider()
    st.subheader("Demo management")
    status = ui.data_or_error(session.demo_status()) or {}
    owners = status.get("visitor_kbs", {})
    published = set(status.get("published", []))
    st.caption("Published knowledge bases are shared read-only with every visitor; a visitor's own expire.")
    if kbs:
        st.dataframe(
            pd.DataFrame(
                {
                    "Name": names,
                    "Owner": [owners.get(kb["id"], "operator") for kb in kbs],
                    "Shared with visitors": ["yes" if kb["id"] in published else "" for kb in kbs],
                    "Chunks": [kb["chunk_count"] for kb in kbs],
                }
            ),
            hide_index=True, width="stretch",
        )
        share_pick, share_on, share_off = st.columns([3, 1, 1], vertical_alignment="bottom")
        shared = share_pick.selectbox("Knowledge base", names, key="demo_publish_target")
        if share_on.button("Publish", key="demo_publish", width="stretch"):
            result = session.publish_knowledge_base(shared, True)
            if result["success"]:
                st.session_state["kb_flash"] = result["message"]
                st.rerun()
            ui.show_error(result)
        if share_off.button("Unpublish", key="demo_unpublish", width="stretch"):
            result = session.publish_knowledge_base(shared, False)
            if result["success"]:
                st.session_state["kb_flash"] = result["message"]
                st.rerun()
            ui.show_error(result)
    usage = status.get("usage") or []
    st.markdown("**Visitors' usage** (imports, searches and refusals since the app started)")
    if usage:
        st.dataframe(
            pd.DataFrame(
                {
                    "Visitor": [u["visitor"] for u in usage],
                    "Knowledge bases": [", ".join(u["knowledge_bases"]) for u in usage],
                    "Chunks": [u["chunks"] for u in usage],
                    "Imports": [u["imports"] for u in usage],
                    "Searches": [u["searches"] for u in usage],
                    "Refused": [u["refused"] for u in usage],
                    "Last seen (UTC)": [
                        "" if u["last_seen"] is None else pd.Timestamp(u["last_seen"], unit="s").strftime("%H:%M:%S")
                        for u in usage
                    ],
                    "First expiry (UTC)": [
                        "" if u["next_expiry"] is None
                        else pd.Timestamp(u["next_expiry"], unit="s").strftime("%Y-%m-%d %H:%M")
                        for u in usage
                    ],
                }
            ),
            hide_index=True, width="stretch",
        )
    else:
        st.caption("No visitor yet.")
