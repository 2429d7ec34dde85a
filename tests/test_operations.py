"""One session API (#38): the session (``service.session()``, an Operations) returns typed results and raises
KBError; the edges answer each operation as the envelope ``envelope_of`` builds from that result, the one builder,
and ``Enveloped`` offers every operation of a session that way. (The ``session`` fixture is an Enveloped session.)"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from kb_core.base.errors import KBError, KBNotFound
from kb_core.edges.envelopes import Enveloped, envelope_of
from kb_core.features.results import ImportReport, KBCreated, KBList, RagResult, Verification


def test_operations_return_results_and_raise_kb_errors(session: Any, tmp_path: Path) -> None:
    operations = session.operations
    created = operations.create_knowledge_base("notes", 64, embedding_model="hashing")
    assert isinstance(created, KBCreated) and created.kb_name == "notes"
    assert created.to_json() == {"kb_id": created.kb_id, "kb_name": "notes", "chunk_size": 64}  # no message in data
    with pytest.raises(KBNotFound):
        operations.select_knowledge_base("nowhere")
    listed = operations.list_knowledge_bases()
    assert isinstance(listed, KBList) and [kb["name"] for kb in listed.knowledge_bases] == ["notes"]
    # the envelope the Session answers is that result's, key order included
    envelope = session.list_knowledge_bases()
    assert list(envelope) == ["success", "message", "data"]
    assert envelope["message"] == listed.message and list(envelope["data"]) == list(listed.to_json())


def test_a_partial_failure_is_a_result_the_envelope_marks_failed_with_its_data(session: Any, tmp_path: Path) -> None:
    session.create_knowledge_base("notes", 64, embedding_model="hashing")
    session.select_knowledge_base("notes")
    report = session.operations.import_document([str(tmp_path / "missing.txt")])
    assert isinstance(report, ImportReport) and report.failure() is not None and report.failed_count == 1
    assert "warnings" not in report.to_json() and "executor" not in report.to_json()  # optional, absent when None
    envelope = envelope_of(session.operations.import_document, [str(tmp_path / "missing.txt")])
    assert envelope["success"] is False and envelope["error"]["code"] == "IMPORT_FAILED"
    assert envelope["data"]["failed_files"][0]["file_path"].endswith("missing.txt")


def test_verify_with_problems_fails_without_an_error_code_and_rag_search_repeats_its_data() -> None:
    problem = envelope_of(lambda: Verification("1 problem(s) found:\n- x", ["x"], []))
    data: dict[str, Any] = {"problems": ["x"], "repaired": []}
    assert problem == {"success": False, "message": "1 problem(s) found:\n- x", "data": data}
    rag = envelope_of(lambda: RagResult("Returned no results (degraded): slow.", [], 0, True, "slow"))
    data = {"chunks": [], "total_results": 0, "degraded": True, "degraded_reason": "slow"}
    assert rag == {"success": True, "message": "Returned no results (degraded): slow.", "data": data, **data}


def test_envelope_of_turns_errors_into_failures_named_after_the_operation(caplog: pytest.LogCaptureFixture) -> None:
    def refuse() -> KBCreated:
        raise KBError("No.", code="INVALID_ARGUMENT", details={"field": "x"})

    def crash() -> KBCreated:
        raise RuntimeError("secret internals")

    assert envelope_of(refuse) == {
        "success": False,
        "message": "No.",
        "data": None,
        "error": {"code": "INVALID_ARGUMENT", "details": {"field": "x"}},
    }
    with caplog.at_level(logging.ERROR):
        crashed = envelope_of(crash)
    assert crashed["error"]["code"] == "INTERNAL_ERROR"
    assert crashed["message"] == "crash failed because of an internal error; see the log."
    assert "secret internals" not in crashed["message"] and "secret internals" in caplog.text  # logged, not shown


def test_enveloped_offers_exactly_the_operations_and_says_where_the_rest_is(service: Any) -> None:
    """``Enveloped(ops).x`` is ``envelope_of(ops.x, …)`` for every public operation (a method answering a result); the
    session's state and typed helpers are refused with the place to read them, and private names are never offered."""
    operations = service.session()
    enveloped = Enveloped(operations)
    created = enveloped.create_knowledge_base("notes", 64, embedding_model="hashing")
    assert created == {"success": True, "message": created["message"], "data": created["data"]}
    assert created["data"]["kb_name"] == "notes"
    # an operation declared once in a feature (kb_core.features.bundles.api) and taken by Operations is offered as well
    assert enveloped.get_ontology("notes")["success"]
    assert enveloped.select_knowledge_base("nowhere")["error"]["code"] == "KB_NOT_FOUND"
    for name in ("visible_kbs", "current_kb_id", "search_chunks", "service", "_set_current", "no_such_operation"):
        with pytest.raises(AttributeError, match=f"'{name}' is not an operation answering an envelope"):
            getattr(enveloped, name)
    assert enveloped.operations is operations
