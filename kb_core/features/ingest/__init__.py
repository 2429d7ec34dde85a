"""Ingest: parse files, chunk them, embed the chunks and commit them as segments (the import pipeline)."""
