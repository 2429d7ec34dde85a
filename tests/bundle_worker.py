"""`kb bundle import` in a process that is SIGKILLed between the bundle's index commit and its graph commit.

Usage: python bundle_worker.py HOME KB BUNDLE
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from kb_core.edges.cli.main import main
from kb_core.features.bundles.graph import GraphStore

if __name__ == "__main__":
    home, kb_name, bundle = sys.argv[1:4]

    def killed(self: GraphStore, state: Any) -> Any:
        os.kill(os.getpid(), signal.SIGKILL)  # the index commit is done; the graph commit never happens

    GraphStore.commit = killed  # type: ignore[method-assign]
    sys.exit(main(["--home", home, "bundle", "import", bundle, "--kb", kb_name]))
