"""A tokenizer backend that counts the texts it is asked to tokenise (tests of "tokenise once", #15)."""

from __future__ import annotations

from typing import Any


class CountingBackend:
    """Delegates to a ``tokenizers.Tokenizer`` and counts the texts its encode methods are given."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.texts = 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not name.startswith("encode"):
            return attr

        def counted(first: Any, *args: Any, **kwargs: Any) -> Any:
            self.texts += len(first) if name.startswith("encode_batch") else 1
            return attr(first, *args, **kwargs)

        return counted
