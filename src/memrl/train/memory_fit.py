"""Fit the update's micro-batch to the memory this machine has, before a run is killed for using more.

Why: without gradient checkpointing, a decoder keeps every layer's activations for the backward pass, about
``layers x (10 x hidden + 4 x intermediate)`` values a token. SmolLM2-135M in float32 keeps ~1.4 MB a token
(1.2 MB measured on a CPU, SDPA attention), so the default micro-batch of 16,384 tokens needs ~23 GB: on a
laptop or a 24 GB CI machine the kernel kills the process during its first update, with no message and
nothing written. The rollout before it, minutes of work, is lost.

Splitting a mini-batch into more micro-batches changes neither the loss nor its gradient (they are
accumulated), so when the user left ``trainer.micro_batch_tokens`` at its default and it would not fit, the run
lowers it and says so in one line. A value the user chose is kept, with a warning saying what to change.
Multi-process runs only warn (every rank must split the same way), and so does ``algorithm.top_entropy_quantile``
below 1 (its threshold is taken over each micro-batch, so the split changes which tokens it keeps).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

HEADROOM = 0.7  # of the free memory: the logits chunks, the optimizer's first-step state and the engine's cache
SMALLEST = 256  # below this a micro-batch holds less than one typical turn: not worth lowering to


@dataclass(frozen=True)
class Fit:
    tokens: int  # the micro-batch to use
    line: str | None  # what to print: None when the configured one fits


def activation_bytes_per_token(model: Any) -> int | None:
    """Bytes of activations one token keeps for backward, or None for a config without the usual fields."""
    config = getattr(model, "config", None)
    config = getattr(config, "get_text_config", lambda: config)() if config is not None else None
    layers = getattr(config, "num_hidden_layers", None)
    hidden = getattr(config, "hidden_size", None)
    if not layers or not hidden:
        return None
    inner = getattr(config, "intermediate_size", None) or 4 * hidden
    param = next(model.parameters(), None)
    size = 4 if param is None else max(param.element_size(), 2)
    return int(layers) * (10 * int(hidden) + 4 * int(inner)) * size


def free_bytes(device: torch.device) -> int | None:
    """Memory free for this process on ``device``: CUDA's free memory, or the system's available RAM."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    if device.type != "cpu":
        return None
    try:
        import psutil
    except ImportError:  # a dependency of peft's; without it, no estimate
        return None
    return int(psutil.virtual_memory().available)


def state_bytes(model: Any) -> int:
    """Gradients and Adam's two moments of the trainable weights, allocated at the first step."""
    return sum(3 * p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)


def fit_micro_batch(cfg: Any, model: Any, device: torch.device, world: int = 1) -> Fit:
    """The micro-batch of tokens this run can afford (see the module docstring)."""
    tokens = int(cfg.trainer.micro_batch_tokens)
    per_token = activation_bytes_per_token(model)
    free = free_bytes(device)
    if cfg.trainer.gradient_checkpointing or per_token is None or free is None:
        return Fit(tokens, None)
    budget = HEADROOM * free - state_bytes(model)
    if tokens * per_token <= budget:
        return Fit(tokens, None)
    need = f"a micro-batch of {tokens} tokens keeps ~{tokens * per_token / 2**30:.1f} GiB of activations for " \
           f"the backward pass and {device.type} has {free / 2**30:.1f} GiB free"
    afford = SMALLEST
    while afford * 2 * per_token <= budget:
        afford *= 2
    chosen = "micro_batch_tokens" in cfg.trainer.model_fields_set
    per_micro = cfg.algorithm.top_entropy_quantile < 1.0  # its threshold is a quantile of each micro-batch's tokens
    if chosen or world > 1 or per_micro or afford * per_token > budget:
        return Fit(tokens, f"{need}: set trainer.micro_batch_tokens={afford} or trainer.gradient_checkpointing=true "
                           "(the update would likely run out of memory)")
    return Fit(afford, f"trainer.micro_batch_tokens {tokens} -> {afford}: {need} (the same loss and gradient, "
                       "accumulated over more passes; set it, or trainer.gradient_checkpointing=true, to choose)")
