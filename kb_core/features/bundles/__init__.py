"""Knowledge bundles: an ontology per KB, a generated JSON Schema, validated YAML import, a graph.

The operations live in :mod:`kb_core.features.bundles.api`: each takes the session, returns a typed result and raises
KBError. They are the session's methods of the same names (:class:`kb_core.session.operations.Operations`), the one
way to call them; envelopes are made at the edges (:mod:`kb_core.edges.envelopes`).
"""

from __future__ import annotations

from kb_core.features.bundles.loading import BundleLimits, load_bundle_file, load_bundle_text
from kb_core.features.bundles.ontology import DEFAULT_ONTOLOGY_JSON, Ontology, default_ontology, parse_ontology
from kb_core.features.bundles.schema import bundle_schema, example_yaml, item_schema

__all__ = [
    "DEFAULT_ONTOLOGY_JSON",
    "BundleLimits",
    "Ontology",
    "bundle_schema",
    "default_ontology",
    "example_yaml",
    "item_schema",
    "load_bundle_file",
    "load_bundle_text",
    "parse_ontology",
]
