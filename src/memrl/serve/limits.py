"""Per-request limits and checks of ``memrl serve``, applied before a request joins a batch.

A request the model cannot run (an id past the embedding, a prompt plus
``max_tokens`` beyond the position window) would raise inside the batched
decode and, before the engine isolated failures, take every batch-mate down
with it; a request that is merely huge (``n=10**6``, ``max_tokens=10**9``)
would hold the single decode loop for hours. Both are answered with a 400 here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from memrl.serve.errors import APIError

# Sampling temperatures below this are greedy, as in vLLM: dividing logits by ~1e-45 overflows to inf.
GREEDY_BELOW = 1e-5
_SEED_RANGE = (-(2**63), 2**63 - 1)
_WINDOW_ATTRS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")


@dataclass(frozen=True)
class ServeLimits:
    """What one request may ask for.

    ``max_model_len`` bounds prompt + ``max_tokens`` (the model's position window by
    default); ``vocab_size`` bounds token ids (``None`` skips that check, for engines
    that check ids themselves); ``max_n`` bounds ``n``; ``max_prompts`` bounds the
    prompts of one ``/v1/completions`` request, ``max_sequences`` its prompts times ``n`` (every
    sequence the request makes the engine decode: 256 prompts x n=16 would queue 4,096 of them ahead of
    every other client); ``max_body_bytes`` bounds the JSON body.
    """

    max_model_len: int
    vocab_size: int | None = None
    max_n: int = 16
    max_prompts: int = 256
    max_sequences: int = 256
    max_body_bytes: int = 8 * 2**20

    def __post_init__(self) -> None:
        for name in ("max_model_len", "max_n", "max_prompts", "max_sequences", "max_body_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")

    @classmethod
    def for_model(cls, model: Any, *, max_model_len: int | None = None, **kwargs: Any) -> ServeLimits:
        """Limits from a ``transformers`` model: its position window and embedding rows.

        ``max_model_len`` may lower the window (never raise it past what the model was built for).
        """
        window = model_window(model)
        if window is None and max_model_len is None:
            raise ValueError("the model config has no max_position_embeddings: pass --max-model-len")
        if max_model_len is not None and window is not None and max_model_len > window:
            raise ValueError(f"--max-model-len {max_model_len} is larger than the model's window ({window})")
        try:
            vocab = int(model.get_input_embeddings().num_embeddings)
        except Exception:  # models without an nn.Embedding input: fall back to the config
            vocab = getattr(model.config, "vocab_size", None)
        return cls(max_model_len=int(max_model_len or window), vocab_size=vocab, **kwargs)  # type: ignore[arg-type]


def model_window(model: Any) -> int | None:
    """The longest sequence (prompt + completion) the model's config declares, if any."""
    config = getattr(model, "config", None)
    for attr in _WINDOW_ATTRS:
        value = getattr(config, attr, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def check_token_ids(ids: Sequence[Any], field: str, vocab_size: int | None) -> list[int]:
    """Token ids must be JSON integers in ``[0, vocab_size)``; the message names the first bad one."""
    out = []
    for i, t in enumerate(ids):
        if isinstance(t, bool) or not isinstance(t, int):
            raise APIError(400, f"{field}[{i}]: token ids must be integers", code="invalid_value", param=field)
        if t < 0 or (vocab_size is not None and t >= vocab_size):
            top = f"0..{vocab_size - 1}" if vocab_size is not None else ">= 0"
            raise APIError(400, f"{field}[{i}]: token id {t} is outside the vocabulary ({top})",
                           code="invalid_value", param=field)
        out.append(t)
    return out


def parse_prompts(raw: Any, encode: Any, limits: ServeLimits) -> list[list[int]]:
    """``prompt`` of ``/v1/completions`` (text, ids, list of texts, list of id lists) as id lists."""
    if isinstance(raw, str) or (isinstance(raw, list) and raw and not isinstance(raw[0], (str, list))):
        raw = [raw]
    if not isinstance(raw, list) or not raw:
        raise APIError(400, "prompt must be a string, a list of token ids, or a non-empty list of either",
                       code="invalid_value", param="prompt")
    if len(raw) > limits.max_prompts:
        raise APIError(400, f"prompt: {len(raw)} prompts in one request, at most {limits.max_prompts}",
                       code="invalid_value", param="prompt")
    prompts = []
    for k, item in enumerate(raw):
        name = "prompt" if len(raw) == 1 else f"prompt[{k}]"
        if isinstance(item, str):
            ids = check_token_ids(_encoded(encode, item, name), name, limits.vocab_size)
        elif isinstance(item, list):
            ids = check_token_ids(item, name, limits.vocab_size)
        else:
            raise APIError(400, f"{name}: must be a string or a list of token ids", code="invalid_value",
                           param="prompt")
        if not ids:
            raise APIError(400, f"{name}: must not be empty", code="invalid_value", param="prompt")
        prompts.append(ids)
    return prompts


def _encoded(encode: Any, text: str, name: str) -> list[int]:
    """``encode(text)``; text the tokenizer refuses (a lone surrogate such as ``"\\ud800"``) is the request's 400."""
    try:
        return encode(text)
    except Exception as exc:  # noqa: BLE001 - tokenizers raise TypeError, ValueError, their own exceptions
        raise APIError(400, f"{name}: cannot be tokenized: {' '.join(str(exc).split())[:200]}",
                       code="invalid_value", param="prompt") from None


def check_window(prompt_len: int, max_tokens: int, limits: ServeLimits) -> None:
    """Prompt + completion must fit the model's window (the message follows OpenAI's wording)."""
    if prompt_len + max_tokens > limits.max_model_len:
        raise APIError(400, f"This model's maximum context length is {limits.max_model_len} tokens. However, you "
                            f"requested {prompt_len + max_tokens} tokens ({prompt_len} in the prompt, {max_tokens} "
                            "for the completion). Please reduce the prompt or max_tokens.",
                       code="context_length_exceeded", param="max_tokens")


def check_sampling(*, max_tokens: int, temperature: float, top_p: float, top_k: int, n: int,
                   seed: int | None, limits: ServeLimits) -> None:
    """Ranges of the sampling fields (types were checked by pydantic)."""
    def bad(param: str, message: str) -> APIError:
        return APIError(400, f"{param}: {message}", code="invalid_value", param=param)

    if max_tokens < 1:  # vLLM's floor: 0 only means "score the prompt" with echo, which is not served
        raise bad("max_tokens", f"must be >= 1, got {max_tokens}")
    if not math.isfinite(temperature) or temperature < 0:
        raise bad("temperature", f"must be a finite number >= 0, got {temperature}")
    if not math.isfinite(top_p) or not 0 < top_p <= 1:
        raise bad("top_p", f"must be in (0, 1], got {top_p}")
    if top_k < -1:
        raise bad("top_k", f"must be -1 (off), 0 (off) or a positive count, got {top_k}")
    if not 1 <= n <= limits.max_n:
        raise bad("n", f"must be between 1 and {limits.max_n} (--max-n), got {n}")
    if n > 1 and temperature < GREEDY_BELOW:  # vLLM's refusal: n copies of one greedy answer are a caller's mistake
        raise bad("n", f"must be 1 when sampling greedily (temperature 0), got {n}")
    if seed is not None and not _SEED_RANGE[0] <= seed <= _SEED_RANGE[1] - (n - 1):  # choice k: seed + k
        raise bad("seed", "must fit in a signed 64-bit integer" + (f" with n={n} (choice k takes seed + k)" if n > 1 else ""))
