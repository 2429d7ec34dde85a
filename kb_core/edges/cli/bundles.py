"""CLI commands for knowledge bundles: ``kb schema``, ``kb bundle import FILE``, ``kb ontology show|set FILE``."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from kb_core.edges.cli.common import Commands
from kb_core.edges.envelopes import Envelope

if TYPE_CHECKING:
    from kb_core.edges.envelopes import Enveloped


def _schema(session: Enveloped, args: argparse.Namespace) -> Envelope:
    return session.get_knowledge_schema(args.kb)


def _render_schema(envelope: Envelope) -> str:
    data = envelope["data"]
    schema = json.dumps(data["full_bundle_schema"], ensure_ascii=False, indent=2)
    return f"{schema}\n\n# example bundle\n{data['example_yaml']}"


def _bundle_import(session: Enveloped, args: argparse.Namespace) -> Envelope:
    return session.import_knowledge_bundle(args.file, args.kb, delete_file=args.delete)


def _render_import(envelope: Envelope) -> str:
    return "\n".join(f"  {key}: {value}" for key, value in envelope["data"]["stats"].items())


def _ontology_show(session: Enveloped, args: argparse.Namespace) -> Envelope:
    return session.get_ontology(args.kb)


def _render_ontology(envelope: Envelope) -> str:
    import yaml

    return yaml.safe_dump(envelope["data"]["ontology"], sort_keys=False, allow_unicode=True)


def _ontology_set(session: Enveloped, args: argparse.Namespace) -> Envelope:
    return session.set_ontology(args.file, args.kb)


def register(commands: Commands) -> None:
    schema = commands.add_parser(
        "schema",
        help="print the knowledge bundle JSON Schema and an example bundle",
        description="Print the JSON Schema (draft-07) a knowledge bundle must satisfy, generated from the "
        "knowledge base's ontology, followed by an example YAML bundle.",
    )
    schema.add_argument("--kb", help="knowledge base (default: the current one)")
    schema.set_defaults(handler=_schema, renderer=_render_schema)

    bundle = commands.add_parser("bundle", help="knowledge bundles (YAML lists of typed nodes and edges)")
    bundle_commands = bundle.add_subparsers(dest="bundle_command", metavar="ACTION", required=True)
    imp = bundle_commands.add_parser(
        "import",
        help="validate and import a YAML bundle as one unit",
        description="Validate the whole bundle against the knowledge base's ontology; refuse it with every "
        "error and its exact place ([4].doc_uri) and change nothing, or apply it all.",
    )
    imp.add_argument("file", help="the YAML bundle file")
    imp.add_argument("--kb", help="knowledge base (default: the current one)")
    imp.add_argument("--delete", action="store_true", help="delete the file after a successful import")
    imp.set_defaults(handler=_bundle_import, renderer=_render_import)

    ontology = commands.add_parser("ontology", help="show or replace the knowledge base's ontology")
    ontology_commands = ontology.add_subparsers(dest="ontology_command", metavar="ACTION", required=True)
    show = ontology_commands.add_parser("show", help="print the ontology as YAML")
    show.add_argument("--kb", help="knowledge base (default: the current one)")
    show.set_defaults(handler=_ontology_show, renderer=_render_ontology)
    set_ = ontology_commands.add_parser(
        "set",
        help="replace the ontology from a YAML or JSON file",
        description="Validate the ontology (node types with identity, indexed fields and property schemas; edge "
        "types with from/to) and check that existing nodes and edges still fit, then replace it.",
    )
    set_.add_argument("file", help="YAML or JSON ontology file")
    set_.add_argument("--kb", help="knowledge base (default: the current one)")
    set_.set_defaults(handler=_ontology_set, renderer=None)
