"""Model input built from token ids a text was already tokenised to, so the model need not tokenise it again.

A fast tokenizer's post-processor (BERT's ``[CLS] $A [SEP]``, RoBERTa's ``<s> $A </s>``, any template) wraps a
sequence in special tokens. :class:`InputTemplate` reads that wrapping from the tokenizer itself, by
post-processing a one-token probe, and then builds padded batches (ids, attention mask and, for models that take
them, token type ids) from plain id lists, exactly as the tokenizer would for the same tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from tokenizers import Tokenizer as HFTokenizer


@dataclass(frozen=True)
class InputTemplate:
    """The special tokens around one sequence, their type ids, and the padding of a batch."""

    prefix: tuple[int, ...]
    prefix_types: tuple[int, ...]
    suffix: tuple[int, ...]
    suffix_types: tuple[int, ...]
    sequence_type: int
    pad_id: int
    pad_type_id: int = 0
    token_types: bool = True

    @property
    def special(self) -> int:
        """Special tokens added to each sequence."""
        return len(self.prefix) + len(self.suffix)

    @classmethod
    def from_tokenizer(
        cls, tokenizer: HFTokenizer, *, pad_id: int, pad_type_id: int = 0, token_types: bool = True
    ) -> InputTemplate | None:
        """The template of ``tokenizer``'s post-processor, or None when it does not simply wrap the sequence.

        ``tokenizer`` must have truncation and padding switched off (they would change the probe).
        """
        probe = tokenizer.encode("a", add_special_tokens=False)
        if not probe.ids:
            return None
        full = tokenizer.post_process(probe, None, True)
        mask = list(full.special_tokens_mask)
        inner = [i for i, m in enumerate(mask) if m == 0]
        if not inner:
            return None
        first, last = inner[0], inner[-1]
        ids, types = list(full.ids), list(full.type_ids)
        # Anything but "specials, the sequence unchanged, specials" (e.g. special tokens inside it) is refused.
        if ids[first : last + 1] != list(probe.ids) or len(set(types[first : last + 1])) != 1:
            return None
        return cls(
            prefix=tuple(ids[:first]),
            prefix_types=tuple(types[:first]),
            suffix=tuple(ids[last + 1 :]),
            suffix_types=tuple(types[last + 1 :]),
            sequence_type=types[first],
            pad_id=pad_id,
            pad_type_id=pad_type_id,
            token_types=token_types,
        )

    def batch(self, rows: Sequence[Sequence[int]]) -> dict[str, np.ndarray]:
        """``input_ids``, ``attention_mask`` (and ``token_type_ids``) of ``rows``, right-padded to the longest."""
        p, s = len(self.prefix), len(self.suffix)
        width = max((len(r) for r in rows), default=0) + p + s
        ids = np.full((len(rows), width), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        types = np.full((len(rows), width), self.pad_type_id, dtype=np.int64)
        for r, row in enumerate(rows):
            n = len(row)
            ids[r, :p] = self.prefix
            ids[r, p : p + n] = row
            ids[r, p + n : p + n + s] = self.suffix
            mask[r, : p + n + s] = 1
            types[r, :p] = self.prefix_types
            types[r, p : p + n] = self.sequence_type
            types[r, p + n : p + n + s] = self.suffix_types
        out = {"input_ids": ids, "attention_mask": mask}
        if self.token_types:
            out["token_type_ids"] = types
        return out
