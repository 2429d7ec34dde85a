"""`kb --store URL eval JUDGMENTS --kb NAME` evaluates a KB held in PostgreSQL and keeps the run, as on a folder
store (it once ran every query, then failed with NOT_ON_POSTGRES while recording the run, #28)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kb_core.edges.cli.main import main as cli_main
from kb_core.edges.envelopes import Enveloped
from kb_core.session.service import KnowledgeBaseService
from tests.postgres.conftest import new_database
from tests.test_evaluation import CORPUS, QRELS, QUERIES


def test_an_evaluation_of_a_postgresql_kb_is_kept_with_its_fingerprint(
    postgres_server, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KB_STORE", "")  # kb --store sets it for the process: restored after the test
    url = new_database(postgres_server, "t_evaluation")
    files = tmp_path / "files"
    files.mkdir()
    for doc_id, (title, text) in CORPUS.items():
        (files / f"{doc_id}.txt").write_text(f"{title}\n\n{text}", encoding="utf-8")
    judgments = tmp_path / "judgments"
    judgments.mkdir()
    (judgments / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": q, "text": t}, ensure_ascii=False) + "\n" for q, t in QUERIES.items()),
        encoding="utf-8",
    )
    (judgments / "qrels.tsv").write_text(
        "query-id\tcorpus-id\tscore\n"
        + "".join(f"{q}\t{d}.txt\t{g}\n" for q, judged in QRELS.items() for d, g in judged.items()),
        encoding="utf-8",
    )
    service = KnowledgeBaseService(tmp_path / "home", store=url)
    try:
        session = Enveloped(service.session())
        assert session.create_knowledge_base("judged", 64, embedding_model="hashing")["success"]
        assert session.import_document([str(p) for p in sorted(files.iterdir())], kb_name="judged")["success"]
    finally:
        service.close()
    home = ["--store", url, "--home", str(tmp_path / "home"), "--json"]
    code = cli_main([*home, "eval", str(judgments), "--kb", "judged", "--mode", "keyword"])
    evaluated = json.loads(capsys.readouterr().out)
    assert code == 0 and evaluated["success"], evaluated["message"]
    assert evaluated["data"]["run_id"].startswith("run_")
    code = cli_main([*home, "eval-runs"])
    runs = json.loads(capsys.readouterr().out)["data"]["runs"]
    assert [r["id"] for r in runs] == [evaluated["data"]["run_id"]] and runs[0]["kb_fingerprint"]
