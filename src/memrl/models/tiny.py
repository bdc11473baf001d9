"""Tiny, download-free tokenizer (and, later, model) for tests and demos.

The tokenizer is a byte-level BPE trained in well under a second with the
``tokenizers`` library on whatever text is given, plus ChatML-style special
tokens, so code paths that need a real tokenizer run offline anywhere.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

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


CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_hf_tokenizer(corpus: Iterable[str] = (), vocab_size: int = 512) -> "PreTrainedTokenizerFast":  # noqa: F821
    """A ``transformers`` fast tokenizer with ChatML chat template and eos ``<|im_end|>``."""
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(
        tokenizer_object=build_tokenizer(corpus, vocab_size),
        eos_token="<|im_end|>",
        pad_token="<|pad|>",
        bos_token=None,
        unk_token=None,
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok


def build_tiny_model(
    out_dir: str | Path,
    corpus: Iterable[str] = (),
    vocab_size: int = 512,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int = 128,
    max_position_embeddings: int = 131072,
    seed: int = 0,
) -> Path:
    """Build a randomly initialised Qwen2-architecture model + tokenizer and save it as an HF folder.

    The result loads with ``AutoModelForCausalLM`` / ``AutoTokenizer`` like any
    downloaded model, so every code path (engines, trainer, export) is
    exercised for real. Initialisation is deterministic in ``seed``.
    """
    tok = build_hf_tokenizer(corpus, vocab_size)
    return save_random_model(out_dir, tok, hidden_size=hidden_size, num_layers=num_layers, num_heads=num_heads,
                             num_kv_heads=num_kv_heads, intermediate_size=intermediate_size,
                             max_position_embeddings=max_position_embeddings, seed=seed)


def save_random_model(out_dir: str | Path, tok: Any, *, architecture: str = "qwen2", hidden_size: int,
                      num_layers: int, num_heads: int, num_kv_heads: int, intermediate_size: int,
                      max_position_embeddings: int, rope_theta: float = 1_000_000.0, seed: int = 0) -> Path:
    """Save a randomly initialised ``architecture`` (qwen2 or llama) model sized for ``tok`` and the
    tokenizer itself as an HF folder (deterministic in ``seed``; tied embeddings, no BOS)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    config_cls, model_cls = {"qwen2": (Qwen2Config, Qwen2ForCausalLM),
                             "llama": (LlamaConfig, LlamaForCausalLM)}[architecture]
    out = Path(out_dir)
    config = config_cls(
        vocab_size=len(tok),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=max_position_embeddings,
        rope_theta=rope_theta,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(seed)
    model = model_cls(config)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out
