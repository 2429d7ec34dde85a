"""Retrieval: ranked search over a store's searcher, per-call settings, the narrative of a search and highlights;
the indexes, analysis and fusion it ranks with are engines (:mod:`kb_core.engines`)."""
