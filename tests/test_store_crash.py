"""SIGKILL a writer at random instants; the store must open consistent every time."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from kb_core import KnowledgeBaseService
from kb_core.store.verify import verify_home

WORKER = Path(__file__).with_name("store_worker.py")


def test_store_survives_sigkill_at_random_points(tmp_path: Path) -> None:
    home = tmp_path / "home"
    rng = random.Random(20261121)
    kills = 0
    for round_number in range(12):
        process = subprocess.Popen(
            [sys.executable, str(WORKER), str(home), str(round_number), "100000"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        # wait for the worker to start writing, then kill it at a random instant
        assert process.stdout is not None
        process.stdout.readline()
        time.sleep(rng.uniform(0.0, 0.4))
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
        kills += 1
        service = KnowledgeBaseService(home)  # opening cleans up after the dead writer
        assert verify_home(service.home) == []
        for record in service.home.knowledge_bases():
            store = service.kb_store(record.id)
            store.clean_up()
            assert list((store.root / "staging").iterdir()) == []
            referenced = {s.id for s in store.manifest().segments}
            assert {p.name for p in (store.root / "segments").iterdir()} == referenced
            assert not [p for p in store.root.rglob("*") if ".tmp-" in p.name]
        known = {r.id for r in service.home.knowledge_bases()}
        assert {p.name for p in (service.home.root / "kbs").iterdir()} == known
    assert kills == 12
