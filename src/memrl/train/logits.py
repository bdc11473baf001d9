"""Log-probs and entropies at the generated tokens only, without a whole ``[tokens, vocab]`` tensor.

The plain path (``batch.token_logprobs``) runs the whole causal LM, so the LM
head produces float32 logits for every position, prompt included. With a
150K-token vocabulary those logits dominate the update's time and memory, yet
only the positions that predict a generated token (loss mask 1) enter the
loss. Here the decoder runs alone, the hidden states of those positions are
picked out, and the LM head + log-softmax run over them in chunks of at most
``chunk_elements`` logits. When there is more than one chunk, each chunk is
recomputed in backward (activation checkpointing of the head), so only one
chunk of logits is ever alive.

Values at positions outside the loss mask are 0 rather than the model's
log-prob: every consumer in the trainer (policy loss, entropy, KL, mismatch)
multiplies by the mask, so the loss and every gradient equal the plain path.

Models whose causal-LM forward does more than ``lm_head(hidden)`` (logit
soft-capping, logit scaling) and sharded (FSDP) policies, whose root module's
hooks gather the weights, take the plain path.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

from memrl.rl.functional import second_stat

#: logits per chunk of the LM head (float32: 256 MiB); a 150K vocabulary gets ~440 tokens a chunk
DEFAULT_CHUNK_ELEMENTS = 1 << 26
#: config fields that make a causal LM's logits something else than ``lm_head(hidden)``
_LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "logits_scaling", "output_multiplier_scale")


def split_head(model: Any) -> tuple[torch.nn.Module, torch.nn.Module] | None:
    """``(decoder, lm_head)`` of a transformers causal LM (through a peft wrapper), or None if unsupported.

    peft injects its LoRA layers into the base model's modules, so the decoder
    and head returned here run with the adapters as they are (active or not).
    """
    base = model.get_base_model() if hasattr(model, "get_base_model") and hasattr(model, "peft_config") else model
    get_decoder = getattr(base, "get_decoder", None)
    get_head = getattr(base, "get_output_embeddings", None)
    if get_decoder is None or get_head is None:
        return None
    config = getattr(base, "config", None)
    if any(getattr(config, name, None) not in (None, 1.0) for name in _LOGIT_TRANSFORMS):
        return None
    try:
        decoder, head = get_decoder(), get_head()
    except (AttributeError, NotImplementedError):
        return None
    if decoder is None or head is None or decoder is base:
        return None
    return decoder, head


def _head_stats(head: torch.nn.Module, hidden: torch.Tensor, targets: torch.Tensor, temperature: float,
                with_entropy: bool, sum_pi_squared: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    logits = head(hidden).float()
    if temperature != 1.0:
        logits = logits / temperature
    logp = torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    second = second_stat(logits, with_entropy, sum_pi_squared)
    return logp, torch.zeros_like(logp) if second is None else second


def head_logprobs(head: torch.nn.Module, hidden: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0,
                  with_entropy: bool = False, chunk_elements: int = DEFAULT_CHUNK_ELEMENTS,
                  sum_pi_squared: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-prob of ``targets`` ``[N]`` (and entropy, or ``sum pi^2``) from hidden states ``[N, H]``, chunked over N.

    With several chunks and autograd on, each chunk's head is checkpointed: its
    logits are freed after the forward and recomputed in backward.
    """
    vocab = int(getattr(head, "out_features", 0) or head.weight.shape[0])
    size = max(1, chunk_elements // max(vocab, 1))
    n = hidden.shape[0]
    if n <= size:
        return _head_stats(head, hidden, targets, temperature, with_entropy, sum_pi_squared)
    grad = torch.is_grad_enabled() and (hidden.requires_grad or any(p.requires_grad for p in head.parameters()))
    logps, ents = [], []
    for start in range(0, n, size):
        h, t = hidden[start:start + size], targets[start:start + size]
        if grad:
            lp, en = checkpoint(_head_stats, head, h, t, temperature, with_entropy, sum_pi_squared,
                                use_reentrant=False)
        else:
            lp, en = _head_stats(head, h, t, temperature, with_entropy, sum_pi_squared)
        logps.append(lp)
        ents.append(en)
    return torch.cat(logps), torch.cat(ents)


def response_logprobs(model: Any, batch: Any, temperature: float = 1.0, with_entropy: bool = False,
                      chunk_elements: int = DEFAULT_CHUNK_ELEMENTS,
                      sum_pi_squared: bool = False) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """``[B, L-1]`` log-probs (and entropies, or ``sum pi^2``) at the loss-mask positions of a collated batch, 0
    elsewhere.

    Returns None when ``model`` cannot be split into decoder and head; the
    caller then uses the whole-model path.
    """
    parts = split_head(model)
    if parts is None:
        return None
    decoder, head = parts
    where = batch.loss_mask > 0
    pack = getattr(batch, "pack", None)
    attn = getattr(getattr(decoder, "config", None), "_attn_implementation", None)
    if pack is not None and attn in ("sdpa", "eager"):  # rows sharing a prompt: the prompt runs once
        dtype = next(head.parameters()).dtype
        hidden = decoder(input_ids=pack.input_ids, attention_mask=pack.attention_mask(attn, dtype),
                         position_ids=pack.position_ids, use_cache=False)
        hidden = hidden[0] if isinstance(hidden, tuple) else hidden.last_hidden_state
        picked = hidden.reshape(-1, hidden.shape[-1])[pack.source]
    else:
        hidden = decoder(input_ids=batch.input_ids, attention_mask=batch.forward_mask(), use_cache=False)
        hidden = hidden[0] if isinstance(hidden, tuple) else hidden.last_hidden_state
        picked = hidden[:, :-1][where]
    lp, en = head_logprobs(head, picked, batch.targets[where], temperature, with_entropy, chunk_elements,
                           sum_pi_squared)
    logp = torch.zeros(batch.targets.shape, dtype=torch.float32, device=lp.device).masked_scatter(where, lp)
    ent = torch.zeros_like(logp).masked_scatter(where, en) if with_entropy or sum_pi_squared else None
    return logp, ent
