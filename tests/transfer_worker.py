"""`kb import-db` in a process that stops at a hook once the file is extracted into its staging folder.

Usage: python transfer_worker.py HOME EXPORT kill|pause
kill: SIGKILL itself there (before any knowledge base is built); pause: print "staged", wait for a line on
stdin, then finish the import.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from kb_core.edges.cli.main import main
from kb_core.features.transfer import restore as transfer

if __name__ == "__main__":
    home, export, mode = sys.argv[1:4]
    stage = transfer._stage_kb

    def hook(*args: Any, **kwargs: Any) -> Any:
        if mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        print("staged", flush=True)
        sys.stdin.readline()
        return stage(*args, **kwargs)

    transfer._stage_kb = hook
    sys.exit(main(["--home", home, "import-db", export]))
