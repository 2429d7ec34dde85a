"""Export and import of whole homes: round trips, merging with renames, and hostile files refused untouched."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import stat
import struct
import tarfile
import threading
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kb_core import KnowledgeBaseService
from kb_core.edges.envelopes import Enveloped
from kb_core.features.results import SearchRequest
from kb_core.features.transfer.format import FORMAT_VERSION, MANIFEST_MEMBER, TransferLimits
from tests.bounded import run_bounded
from tests.lying_zip import claim_compressed_size

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
DOCS = SHARED / "fixtures" / "docs"

ENGLISH = (
    "Photosynthesis converts light energy into chemical energy stored in glucose. "
    "Chlorophyll absorbs red and blue light and reflects green light. "
    "The Calvin cycle fixes carbon dioxide in the stroma of the chloroplast. "
) * 6
ENGLISH_2 = (
    "A lighthouse keeper trims the wick and winds the clockwork every evening. "
    "Ships at sea watch for the flashing beam to avoid the rocks near the harbour. "
) * 6
CHINESE = (
    "光合作用把光能转化为储存在葡萄糖中的化学能。叶绿素吸收红光和蓝光，反射绿光。卡尔文循环在叶绿体基质中固定二氧化碳。"
) * 6
CHINESE_2 = "长城是中国古代的军事防御工程，东起山海关，西至嘉峪关，全长两万多公里。" * 6
QUERIES = ["chlorophyll light", "lighthouse ships harbour", "叶绿素 光能", "长城 防御", "light"]


def _need_shared() -> None:
    if not DOCS.is_dir():
        pytest.skip(f"{DOCS} is absent: the shared .doc/.docx fixtures live in ../shared beside the repository")


def home_listing(root: Path) -> dict[str, str]:
    """Every file (and link) under the home with a hash of its content: equal listings mean an unchanged home."""
    listing: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        relative = str(path.relative_to(root))
        if path.is_symlink():
            listing[relative] = "link:" + str(path.readlink())
        elif path.is_file():
            listing[relative] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            listing[relative] = "dir"
    return listing


def search_rows(session: Any, kb_name: str, query: str, mode: str) -> list[tuple[Any, ...]]:
    envelope = session.search(SearchRequest(query, mode=mode, top_k=10, kb_names=[kb_name], explain=True))
    assert envelope["success"], envelope["message"]
    rows = []
    for chunk in envelope["data"]["chunks"]:
        breakdown = chunk["breakdown"]
        rows.append(
            (
                chunk["id"],
                chunk["doc_name"],
                chunk["chunk_index"],
                chunk["content"],
                chunk["score"],
                breakdown.get("vector_score"),
                breakdown.get("keyword_score"),
            )
        )
    return rows


def assert_same_results(left: list[tuple[Any, ...]], right: list[tuple[Any, ...]], *, same_ids: bool = True) -> None:
    assert len(left) == len(right)
    for a, b in zip(left, right, strict=True):
        start = 0 if same_ids else 1
        assert a[start:4] == b[start:4]
        for x, y in zip(a[4:], b[4:], strict=True):
            if x is None or y is None:
                assert x is y
            else:
                assert abs(x - y) <= 1e-6


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A home with an English and a Chinese KB (TXT, DOCX, DOC; one document deleted) and its export file."""
    _need_shared()
    root = tmp_path_factory.mktemp("source")
    files = root / "files"
    files.mkdir()
    texts = {"photosynthesis.txt": ENGLISH, "lighthouse.txt": ENGLISH_2, "光合作用.txt": CHINESE, "长城.txt": CHINESE_2}
    for name, text in texts.items():
        (files / name).write_text(text, encoding="utf-8")
    (files / "deleted.txt").write_text("This document is deleted before the export. " * 10, encoding="utf-8")
    service = KnowledgeBaseService(root / "home")
    session = Enveloped(service.session())
    for name in ("english", "中文"):
        assert session.create_knowledge_base(name, 64, embedding_model="hashing")["success"]
    english = [files / "photosynthesis.txt", files / "lighthouse.txt", files / "deleted.txt", DOCS / "docx-rs/aa.docx"]
    result = session.import_document([str(p) for p in english], kb_name="english")
    assert result["data"]["failed_count"] == 0, result
    chinese = [files / "光合作用.txt", files / "长城.txt", DOCS / "node-word-extractor/test11.doc"]
    result = session.import_document([str(p) for p in chinese], kb_name="中文")
    assert result["data"]["failed_count"] == 0, result
    assert session.delete_document("deleted.txt", kb_name="english")["success"]
    assert session.save_search_settings(kb_name="中文", top_k=7, vector_weight=0.5, keyword_weight=0.5)["success"]
    export = root / "backup.kbx"
    envelope = session.export_database(str(export))
    assert envelope["success"], envelope
    return {"session": session, "home": service.home.root, "export": export, "envelope": envelope, "files": files}


def fresh_session(path: Path) -> Any:
    return Enveloped(KnowledgeBaseService(path).session())


# -- round trip ----------------------------------------------------------------------------------------------------
def test_export_reports_paths_and_holds_a_versioned_manifest(source: dict[str, Any]) -> None:
    assert source["envelope"]["data"] == {"source_path": str(source["home"]), "export_path": str(source["export"])}
    assert "API keys are never exported" in source["envelope"]["message"]
    with zipfile.ZipFile(source["export"]) as archive:
        manifest = json.loads(archive.read(MANIFEST_MEMBER))
        names = set(archive.namelist())
    assert manifest["format"] == "kb-workbench-export" and manifest["format_version"] == FORMAT_VERSION
    assert set(manifest["files"]) == names - {MANIFEST_MEMBER}
    kbs = {kb["name"]: kb for kb in manifest["knowledge_bases"]}
    assert set(kbs) == {"english", "中文"}
    assert {d["name"] for d in kbs["english"]["documents"]} == {"photosynthesis.txt", "lighthouse.txt", "aa.docx"}
    assert kbs["中文"]["search_settings"]["top_k"] == 7
    assert all(s["dimension"] == 64 for kb in kbs.values() for s in kb["segments"])


def test_round_trip_into_an_empty_home_gives_the_same_search_results(source: dict[str, Any], tmp_path: Path) -> None:
    target = fresh_session(tmp_path / "home")
    envelope = target.import_database(str(source["export"]))
    assert envelope["success"], envelope
    assert envelope["data"]["source_path"] == str(source["export"])
    assert envelope["data"]["imported_kb_count"] == 2
    assert envelope["data"]["imported_doc_count"] == 6
    assert "no API key" in envelope["message"]
    original = source["session"]
    for kb in ("english", "中文"):
        before = original.list_documents(kb_name=kb)["data"]["documents"]
        after = target.list_documents(kb_name=kb)["data"]["documents"]
        key = ("id", "name", "file_type", "chunk_count", "size_bytes", "chunk_size", "status")
        assert sorted(tuple(d[k] for k in key) for d in before) == sorted(tuple(d[k] for k in key) for d in after)
        found = 0
        for query in QUERIES:
            for mode in ("hybrid", "keyword", "semantic"):
                expected = search_rows(original, kb, query, mode)
                found += bool(expected)  # a search may find nothing with evidence (#25): compared all the same
                assert_same_results(expected, search_rows(target, kb, query, mode))
        assert found >= len(QUERIES)
    # The export holds no signatures (its format is unchanged); the import computes them with the segments.
    from kb_core.engines.near_duplicates import text_signatures
    from kb_core.store import catalog

    for record in target.operations.visible_kbs():
        for segment in target.operations.service.reader(record.id).snapshot().segments:
            stored = catalog.signatures_of(segment.row_store)
            assert stored is not None
            expected = text_signatures(segment.chunks.column("content").to_pylist())
            assert stored.sketch.tolist() == expected.sketch.tolist()
    listed = {kb["name"]: kb for kb in target.list_knowledge_bases()["data"]["knowledge_bases"]}
    assert listed["中文"]["embedding_model"] == "hashing"
    assert target.search(SearchRequest("长城", kb_names=["中文"]))["data"]["settings"]["top_k"] == 7
    # the Chinese .doc came through with its text, and its kept original still re-chunks
    doc = next(d for d in target.list_documents(kb_name="中文")["data"]["documents"] if d["file_type"] == "doc")
    text = target.get_item(doc["id"])["data"]["text"]
    assert text == original.get_item(doc["id"])["data"]["text"] and any("\u4e00" <= c <= "\u9fff" for c in text)
    assert target.update_document(doc["name"], 128, kb_name="中文")["success"]


def test_importing_the_same_file_twice_renames_and_overwrites_nothing(source: dict[str, Any], tmp_path: Path) -> None:
    target = fresh_session(tmp_path / "home")
    assert target.import_database(str(source["export"]))["success"]
    first = home_listing(tmp_path / "home" / "kbs")
    first_ids = {kb["name"]: kb["id"] for kb in target.list_knowledge_bases()["data"]["knowledge_bases"]}
    second = target.import_database(str(source["export"]))
    assert second["success"], second
    renamed = {r["from"]: r["to"] for r in second["data"]["renamed_knowledge_bases"]}
    assert set(renamed) == {"english", "中文"}
    assert all(new.startswith(f"{old}_") and len(new) == len(old) + 16 for old, new in renamed.items())
    assert "Renamed" in second["message"]
    after = home_listing(tmp_path / "home" / "kbs")
    assert all(after.get(path) == digest for path, digest in first.items())  # nothing of the first copy changed
    kbs = {kb["name"]: kb for kb in target.list_knowledge_bases()["data"]["knowledge_bases"]}
    assert len(kbs) == 4 and all(kbs[name]["id"] == kb_id for name, kb_id in first_ids.items())
    for old, new in renamed.items():
        for query in QUERIES:
            assert_same_results(
                search_rows(target, old, query, "hybrid"), search_rows(target, new, query, "hybrid"), same_ids=False
            )
    # the copy got fresh ids, so an id still names exactly one document
    ids = [d["id"] for name in kbs for d in target.list_documents(kb_name=name)["data"]["documents"]]
    assert len(ids) == len(set(ids)) == 12


def test_export_of_one_kb_is_a_portable_package(source: dict[str, Any], tmp_path: Path) -> None:
    package = tmp_path / "one.kbx"
    assert source["session"].export_database(package, kb_names=["中文"])["success"]
    target = fresh_session(tmp_path / "home")
    envelope = target.import_database(package)
    assert envelope["data"]["imported_kb_count"] == 1 and envelope["data"]["imported_doc_count"] == 3
    assert [kb["name"] for kb in target.list_knowledge_bases()["data"]["knowledge_bases"]] == ["中文"]


def test_export_refuses_unknown_kbs_and_folders(source: dict[str, Any], tmp_path: Path) -> None:
    missing = source["session"].export_database(tmp_path / "x.kbx", kb_names=["nope"])
    assert missing["error"]["code"] == "KB_NOT_FOUND"
    folder = source["session"].export_database(tmp_path)
    assert folder["error"]["code"] == "INVALID_ARGUMENT" and "folder" in folder["message"]
    assert not (tmp_path / "x.kbx").exists()


def test_api_keys_are_never_exported(tmp_path: Path) -> None:
    session = fresh_session(tmp_path / "home")
    secret = "sk-very-secret-key-0123456789"
    created = session.create_knowledge_base(
        "remote", 64, embedding_model="hashing", embedding_endpoint="http://127.0.0.1:9/v1", embedding_api_key=secret
    )
    assert created["success"], created
    export = tmp_path / "remote.kbx"
    assert session.export_database(export)["success"]
    assert secret.encode() not in export.read_bytes()
    with zipfile.ZipFile(export) as archive:
        assert all(secret.encode() not in archive.read(name) for name in archive.namelist())
    target = fresh_session(tmp_path / "other")
    envelope = target.import_database(export)
    assert envelope["success"] and "'remote'" in envelope["message"] and "key" in envelope["message"]
    record = target.operations.resolve_kb("remote")
    assert not record.has_api_key and record.embedding_endpoint == "http://127.0.0.1:9/v1"


def test_export_while_another_thread_imports_is_a_committed_state(tmp_path: Path) -> None:
    service = KnowledgeBaseService(tmp_path / "home")
    session = Enveloped(service.session())
    assert session.create_knowledge_base("busy", 64, embedding_model="hashing")["success"]
    files = []
    for number in range(8):
        path = tmp_path / f"note{number:02d}.txt"
        path.write_text(f"Note {number} about topic{number}. " * 40 + f"第{number}号笔记。" * 20, encoding="utf-8")
        files.append(path)
    errors: list[str] = []

    def writer() -> None:
        for path in files:
            result = Enveloped(service.session()).import_document([str(path)], kb_name="busy")
            if not result["success"]:
                errors.append(result["message"])

    thread = threading.Thread(target=writer)
    thread.start()
    exports = []
    try:
        while thread.is_alive() or len(exports) < 2:
            path = tmp_path / f"export{len(exports)}.kbx"
            envelope = session.export_database(path)
            assert envelope["success"], envelope
            exports.append(path)
            time.sleep(0.05)  # let the writer thread have the interpreter between exports
    finally:
        thread.join()
    assert not errors
    counts = []
    for number, path in enumerate(exports):
        target = fresh_session(tmp_path / f"target{number}")
        envelope = target.import_database(path)  # validates every document's chunks against its vectors
        assert envelope["success"], envelope
        names = sorted(d["name"] for d in target.list_documents(kb_name="busy")["data"]["documents"])
        assert names == [p.name for p in files[: len(names)]]  # a prefix of the commits: no torn state
        counts.append(len(names))
    assert counts == sorted(counts)


# -- hostile and damaged files --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def small_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("small")
    session = fresh_session(root / "home")
    assert session.create_knowledge_base("small", 64, embedding_model="hashing")["success"]
    (root / "a.txt").write_text("alpha beta gamma. " * 30, encoding="utf-8")
    (root / "b.txt").write_text("数据 导入 导出。" * 30, encoding="utf-8")
    assert session.import_document([str(root / "a.txt"), str(root / "b.txt")], kb_name="small")["success"]
    export = root / "small.kbx"
    assert session.export_database(export)["success"]
    return export


def rebuild(
    source: Path,
    target: Path,
    *,
    replace: dict[str, bytes] | None = None,
    extra: list[tuple[zipfile.ZipInfo, bytes]] | None = None,
    edit_manifest: Callable[[dict[str, Any]], None] | None = None,
    fix_checksums: bool = True,
) -> Path:
    """Copy an export with some members replaced or added; the manifest's checksums follow unless told not to."""
    replace = replace or {}
    extra = extra or []
    with zipfile.ZipFile(source) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    manifest = json.loads(members.pop(MANIFEST_MEMBER))
    members.update(replace)
    for info, data in extra:
        members[info.filename] = data
    if fix_checksums:
        for name, data in members.items():
            manifest["files"][name] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    if edit_manifest is not None:
        edit_manifest(manifest)
    infos = {info.filename: info for info, _ in extra}
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(infos.get(name, zipfile.ZipInfo(name)), data, compress_type=zipfile.ZIP_DEFLATED)
        archive.writestr(MANIFEST_MEMBER, json.dumps(manifest))
    return target


def first_member(export: Path, suffix: str) -> str:
    with zipfile.ZipFile(export) as archive:
        return next(n for n in archive.namelist() if n.endswith(suffix))


def test_an_uploaded_export_is_named_by_the_users_file_name_not_its_temporary_copy(
    tmp_path: Path, small_export: Path
) -> None:
    """The app saves an upload under a temporary name; its messages name the file the user chose (#34)."""
    session = fresh_session(tmp_path / "home")
    copy = tmp_path / "kb-import-f60lbt3a.kbx"
    shutil.copy(small_export, copy)
    imported = session.import_database(str(copy), display_name="我的备份.kbx")
    assert imported["success"] and "from 我的备份.kbx." in imported["message"]
    assert imported["data"]["source_path"] == "我的备份.kbx" and "kb-import-" not in json.dumps(imported)
    copy.write_bytes(b"not a zip at all")
    refused = session.import_database(str(copy), display_name="我的备份.kbx")
    assert not refused["success"] and "我的备份.kbx" in refused["message"]
    assert "kb-import-" not in json.dumps(refused, ensure_ascii=False)


@pytest.fixture
def victim(tmp_path: Path, small_export: Path) -> tuple[Any, Path, dict[str, str]]:
    """A home with one KB already in it, and the listing to compare against after a refused import."""
    session = fresh_session(tmp_path / "victim")
    assert session.import_database(small_export)["success"]
    return session, tmp_path / "victim", home_listing(tmp_path / "victim")


def assert_refused(victim: tuple[Any, Path, dict[str, str]], path: Path, *fragments: str) -> None:
    session, root, before = victim
    envelope = session.import_database(path)
    assert not envelope["success"]
    assert envelope["error"]["code"] == "INVALID_IMPORT_FILE", envelope
    assert "Traceback" not in envelope["message"]
    for fragment in fragments:
        assert fragment in envelope["message"], envelope["message"]
    assert home_listing(root) == before


def test_traversal_member_is_refused(victim: Any, small_export: Path, tmp_path: Path) -> None:
    bad = rebuild(small_export, tmp_path / "bad.kbx", extra=[(zipfile.ZipInfo("../../evil.txt"), b"owned")])
    assert_refused(victim, bad, "'..'")
    nested = zipfile.ZipInfo("kb/0000/seg/0000/files/../../../../evil.txt")
    assert_refused(victim, rebuild(small_export, tmp_path / "bad2.kbx", extra=[(nested, b"x")]), "'..'")
    assert not (tmp_path / "evil.txt").exists()


def test_absolute_member_is_refused(victim: Any, small_export: Path, tmp_path: Path) -> None:
    absolute = tmp_path / "absolute-evil.txt"
    bad = rebuild(small_export, tmp_path / "bad.kbx", extra=[(zipfile.ZipInfo(str(absolute)), b"owned")])
    assert_refused(victim, bad, "absolute")
    windows = rebuild(small_export, tmp_path / "bad2.kbx", extra=[(zipfile.ZipInfo("C:/evil.txt"), b"x")])
    assert_refused(victim, windows, "absolute")
    assert not absolute.exists()


def test_symlink_member_is_refused(victim: Any, small_export: Path, tmp_path: Path) -> None:
    link = zipfile.ZipInfo("kb/0000/seg/0000/files/doc_link.txt")
    link.create_system = 3
    link.external_attr = (stat.S_IFLNK | 0o777) << 16
    bad = rebuild(small_export, tmp_path / "bad.kbx", extra=[(link, b"/etc/passwd")])
    assert_refused(victim, bad, "symbolic link")
    device = zipfile.ZipInfo("kb/0000/seg/0000/files/doc_dev.txt")
    device.external_attr = (stat.S_IFCHR | 0o666) << 16
    assert_refused(victim, rebuild(small_export, tmp_path / "bad2.kbx", extra=[(device, b"")]), "device")


def test_decompression_bomb_is_refused(victim: Any, small_export: Path, tmp_path: Path) -> None:
    bomb = rebuild(
        small_export,
        tmp_path / "bomb.kbx",
        extra=[(zipfile.ZipInfo("kb/0000/seg/0000/files/doc_bomb.txt"), bytes(64 << 20))],
    )
    assert bomb.stat().st_size < 1 << 20
    assert_refused(victim, bomb, "decompression bomb")
    # a member whose header declares a huge size (4 GiB) while holding a few bytes
    honest = rebuild(
        small_export, tmp_path / "huge.kbx", extra=[(zipfile.ZipInfo("kb/0000/seg/0000/files/doc_x.txt"), b"x" * 100)]
    )
    data = bytearray(honest.read_bytes())
    name = b"kb/0000/seg/0000/files/doc_x.txt"
    central = data.find(b"PK\x01\x02")
    while central != -1:
        length = struct.unpack_from("<H", data, central + 28)[0]
        if data[central + 46 : central + 46 + length] == name:
            struct.pack_into("<I", data, central + 24, 0xFFFFFFF0)
            break
        central = data.find(b"PK\x01\x02", central + 4)
    huge = tmp_path / "huge-declared.kbx"
    huge.write_bytes(bytes(data))
    with zipfile.ZipFile(huge) as archive:
        assert archive.getinfo(name.decode()).file_size == 0xFFFFFFF0
    assert_refused(victim, huge, "decompression bomb")


def import_in_a_bounded_child(home: Path, export: Path, file_mb: int | None = None) -> str:
    """``import-db`` of ``export`` into ``home`` in a child under a 512 MB address-space cap (and ``file_mb``);
    its output holds ``code: <error code or none> <message>``."""
    return run_bounded(
        f"""
        from kb_core import KnowledgeBaseService
        from kb_core.edges.envelopes import Enveloped
        result = Enveloped(KnowledgeBaseService({str(home)!r}).session()).import_database({str(export)!r})
        print("code:", result["error"]["code"] if not result["success"] else "none", result["message"])
        """,
        memory_mb=512,
        file_mb=file_mb,
        timeout_s=120,
    )


def lying_export(source: Path, target: Path, name: str, data: bytes, ratio: float = 150) -> Path:
    """``source`` with ``data`` as member ``name`` (listed in the manifest, written last), whose directory entry claims
    ``ratio``:1 compression, under the 200:1 limit, while its deflate stream inflates ~1000-fold."""
    with zipfile.ZipFile(source) as archive:
        members = {n: archive.read(n) for n in archive.namelist()}
    manifest = json.loads(members.pop(MANIFEST_MEMBER))
    if name != MANIFEST_MEMBER:
        manifest["files"][name] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
        members[MANIFEST_MEMBER] = json.dumps(manifest).encode()
    members[name] = data  # last
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for member, content in members.items():
            archive.writestr(member, content)
    target.write_bytes(claim_compressed_size(target.read_bytes(), name, ratio))
    return target


@pytest.mark.parametrize("member", ["kb/0000/seg/0000/files/doc_bomb.txt", MANIFEST_MEMBER])
def test_a_bomb_whose_headers_lie_stops_inflating_at_the_limit(small_export: Path, tmp_path: Path, member: str) -> None:
    """Its headers claim 150:1, its data inflates ~1000-fold: once a 5.8 MB file left a 1 GB member in the home.
    The import runs where no file may pass 16 MB and memory is capped at 512 MB: it must stop long before."""
    if member == MANIFEST_MEMBER:  # valid JSON followed by 192 MB of spaces: parsed in memory, if ever inflated
        with zipfile.ZipFile(small_export) as archive:
            data = archive.read(MANIFEST_MEMBER) + b" " * (192 << 20)
    else:
        data = bytes(64 << 20)
    bomb = lying_export(small_export, tmp_path / "bomb.kbx", member, data)
    assert bomb.stat().st_size < 2 << 20
    with zipfile.ZipFile(bomb) as archive:
        info = archive.getinfo(member)
        assert info.file_size <= 150 * info.compress_size  # the ratio check on the headers passes
    out = import_in_a_bounded_child(tmp_path / "victim", bomb, file_mb=16)
    assert "code: INVALID_IMPORT_FILE" in out and "decompression bomb" in out, out
    assert KnowledgeBaseService(tmp_path / "victim").store.knowledge_bases() == []


def test_member_larger_than_declared_is_refused(victim: Any, small_export: Path, tmp_path: Path) -> None:
    member = first_member(small_export, "texts.parquet")
    honest = rebuild(small_export, tmp_path / "ok.kbx")
    data = bytearray(honest.read_bytes())
    position = data.find(b"PK\x01\x02")
    while position != -1:
        length = struct.unpack_from("<H", data, position + 28)[0]
        if data[position + 46 : position + 46 + length] == member.encode():
            size = struct.unpack_from("<I", data, position + 24)[0]
            struct.pack_into("<I", data, position + 24, size // 2)
        position = data.find(b"PK\x01\x02", position + 4)
    lying = tmp_path / "lying.kbx"
    lying.write_bytes(bytes(data))
    assert_refused(victim, lying)


def test_wrong_checksum_is_refused(victim: Any, small_export: Path, tmp_path: Path) -> None:
    member = first_member(small_export, ".txt")

    def corrupt(manifest: dict[str, Any]) -> None:
        manifest["files"][member]["sha256"] = "0" * 64

    assert_refused(victim, rebuild(small_export, tmp_path / "bad.kbx", edit_manifest=corrupt), "checksum")
    # an altered member whose manifest entry was left alone (same size, different bytes)
    with zipfile.ZipFile(small_export) as archive:
        original = archive.read(member)
    altered = bytes(reversed(original))
    bad = rebuild(small_export, tmp_path / "bad2.kbx", replace={member: altered}, fix_checksums=False)
    assert_refused(victim, bad, "checksum")


def test_truncated_file_is_refused(victim: Any, small_export: Path, tmp_path: Path) -> None:
    data = small_export.read_bytes()
    for fraction in (0.5, 0.99):
        truncated = tmp_path / f"truncated-{fraction}.kbx"
        truncated.write_bytes(data[: int(len(data) * fraction)])
        assert_refused(victim, truncated, "truncated")


def test_not_an_export_file_is_refused(victim: Any, small_export: Path, tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("just some text", encoding="utf-8")
    assert_refused(victim, text, "not a kb-workbench-export file")
    tarball = tmp_path / "backup.tar.gz"
    with tarfile.open(tarball, "w:gz") as archive:
        archive.add(small_export, arcname="backup.kbx")
    assert_refused(victim, tarball, "not a kb-workbench-export file")
    plain = tmp_path / "plain.zip"
    with zipfile.ZipFile(plain, "w") as archive:
        archive.writestr("readme.txt", "hello")
    assert_refused(victim, plain)


def test_future_format_version_is_refused(victim: Any, small_export: Path, tmp_path: Path) -> None:
    def future(manifest: dict[str, Any]) -> None:
        manifest["format_version"] = FORMAT_VERSION + 1

    assert_refused(victim, rebuild(small_export, tmp_path / "future.kbx", edit_manifest=future), "newer", "upgrade")


def test_wrong_vector_dimension_is_refused(victim: Any, small_export: Path, tmp_path: Path) -> None:
    member = first_member(small_export, "vectors.npy")
    with zipfile.ZipFile(small_export) as archive:
        vectors = np.load(io.BytesIO(archive.read(member)))
    narrow = np.ascontiguousarray(vectors[:, :32])
    narrow /= np.linalg.norm(narrow, axis=1, keepdims=True)
    buffer = io.BytesIO()
    np.save(buffer, narrow.astype(np.float32))
    # the manifest still says 64: the array disagrees with it
    bad = rebuild(small_export, tmp_path / "narrow.kbx", replace={member: buffer.getvalue()})
    assert_refused(victim, bad, "32-dimensional", "64")

    def declare_32(manifest: dict[str, Any]) -> None:
        for segment in manifest["knowledge_bases"][0]["segments"]:
            segment["dimension"] = 32

    # file and manifest agree on 32, but the KB's model ("hashing") makes 64-dimensional vectors
    consistent = rebuild(
        small_export, tmp_path / "n2.kbx", replace={member: buffer.getvalue()}, edit_manifest=declare_32
    )
    assert_refused(victim, consistent, "'hashing'", "64", "32")


def _with_raw_manifest(small_export: Path, target: Path, text: str, stored: bool = False) -> Path:
    """The export's members with ``manifest.json`` replaced by ``text`` (which json.dumps could not even write);
    ``stored``: not deflated, so no ratio check applies to it."""
    with zipfile.ZipFile(small_export) as archive:
        members = {name: archive.read(name) for name in archive.namelist() if name != MANIFEST_MEMBER}
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
        archive.writestr(MANIFEST_MEMBER, text, compress_type=zipfile.ZIP_STORED if stored else None)
    return target


@pytest.mark.parametrize("filler", ["{}", "[]", "0", '""'])
def test_a_wide_manifest_is_refused_before_it_is_parsed(small_export: Path, tmp_path: Path, filler: str) -> None:
    """3 MB of ``[{},{},…]`` once cost hundreds of MB to parse (3.4 GB in the attack pass): values are counted
    before anything is built. Run where the address space is capped at 512 MB."""
    with zipfile.ZipFile(small_export) as archive:
        head = json.dumps(json.loads(archive.read(MANIFEST_MEMBER)))[:-1]
    text = head + ', "x": [' + ",".join([filler] * 2_500_000) + "]}"  # 2.5 million values, stored
    wide = _with_raw_manifest(small_export, tmp_path / "wide.kbx", text, stored=True)
    out = import_in_a_bounded_child(tmp_path / "victim", wide)
    assert "code: INVALID_IMPORT_FILE" in out and "more than 2,000,000 values" in out, out


def test_deeply_nested_manifest_is_refused(victim: Any, small_export: Path, tmp_path: Path) -> None:
    with zipfile.ZipFile(small_export) as archive:
        manifest = json.loads(archive.read(MANIFEST_MEMBER))
    head = json.dumps(manifest)[:-1]  # the real manifest, still open for one more key
    text = head + ', "x": ' + "[" * 200_000 + "]" * 200_000 + "}"
    deep = _with_raw_manifest(small_export, tmp_path / "deep.kbx", text)
    assert deep.stat().st_size < 1 << 20
    assert_refused(victim, deep, "nests deeper than")
    # shallow enough for the parser, still far deeper than the format: refused before anything reads it
    manifest["knowledge_bases"][0]["search_settings"] = {"top_k": json.loads("[" * 500 + "]" * 500)}
    assert_refused(victim, rebuild(small_export, tmp_path / "d500.kbx", edit_manifest=lambda m: m.update(manifest)),
                   "nests deeper than")


def _npy_with_header(header: dict[str, Any], payload: bytes) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, header)
    return buffer.getvalue() + payload


def test_vectors_with_a_hostile_npy_header_are_refused_before_reading(
    victim: Any, small_export: Path, tmp_path: Path
) -> None:
    member = first_member(small_export, "vectors.npy")
    with zipfile.ZipFile(small_export) as archive:
        vectors = np.load(io.BytesIO(archive.read(member)))
    payload = vectors.astype("<f4").tobytes()
    rows, dimension = vectors.shape
    assert rows >= 1
    one_row = payload[: 4 * dimension]
    # a header claiming 2^30 x 2^10 floats (4 TiB) over a few kilobytes: never allocated
    huge = _npy_with_header({"descr": "<f4", "fortran_order": False, "shape": (1 << 30, 1 << 10)}, payload)
    assert_refused(victim, rebuild(small_export, tmp_path / "huge.kbx", replace={member: huge}), "shape", "bytes")
    cases = {
        "short": ({"descr": "<f4", "fortran_order": False, "shape": (rows, dimension)}, payload[:-4], "bytes"),
        "long": ({"descr": "<f4", "fortran_order": False, "shape": (rows, dimension)}, payload + b"\0" * 4, "bytes"),
        "object": ({"descr": "|O", "fortran_order": False, "shape": (rows, dimension)}, payload, "float32"),
        "3-d": ({"descr": "<f4", "fortran_order": False, "shape": (rows, dimension, 1)}, payload, "2-D"),
        "rows": ({"descr": "<f4", "fortran_order": False, "shape": (rows + 1, dimension)}, payload + one_row, "chunks"),
    }
    for label, (header, data, fragment) in cases.items():
        bad = rebuild(small_export, tmp_path / f"{label}.kbx", replace={member: _npy_with_header(header, data)})
        assert_refused(victim, bad, fragment)
    garbage = rebuild(small_export, tmp_path / "magic.kbx", replace={member: b"\x93NUMPY\x09\x00" + payload})
    assert_refused(victim, garbage, ".npy")


def test_inconsistent_contents_are_refused(victim: Any, small_export: Path, tmp_path: Path) -> None:
    def missing_member(manifest: dict[str, Any]) -> None:
        manifest["files"]["kb/0000/seg/0000/files/doc_ghost.txt"] = {"sha256": "0" * 64, "size": 1}

    assert_refused(victim, rebuild(small_export, tmp_path / "m.kbx", edit_manifest=missing_member), "missing")

    def bad_name(manifest: dict[str, Any]) -> None:
        manifest["knowledge_bases"][0]["name"] = "../etc"

    assert_refused(victim, rebuild(small_export, tmp_path / "n.kbx", edit_manifest=bad_name), "kb_name")
    unexpected = rebuild(small_export, tmp_path / "u.kbx", extra=[(zipfile.ZipInfo("kb/0000/evil.py"), b"x")])
    assert_refused(victim, unexpected, "not part of the")


def test_failure_at_the_commit_leaves_the_home_unchanged(
    victim: Any, source: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    session, root, before = victim

    def broken(records: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(session.operations.service.home, "_write_registry", broken)
    envelope = session.import_database(source["export"])
    assert not envelope["success"]
    assert home_listing(root) == before


@pytest.mark.model
def test_round_trip_with_the_real_model(tmp_path: Path) -> None:
    session = fresh_session(tmp_path / "home")
    assert session.create_knowledge_base("model", 128, "all-MiniLM-L6-v2")["success"]
    (tmp_path / "en.txt").write_text(ENGLISH + ENGLISH_2, encoding="utf-8")
    (tmp_path / "zh.txt").write_text(CHINESE + CHINESE_2, encoding="utf-8")
    imported = session.import_document([str(tmp_path / "en.txt"), str(tmp_path / "zh.txt")], kb_name="model")
    assert imported["data"]["success_count"] == 2
    export = tmp_path / "model.kbx"
    assert session.export_database(export)["success"]
    with zipfile.ZipFile(export) as archive:
        manifest = json.loads(archive.read(MANIFEST_MEMBER))
    assert manifest["knowledge_bases"][0]["segments"][0]["dimension"] == 384
    target = fresh_session(tmp_path / "other")
    assert target.import_database(export)["success"]
    for query in QUERIES:
        for mode in ("hybrid", "semantic"):
            assert_same_results(search_rows(session, "model", query, mode), search_rows(target, "model", query, mode))


def test_cli_export_and_import_db(small_export: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from kb_core.edges.cli.main import main

    home = tmp_path / "cli-home"
    assert main(["--home", str(home), "import-db", str(small_export)]) == 0
    assert "Imported 1 knowledge base(s)" in capsys.readouterr().out
    package = tmp_path / "one.kbx"
    assert main(["--home", str(home), "export", str(package), "--kb", "small"]) == 0
    assert package.is_file() and "API keys are never exported" in capsys.readouterr().out
    assert main(["--home", str(home), "--json", "import-db", str(package)]) == 0
    envelope = json.loads(capsys.readouterr().out)
    assert envelope["data"]["imported_kb_count"] == 1 and envelope["data"]["renamed_knowledge_bases"]
    broken = tmp_path / "broken.kbx"
    broken.write_bytes(package.read_bytes()[:100])
    assert main(["--home", str(home), "import-db", str(broken)]) == 1
    assert "truncated" in capsys.readouterr().err


# -- knowledge-bundle graphs ---------------------------------------------------------------------------------------
GRAPH_BUNDLE = """\
- type: Document
  doc_uri: "doc-001"
  title: "Lighthouses"
  content: "A lighthouse keeper trims the wick and winds the clockwork every evening so ships avoid the rocks."
- type: Document
  doc_uri: "doc-002"
  content: "长城是中国古代的军事防御工程，东起山海关，西至嘉峪关，全长两万多公里。"
- type: Document
  doc_uri: "doc-003"
  content: "Harbour pilots guide ships past the rocks when fog hides the lighthouse beam."
- type: REFERENCES
  source: { doc_uri: "doc-001" }
  target: { doc_uri: "doc-002" }
  ref_type: "citation"
- type: REFERENCES
  source: { doc_uri: "doc-003" }
  target: { doc_uri: "doc-001" }
"""
GRAPH_QUERIES = ["lighthouse keeper", "长城 防御", "ships rocks fog", "chlorophyll"]


def graph_of(session: Any, kb_name: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    view = session.graph_view(kb_name=kb_name)
    assert view["success"], view
    return view["data"]["nodes"], view["data"]["edges"]


def shadow_files(home: Path, session: Any, kb_name: str) -> dict[str, bytes]:
    folder = home / "kbs" / session.operations.resolve_kb(kb_name).id / "graph" / "shadow"
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != "shadow.json"
    }


@pytest.fixture(scope="module")
def graph_export(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A home with a KB holding a TXT document and an imported bundle (documents + references), and its export."""
    root = tmp_path_factory.mktemp("graph")
    service = KnowledgeBaseService(root / "home")
    session = Enveloped(service.session())
    assert session.create_knowledge_base("graph", 64, embedding_model="hashing")["success"]
    assert session.create_knowledge_base("plain", 64, embedding_model="hashing")["success"]
    (root / "photosynthesis.txt").write_text(ENGLISH, encoding="utf-8")
    assert session.import_document([str(root / "photosynthesis.txt")], kb_name="graph")["success"]
    assert session.import_document([str(root / "photosynthesis.txt")], kb_name="plain")["success"]
    bundle = root / "bundle.yaml"
    bundle.write_text(GRAPH_BUNDLE, encoding="utf-8")
    imported = session.import_knowledge_bundle(str(bundle), kb_name="graph")
    assert imported["success"], imported
    export = root / "graph.kbx"
    envelope = session.export_database(export)
    assert envelope["success"], envelope
    return {"session": session, "home": service.home.root, "export": export, "envelope": envelope}


def test_export_carries_the_graph_state_as_an_optional_member(graph_export: dict[str, Any]) -> None:
    assert "1 knowledge-bundle graph(s) with 3 node(s) and 2 edge(s)" in graph_export["envelope"]["message"]
    with zipfile.ZipFile(graph_export["export"]) as archive:
        manifest = json.loads(archive.read(MANIFEST_MEMBER))
        kbs = {kb["name"]: kb for kb in manifest["knowledge_bases"]}
        graph = kbs["graph"]["graph"]
        state = json.loads(archive.read(graph["path"]))
    assert manifest["format_version"] == FORMAT_VERSION == 1
    assert graph["path"] in manifest["files"] and (graph["nodes"], graph["edges"]) == (3, 2)
    assert "graph" not in kbs["plain"]  # a KB without a graph is exported exactly as before
    assert set(state) == {"version", "ontology", "nodes", "edges"} and len(state["nodes"]) == 3


def test_graph_round_trip_into_an_empty_home(graph_export: dict[str, Any], tmp_path: Path) -> None:
    original = graph_export["session"]
    target = fresh_session(tmp_path / "home")
    envelope = target.import_database(graph_export["export"])
    assert envelope["success"], envelope
    assert "Restored 1 knowledge-bundle graph(s) with 3 node(s) and 2 edge(s)" in envelope["message"]
    assert graph_of(target, "graph") == graph_of(original, "graph")
    assert graph_of(target, "plain") == ([], [])
    assert shadow_files(tmp_path / "home", target, "graph") == shadow_files(graph_export["home"], original, "graph")
    for query in GRAPH_QUERIES:
        for mode in ("hybrid", "keyword", "semantic"):
            assert_same_results(search_rows(original, "graph", query, mode), search_rows(target, "graph", query, mode))
        before = original.search(SearchRequest(query, top_k=2, kb_names=["graph"], expand_graph=True))["data"]["chunks"]
        after = target.search(SearchRequest(query, top_k=2, kb_names=["graph"], expand_graph=True))["data"]["chunks"]
        assert [(c["id"], c.get("expanded", False), c.get("graph")) for c in before] == [
            (c["id"], c.get("expanded", False), c.get("graph")) for c in after
        ]
    node = graph_of(target, "graph")[0][0]["id"]
    assert target.get_item(node)["data"]["neighbours"] == original.get_item(node)["data"]["neighbours"]
    # the imported graph is live: an unchanged node is not re-indexed, a new one is, a delete cascades
    (tmp_path / "more.yaml").write_text(
        GRAPH_BUNDLE.split('- type: Document\n  doc_uri: "doc-002"')[0]
        + '- type: Document\n  doc_uri: "doc-004"\n  content: "新的文档"\n- type: Document\n  action: delete\n'
        '  doc_uri: "doc-003"\n',
        encoding="utf-8",
    )
    more = target.import_knowledge_bundle(str(tmp_path / "more.yaml"), kb_name="graph")
    assert more["success"], more
    stats = more["data"]["stats"]
    assert (stats["documents_indexed"], stats["documents_removed"], stats["edges_cascaded"]) == (1, 1, 1)
    assert target.verify()["success"]


def test_graph_links_follow_fresh_ids_and_renamed_documents(graph_export: dict[str, Any], tmp_path: Path) -> None:
    target = fresh_session(tmp_path / "home")
    assert target.import_database(graph_export["export"])["success"]
    second = target.import_database(graph_export["export"])  # same document ids: the copy gets fresh ones
    assert second["success"], second
    copy = next(r["to"] for r in second["data"]["renamed_knowledge_bases"] if r["from"] == "graph")
    nodes, edges = graph_of(target, copy)
    first_nodes, first_edges = graph_of(target, "graph")
    assert [n["id"] for n in nodes] == [n["id"] for n in first_nodes] and edges == first_edges
    documents = {d["id"]: d["name"] for d in target.list_documents(kb_name=copy)["data"]["documents"]}
    state = graph_nodes(tmp_path / "home", target, copy)
    linked = [n for n in state.values() if n["doc_id"]]
    assert len(linked) == 3 and all(documents[n["doc_id"]] == n["doc_name"] for n in linked)
    assert not {n["doc_id"] for n in linked} & {
        n["doc_id"] for n in graph_nodes(tmp_path / "home", target, "graph").values()
    }
    request = SearchRequest("lighthouse keeper", top_k=1, kb_names=[copy], expand_graph=True)
    hits = target.search(request)["data"]["chunks"]
    assert hits[0]["doc_name"] == "doc-001" and {h["doc_name"] for h in hits[1:]} == {"doc-002", "doc-003"}


def graph_nodes(home: Path, session: Any, kb_name: str) -> dict[str, dict[str, Any]]:
    from kb_core.features.bundles.graph import GraphStore

    return GraphStore(home / "kbs" / session.operations.resolve_kb(kb_name).id).load().nodes


def _graph_member(export: Path) -> tuple[str, dict[str, Any]]:
    with zipfile.ZipFile(export) as archive:
        manifest = json.loads(archive.read(MANIFEST_MEMBER))
        path = next(kb["graph"]["path"] for kb in manifest["knowledge_bases"] if "graph" in kb)
        return path, json.loads(archive.read(path))


def test_hostile_graph_states_are_refused_and_change_nothing(
    victim: Any, graph_export: dict[str, Any], tmp_path: Path
) -> None:
    path, state = _graph_member(graph_export["export"])

    def variant(name: str, edit: Callable[[dict[str, Any]], Any] | None = None, raw: bytes | None = None) -> Path:
        changed = json.loads(json.dumps(state))
        if edit is not None:
            edit(changed)
        data = raw if raw is not None else json.dumps(changed, ensure_ascii=False).encode("utf-8")
        return rebuild(graph_export["export"], tmp_path / f"{name}.kbx", replace={path: data})

    def orphan_edge(s: dict[str, Any]) -> None:
        s["edges"][0]["target"] = "node_" + "0" * 24

    def forged_id(s: dict[str, Any]) -> None:
        s["nodes"][0]["identity"]["doc_uri"] = "someone-else"
        s["nodes"][0]["properties"]["doc_uri"] = "someone-else"

    def wrong_property(s: dict[str, Any]) -> None:
        s["nodes"][0]["properties"]["content"] = 42

    def unknown_type(s: dict[str, Any]) -> None:
        s["nodes"][0]["type"] = "Human"

    def stolen_document(s: dict[str, Any]) -> None:
        s["nodes"][1]["doc_id"] = s["nodes"][0]["doc_id"]

    assert_refused(victim, variant("orphan", orphan_edge), "source and target must be ids of nodes")
    assert_refused(victim, variant("forged", forged_id), "derived from type and identity")
    assert_refused(victim, variant("property", wrong_property), "do not fit its ontology", "[0].content")
    assert_refused(victim, variant("type", unknown_type), "'Human' is not a node type")
    assert_refused(victim, variant("shared", stolen_document), "shared with another node")
    assert_refused(victim, variant("nan", raw=b'{"version": NaN}'), "not valid UTF-8 JSON")
    assert_refused(victim, variant("deep", raw=b"[" * 100_000 + b"]" * 100_000), "nests deeper than")
    wide = variant("wide", lambda s: s.update(padding=[{}] * 1001))
    refused = victim[0].import_database(wide, limits=TransferLimits(max_graph_values=1000))
    assert refused["error"]["code"] == "INVALID_IMPORT_FILE" and "more than 1,000 values" in refused["message"]
    assert_refused(victim, variant("ontology", lambda s: s["ontology"].update(nodes={})), "ontology is invalid")

    def non_bundle_document(s: dict[str, Any]) -> None:
        with zipfile.ZipFile(graph_export["export"]) as archive:
            manifest = json.loads(archive.read(MANIFEST_MEMBER))
        kb = next(kb for kb in manifest["knowledge_bases"] if kb["name"] == "graph")
        txt = next(d["doc_id"] for d in kb["documents"] if d["name"] == "photosynthesis.txt")
        s["nodes"][0]["doc_id"] = txt

    assert_refused(victim, variant("txt", non_bundle_document), "not 'bundle'")
    session, root, before = victim
    too_big = session.import_database(graph_export["export"], limits=TransferLimits(max_graph_bytes=100))
    assert too_big["error"]["code"] == "INVALID_IMPORT_FILE" and "graph" in too_big["message"]
    assert home_listing(root) == before


def test_a_graph_link_to_a_document_missing_from_the_file_is_cleared(
    graph_export: dict[str, Any], tmp_path: Path
) -> None:
    """The source crashed between a bundle's index commit and its graph commit: the node is re-indexed later."""
    path, state = _graph_member(graph_export["export"])
    state["nodes"][0]["doc_id"] = "doc_gone0000000000"
    bad = rebuild(graph_export["export"], tmp_path / "gone.kbx", replace={path: json.dumps(state).encode("utf-8")})
    target = fresh_session(tmp_path / "home")
    envelope = target.import_database(bad)
    assert envelope["success"], envelope
    assert "1 node(s) of 'graph' had no indexed document" in envelope["message"]
    assert (
        target.import_knowledge_bundle(str(_empty_bundle(tmp_path)), kb_name="graph")["data"]["stats"][
            "documents_indexed"
        ]
        == 1
    )
    assert target.verify()["success"]


def _empty_bundle(tmp_path: Path) -> Path:
    path = tmp_path / "empty.yaml"
    path.write_text("[]\n", encoding="utf-8")
    return path


def test_export_while_bundles_import_holds_matching_graph_and_documents(tmp_path: Path) -> None:
    service = KnowledgeBaseService(tmp_path / "home")
    session = Enveloped(service.session())
    assert session.create_knowledge_base("busy", 64, embedding_model="hashing")["success"]
    errors: list[str] = []

    def writer() -> None:
        for number in range(6):
            bundle = tmp_path / f"b{number}.yaml"
            bundle.write_text(
                f'- type: Document\n  doc_uri: "n{number}"\n  content: "Note {number} 第{number}号笔记 " \n'
                + (f'- type: REFERENCES\n  source: {{ doc_uri: "n{number}" }}\n  target: {{ doc_uri: "n0" }}\n')
                * (number > 0),
                encoding="utf-8",
            )
            result = Enveloped(service.session()).import_knowledge_bundle(str(bundle), kb_name="busy")
            if not result["success"]:
                errors.append(result["message"])

    thread = threading.Thread(target=writer)
    thread.start()
    exports = []
    try:
        while thread.is_alive() or len(exports) < 2:
            path = tmp_path / f"export{len(exports)}.kbx"
            assert session.export_database(path)["success"]
            exports.append(path)
            time.sleep(0.02)
    finally:
        thread.join()
    assert not errors
    for number, path in enumerate(exports):
        target = fresh_session(tmp_path / f"target{number}")
        envelope = target.import_database(path)
        assert envelope["success"] and "had no indexed document" not in envelope["message"], envelope
        nodes, edges = graph_of(target, "busy")
        documents = target.list_documents(kb_name="busy")["data"]["documents"]
        assert sorted(d["name"] for d in documents) == sorted(n["doc_name"] for n in nodes)  # no torn state
        assert len(edges) == max(len(nodes) - 1, 0)


# -- a killed import-db --------------------------------------------------------------------------------------------
TRANSFER_WORKER = Path(__file__).with_name("transfer_worker.py")


def _staging(home: Path) -> list[Path]:
    return sorted(p for p in home.glob(".transfer-*") if p.is_dir())


def test_a_killed_import_db_leaves_staging_that_verify_reports_and_the_next_open_removes(
    small_export: Path, tmp_path: Path
) -> None:
    import subprocess
    import sys

    from kb_core.store.verify import verify_home

    home = tmp_path / "home"
    service = KnowledgeBaseService(home)  # a long-running process (the app) has the home open meanwhile
    killed = subprocess.run(
        [sys.executable, str(TRANSFER_WORKER), str(home), str(small_export), "kill"], capture_output=True, timeout=120
    )
    assert killed.returncode == -9, killed.stderr.decode()
    leftovers = _staging(home)
    assert len(leftovers) == 1 and sum(f.stat().st_size for f in leftovers[0].rglob("*") if f.is_file()) > 0
    problems = verify_home(service.home)
    assert len(problems) == 1 and leftovers[0].name in problems[0] and "import-db" in problems[0], problems
    assert Enveloped(service.session()).list_knowledge_bases()["data"]["knowledge_bases"] == []  # nothing half-imported
    reopened = KnowledgeBaseService(home)  # the next open of the home removes it
    assert _staging(home) == [] and list(home.glob(".transfer-*")) == []
    assert verify_home(reopened.home) == []


def test_opening_the_home_keeps_the_staging_of_a_running_import_db(small_export: Path, tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    from kb_core.store.verify import verify_home

    home = tmp_path / "home"
    KnowledgeBaseService(home)
    running = subprocess.Popen(
        [sys.executable, str(TRANSFER_WORKER), str(home), str(small_export), "pause"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert running.stdout is not None and running.stdin is not None
        assert running.stdout.readline().strip() == b"staged"
        staging = _staging(home)
        assert len(staging) == 1
        service = KnowledgeBaseService(home)  # another process opens the home while the import runs
        assert _staging(home) == staging
        assert verify_home(service.home) == []  # a live import is no problem
        running.stdin.write(b"go\n")
        running.stdin.flush()
        assert running.wait(timeout=120) == 0, running.stderr.read().decode() if running.stderr else ""
    finally:
        if running.poll() is None:
            running.kill()
            running.wait()
    assert [r.name for r in service.home.knowledge_bases()] == ["small"]
    assert list(home.glob(".transfer-*")) == []
    # A leftover whose pid now names a live process (reused) is still recognised by its free lock ...
    reused = home / f".transfer-{os.getpid()}-0badc0de"
    (reused / "raw").mkdir(parents=True)
    (home / f"{reused.name}.lock").touch()
    # ... and one written before staging folders had a lock is judged by its (dead) pid.
    legacy = home / ".transfer-999999999-0ldf0rm0"
    legacy.mkdir()
    assert len(verify_home(service.home)) == 2
    KnowledgeBaseService(home)
    assert list(home.glob(".transfer-*")) == []
