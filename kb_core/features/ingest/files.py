"""Files into a KB: the import of the paths a user names, and the re-import of a stored document.

:func:`import_files` opens each path once (confined to the session's folders, refused over the size limit) and
copies it into a private staging folder; everything after works on the copy, so a path cannot be redirected (a
folder swapped for a symlink) after its check. :func:`reimport_document` re-chunks a stored document from its
original. Both raise :class:`~kb_core.base.errors.KBError` for what stops the whole call and return typed data.
"""

from __future__ import annotations

import dataclasses
import functools
import shutil
import threading
import unicodedata
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kb_core.base.errors import KBError, KBNotFound
from kb_core.base.i18n import msg
from kb_core.base.removal import remove_tree
from kb_core.base.safe_files import UnusablePath, open_input_file, path_name_problem, shown_path
from kb_core.features.ingest import pipeline
from kb_core.features.ingest.pipeline import ChunkBudget, FileProgress, ImportProgress
from kb_core.store.sink import ImportSource

if TYPE_CHECKING:
    from kb_core.features.ingest.executors import DocumentExecutor
    from kb_core.features.seams import ImportResources
    from kb_core.store import KnowledgeBaseRecord


PHASE_COMPACTING = "compacting"  # merging the KB's segments after the import (when it has many)


@dataclass(frozen=True)
class FileOutcome:
    """What became of one named file: a document with its chunks, or an error."""

    file_path: str
    doc_name: str | None = None
    chunk_count: int | None = None
    error: str | None = None
    language: str | None = None  # detected at import (kb_core.engines.text_language); not part of the tool's result
    already_imported: bool = False  # the KB held a document of this name and content: not imported again

    def to_json(self) -> dict[str, Any]:
        if self.error is not None:
            return {"file_path": self.file_path, "error": self.error}
        row: dict[str, Any] = {"file_path": self.file_path, "doc_name": self.doc_name, "chunk_count": self.chunk_count}
        if self.already_imported:
            row["already_imported"] = True
        return row


def import_files(
    service: ImportResources,
    record: KnowledgeBaseRecord,
    file_paths: Sequence[str],
    chunk_size: int,
    *,
    allowed_dirs: Sequence[Path] | None,
    runner: DocumentExecutor | None = None,
    progress: Callable[[ImportProgress], None] | None = None,
    display_names: Sequence[str] | None = None,
    source: str = "path",
    cancel: threading.Event | None = None,
    max_file_bytes: int | None = None,
    chunk_budget: ChunkBudget | None = None,
    absolute_only: bool = False,
    phase: Callable[[str], None] | None = None,
) -> list[FileOutcome]:
    """Import ``file_paths`` (validated by the caller) into ``record``; one outcome per path, in order.
    ``cancel``: set it to stop the import (what was committed stays; the other files fail as cancelled).
    ``max_file_bytes`` (below the parser's own limit) and ``chunk_budget`` (chunks all files may add) are a demo
    visitor's quotas: a file past either fails alone, the others are imported. With ``absolute_only`` a relative
    path fails alone (an MCP client's: it would resolve against the server's working folder). ``phase`` hears what
    the import does once its files are committed (the KB's automatic compaction)."""
    sources: list[ImportSource] = []
    # A path whose text cannot name a file (not UTF-8, too long) fails here, alone; the pipeline never sees it.
    refused = {index: problem for index, raw in enumerate(file_paths) if (problem := path_name_problem(str(raw)))}
    copies = service.import_staging(record)
    copied_names: dict[int, set[str]] = {}
    folders: dict[str, Path] = {}
    limit = service.parse_limits.max_file_bytes
    quota = max_file_bytes is not None and max_file_bytes < limit
    if max_file_bytes is not None:
        limit = min(limit, max_file_bytes)
    try:
        for index, raw in enumerate(file_paths):
            if index in refused:
                continue
            path = Path(str(raw)).expanduser()
            relative = not path.is_absolute()
            if relative:
                path = Path.cwd() / path
            # A few shared folders (see staging_folder), and a folder of its own only for a name repeated in one:
            # a folder per file cost more than the import of a small file (removing thousands of folders is slow).
            bucket = staging_folder(index)
            names = copied_names.setdefault(bucket, set())
            repeated = path.name.casefold() in names
            names.add(path.name.casefold())
            key = f"{bucket}-{index}" if repeated else str(bucket)
            folder = folders.get(key) or folders.setdefault(key, copies / key)
            name = display_names[index] if display_names is not None else path.name
            # An upload is known by the name the user gave it, never by the temporary path it was saved under: in
            # results, messages and the document's file_path (#34).
            reported = str(name) if source == "upload" and display_names is not None else str(raw)
            sources.append(
                ImportSource(
                    path=folder / path.name,
                    display_name=safe_document_name(name),
                    source=source,
                    reported_path=reported,
                    # the copy is made by the pipeline just before the file is parsed, overlapping the import
                    stage=functools.partial(_refuse_relative, reported)
                    if relative and absolute_only
                    else functools.partial(_copy_for_import, path, folder, allowed_dirs, limit, reported, quota),
                )
            )
        states, committed = ([], [])
        if sources:
            # What the KB holds now, so a re-run of an import that was killed skips what it committed (#37)
            imported = {
                (str(row["name"]).casefold(), str(row["sha256"])): (str(row["name"]), int(row["chunk_count"] or 0))
                for row in service.documents(record)
                if row.get("status") == "ready" and row.get("sha256")
            }
            states, committed = service.importer(record, runner).run(
                sources, chunk_size, progress, cancel, imported=imported, chunk_budget=chunk_budget
            )
    finally:
        _remove_in_background(copies)
    if sources:
        if phase is not None:
            phase(PHASE_COMPACTING)
        service.compact_quietly(record)
    languages = {row["name"]: row.get("language") for row in committed}
    outcomes = iter(
        FileOutcome(
            state.file_path,
            state.doc_name,
            state.chunks_total,
            language=languages.get(state.doc_name),
            already_imported=state.already_imported,
        )
        if state.status == "ready"
        else FileOutcome(state.file_path, error=state.error or "import failed")
        for state in states
    )
    return [
        FileOutcome(
            shown_path(str(raw)), error=msg("{path} {reason}.", path=shown_path(str(raw)), reason=refused[index])
        )
        if index in refused
        else next(outcomes)
        for index, raw in enumerate(file_paths)
    ]


_removals: list[threading.Thread] = []
_removals_lock = threading.Lock()


def _remove_in_background(copies: Path) -> None:
    """Remove an import's staging copies (a file per imported file) without making the import wait for it (#29:
    thousands of files on the GPU machine's file system). The folder is first renamed to a name no process owns,
    which the next open removes should this process die first (a KB's clean-up on the folder store, the home's on
    PostgreSQL). A plain non-daemon thread per removal: the interpreter waits for it at exit,
    so a command-line import leaves nothing behind, and it works in a forked child too; where no thread can start
    (interpreter shutdown) the removal runs here."""
    doomed = copies.with_name(f"removing-{uuid.uuid4().hex}")
    try:
        copies.rename(doomed)
    except FileNotFoundError:
        return  # nothing was staged, or the KB was deleted meanwhile
    except OSError:
        doomed = copies
    # the staging folder (checked not to be a link when the import began) is the folder the removal works in
    thread = threading.Thread(
        target=remove_tree, args=(doomed,), kwargs={"within": doomed.parent}, name="kb-remove-staging"
    )
    try:
        thread.start()
    except RuntimeError:
        remove_tree(doomed, within=doomed.parent)
        return
    with _removals_lock:
        _removals[:] = [t for t in _removals if t.is_alive()] + [thread]


def wait_for_staging_removals() -> None:
    """Return once the staging copies of every import that has returned are removed (for a caller that must see
    the KB's folder without them, such as a test)."""
    with _removals_lock:
        running = list(_removals)
    for thread in running:
        thread.join()


def staging_folder(index: int) -> int:
    """The staging sub-folder of an import's ``index``-th file. The files of one parser request (consecutive, at most
    ``FILES_PER_REQUEST``) share one; the requests in flight at once (one per parser process, taken in order) get
    different ones, unless one is held up while ``2 * PARSE_WORKERS`` later ones start. So parser processes do not
    create copies in one folder at once: creating a name holds its folder's lock while the file system allocates the
    inode (ext4 scans its inode bitmap: 0.1-0.9 ms), and processes copying into one folder queue and spin on that
    lock (#29: on 16 cores, 15 parser processes spent 4x the CPU of 2 on the same copies)."""
    return index // pipeline.FILES_PER_REQUEST % (2 * pipeline.PARSE_WORKERS)


def _refuse_relative(raw: str) -> Path:
    raise UnusablePath(
        raw,
        msg(
            "is a relative path; MCP tools take absolute paths only (a relative path would resolve against the "
            "server's working folder), e.g. /home/me/docs/report.docx"
        ),
    )


def _copy_for_import(
    path: Path,
    folder: Path,
    allowed_dirs: Sequence[Path] | None,
    limit: int,
    raw: str | None = None,
    quota: bool = False,
) -> Path:
    """Open ``path`` (confined to ``allowed_dirs``) and copy it to ``folder/<its name>``; an unusable path raises
    :class:`UnusablePath` naming it as the user gave it (``raw``). ``quota``: ``limit`` is a demo's per-file quota,
    and the refusal says so."""
    try:
        return _copy_checked(path, folder, allowed_dirs, limit, quota)
    except UnusablePath as exc:
        if raw is None:
            raise
        raise UnusablePath(raw, exc.reason) from None


def _copy_checked(
    path: Path, folder: Path, allowed_dirs: Sequence[Path] | None, limit: int, quota: bool = False
) -> Path:
    with open_input_file(path, allowed_dirs) as opened:
        if opened.stat.st_size > limit:
            if quota:  # a demo's limit, in the MB of its upload limit (2**20 bytes)
                raise UnusablePath(
                    path,
                    msg(
                        "is {size:.1f} MB, over this demo's limit of {limit:g} MB per file",
                        size=opened.stat.st_size / 2**20, limit=limit / 2**20,
                    ),
                )
            raise UnusablePath(
                path,
                msg(
                    "is {size:.1f} MB, over the import limit of {limit:.1f} MB",
                    size=opened.stat.st_size / 1e6, limit=limit / 1e6,
                ),
            )
        try:  # inside the KB's staging/, which is never recreated for a KB deleted meanwhile
            folder.parent.mkdir(exist_ok=True)
            folder.mkdir(exist_ok=True)
        except FileNotFoundError:
            raise KBNotFound(msg("The knowledge base was deleted during the import.")) from None
        copy = folder / path.name
        try:
            opened.copy_to(copy, limit)
        except OSError as exc:
            raise UnusablePath(
                path, msg("could not be read and copied for the import ({problem})", problem=exc.strerror or str(exc))
            ) from None
    return copy


def reimport_document(
    service: ImportResources,
    record: KnowledgeBaseRecord,
    document: dict[str, Any],
    chunk_size: int,
    progress: Callable[[ImportProgress], None] | None = None,
    chunk_budget: ChunkBudget | None = None,
) -> FileProgress | None:
    """Re-chunk the live ``document`` (a documents row) from its kept original, under the same id, replacing it in
    one commit. None when its original is gone (the document was changed meanwhile). ``chunk_budget``: the most
    chunks it may have now (a demo visitor's quota)."""
    importer = service.importer(record)
    with importer.sink.reimport_source(document) as source:
        if source is None:
            return None
        states, _ = importer.run([source], chunk_size, progress, chunk_budget=chunk_budget)
    return states[0]


def copy_documents(
    service: ImportResources,
    source_record: KnowledgeBaseRecord,
    documents: Sequence[dict[str, Any]],
    target: KnowledgeBaseRecord,
    progress: Callable[[ImportProgress], None] | None = None,
    cancel: threading.Event | None = None,
) -> list[FileOutcome]:
    """Import the kept originals of ``source_record``'s live ``documents`` (documents rows) into ``target`` as new
    documents, each under its name and file name and at its own chunk size (#35: re-embedding a KB's files with
    another model). One outcome per document, in order; a document whose original is gone fails, the rest go on."""
    outcomes: dict[int, FileOutcome] = {}
    copies = service.import_staging(target)
    groups: dict[int, list[tuple[int, ImportSource]]] = {}
    try:
        sink = service.importer(source_record).sink
        for index, document in enumerate(documents):
            name = str(document["name"])
            try:
                with sink.reimport_source(document) as kept:
                    if kept is None:
                        raise KBNotFound(msg("its original is gone (the document was changed meanwhile)"))
                    folder = copies / str(index)
                    folder.mkdir(parents=True)
                    copy = folder / (safe_document_name(str(document.get("file_name") or name)))
                    shutil.copyfile(kept.path, copy)
            except (KBError, OSError) as exc:
                reason = (
                    exc.message
                    if isinstance(exc, KBError)
                    else msg("its original could not be read ({problem})", problem=str(exc))
                )
                outcomes[index] = FileOutcome(
                    str(document["file_path"]), error=msg("{file}: {reason}", file=name, reason=reason)
                )
                continue
            source = ImportSource(copy, name, str(document["source"]), str(document["file_path"]))
            groups.setdefault(int(document["chunk_size"]), []).append((index, source))
        languages: dict[str, str | None] = {}
        for size, members in groups.items():
            states, committed = service.importer(target).run([m[1] for m in members], size, progress, cancel)
            languages.update({row["name"]: row.get("language") for row in committed})
            for (index, _), state in zip(members, states, strict=True):
                outcomes[index] = (
                    FileOutcome(state.file_path, state.doc_name, state.chunks_total)
                    if state.status == "ready"
                    else FileOutcome(state.file_path, error=state.error or "import failed")
                )
    finally:
        _remove_in_background(copies)
    if groups:
        service.compact_quietly(target)
    return [
        dataclasses.replace(outcome, language=languages.get(str(outcome.doc_name)))
        for outcome in (outcomes[i] for i in range(len(documents)))
    ]


def safe_document_name(name: str) -> str:
    """A document name from a file name: no folders, no control characters, not empty."""
    base = str(name).replace("\\", "/").rsplit("/", 1)[-1]
    if not (base.isascii() and base.isprintable()):  # printable ASCII is NFC and has no control or format character
        base = "".join(c for c in unicodedata.normalize("NFC", base) if unicodedata.category(c) not in ("Cc", "Cf"))
    base = base.strip().lstrip(".") or "document"
    return base[:200]
