"""CLI commands for documents and search: import, docs, doc-delete, doc-update, search, save-settings."""

from __future__ import annotations

import argparse
import sys
import textwrap
from typing import Any

from kb_core.cli import _table
from kb_core.envelope import Envelope


def _import(session: Any, args: argparse.Namespace) -> Envelope:
    bar = None
    if sys.stderr.isatty() and not args.json:
        from tqdm import tqdm

        bar = tqdm(total=0, unit="chunk", desc="embedding", file=sys.stderr)

    def progress(state: Any) -> None:
        if bar is None:
            return
        bar.total = max(state.chunks_total, 1)
        bar.n = state.chunks_embedded
        bar.set_postfix_str(f"files {state.files_done}/{state.files_total}")
        bar.refresh()

    try:
        return session.import_document(args.files, args.chunk_size, progress=progress)
    finally:
        if bar is not None:
            bar.close()


def _render_import(envelope: Envelope) -> str:
    data = envelope["data"]
    rows = [
        {"file": r["file_path"], "document": r["doc_name"], "chunks": r["chunk_count"], "result": "ok"}
        for r in data["success_files"]
    ]
    rows += [{"file": r["file_path"], "document": "", "chunks": "", "result": r["error"]} for r in data["failed_files"]]
    return _table(rows, [("file", "file"), ("document", "document"), ("chunks", "chunks"), ("result", "result")])


def _render_docs(envelope: Envelope) -> str:
    rows = [{**d, "updated_at": (d["updated_at"] or "")[:19].replace("T", " ")} for d in envelope["data"]["documents"]]
    return _table(
        rows,
        [
            ("name", "name"),
            ("status", "status"),
            ("file_type", "type"),
            ("size_bytes", "bytes"),
            ("chunk_count", "chunks"),
            ("chunk_size", "chunk size"),
            ("updated_at", "updated (UTC)"),
        ],
    )


def _search(session: Any, args: argparse.Namespace) -> Envelope:
    return session.search(
        args.query,
        top_k=args.top_k,
        mode=args.mode,
        vector_weight=args.vector_weight,
        keyword_weight=args.keyword_weight,
        jaccard_weight=args.jaccard_weight,
        fusion=args.fusion,
        doc_names=args.doc or None,
        file_types=args.file_type or None,
        kb_names=args.kb or None,
        explain=args.explain or args.json,
    )


def _render_search(envelope: Envelope) -> str:
    lines: list[str] = []
    for rank, hit in enumerate(envelope["data"]["chunks"], start=1):
        where = " · ".join(str(x) for x in (hit["doc_name"], hit["chapter"], hit["page"] and f"p. {hit['page']}") if x)
        lines.append(f"{rank}. ({hit['score']:.4f}) {where}  [{hit['id']}]")
        snippet = " ".join(hit["content"].split())
        lines.append(textwrap.indent(textwrap.shorten(snippet, 300, placeholder=" …"), "   "))
        breakdown = hit.get("breakdown")
        if breakdown:
            lines.append(
                "   cosine {vs} (norm {vn:.3f}, rank {vr}) × {vw:.2f} = {vc:.4f}; "
                "BM25 {ks} (norm {kn:.3f}, rank {kr}) × {kw:.2f} = {kc:.4f}; "
                "jaccard {j:.3f} × {jw:.2f}; final {f:.4f}".format(
                    vs="-" if breakdown["vector_score"] is None else f"{breakdown['vector_score']:.4f}",
                    vn=breakdown["vector_normalized"],
                    vr=breakdown["vector_rank"] or "-",
                    vw=breakdown["vector_weight"],
                    vc=breakdown["vector_contribution"],
                    ks="-" if breakdown["keyword_score"] is None else f"{breakdown['keyword_score']:.4f}",
                    kn=breakdown["keyword_normalized"],
                    kr=breakdown["keyword_rank"] or "-",
                    kw=breakdown["keyword_weight"],
                    kc=breakdown["keyword_contribution"],
                    j=breakdown["jaccard"],
                    jw=breakdown["jaccard_weight"],
                    f=breakdown["final_score"],
                )
            )
            for note in breakdown["notes"]:
                lines.append(f"   note: {note}")
    return "\n".join(lines) or "(no results)"


def _save_settings(session: Any, args: argparse.Namespace) -> Envelope:
    return session.save_search_settings(
        kb_name=args.kb,
        mode=args.mode,
        top_k=args.top_k,
        vector_weight=args.vector_weight,
        keyword_weight=args.keyword_weight,
        jaccard_weight=args.jaccard_weight,
        fusion=args.fusion,
    )


def _add_search_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--top-k", type=int, help="number of chunks (default: the KB's saved setting, else 5)")
    parser.add_argument("--mode", choices=["hybrid", "semantic", "keyword"], help="default hybrid")
    parser.add_argument("--vector-weight", type=float, help="weight of the semantic signal (default 0.7)")
    parser.add_argument("--keyword-weight", type=float, help="weight of the BM25 signal (default 0.3)")
    parser.add_argument("--jaccard-weight", type=float, help="weight of the query/chunk term Jaccard rerank")
    parser.add_argument("--fusion", choices=["weighted", "rrf"], help="fusion method (default weighted)")


def register(commands: Any) -> None:
    importer = commands.add_parser("import", help="import TXT, DOCX and DOC files into the current KB")
    importer.add_argument("files", nargs="+", metavar="FILE")
    importer.add_argument("--chunk-size", type=int, help="tokens per chunk (default: the KB's chunk size)")
    importer.set_defaults(handler=_import, renderer=_render_import)

    docs = commands.add_parser("docs", help="list the documents of the current KB")
    docs.add_argument("--kb", help="another KB than the current one")
    docs.set_defaults(handler=lambda s, a: s.list_documents(a.kb), renderer=_render_docs)

    delete = commands.add_parser("doc-delete", help="delete a document and its chunks")
    delete.add_argument("name")
    delete.set_defaults(handler=lambda s, a: s.delete_document(a.name), renderer=None)

    update = commands.add_parser("doc-update", help="re-chunk a document with a new chunk size")
    update.add_argument("name")
    update.add_argument("--chunk-size", type=int, required=True)
    update.set_defaults(handler=lambda s, a: s.update_document(a.name, a.chunk_size), renderer=None)

    search = commands.add_parser("search", help="search the current KB (hybrid by default)")
    search.add_argument("query")
    _add_search_options(search)
    search.add_argument("--kb", action="append", help="search this KB instead (repeat for several)")
    search.add_argument("--doc", action="append", help="only chunks of this document (repeatable)")
    search.add_argument("--file-type", action="append", help="only these file types: txt, docx, doc")
    search.add_argument("--explain", action="store_true", help="show each hit's score breakdown")
    search.set_defaults(handler=_search, renderer=_render_search)

    compact = commands.add_parser("compact", help="merge the KB's segments and drop deleted rows")
    compact.add_argument("--kb", help="another KB than the current one")
    compact.set_defaults(handler=lambda s, a: s.compact(a.kb), renderer=None)

    verify = commands.add_parser("verify", help="check the home for consistency")
    verify.add_argument(
        "--repair",
        action="store_true",
        help="first roll back bundle imports interrupted between their index and graph commits, and remove "
        "staging folders of killed import-db runs",
    )
    verify.set_defaults(handler=lambda s, a: s.verify(a.repair), renderer=lambda e: "\n".join(e["data"]["repaired"]))

    settings = commands.add_parser("save-settings", help="save search defaults for the current KB")
    _add_search_options(settings)
    settings.add_argument("--kb", help="another KB than the current one")
    settings.set_defaults(handler=_save_settings, renderer=None)
