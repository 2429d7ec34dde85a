"""CLI command ``kb info``: where this process would embed (device, precision, threads) and the home in use."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from kb_core.cli.common import Commands
from kb_core.envelope import Envelope

if TYPE_CHECKING:
    from kb_core.session import Session


def _info(session: Session, args: argparse.Namespace) -> Envelope:
    envelope: Envelope = session.device_info()
    if envelope["success"]:
        envelope["data"]["home"] = str(session.service.home.root)
        envelope["data"]["store"] = session.service.store.label
        models = session.embedding_models()
        if models["success"]:
            envelope["data"]["models"] = models["data"]["models"]
    return envelope


def _model_line(model: dict[str, Any]) -> str:
    if not model["available"]:
        state = f"not available ({model.get('note')})"
    elif model["built"]:
        state = f"ready offline at {model['path']}"
    else:
        state = f"available offline; {model.get('note')} at {model['path']}"
    default = " (default)" if model.get("default") else ""
    return f"  {model['name']}{default}: {model['reads']}; {model['speed']}; {state}"


def _render_info(envelope: Envelope) -> str:
    data = envelope["data"]
    device = data["device"]
    return "\n".join(
        [
            f"home: {data['home']}",
            f"store: {data['store']}",
            f"document embedding: {device['device']} ({device['label']}, {device['precision']})",
            f"CPU threads: {device['threads']}",
            f"device {'chosen automatically' if device['source'] == 'default' else 'asked for by ' + device['source']}"
            f" (asked: {device['requested']}); available: {', '.join(device['available'])}",
            f"query embedding: {data['query_device']}",
            "local embedding models (package -> model folder; never downloaded):",
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
