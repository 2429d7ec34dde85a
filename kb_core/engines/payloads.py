"""Files as a parser process answers them and the importing process passes them on, unopened (#29).

An import scales with cores only as far as its importing process keeps up: whatever it does per chunk is done on
one interpreter lock (Amdahl). So a parser process that parsed and chunked a file answers with a
:class:`FilePayload`: the few fields the importing process needs (counts, checksum, the chunk texts and token ids
when it embeds them) and the rest, the parsed text and the chunks, as one opaque pickle that it never opens.
Segments are then written by worker processes too (:mod:`kb_core.store.segment_jobs`, several at once): the
importing process hands over the payloads with the documents' names and vectors, and only commits the written
segment.
"""

from __future__ import annotations

import dataclasses
import hashlib
import pickle
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kb_core.engines.embedding.base import TokenIds

_PICKLE = pickle.HIGHEST_PROTOCOL


@dataclass(frozen=True)
class PackedTokenIds:
    """The token ids of a file's chunks as three arrays (cheap to send): ``counts`` per chunk (-1: none),
    ``ids`` and ``offsets`` of the chunks with ids one after another, and the tokenizer's fingerprint."""

    counts: np.ndarray
    ids: np.ndarray
    offsets: np.ndarray
    tokenizer: str

    @classmethod
    def pack(cls, chunks: Sequence[Any]) -> PackedTokenIds | None:
        tagged = [c.token_ids for c in chunks if c.token_ids is not None]
        if not tagged:
            return None
        return cls(
            counts=np.array([-1 if c.token_ids is None else len(c.token_ids) for c in chunks], dtype=np.int32),
            ids=np.concatenate([np.asarray(t.ids, dtype=np.int32) for t in tagged]),
            offsets=np.concatenate([np.asarray(t.offsets, dtype=np.int32).reshape(-1, 2) for t in tagged]),
            tokenizer=tagged[0].tokenizer,
        )

    def unpack(self) -> list[TokenIds | None]:
        out: list[TokenIds | None] = []
        start = 0
        for count in self.counts.tolist():
            if count < 0:
                out.append(None)
                continue
            out.append(TokenIds(self.ids[start : start + count], self.offsets[start : start + count], self.tokenizer))
            start += count
        return out


@dataclass
class FilePayload:
    """One parsed and chunked file, as a parser process hands it to the importing process."""

    file_type: str
    chunk_count: int
    size_bytes: int
    sha256: str
    body: bytes  # pickle of (parsed text, chunks without token ids): opened by the segment writer only
    contents: list[str]  # the chunk texts (the importing process embeds them, or keys the embedding cache)
    token_ids: PackedTokenIds | None = None  # what the chunker's tokenizer made of them, for the embedder
    prepared: bytes | None = None  # pickle of the chunks' PreparedChunks, when the parser process made them
    embedded: bool = False  # that preparation holds the chunks' vectors (the hashing embedder)


def file_payload(path: Path, parsed: Any, chunks: Sequence[Any]) -> FilePayload:
    """The payload of ``parsed`` (read from ``path``) cut into ``chunks`` (in a parser process)."""
    data = path.read_bytes()
    stored = [dataclasses.replace(c, token_ids=None) if c.token_ids is not None else c for c in chunks]
    return FilePayload(
        file_type=parsed.file_type,
        chunk_count=len(chunks),
        size_bytes=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        body=pickle.dumps((parsed.text, stored), protocol=_PICKLE),
        contents=[c.content for c in chunks],
        token_ids=PackedTokenIds.pack(chunks),
    )


def pack_prepared(prepared: Any) -> tuple[bytes, bool] | None:
    """A parser process's PreparedChunks as (pickle, whether it holds vectors), or None."""
    if prepared is None:
        return None
    return pickle.dumps(prepared, protocol=_PICKLE), prepared.vectors is not None
