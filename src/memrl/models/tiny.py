"""Tiny, download-free tokenizer (and, later, model) for tests and demos.

The tokenizer is a byte-level BPE trained in well under a second with the
``tokenizers`` library on whatever text is given, plus ChatML-style special
tokens, so code paths that need a real tokenizer run offline anywhere.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|pad|>"]

_DEFAULT_CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Document 1: Paris is the capital of France. Answer with \\boxed{Paris}.",
    "Memory: the key is 42 and the value is blue. Question: what is the value?",
    "0 1 2 3 4 5 6 7 8 9 10 100 1000 yes no the a an of in on at to for with",
]


def build_tokenizer(corpus: Iterable[str] = (), vocab_size: int = 512) -> "tokenizers.Tokenizer":  # noqa: F821
    """Train a byte-level BPE tokenizer on ``corpus`` (plus a small built-in text)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([*_DEFAULT_CORPUS, *corpus], trainer=trainer)
    return tok


def save_tokenizer(path: str | Path, corpus: Iterable[str] = (), vocab_size: int = 512) -> Path:
    """Write ``tokenizer.json`` to ``path`` (a file path) and return it."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    build_tokenizer(corpus, vocab_size).save(str(p))
    return p
