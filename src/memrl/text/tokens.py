"""Tokenizer round trips every generating component uses: stop tokens, encode without specials, decode.

Workflows, the user simulator, the NL judge, the server and ``memrl data filter`` all cut a turn at
the same stop tokens and carry it forward as the same text, so these live in one place.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

_STOP_STRINGS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end|>", "</s>")


def stop_token_ids(tokenizer: Any) -> tuple[int, ...]:
    """EOS plus the usual end-of-turn specials present in this tokenizer's vocabulary."""
    ids: set[int] = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    vocab = tokenizer.get_vocab()
    ids.update(int(vocab[s]) for s in _STOP_STRINGS if s in vocab)
    return tuple(sorted(ids))


def strip_stop(ids: Sequence[int], stops: Sequence[int]) -> list[int]:
    """Generated ids without a trailing stop token (what is carried forward as text)."""
    out = list(ids)
    if out and out[-1] in stops:
        out.pop()
    return out


def encode_text(tokenizer: Any, text: str) -> list[int]:
    """Token ids of ``text`` without special tokens, for arbitrarily long text.

    Goes straight to the Rust tokenizer when there is one: faster, and no
    "sequence longer than model_max_length" warning for a 1M-token document
    that will be read in chunks anyway.
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        return list(backend.encode(text, add_special_tokens=False).ids)
    return list(tokenizer.encode(text, add_special_tokens=False))


def decode(tokenizer: Any, ids: Sequence[int]) -> str:
    """Text of ``ids`` without special tokens."""
    return tokenizer.decode(list(ids), skip_special_tokens=True)


def chat_ids(tokenizer: Any, messages: Sequence[Mapping[str, Any]], tools: Sequence[Any] | None = None, *,
             continue_final: bool = False) -> list[int]:
    """The ids of ``messages`` under the tokenizer's chat template, ready for the assistant's turn.

    What an OpenAI-compatible server builds for the same request, so an agent trained
    here sees the prompts it will be served with. ``continue_final``: the last message is an
    assistant's text to continue (a prefill), left open rather than closed and followed by a new turn.
    """
    kwargs: dict[str, Any] = {"add_generation_prompt": not continue_final, "tokenize": True}
    if continue_final:
        kwargs["continue_final_message"] = True
    if tools:
        kwargs["tools"] = list(tools)
    out = tokenizer.apply_chat_template([dict(m) for m in messages], **kwargs)
    if isinstance(out, Mapping) or hasattr(out, "input_ids"):  # transformers may return a BatchEncoding
        out = out["input_ids"]
    return [int(t) for t in out]
