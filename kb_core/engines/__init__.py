"""Algorithms that hold no knowledge base: parsing, chunking, text analysis, embedding models, and the
index structures and scoring maths the stores build on (BM25 and FAISS indexes, fusion, weights,
near-duplicates).
"""
