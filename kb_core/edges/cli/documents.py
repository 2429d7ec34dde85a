"""CLI commands for documents and search: import, docs, doc-delete, doc-update, search, save-settings."""

from __future__ import annotations

import argparse
import signal
import sys
import textwrap
import threading
import time
from typing import TYPE_CHECKING, Any

from kb_core.base.config import DEFAULT_KEYWORD_WEIGHT, DEFAULT_VECTOR_WEIGHT, FUSION_METHODS, SEARCH_MODES, WEIGHTINGS
from kb_core.edges.cli.common import Commands, say, t, table
from kb_core.edges.envelopes import Envelope

if TYPE_CHECKING:
    from kb_core.edges.envelopes import Enveloped


def _import(session: Enveloped, args: argparse.Namespace) -> Envelope:
    """Import as a job of the service (#34), with a progress line (what it does now, files, chunks, rate, time left)
    on a terminal. The first Ctrl-C or SIGTERM cancels the import cleanly (its parser processes and embedding stop
    within seconds, what was committed stays, the result lists the rest as cancelled); a second Ctrl-C aborts."""
    started = session.start_import(
        args.files, args.chunk_size, executor=args.executor, executor_address=args.address
    )
    if not started["success"]:
        return started
    job_id = started["data"]["job_id"]
    bar = None
    if sys.stderr.isatty() and not args.json:
        from tqdm import tqdm

        # tqdm's own rate and estimate would count from the bar's creation and only know parsed files' chunks;
        # the importer's account covers the whole import, with unparsed files estimated.
        bar = tqdm(total=0, unit="chunk", file=sys.stderr, bar_format="import {bar:24} {desc}")
    cancelled_at: list[float] = []

    def interrupted(signum: int, frame: object) -> None:
        if cancelled_at and signum == signal.SIGINT:
            raise KeyboardInterrupt
        if not cancelled_at:
            cancelled_at.append(time.monotonic())
            session.cancel_import(job_id)
            print(t("cancelling the import (Ctrl-C again to abort)…"), file=sys.stderr)

    in_main_thread = threading.current_thread() is threading.main_thread()  # only it may set signal handlers
    previous = (
        {sig: signal.signal(sig, interrupted) for sig in (signal.SIGINT, signal.SIGTERM)} if in_main_thread else {}
    )
    try:
        while True:
            status = session.import_job(job_id)["data"]
            if bar is not None:
                bar.total = max(status["chunks_expected"], 1)
                bar.n = status["chunks_embedded"]
                what = status["summary"] if status["phase"] == "importing" else status["phase_text"]
                bar.set_description_str(
                    t("{progress} · cancelling", progress=say(what)) if cancelled_at else say(what), refresh=False
                )
                bar.refresh()
            if status["state"] not in ("running", "cancelling"):
                break
            if cancelled_at and time.monotonic() - cancelled_at[0] > CANCEL_WAIT_SECONDS:
                print(
                    t(
                        "the import did not stop within {seconds:.0f} s; leaving it (nothing half-done is committed)",
                        seconds=CANCEL_WAIT_SECONDS,
                    ),
                    file=sys.stderr,
                )
                break
            time.sleep(POLL_SECONDS)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if bar is not None:
            bar.close()
    if status["state"] in ("running", "cancelling"):
        return session.import_job(job_id)
    return session.import_job_result(job_id)


POLL_SECONDS = 0.25
CANCEL_WAIT_SECONDS = 8.0


def _render_import(envelope: Envelope) -> str:
    data = envelope["data"]
    rows = [
        {
            "file": r["file_path"],
            "document": r["doc_name"],
            "chunks": r["chunk_count"],
            "result": t("already imported (skipped)") if r.get("already_imported") else t("ok"),
        }
        for r in data["success_files"]
    ]
    rows += [
        {"file": r["file_path"], "document": "", "chunks": "", "result": say(r["error"])} for r in data["failed_files"]
    ]
    columns = [("file", t("file")), ("document", t("document")), ("chunks", t("chunks")), ("result", t("result"))]
    ran = data.get("executor")
    if ran:  # where a cluster ran the work: chunks embedded per node
        nodes = ", ".join(f"{node[:8]} {chunks}" for node, chunks in ran["chunks_embedded_per_node"].items())
        summary = t(
            "executor ray: {nodes} node(s), {actors} embedding actor(s); chunks embedded per node: {per_node}; "
            "{cached} from the embedding cache",
            nodes=ran["nodes"], actors=ran["embedding_actors"], per_node=nodes or t("none"),
            cached=ran["chunks_from_cache"],
        )
        return summary + "\n" + table(rows, columns)
    return table(rows, columns)


def _render_docs(envelope: Envelope) -> str:
    statuses = {"ready": t("ready"), "failed": t("failed")}
    rows = [
        {
            **d,
            "status": statuses.get(d["status"], d["status"]),
            "updated_at": (d["updated_at"] or "")[:19].replace("T", " "),
        }
        for d in envelope["data"]["documents"]
    ]
    return table(
        rows,
        [
            ("name", t("name")),
            ("status", t("status")),
            ("file_type", t("type")),
            ("size_bytes", t("bytes")),
            ("chunk_count", t("chunks")),
            ("chunk_size", t("chunk size")),
            ("language", t("language")),
            ("updated_at", t("updated (UTC)")),
        ],
    )


def _search(session: Enveloped, args: argparse.Namespace) -> Envelope:
    from kb_core.features.results import SearchRequest

    return session.search(
        SearchRequest(
            args.query,
            top_k=args.top_k,
            mode=args.mode,
            vector_weight=args.vector_weight,
            keyword_weight=args.keyword_weight,
            jaccard_weight=args.jaccard_weight,
            fusion=args.fusion,
            doc_names=args.doc or (),
            file_types=args.file_type or (),
            kb_names=args.kb or (),
            explain=args.explain or args.json,
            weighting=args.weighting,
            language_guard=args.language_guard,
            min_score=args.min_score,
        )
    )


def _weights_line(weights: dict[str, Any] | None) -> str | None:
    """``weights used: vector 0.70 / keyword 0.30 (fixed; auto would use 0.95 / 0.05)``."""
    if not weights or weights.get("used") is None:
        return None
    used, auto = weights["used"], weights.get("auto")
    requested = weights["requested"]
    weighting = str(weights["weighting"])
    details = [{"fixed": t("fixed"), "auto": t("auto")}.get(weighting, weighting)]
    if abs(used["vector"] - requested["vector"]) > 1e-9:
        details.append(
            t("asked {vector:.2f} / {keyword:.2f}", vector=requested["vector"], keyword=requested["keyword"])
        )
    if auto is not None and weights["weighting"] != "auto":
        details.append(t("auto would use {vector:.2f} / {keyword:.2f}", vector=auto["vector"], keyword=auto["keyword"]))
    if not weights.get("language_guard", True):
        details.append(t("language guard off"))
    return t(
        "weights used: vector {vector:.2f} / keyword {keyword:.2f} ({details})",
        vector=used["vector"], keyword=used["keyword"], details=t("; ").join(details),
    )


def _render_search(envelope: Envelope) -> str:
    from kb_core.features.retrieval.narrative import formula_line

    data = envelope["data"]
    lines: list[str] = []
    header = _weights_line(data.get("weights"))
    if header:
        lines.append(header)
    lines += [t("warning: {warning}", warning=say(w)) for w in data.get("warnings", [])]
    terms = data.get("query_terms")
    if terms and any(hit.get("breakdown") for hit in data["chunks"]):
        floor = data.get("semantic_floor")
        parts = [t("keyword terms: {terms}", terms=", ".join(terms["terms"]) or t("none"))]
        if terms["stop_words"]:
            parts = [
                t(
                    "keyword terms: {terms} (stop words left out: {stop_words})",
                    terms=", ".join(terms["terms"]) or t("none"), stop_words=", ".join(terms["stop_words"]),
                )
            ]
        if terms.get("support"):
            parts.append(t("only adding to chunks that hold one: {words}", words=", ".join(terms["support"])))
        if floor is not None:
            parts.append(t("semantic floor {floor:.3f} (a cosine must exceed it to count)", floor=floor))
        lines.append(t("; ").join(parts))
    for rank, hit in enumerate(data["chunks"], start=1):
        page = hit["page"] and t("p. {page}", page=hit["page"])
        where = " · ".join(str(x) for x in (hit["doc_name"], hit["chapter"], page) if x)
        lines.append(f"{rank}. ({hit['score']:.4f}) {where}  [{hit['id']}]")
        # the passage around the matched words (search adds it; a hit added by graph expansion has none)
        snippet = hit.get("snippet") or textwrap.shorten(" ".join(hit["content"].split()), 300, placeholder=" …")
        lines.append(f"   {snippet}")
        breakdown = hit.get("breakdown")
        if breakdown:
            lines.append("   " + say(formula_line(breakdown)))
            for note in breakdown["notes"]:
                lines.append("   " + t("note: {note}", note=say(note)))
    return "\n".join(lines) or t("(no results)")


def _save_settings(session: Enveloped, args: argparse.Namespace) -> Envelope:
    return session.save_search_settings(
        kb_name=args.kb,
        mode=args.mode,
        top_k=args.top_k,
        vector_weight=args.vector_weight,
        keyword_weight=args.keyword_weight,
        jaccard_weight=args.jaccard_weight,
        fusion=args.fusion,
        weighting=args.weighting,
        language_guard=args.language_guard,
        min_score=args.min_score,
    )


def _add_search_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--top-k", type=int, help="number of chunks (default: the KB's saved setting, else 5)")
    parser.add_argument("--mode", choices=SEARCH_MODES, help="default hybrid")
    parser.add_argument(
        "--vector-weight",
        type=float,
        help=f"weight of the semantic signal (default {DEFAULT_VECTOR_WEIGHT}; alone, keyword = 1 − it)",
    )
    parser.add_argument(
        "--keyword-weight",
        type=float,
        help=f"weight of the BM25 signal (default {DEFAULT_KEYWORD_WEIGHT}; alone, vector = 1 − it)",
    )
    parser.add_argument("--jaccard-weight", type=float, help="weight of the query/chunk term Jaccard rerank")
    parser.add_argument("--fusion", choices=FUSION_METHODS, help="fusion method (default weighted)")
    parser.add_argument(
        "--weighting",
        choices=WEIGHTINGS,
        help="fixed: exactly the given weights (default); auto: scaled by each signal's quality for the query",
    )
    parser.add_argument(
        "--language-guard",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="give the vector signal weight 0 when the model does not cover the query's language (default on)",
    )
    parser.add_argument(
        "--min-score",
        type=float,
        help="hide hits whose final score (0-1) is below this (default: the KB's saved setting, else 0)",
    )


def register(commands: Commands) -> None:
    importer = commands.add_parser("import", help="import TXT, DOCX and DOC files into the current KB")
    importer.add_argument("files", nargs="+", metavar="FILE")
    importer.add_argument("--chunk-size", type=int, help="tokens per chunk (default: the KB's chunk size)")
    importer.add_argument(
        "--executor",
        choices=("local", "ray"),
        default="local",
        help="where parsing, chunking and embedding run: this process (default) or a Ray cluster "
        "(needs the optional extra kb-workbench[ray])",
    )
    importer.add_argument(
        "--address",
        help="the Ray cluster for --executor ray, e.g. 10.0.0.5:6379 or ray://host:10001 "
        "(default: $RAY_ADDRESS, else a new local cluster)",
    )
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
