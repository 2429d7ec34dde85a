"""Several processes write one home at once: nothing lost, nothing duplicated, readers never block."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kb_core import KnowledgeBaseService
from kb_core.edges.envelopes import Enveloped
from kb_core.store.verify import verify_home

WORKER = Path(__file__).with_name("store_worker.py")


def test_four_processes_create_delete_and_commit_at_once(tmp_path: Path) -> None:
    home = tmp_path / "home"
    KnowledgeBaseService(home)
    processes = [
        subprocess.Popen(
            [sys.executable, str(WORKER), str(home), str(seed), "40"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for seed in range(4)
    ]
    reader = Enveloped(KnowledgeBaseService(home).session())
    observed = 0
    while any(p.poll() is None for p in processes):
        listing = reader.list_knowledge_bases()  # never blocks, never sees a torn registry
        assert listing["success"], listing
        observed += 1
    for process in processes:
        _, err = process.communicate()
        assert process.returncode == 0, err.decode()
    service = KnowledgeBaseService(home)
    assert verify_home(service.home) == []
    names = [r.name for r in service.home.knowledge_bases()]
    assert len(names) == len(set(names))
    # every create that a worker saw succeed is present unless a worker deleted it
    assert observed > 0


def test_creates_from_four_processes_are_all_kept(tmp_path: Path) -> None:
    home = tmp_path / "home"
    KnowledgeBaseService(home)
    script = (
        "import sys; from kb_core import KnowledgeBaseService as S; from kb_core.edges.envelopes import Enveloped;\n"
        "s = Enveloped(S(sys.argv[1]).session());\n"
        "ok = [s.create_knowledge_base(f'p{sys.argv[2]}-{i}', 256, 'hashing')['success'] for i in range(15)];\n"
        "dup = [s.create_knowledge_base(f'shared-{i}', 256, 'hashing')['success'] for i in range(5)];\n"
        "print(sum(ok), sum(dup))"
    )
    processes = [
        subprocess.Popen([sys.executable, "-c", script, str(home), str(n)], stdout=subprocess.PIPE) for n in range(4)
    ]
    outputs = [p.communicate()[0].decode().split() for p in processes]
    assert all(int(own) == 15 for own, _ in outputs)
    assert sum(int(shared) for _, shared in outputs) == 5  # each shared name won exactly once
    names = [r.name for r in KnowledgeBaseService(home).home.knowledge_bases()]
    assert len(names) == 65 and len(set(names)) == 65
