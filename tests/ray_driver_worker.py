"""A Ray import driver the tests SIGKILL mid-import: imports FILES into KB 'ray' with the ray executor.

Usage: python ray_driver_worker.py HOME ADDRESS FILE...
Segments are made small; after the first one is committed the driver prints "committed" (with the number of
documents then ready) and blocks, so the test can kill it between commits while the cluster still works.
"""

import sys
import time

from kb_core import KnowledgeBaseService
from kb_core.edges.envelopes import Enveloped
from kb_core.features.ingest import pipeline as importer
from kb_core.features.ingest.pipeline import ImportProgress

if __name__ == "__main__":
    home, address, files = sys.argv[1], sys.argv[2], sys.argv[3:]
    importer.COMMIT_CHUNKS = 8

    def progress(state: ImportProgress) -> None:
        ready = sum(f.status == "ready" for f in state.files)
        if ready:
            print(f"committed {ready}", flush=True)
            time.sleep(3600)  # the test kills this process now

    session = Enveloped(KnowledgeBaseService(home).session())
    print("started", flush=True)
    result = session.import_document(files, kb_name="ray", executor="ray", executor_address=address, progress=progress)
    print("finished", result["data"]["success_count"], flush=True)  # the test fails if it gets here
