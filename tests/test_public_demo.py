"""A public demo (KB_DEMO=1) in kb_core, where it is enforced: visitors in sandboxes, shared KBs read-only, quotas
with messages naming the limit, expiry, the operator, and no server path in what a visitor reads (#36).

Real store, real files, the hashing embedder (what a visitor may do does not depend on the model); the browser test
(tests/browser/test_public_demo_browser.py) drives the same through the app started as `run.sh --demo` starts it."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

from kb_core import KnowledgeBaseService
from kb_core.edges.envelopes import Enveloped
from kb_core.features.results import SearchRequest
from kb_core.session.demo import DEMO_FOLDER, demo_judgments_folder, ensure_demo_kb
from kb_core.session.public_demo import DemoLimits, PublicDemo, demo_setting, parse_duration

TEXT = "Hybrid search mixes keyword and vector scores. 混合检索结合关键词与向量。 "


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def site(tmp_path: Path) -> tuple[KnowledgeBaseService, PublicDemo, Clock]:
    """A home with a shared (published) KB built from the repository's demo files, an operator-only KB, and a demo
    over it whose visitors may use the hashing embedder."""
    service = KnowledgeBaseService(tmp_path / "home")
    local = Enveloped(service.session())
    built = ensure_demo_kb(local.operations, kb_name="shared", embedding_model="hashing")
    assert built is not None and built.succeeded()
    assert local.create_knowledge_base("operator-only", 64, "hashing")["success"]
    clock = Clock()
    demo = PublicDemo(
        service, DemoLimits(chunks_per_visitor=40, imports_per_minute=10), "operator-secret", models=("hashing",),
        exchange_root=tmp_path / "exchange", clock=clock,
    )
    demo.ledger.publish(service.find_kb("shared").id)
    return service, demo, clock


def upload(session: Enveloped, name: str, text: str) -> str:
    """A file written where the app writes uploads for this session (its scratch root)."""
    root = session.operations.scratch_root
    assert root is not None
    path = Path(root) / f"up-{len(list(Path(root).iterdir()))}" / name
    path.parent.mkdir(parents=True)
    path.write_text(text, encoding="utf-8")
    return str(path)


def code(envelope: dict[str, Any]) -> str | None:
    return (envelope.get("error") or {}).get("code")


def names(session: Enveloped) -> list[str]:
    return [kb["name"] for kb in session.list_knowledge_bases()["data"]["knowledge_bases"]]


def test_kb_demo_names_public_off_and_private() -> None:
    assert demo_setting({"KB_DEMO": "1"}) == "public"
    assert demo_setting({"KB_DEMO": "0"}) == "off"  # what the tests have always set: no demo KB
    assert demo_setting({}) == "private"
    with pytest.raises(Exception, match="KB_DEMO='maybe' is not understood"):
        demo_setting({"KB_DEMO": "maybe"})
    assert parse_duration("24h", "X") == 86400 and parse_duration("90s", "X") == 90
    limits = DemoLimits.from_environment({"KB_DEMO_EXPIRY": "30m", "KB_DEMO_MAX_FILE_MB": "0.5"})
    assert (limits.expiry_seconds, limits.max_file_bytes) == (1800, 512 * 1024)
    with pytest.raises(Exception, match="KB_DEMO_FILES_PER_IMPORT='-3' must be a positive whole number"):
        DemoLimits.from_environment({"KB_DEMO_FILES_PER_IMPORT": "-3"})


def test_visitors_own_sandboxes_and_read_only_shared_kbs(site: tuple[KnowledgeBaseService, PublicDemo, Clock]) -> None:
    service, demo, _ = site
    a, b = Enveloped(demo.visitor_session("a" * 32)), Enveloped(demo.visitor_session("b" * 32))
    created = a.create_knowledge_base("notes", 64, "hashing")
    mine = created["data"]["kb_name"]
    assert re.fullmatch(r"notes \[[0-9a-f]{6}\]", mine), mine  # tagged: two visitors never collide on a name
    assert b.create_knowledge_base("notes", 64, "hashing")["success"]
    assert a.import_document([upload(a, "mine.txt", TEXT * 5)], kb_name=mine)["success"]
    chunk_id = a.search(SearchRequest("hybrid", kb_names=[mine]))["data"]["chunks"][0]["id"]

    assert names(a) == ["shared", mine]  # never the operator's own KB, never B's
    assert mine not in names(b) and "operator-only" not in names(b)
    # B learns nothing of A's KB: every answer is the one a nonexistent KB gets
    for call in (b.select_knowledge_base, b.delete_knowledge_base, lambda n: b.list_documents(n)):
        hidden, absent = call(mine), call("no such kb [000000]")
        assert code(hidden) == code(absent) == "KB_NOT_FOUND"
        assert hidden["message"].replace(mine, "X") == absent["message"].replace("no such kb [000000]", "X")
    assert code(b.get_item(chunk_id)) == "ITEM_NOT_FOUND"
    assert code(b.search(SearchRequest("hybrid", kb_names=[mine]))) == "KB_NOT_FOUND"

    # the shared KB: read, never changed, by either visitor
    b.select_knowledge_base("shared")
    assert b.search(SearchRequest("hybrid search"))["data"]["count"] > 0
    document = b.list_documents("shared")["data"]["documents"][0]["name"]
    refusals = {
        "delete": b.delete_knowledge_base("shared"),
        "import documents into": b.import_document([upload(b, "x.txt", TEXT)]),
        "save search defaults for": b.save_search_settings(vector_weight=0.2, keyword_weight=0.8),
        "change the ontology of": b.set_ontology("node_types:\n  Note:\n    identity: [name]\n"),
        "delete documents of": b.delete_document(document),
        "re-chunk documents of": b.update_document(document, 128),
        "compact": b.compact(),
        "import a bundle into": b.import_knowledge_bundle(
            upload(b, "bundle.yaml", '- type: Document\n  doc_uri: "x"\n  content: "delete me"\n'), delete_file=False
        ),
    }
    for action, refused in refusals.items():
        assert code(refused) == "PERMISSION_DENIED", (action, refused)
        assert f"not {action} it" in refused["message"] and "'shared' is shared in this demo" in refused["message"]
    assert service.find_kb("shared").search_settings == {}
    assert code(b.import_database(upload(b, "x.kbx", "not an export"))) == "PERMISSION_DENIED"
    assert code(b.publish_knowledge_base(mine)) == "KB_NOT_FOUND"
    assert code(a.publish_knowledge_base(mine)) == "PERMISSION_DENIED"  # publishing is the operator's

    # the operator: a wrong secret is refused; the right one sees and changes everything
    from kb_core.base.errors import PermissionDenied

    with pytest.raises(PermissionDenied):
        demo.operator_session("guess")
    operator = Enveloped(demo.operator_session("operator-secret"))
    assert set(names(operator)) == {"shared", "operator-only", mine, names(b)[-1]}
    usage = {row["visitor"]: row for row in operator.demo_status()["data"]["usage"]}
    assert usage[demo.visitor_id("a" * 32)]["knowledge_bases"] == [mine]
    assert usage[demo.visitor_id("a" * 32)]["chunks"] > 0
    assert operator.publish_knowledge_base("operator-only")["success"]
    assert "operator-only" in names(b)
    assert operator.delete_knowledge_base(mine)["success"]
    assert mine not in names(a) and mine not in names(operator)
    assert demo.ledger.read().owned_by(demo.visitor_id("a" * 32)) == []


def test_visitor_quotas_refuse_with_the_limit_named(tmp_path: Path) -> None:
    service = KnowledgeBaseService(tmp_path / "home")
    limits = DemoLimits(
        max_file_mb=1 / 64, files_per_import=2, chunks_per_visitor=12, kbs_per_visitor=1, imports_per_minute=2,
        searches_per_minute=3,
    )
    demo = PublicDemo(service, limits, models=("hashing",), exchange_root=tmp_path / "exchange")
    visitor = Enveloped(demo.visitor_session("q" * 32))
    kb = visitor.create_knowledge_base("quota", 32, "hashing")["data"]["kb_name"]
    second = visitor.create_knowledge_base("another", 32, "hashing")
    assert code(second) == "QUOTA_EXCEEDED" and "at most 1 knowledge bases per visitor" in second["message"]
    refused_model = Enveloped(demo.visitor_session("r" * 32)).create_knowledge_base("x", 64, "/etc")
    assert code(refused_model) == "INVALID_ARGUMENT" and "these models only: hashing" in refused_model["message"]

    visitor.select_knowledge_base(kb)
    three = [upload(visitor, f"f{i}.txt", TEXT) for i in range(3)]
    too_many = visitor.import_document(three)
    assert code(too_many) == "QUOTA_EXCEEDED" and "at most 2 files at a time; 3 were given" in too_many["message"]

    big = upload(visitor, "big.txt", "x" * 20_000)  # 20 KB, over 1/64 MB = 16 KB
    small = upload(visitor, "small.txt", TEXT * 4)  # a few chunks
    sized = visitor.import_document([big, small])
    assert sized["data"]["success_count"] == 1
    assert "over this demo's limit of 0.015625 MB per file" in sized["data"]["failed_files"][0]["error"]

    used = visitor.list_knowledge_bases()["data"]["knowledge_bases"][0]["chunk_count"]
    assert 0 < used < 12
    long_text = upload(visitor, "long.txt", TEXT * 40)  # more chunks than are left
    over = visitor.import_document([long_text])
    assert over["data"]["success_count"] == 0
    assert "would pass this demo's limit of 12 chunks per visitor" in over["data"]["failed_files"][0]["error"]
    assert visitor.list_knowledge_bases()["data"]["knowledge_bases"][0]["chunk_count"] == used  # nothing of it

    rate = visitor.import_document([small])  # the third import within a minute
    assert code(rate) == "RATE_LIMITED" and "allows 2 imports per minute per visitor" in rate["message"]
    for _ in range(3):
        assert visitor.search(SearchRequest("hybrid"))["success"]
    searched = visitor.search(SearchRequest("hybrid"))
    assert code(searched) == "RATE_LIMITED" and searched["error"]["details"]["retry_after_sec"] > 0
    assert "allows 3 searches (an evaluation counts as one) per minute" in searched["message"]
    other = Enveloped(demo.visitor_session("s" * 32))
    # each visitor's own window
    assert other.search(SearchRequest("hybrid", kb_names=["quota"]))["error"]["code"] == "KB_NOT_FOUND"

    # one import at a time for all visitors (the default, for 2 cores): another visitor's waits its turn
    own = other.create_knowledge_base("other", 32, "hashing")["data"]["kb_name"]
    third = Enveloped(demo.visitor_session("t" * 32))
    theirs = third.create_knowledge_base("third", 32, "hashing")["data"]["kb_name"]
    with third.operations.importing(third.operations.find_kb(theirs), 1):  # a third visitor's import is running
        busy = other.import_document([upload(other, "wait.txt", TEXT)], kb_name=own)
        assert code(busy) == "QUOTA_EXCEEDED" and "busy with another visitor's files" in busy["message"]
    assert other.import_document([upload(other, "now.txt", TEXT)], kb_name=own)["success"]


def test_a_visitors_evaluation_runs_are_its_own(site: tuple[KnowledgeBaseService, PublicDemo, Clock]) -> None:
    from kb_core.session.evaluation import EvaluationRequest, run_evaluation

    _, demo, _ = site
    a, b = Enveloped(demo.visitor_session("a" * 32)), Enveloped(demo.visitor_session("b" * 32))
    judgments = demo_judgments_folder()
    assert judgments is not None
    request = EvaluationRequest(
        folder=judgments, build_corpus=False, kb_name="shared", modes=("keyword",), max_queries=3
    )
    outcome = run_evaluation(a.operations, request)
    assert outcome.queries == 3
    assert [r["id"] for r in a.list_evaluation_runs()["data"]["runs"]] == [outcome.run.id]
    assert b.list_evaluation_runs()["data"]["runs"] == []  # B does not see A's judged queries
    assert code(b.compare_evaluation_runs(outcome.run.id, outcome.run.id)) == "RUN_NOT_FOUND"
    from kb_core.base.errors import KBError

    with pytest.raises(KBError, match="at most 2 judged queries"):
        small = PublicDemo(
            demo.service, DemoLimits(evaluation_queries=2), models=("hashing",), exchange_root=demo.exchange_root
        )
        run_evaluation(small.visitor_session("c" * 32), request)


def test_visitor_kbs_expire_and_the_sweep_deletes_them(site: tuple[KnowledgeBaseService, PublicDemo, Clock]) -> None:
    from kb_core.session.evaluation import EvaluationRequest, run_evaluation

    service, demo, clock = site
    visitor = Enveloped(demo.visitor_session("e" * 32))
    kb = visitor.create_knowledge_base("short-lived", 64, "hashing")["data"]["kb_name"]
    judgments = demo_judgments_folder()
    assert judgments is not None
    run_evaluation(
        visitor.operations,
        EvaluationRequest(folder=judgments, build_corpus=False, kb_name="shared", modes=("keyword",), max_queries=2),
    )
    runs = demo.ledger.folder / "visitors" / demo.visitor_id("e" * 32)
    assert runs.is_dir()
    expires = visitor.demo_status()["data"]["knowledge_bases"][0]["expires_at"]
    assert expires == clock.now + 24 * 3600  # the default: 24 h after creation
    clock.now += 24 * 3600 - 1
    assert demo.sweep() == [] and kb in names(visitor)
    clock.now += 2
    assert demo.sweep() == [kb]
    assert kb not in names(visitor) and kb not in [r.name for r in service.store.knowledge_bases()]
    assert "shared" in names(visitor)  # shared KBs never expire
    assert visitor.demo_status()["data"]["knowledge_bases"] == []
    assert not runs.exists()  # nor does a visitor gone past the expiry keep its evaluation runs


def test_a_visitor_reads_no_server_path(site: tuple[KnowledgeBaseService, PublicDemo, Clock], tmp_path: Path) -> None:
    """The shared KB was imported from the repository's files and the visitor's from the app's upload folder: neither
    folder reaches what a visitor reads, and server folders are refused without saying whether they exist."""
    _, demo, _ = site
    visitor = Enveloped(demo.visitor_session("p" * 32))
    kb = visitor.create_knowledge_base("mine", 64, "hashing")["data"]["kb_name"]
    imported = visitor.import_document([upload(visitor, "上传.txt", TEXT * 3)], kb_name=kb)
    visitor.select_knowledge_base("shared")
    hit = visitor.search(SearchRequest("hybrid"))["data"]["chunks"][0]
    document_id = visitor.list_documents()["data"]["documents"][0]["id"]
    exported = visitor.export_database(str(Path(visitor.operations.scratch_root or "") / "mine.kbx"), kb_names=[kb])
    assert imported["success"] and str(demo.exchange_root) not in imported["message"]
    answers = [
        visitor.list_documents(),
        visitor.list_documents(kb),
        visitor.get_item(hit["id"]),
        visitor.get_item(document_id),
        visitor.get_document_info([document_id]),
        exported,
        visitor.demo_status(),
    ]
    text = repr(answers)
    for folder in (str(DEMO_FOLDER.parent), str(demo.exchange_root), str(tmp_path), "/tmp/"):
        assert folder not in text, folder
    assert exported["data"]["export_path"] == "mine.kbx"
    assert "上传.txt" in repr(visitor.list_documents(kb))

    outside = visitor.import_document([str(DEMO_FOLDER / "hybrid_search.docx")], kb_name=kb)
    assert outside["data"]["success_count"] == 0  # the session opens files in its own folder only
    big = upload(visitor, "big.txt", "x" * (3 * 1024 * 1024))
    refused = visitor.import_document([big], kb_name=kb)
    assert "big.txt is 3.0 MB, over this demo's limit of 1 MB per file" in refused["message"]
    assert str(demo.exchange_root) not in refused["message"] + refused["data"]["failed_files"][0]["error"]
    assert code(visitor.export_database(str(tmp_path / "out.kbx"))) == "PERMISSION_DENIED"
    with pytest.raises(Exception, match="Files on the server are off"):
        visitor.operations.confined([tmp_path])
    from kb_core.base.errors import KBError

    refusals = []
    for folder in (Path("/etc"), tmp_path / "no-such-folder", demo_judgments_folder() or tmp_path):
        try:
            visitor.operations.begin_evaluation(folder, None, builds_corpus=False)
            refusals.append(None)
        except KBError as error:
            refusals.append(error.message)
    assert refusals[0] is not None and refusals[0] == refusals[1]  # an existing and a missing folder read the same
    assert refusals[2] is None  # the demo's own judgments are allowed


def test_a_demo_removes_the_exchange_folder_it_made(tmp_path: Path) -> None:
    # an app started and stopped again left an empty kb-demo-files-* folder in the temporary folder each time
    import gc

    demo = PublicDemo(KnowledgeBaseService(tmp_path / "home"), DemoLimits(), models=("hashing",))
    folder = demo.exchange_root
    (folder / "upload.txt").write_text("x", encoding="utf-8")
    assert folder.is_dir()
    del demo
    gc.collect()
    assert not folder.exists()
    given = tmp_path / "given"
    kept = PublicDemo(KnowledgeBaseService(tmp_path / "home"), DemoLimits(), models=("hashing",), exchange_root=given)
    del kept
    gc.collect()
    assert given.is_dir()  # a folder the caller gave is the caller's
