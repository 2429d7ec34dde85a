"""Knowledge-base management through the service API: contracts of kb-tools.json."""

from __future__ import annotations

import os
import stat

import pytest

from kb_core import KnowledgeBaseService
from kb_core.edges.envelopes import Enveloped


def test_create_returns_the_spec_fields(session) -> None:
    result = session.create_knowledge_base("Handbook", 512)
    assert result["success"] is True
    assert set(result["data"]) == {"kb_id", "kb_name", "chunk_size"}
    assert result["data"]["kb_name"] == "Handbook" and result["data"]["chunk_size"] == 512


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("", "must not be empty"),
        ("   ", "must not be empty"),
        ("a" * 65, "at most 64"),
        ("team/notes", "'/'"),
        ("back\\slash", "'\\\\'"),
        ("tab\tname", "control characters"),
        ("..", "reserved"),
    ],
)
def test_bad_names_are_refused_with_a_reason(session, name: str, fragment: str) -> None:
    result = session.create_knowledge_base(name, 256)
    assert result["success"] is False
    assert result["error"]["code"] == "INVALID_ARGUMENT"
    assert fragment in result["message"]


@pytest.mark.parametrize("size", [0, 31, 8193, -5, 1.5, "big", None, True])
def test_chunk_size_bounds_say_what_is_allowed(session, size: object) -> None:
    result = session.create_knowledge_base("kb", size)
    assert result["success"] is False and result["error"]["code"] == "INVALID_ARGUMENT"
    assert "32 to 8192" in result["message"]


def test_names_are_unique_case_insensitively_after_nfc(session) -> None:
    assert session.create_knowledge_base("Café", 256)["success"]
    decomposed = "Cafe\u0301".upper()  # CAFÉ written with a combining accent
    result = session.create_knowledge_base(decomposed, 256)
    assert result["success"] is False and result["error"]["code"] == "KB_EXISTS"
    assert session.select_knowledge_base("café")["data"]["kb_name"] == "Café"


def test_chinese_names_work_end_to_end(session) -> None:
    created = session.create_knowledge_base("产品手册", 256)["data"]
    selected = session.select_knowledge_base("产品手册")
    assert selected["data"] == {"kb_id": created["kb_id"], "kb_name": "产品手册", "document_count": 0}
    listed = session.list_knowledge_bases()["data"]
    assert listed["count"] == 1 and listed["current_kb_id"] == created["kb_id"]
    row = listed["knowledge_bases"][0]
    assert row["is_current"] is True and row["name"] == "产品手册"
    assert {
        "id",
        "name",
        "chunk_size",
        "embedding_model",
        "created_at",
        "is_current",
        "document_count",
        "chunk_count",
    } <= set(row)


def test_the_default_model_is_the_local_model_that_reads_chinese(session) -> None:
    session.create_knowledge_base("kb", 256)  # #35: multilingual-e5-small, built once per machine
    assert session.list_knowledge_bases()["data"]["knowledge_bases"][0]["embedding_model"] == "multilingual-e5-small"


def test_deleting_the_current_kb_is_refused_and_others_go_with_their_files(service, session) -> None:
    session.create_knowledge_base("keep", 256)
    doomed = session.create_knowledge_base("doomed", 256)["data"]["kb_id"]
    session.select_knowledge_base("keep")
    refused = session.delete_knowledge_base("KEEP")
    assert refused["error"]["code"] == "KB_IS_CURRENT" and "select another" in refused["message"]
    assert service.home.kb_dir(doomed).exists()
    assert session.delete_knowledge_base("doomed") == {
        "success": True,
        "message": "Deleted knowledge base 'doomed' with all its documents.",
        "data": {"kb_name": "doomed"},
    }
    assert not service.home.kb_dir(doomed).exists()
    assert [kb["name"] for kb in session.list_knowledge_bases()["data"]["knowledge_bases"]] == ["keep"]
    missing = session.delete_knowledge_base("doomed")
    assert missing["error"]["code"] == "KB_NOT_FOUND" and "keep" in missing["message"]


def test_api_key_is_secret(service, session, caplog) -> None:
    caplog.set_level("DEBUG")
    key = "sk-very-secret-123"
    created = session.create_knowledge_base("remote", 256, "text-embedding-3-small", "http://127.0.0.1:9/v1", key)
    assert created["success"], created
    kb_id = created["data"]["kb_id"]
    listing = session.list_knowledge_bases()
    assert key not in repr(listing) and key not in caplog.text
    for path in service.home.root.rglob("*"):
        if path.is_file() and path != service.home.secret_path(kb_id):
            assert key.encode() not in path.read_bytes(), path
    secret = service.home.secret_path(kb_id)
    assert stat.S_IMODE(os.stat(secret).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(secret.parent).st_mode) == 0o700


def test_key_without_endpoint_is_refused(session) -> None:
    result = session.create_knowledge_base("kb", 256, embedding_api_key="sk-x")
    assert result["error"]["code"] == "INVALID_ARGUMENT" and "sk-x" not in result["message"]


def test_sessions_have_their_own_current_kb(service) -> None:
    first, second = Enveloped(service.session()), Enveloped(service.session())
    first.create_knowledge_base("one", 256)
    first.create_knowledge_base("two", 256)
    first.select_knowledge_base("one")
    second.select_knowledge_base("two")
    assert (
        first.list_knowledge_bases()["data"]["current_kb_id"] != second.list_knowledge_bases()["data"]["current_kb_id"]
    )
    assert Enveloped(service.session()).list_knowledge_bases()["data"]["current_kb_id"] is None


def test_persistent_session_survives_a_new_process_object(home) -> None:
    first = Enveloped(KnowledgeBaseService(home).session("cli"))
    first.create_knowledge_base("kept", 256)
    first.select_knowledge_base("kept")
    again = Enveloped(KnowledgeBaseService(home).session("cli"))
    assert again.operations.current_kb().name == "kept"


def test_kbs_are_stored_by_id_not_name(service, session) -> None:
    kb_id = session.create_knowledge_base("报告 2026", 256)["data"]["kb_id"]
    folders = [p.name for p in (service.home.root / "kbs").iterdir()]
    assert folders == [kb_id]


def test_knowledge_bases_parquet_is_readable_by_pandas(service, session) -> None:
    import pandas as pd

    session.create_knowledge_base("甲", 256)
    session.create_knowledge_base("B", 1024)
    frame = pd.read_parquet(service.home.root / "knowledge_bases.parquet")
    assert sorted(frame["name"]) == ["B", "甲"]
    assert set(frame["chunk_size"]) == {256, 1024}
