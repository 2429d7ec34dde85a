"""Registration of the CLI commands beyond knowledge-base management: one line per feature module."""

from kb_core import cli_bundles, cli_documents, cli_mcp, cli_transfer
from kb_core.cli import EXTRA_COMMANDS

EXTRA_COMMANDS.append(cli_documents.register)
EXTRA_COMMANDS.append(cli_transfer.register)
EXTRA_COMMANDS.append(cli_mcp.register)
EXTRA_COMMANDS.append(cli_bundles.register)
from kb_core import cli_eval  # noqa: E402

EXTRA_COMMANDS.append(cli_eval.register)
from kb_core import cli_info  # noqa: E402

EXTRA_COMMANDS.append(cli_info.register)
