"""CLI command ``kb info``: where this process would embed (device, precision, threads) and the home in use."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from kb_core.edges.cli.common import Commands, t
from kb_core.edges.envelopes import Envelope

if TYPE_CHECKING:
    from kb_core.edges.envelopes import Enveloped


def _info(session: Enveloped, args: argparse.Namespace) -> Envelope:
    envelope: Envelope = session.device_info()
    if envelope["success"]:
        envelope["data"]["home"] = str(session.operations.service.home.root)
        envelope["data"]["store"] = session.operations.service.store.label
        models = session.embedding_models()
        if models["success"]:
            envelope["data"]["models"] = models["data"]["models"]
    return envelope


def _model_line(model: dict[str, Any]) -> str:
    if not model["available"]:
        state = t("not available ({note})", note=model.get("note"))
    elif model["built"]:
        state = t("ready offline at {path}", path=model["path"])
    else:
        state = t("available offline; {note} at {path}", note=model.get("note"), path=model["path"])
    name = t("{model} (default)", model=model["name"]) if model.get("default") else model["name"]
    return f"  {name}: {model['reads']}; {model['speed']}; {state}"


def _render_info(envelope: Envelope) -> str:
    data = envelope["data"]
    device = data["device"]
    return "\n".join(
        [
            t("home: {home}", home=data["home"]),
            t("store: {store}", store=data["store"]),
            t(
                "document embedding: {device} ({label}, {precision})",
                device=device["device"], label=device["label"], precision=device["precision"],
            ),
            t("CPU threads: {threads}", threads=device["threads"]),
            t(
                "device chosen automatically (asked: {requested}); available: {available}",
                requested=device["requested"], available=", ".join(device["available"]),
            )
            if device["source"] == "default"
            else t(
                "device asked for by {source} (asked: {requested}); available: {available}",
                source=device["source"], requested=device["requested"], available=", ".join(device["available"]),
            ),
            t("query embedding: {device}", device=data["query_device"]),
            t("local embedding models (package -> model folder; never downloaded):"),
            *(_model_line(m) for m in data.get("models", [])),
        ]
    )


def register(commands: Commands) -> None:
    info = commands.add_parser(
        "info",
        help="show the embedding device (--device / $KB_DEVICE), the local models available offline, the home and the "
        "store (never its password)",
    )
    info.set_defaults(handler=_info, renderer=_render_info)
