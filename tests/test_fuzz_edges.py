"""Fuzzing the pieces #37 added where outside input arrives: file names (any bytes), a built model folder in any
state, and Ray addresses and what answers at them. Each ends in a result or a clear error (a KBError with a known
code) in bounded time, never another exception. Examples are derandomized (tests/conftest.py) and few: about 20 s
in all.
"""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kb_core.base.errors import EmbeddingError, InvalidArgument, KBError
from kb_core.edges.envelopes import Enveloped

pytestmark = pytest.mark.slow

FUZZ = settings(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)
# A file name as a file system holds it: any bytes but "/" and NUL (Latin-1, broken UTF-8, CJK, very long).
NAME_BYTES = st.one_of(
    st.binary(min_size=1, max_size=300),
    st.text(min_size=1, max_size=120).map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.text(alphabet="文件名报告é", min_size=80, max_size=100).map(lambda t: t.encode("utf-8")),
).map(lambda b: b.replace(b"/", b"_").replace(b"\x00", b"_")).filter(lambda b: b not in (b".", b".."))


# -- file names ------------------------------------------------------------------------------------------------------
@FUZZ
@given(NAME_BYTES)
def test_any_name_is_either_usable_or_refused_with_a_reason_that_can_be_shown(name: bytes) -> None:
    from kb_core.base.safe_files import NAME_MAX_BYTES, path_name_problem, shown_path

    raw = os.fsdecode(b"/tmp/" + name)  # what Python's argv or os.listdir gives for it
    problem = path_name_problem(raw)
    shown = shown_path(raw)
    shown.encode("utf-8")  # always text that can be written anywhere (JSON, a log, a terminal)
    json.dumps({"file_path": shown, "error": problem}, ensure_ascii=False).encode("utf-8")
    if problem is None:
        assert len(name) <= NAME_MAX_BYTES and raw.encode("utf-8") == b"/tmp/" + name
    else:
        assert len(name) > NAME_MAX_BYTES or "not UTF-8" in problem


@pytest.fixture(scope="module")
def importing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[object, Path]]:
    from kb_core import KnowledgeBaseService

    root = tmp_path_factory.mktemp("names")
    session = Enveloped(KnowledgeBaseService(root / "home").session())
    assert session.create_knowledge_base("names", 64, "hashing")["success"]
    (root / "good.txt").write_text("an ordinary note about apples", encoding="utf-8")
    yield session, root


@settings(FUZZ, max_examples=12)
@given(NAME_BYTES, st.booleans())
def test_an_import_with_any_name_imports_the_other_file(
    importing: tuple[object, Path], name: bytes, exists: bool
) -> None:
    session, root = importing
    folder = os.fsencode(root / "odd")
    os.makedirs(folder, exist_ok=True)
    path = folder + b"/" + name
    if exists and len(name) <= 255:  # a longer name cannot exist
        with open(path, "wb") as handle:
            handle.write(b"text in a file with an odd name")
    result = session.import_document([str(root / "good.txt"), os.fsdecode(path)], kb_name="names")  # type: ignore[attr-defined]
    json.dumps(result, ensure_ascii=False).encode("utf-8")
    assert result["success"], result["message"]
    data = result["data"]
    assert data["total"] == 2 and data["success_count"] + data["failed_count"] == 2
    assert data["success_files"][0]["file_path"] == str(root / "good.txt") or data["success_files"][0].get(
        "already_imported"
    )
    for failure in data["failed_files"]:
        assert failure["error"] and "internal error" not in failure["error"]


# -- a built model folder in any state -------------------------------------------------------------------------------
DAMAGES = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 7), st.floats(0, 1), st.binary(min_size=1, max_size=64)),
    st.tuples(st.just("truncate"), st.integers(0, 7), st.floats(0, 1), st.just(b"")),
    st.tuples(st.just("delete"), st.integers(0, 7), st.just(0.0), st.just(b"")),
    st.tuples(st.just("marker"), st.just(0), st.just(0.0), st.binary(max_size=200)),
    st.tuples(st.just("checked"), st.just(0), st.just(0.0), st.binary(max_size=200)),
)


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    from kb_core.engines.embedding import builtin
    from tests.e5s1_tiny import write_tiny_e5s1

    root = tmp_path_factory.mktemp("models")
    source = write_tiny_e5s1(root / "tiny-q4.bin")
    patch = pytest.MonkeyPatch()
    patch.setenv(builtin.MODELS_DIR_VARIABLE, str(root / "models"))
    patch.setattr(builtin, "_e5_source", lambda: source)
    try:
        yield builtin.model_folder(builtin.E5_SMALL)
    finally:
        patch.undo()


@settings(FUZZ, max_examples=15)
@given(DAMAGES)
def test_any_damage_to_a_built_folder_is_rebuilt_or_a_clear_error(
    tiny_models: Path, damage: tuple[str, int, float, bytes]
) -> None:
    from kb_core.engines.embedding import builtin

    kind, which, where, data = damage
    files = sorted(p for p in tiny_models.rglob("*") if p.is_file() and p.name != builtin.CHECKED)
    target = files[which % len(files)]
    if kind == "flip" and target.stat().st_size:
        with open(target, "r+b") as handle:
            handle.seek(int(where * max(0, target.stat().st_size - len(data))))
            handle.write(data)
    elif kind == "truncate":
        with open(target, "r+b") as handle:
            handle.truncate(int(where * target.stat().st_size))
    elif kind == "delete":
        target.unlink()
    elif kind in ("marker", "checked"):
        (tiny_models / (builtin.MARKER if kind == "marker" else builtin.CHECKED)).write_bytes(data)
    try:
        folder = builtin.model_folder(builtin.E5_SMALL)
    except EmbeddingError as exc:  # only a models folder that cannot hold a build may refuse
        assert exc.code == "MODEL_FOLDER_UNUSABLE", exc.message
        return
    assert builtin.verify_model_folder(builtin.E5_SMALL) is None
    assert builtin.model_status(builtin.E5_SMALL)["built"] is True
    assert folder == tiny_models


# -- Ray addresses and what answers there ----------------------------------------------------------------------------
class _Answering:
    """A loopback port that answers every connection with ``reply`` (then closes it)."""

    def __init__(self) -> None:
        self.reply = b""
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.sock.accept()
            except OSError:
                return
            with connection:
                try:
                    connection.settimeout(2)
                    connection.recv(64)
                    connection.sendall(self.reply)
                except OSError:
                    pass


@pytest.fixture(scope="module")
def answering() -> Iterator[_Answering]:
    server = _Answering()
    yield server
    server.sock.close()


ADDRESSES = st.one_of(
    st.text(max_size=40),
    st.builds(
        lambda scheme, host, sep, port: f"{scheme}{host}{sep}{port}",
        st.sampled_from(["", "ray://", "http://", "ray:/"]),
        st.sampled_from(["127.0.0.1", "[::1]", "::1", "localhost", "", "a" * 70, "host name", "1.2.3", "[::1"]),
        st.sampled_from([":", "", "::", "/"]),
        st.one_of(st.integers(-5, 70_000).map(str), st.text(alphabet="0123456789x-+ ", max_size=6)),
    ),
)


@settings(FUZZ, max_examples=40)
@given(ADDRESSES)
def test_any_ray_address_is_probed_or_refused_clearly(address: str) -> None:
    pytest.importorskip("ray.data", reason="the optional extra kb-workbench[ray] (Ray Data) is not installed")
    from kb_core.features.ingest.executors.ray_data import probe_address

    if any(c.isalpha() for c in address.split("://")[-1].split(":")[0]) and "localhost" not in address:
        address = "127.0.0.1" + address[len(address.split(":")[0]) :]  # no name lookups on a machine off the net
    try:
        probe_address(address, timeout=0.5)
    except InvalidArgument as exc:
        assert address[:40] in exc.message or "malformed" in exc.message or "address" in exc.message
    except KBError as exc:  # pragma: no cover - a code of its own would do too, but none is expected
        pytest.fail(f"{address!r}: {exc.code} {exc.message}")


@settings(FUZZ, max_examples=25)
@given(st.binary(max_size=40))
def test_whatever_answers_at_the_address_ends_in_a_verdict(answering: _Answering, reply: bytes) -> None:
    pytest.importorskip("ray.data", reason="the optional extra kb-workbench[ray] (Ray Data) is not installed")
    from kb_core.features.ingest.executors.ray_data import probe_address

    answering.reply = reply
    settings_frame = len(reply) >= 9 and reply[3] == 4 and reply[5:9] == bytes(4)
    try:
        probe_address(f"127.0.0.1:{answering.port}", timeout=1.0)
    except InvalidArgument as exc:
        assert not settings_frame and "not a Ray cluster" in exc.message
    else:
        assert settings_frame
