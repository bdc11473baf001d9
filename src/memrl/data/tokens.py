"""Token counting for data reports and token budgets.

With a tokenizer (a Hugging Face folder, hub id, or a ``tokenizer.json`` file)
counts are exact for that tokenizer. Without one, counts are an explicit
approximation (words and punctuation marks), labelled as such in reports.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Protocol

_APPROX = re.compile(r"\w+|[^\w\s]")


class TokenCounter(Protocol):
    name: str
    exact: bool

    def count(self, text: str) -> int: ...


class ApproxCounter:
    """Words + punctuation marks; roughly 0.75x a BPE tokenizer's count on English."""

    name = "approx (words+punctuation; pass --tokenizer for exact counts)"
    exact = False

    def count(self, text: str) -> int:
        return sum(1 for _ in _APPROX.finditer(text))


class HFCounter:
    """Exact counts with a ``tokenizers``/``transformers`` tokenizer (no special tokens)."""

    exact = True

    def __init__(self, spec: str) -> None:
        self.name = spec
        path = Path(spec)
        if path.is_file():
            from tokenizers import Tokenizer

            tok = Tokenizer.from_file(str(path))
            self._encode = lambda text: len(tok.encode(text, add_special_tokens=False).ids)
            return
        from memrl.models.resolve import load_tokenizer

        hf = load_tokenizer(spec)
        self._encode = lambda text: len(hf.encode(text, add_special_tokens=False))

    def count(self, text: str) -> int:
        return self._encode(text)


def load_token_counter(spec: str | None) -> TokenCounter:
    """``None`` gives the approximate counter; anything else must load or raise."""
    return ApproxCounter() if spec is None else HFCounter(spec)
