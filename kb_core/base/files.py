"""The one list of the files of a segment folder (``kb/<id>/segments/<segment>/``).

Kept apart from :mod:`kb_core.store.segments` (the writer) because :mod:`kb_core.store.catalog`, which the
writer uses, reads and writes these files too.
"""

from __future__ import annotations

DOCUMENTS_FILE = "documents.parquet"  # one row per document (catalog.DOCUMENTS_SCHEMA)
CHUNKS_FILE = "chunks.parquet"  # one row per chunk (catalog.CHUNKS_SCHEMA)
TEXTS_FILE = "texts.parquet"  # each document's full text
CHUNK_ROWS_FILE = "chunks.arrow"  # the chunk rows again, memory-mapped for search
SEGMENT_INFO_FILE = "segment.json"  # written last: its presence marks the segment complete
KEYWORD_FILE = "keyword.npz"  # the BM25 postings (retrieval.keyword_index)
EXACT_VECTORS_FILE = "vectors.npy"  # the exact float32 vectors (retrieval.vector_index)
VECTOR_INDEX_FILE = "vectors.faiss"  # an approximate FAISS index, when one is built
ORIGINALS_FOLDER = "files"  # the imported originals, named <doc_id><suffix>

TABLE_FILES = (DOCUMENTS_FILE, CHUNKS_FILE, TEXTS_FILE)
