"""Front ends can say the embedding model is loading, and about how long that takes, before an import's first chunk
(the app's first start, the Import page and ``kb import`` do): the service knows whether a model is loaded, loads it
on request and records how long that took in the home for the next estimate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kb_core import KnowledgeBaseService
from kb_core.edges.envelopes import Enveloped
from kb_core.session.service import MODEL_LOAD_SECONDS


@pytest.mark.model
def test_the_model_load_is_announced_timed_and_remembered_for_the_next_process(tmp_path: Path) -> None:
    from kb_core.engines.embedding.local import SentenceTransformerEmbedder

    def open_session() -> Any:
        # a model instance of its own, so the test does not depend on what other tests loaded in this process
        service = KnowledgeBaseService(
            tmp_path / "home", embedder_factory=lambda record, key: SentenceTransformerEmbedder()
        )
        session = Enveloped(service.session())
        session.select_knowledge_base("minilm")
        return session

    Enveloped(KnowledgeBaseService(tmp_path / "home").session()).create_knowledge_base(
        "minilm", 128, "all-MiniLM-L6-v2"
    )
    session = open_session()
    status = session.embedding_model_status()
    assert status["data"] == {
        "model": "all-MiniLM-L6-v2",
        "loaded": False,
        "expected_seconds": MODEL_LOAD_SECONDS,
        "measured": False,
    }
    assert "is not loaded yet" in status["message"]
    seconds = session.load_embedding_model()["data"]["seconds"]
    assert seconds > 0
    after = session.embedding_model_status()["data"]
    assert after["loaded"] and after["measured"] and after["expected_seconds"] == round(seconds, 1)
    assert session.load_embedding_model()["data"]["seconds"] == 0  # loaded already: nothing to do
    # the next process over this home expects what this one measured
    later = open_session().embedding_model_status()["data"]
    assert not later["loaded"] and later["measured"] and later["expected_seconds"] == round(seconds, 1)


def test_a_model_that_loads_nothing_is_always_ready(tmp_path: Path) -> None:
    session = Enveloped(KnowledgeBaseService(tmp_path / "home").session())
    session.create_knowledge_base("fast", 64, embedding_model="hashing")
    assert session.embedding_model_status(kb_name="fast")["data"]["loaded"] is True
    assert session.load_embedding_model(kb_name="fast")["data"]["seconds"] == 0
    assert session.embedding_model_status(model="hashing-32")["data"]["loaded"] is True
