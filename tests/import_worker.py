"""Imports every file of a folder into KB 'crash' (hashing embedder); used by the SIGKILL and delete tests.

Usage: python import_worker.py HOME FOLDER [PAUSE_AT]
With PAUSE_AT the import prints "paused" at that point and waits for a line on stdin: "parsed" (a file is
parsed) or "committed" (a first segment is committed; segments are made small so that more commits follow).
A failed import prints its error code; the number of imported files comes last.
"""

import sys
from pathlib import Path

from kb_core import KnowledgeBaseService
from kb_core.edges.envelopes import Enveloped
from kb_core.features.ingest import pipeline as importer
from kb_core.features.ingest.pipeline import ImportProgress

if __name__ == "__main__":
    home, folder = sys.argv[1], Path(sys.argv[2])
    pause_at = sys.argv[3] if len(sys.argv) > 3 else None
    paused = []
    if pause_at == "committed":
        importer.COMMIT_CHUNKS = 64

    def progress(state: ImportProgress) -> None:
        reached = {"parsed": state.files_parsed >= 1, "committed": any(f.status == "ready" for f in state.files)}
        if pause_at is not None and reached[pause_at] and not paused:
            paused.append(True)
            print("paused", flush=True)
            sys.stdin.readline()

    session = Enveloped(KnowledgeBaseService(home).session())
    session.select_knowledge_base("crash")
    print("started", flush=True)
    files = sorted(str(p) for p in folder.iterdir())
    result = session.import_document(files, progress=progress)
    if not result["success"]:
        print(result["error"]["code"], flush=True)
    print((result["data"] or {}).get("success_count", 0), flush=True)
