"""The tools demo's tiny model and its tokenizer, built from a config (no download).

The tokenizer is a byte-level BPE trained with ``tokenizers`` on the domain's own
text (policy, tool schemas, training tickets and their gold episodes). Unlike
the usual word-bounded BPE, merges may cross spaces, except around ids, emails,
numbers, titles and authors, which are cut out first and stay whole tokens. So
the fixed policy and a tool call's JSON skeleton take a few tokens each and a
member or loan id is exactly one token wherever it appears (ticket, tool result,
call): the task for the tiny model is choosing the right tool and copying the
right id, not spelling, and an episode is a few hundred tokens, which is what
makes RL on two CPU cores take minutes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from memrl.models.tiny import CHAT_TEMPLATE, SPECIAL_TOKENS

MODEL_SHAPE = dict(hidden_size=128, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=384)


def isolate_pattern(db: dict[str, Any]) -> str:
    """The pieces that never merge with their neighbours: the database's titles and authors (longest
    first, so a title that contains another wins), ids like M001, emails and numbers."""
    names = {b["title"] for b in db["books"].values()} | {b["author"] for b in db["books"].values()}
    names |= {m["name"] for m in db["members"].values()}
    alts = [re.escape(n) for n in sorted(names, key=len, reverse=True)]
    return "|".join(alts + [r"[A-Z]\d{3}", r"[a-z.]+@[a-z.]+", r"\d+(?:\.\d+)?"])


def build_tokenizer(corpus: Iterable[str], db: dict[str, Any], vocab_size: int = 3000) -> Any:
    """A ``transformers`` fast tokenizer (ChatML specials, eos ``<|im_end|>``) trained on ``corpus``."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(isolate_pattern(db)), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(list(corpus), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|pad|>",
                                   bos_token=None, unk_token=None)
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_model(out: Path, corpus: Iterable[str], db: dict[str, Any], seed: int, vocab_size: int = 3000) -> Path:
    """Write a randomly initialised Llama-architecture model and the tokenizer to ``out`` (deterministic
    in ``seed`` and the corpus).

    Llama, not Qwen2 as elsewhere in memrl's tiny models: ``AutoTokenizer`` (transformers 5) loads a
    qwen2 folder's tokenizer as ``Qwen2Tokenizer``, which replaces the pre-tokenizer with Qwen's own,
    and this tokenizer's cut-outs would be lost; for llama it keeps ``tokenizer.json`` as written."""
    from memrl.models.tiny import save_random_model

    tok = build_tokenizer(corpus, db, vocab_size)
    s = MODEL_SHAPE
    return save_random_model(out, tok, architecture="llama", hidden_size=s["hidden_size"],
                             num_layers=s["num_layers"], num_heads=s["num_heads"], num_kv_heads=s["num_kv_heads"],
                             intermediate_size=s["intermediate_size"], max_position_embeddings=4096,
                             rope_theta=10_000.0, seed=seed)
