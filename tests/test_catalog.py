"""Catalog rows survive a round trip through parquet unchanged (hypothesis)."""

from __future__ import annotations

from pathlib import Path
from tempfile import TemporaryDirectory

from hypothesis import given, settings
from hypothesis import strategies as st

from kb_core.store import catalog

text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=200)
optional_text = st.none() | text
int32 = st.integers(min_value=0, max_value=2**31 - 1)

chunk_rows = st.lists(
    st.fixed_dictionaries(
        {
            "chunk_id": text,
            "doc_id": text,
            "chunk_index": int32,
            "content": text,
            "tokens": int32,
            "chapter": optional_text,
            "page": st.none() | int32,
            "start_char": st.integers(min_value=0, max_value=2**40),
            "end_char": st.integers(min_value=0, max_value=2**40),
        }
    ),
    max_size=20,
)

document_rows = st.lists(
    st.fixed_dictionaries(
        {
            "doc_id": text,
            "name": text,
            "file_name": text,
            "file_path": text,
            "file_type": st.sampled_from(["txt", "docx", "doc"]),
            "source": st.sampled_from(["path", "upload", "bundle"]),
            "size_bytes": st.integers(min_value=0, max_value=2**50),
            "sha256": text,
            "chunk_size": st.integers(min_value=32, max_value=8192),
            "status": st.sampled_from(["ready", "failed"]),
            "error": optional_text,
            "chunk_count": st.integers(min_value=0, max_value=10**6),
            "created_at": text,
            "updated_at": text,
            "original": text,
            "language": st.sampled_from([None, "zh", "en", "ja", "latin"]),
        }
    ),
    max_size=10,
)


@settings(max_examples=60, deadline=None)
@given(rows=chunk_rows)
def test_chunk_rows_round_trip(rows: list[dict]) -> None:
    with TemporaryDirectory() as folder:
        catalog.write_chunks(Path(folder), rows)
        frame = catalog.read_chunks(Path(folder))
        back = [{k: (None if v != v else v) for k, v in r.items()} for r in frame.to_dict("records")]
        back = [{k: (int(v) if k in ("page",) and v is not None else v) for k, v in r.items()} for r in back]
        assert back == rows
        assert catalog.open_chunk_rows(Path(folder)).to_pylist() == rows  # the row store holds the same rows


def test_chunk_table_is_written_in_row_groups_with_catalog_types(tmp_path: Path, monkeypatch) -> None:
    import pyarrow.parquet as pq

    monkeypatch.setattr(catalog, "_PARQUET_ROW_GROUP", 3)
    rows = [
        {"chunk_id": f"chk_{i}", "doc_id": "doc_1", "chunk_index": i, "content": f"片段 {i} text", "tokens": 3,
         "chapter": None, "page": None, "start_char": i, "end_char": i + 5}
        for i in range(10)
    ]
    catalog.write_chunks(tmp_path, rows)
    parquet = pq.ParquetFile(tmp_path / "chunks.parquet")
    assert parquet.metadata.num_row_groups == 4 and parquet.schema_arrow == catalog.CHUNKS_SCHEMA
    assert pq.read_table(tmp_path / "chunks.parquet").to_pylist() == rows
    assert catalog.open_chunk_rows(tmp_path).schema == catalog.CHUNK_FIELDS_SCHEMA


@settings(max_examples=60, deadline=None)
@given(rows=document_rows)
def test_document_rows_round_trip(rows: list[dict]) -> None:
    with TemporaryDirectory() as folder:
        catalog.write_documents(Path(folder), rows)
        frame = catalog.read_documents(Path(folder))
        back = [{k: (None if v is None or v != v else v) for k, v in r.items()} for r in frame.to_dict("records")]
        assert back == rows


def test_documents_of_a_segment_written_before_languages_were_stored_read_with_none(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    row = {name: None for name in catalog.DOCUMENTS_SCHEMA.names} | {"doc_id": "doc_1", "name": "a.txt"}
    older = pa.schema([f for f in catalog.DOCUMENTS_SCHEMA if f.name != "language"])
    pq.write_table(pa.Table.from_pylist([row], schema=older), tmp_path / "documents.parquet")
    table = catalog.read_documents_table(tmp_path)
    assert table.schema == catalog.DOCUMENTS_SCHEMA and table.column("language").to_pylist() == [None]
    assert catalog.read_documents(tmp_path).loc[0, "name"] == "a.txt"
