"""Retrieval: text analysis, the keyword (BM25) and vector indexes, score fusion and ranked search."""
