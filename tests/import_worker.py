"""Imports every file of a folder into KB 'crash' (hashing embedder); used by the SIGKILL test."""

import sys
from pathlib import Path

from kb_core import KnowledgeBaseService

if __name__ == "__main__":
    home, folder = sys.argv[1], Path(sys.argv[2])
    session = KnowledgeBaseService(home).session()
    session.select_knowledge_base("crash")
    print("started", flush=True)
    files = sorted(str(p) for p in folder.iterdir())
    result = session.import_document(files)
    print(result["data"]["success_count"], flush=True)
