"""``python -m kb_core.edges.cli``: the same as the ``kb`` command."""

import sys

from kb_core.edges.cli.main import main

sys.exit(main())
