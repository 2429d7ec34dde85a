"""Registration of the CLI commands beyond knowledge-base management."""
