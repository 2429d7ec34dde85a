"""``python -m kb_core.cli``: the same as the ``kb`` command."""

import sys

from kb_core.cli.main import main

sys.exit(main())
