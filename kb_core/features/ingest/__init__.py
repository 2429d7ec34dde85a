"""Ingest: the import pipeline (files parsed and chunked by the engines, embedded, committed through the store's
sink), the files a user names, and the executors that run the work."""
