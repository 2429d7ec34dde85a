"""The result envelope the front ends show, ``{success, message, data}``: where the CLI and the MCP server take it
from. It is built by one function, :func:`kb_core.session.envelope_of`, from a typed result (:mod:`kb_core.results`)
or a KBError; :func:`failure` is its refusal form.
"""

from __future__ import annotations

from kb_core.session import Envelope, envelope_of, failure

__all__ = ["Envelope", "envelope_of", "failure"]
