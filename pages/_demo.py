"""The demo on the pages: the demo KB's build (one per process and home), and a public demo's visitor cookie,
operator sign-in, banner and quotas."""

from __future__ import annotations

import threading
import time

import streamlit as st

from kb_core import KBError, Operations
from pages._i18n import say, t
from pages._service import (
    VISITOR_COOKIE,
    VISITOR_TOKEN,
    public_demo,
    public_demo_enabled,
    sign_in_operator,
    sign_out_operator,
)


@st.cache_resource
def demo_lock(home: str) -> threading.Lock:
    """One lock per home for this app process: the demo KB is built once, however many sessions ask at once."""
    return threading.Lock()


@st.cache_resource
def demo_build(home: str) -> dict[str, str | None]:
    """The demo build's job id while it runs (``job_id``), shared by every session of this app process."""
    return {"job_id": None}



def set_visitor_cookie() -> None:
    """Write the visitor's cookie once per browser session (after the page's first elements: it is a script
    element): valid as long as a KB made now lives, renewed on every visit."""
    demo = public_demo()
    if demo is None or not st.session_state.pop("kb_visitor_cookie_due", False):
        return
    token = st.session_state.get("kb_visitor_token")
    if token and VISITOR_TOKEN.match(token):
        age = int(demo.limits.expiry_seconds)
        st.html(
            f"<script>document.cookie = '{VISITOR_COOKIE}={token}; path=/; max-age={age}; SameSite=Lax';</script>",
            unsafe_allow_javascript=True,
        )



def operator_sign_in(sess: Operations) -> None:
    """The sidebar's operator sign-in (a public demo with KB_DEMO_OPERATOR_TOKEN set), or sign-out once signed in."""
    demo = public_demo()
    if demo is None or not demo.operator_enabled:
        return
    with st.sidebar:
        if sess.principal.kind == "operator":
            if st.button(t("Sign out (operator)"), key="operator_sign_out"):
                sign_out_operator()
                st.rerun()
            return
        with (
            st.expander(t("Operator"), icon=":material/admin_panel_settings:"),
            st.form("operator_sign_in", border=False),
        ):
            secret = st.text_input(t("Operator token"), type="password", key="operator_token")
            if st.form_submit_button(t("Sign in")):
                refused = sign_in_operator(secret)
                if refused is None:
                    st.rerun()
                else:
                    st.error(f"{say(refused.message)}  \n`{refused.code}`", icon=":material/error:")



def demo_enabled() -> bool:
    """Whether the app builds and opens on the demo KB: always but with ``KB_DEMO=0``."""
    from kb_core.session.public_demo import demo_setting

    try:
        return demo_setting() != "off"
    except KBError:
        return False



def demo_banner(sess: Operations) -> None:
    """A public demo's banner: what this is, what a visitor may do, and when the visitor's KBs are deleted."""
    if not public_demo_enabled():
        return
    try:
        data = sess.demo_status().data
    except KBError:  # no banner rather than a failure on every page
        return
    limits = data.get("limits") or {}
    from kb_core.session.public_demo import format_duration

    if data.get("kind") == "operator":
        st.warning(
            t(
                "**Public demo, signed in as the operator.** You see and change every knowledge base, publish one to "
                "all visitors, and see each visitor's usage (Knowledge bases page)."
            ),
            icon=":material/admin_panel_settings:",
        )
        return
    expiry = say(format_duration(float(limits.get("expiry_seconds", 0))))
    text = t(
        "**Public demo.** The shared knowledge bases are read-only. Knowledge bases you create are yours alone "
        "(their names end in your tag [{tag}]) and are deleted {expiry} after you create them.",
        tag=data.get("tag"), expiry=expiry,
    )
    mine = data.get("knowledge_bases") or []
    if mine:
        first = min(mine, key=lambda kb: kb["expires_at"])
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(first["expires_at"]))
        text += " " + t("Next: **{name}** on {when}.", name=first["name"], when=when)
    st.info(text, icon=":material/science:")


def demo_limits_caption(sess: Operations) -> None:
    """A visitor's quotas, where they are met (the Import page)."""
    if not public_demo_enabled():
        return
    try:
        data = sess.demo_status().data
    except KBError:
        return
    if data.get("kind") != "visitor":
        return
    limits = data["limits"]
    st.caption(
        t(
            "Demo limits per visitor: files up to {file_mb} MB, {files} files per import, {chunks} chunks in all your "
            "knowledge bases (used: {used}), {kbs} knowledge bases, {imports} imports and {searches} searches per "
            "minute.",
            file_mb=f"{limits['max_file_mb']:g}", files=limits["files_per_import"],
            chunks=f"{limits['chunks_per_visitor']:,}", used=f"{data['chunks_used']:,}",
            kbs=limits["kbs_per_visitor"], imports=limits["imports_per_minute"],
            searches=limits["searches_per_minute"],
        )
    )
