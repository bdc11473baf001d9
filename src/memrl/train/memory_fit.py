"""Split the update's micro-batches further when the configured ones would not fit in memory.

Why: without gradient checkpointing, a decoder keeps every layer's activations for the backward pass. For
SmolLM2-135M in float32 on a CPU that is ~1.4 MB a token, ~0.6 MB more with LoRA on every linear layer (peft's
dropout copies each input), and the attention of a padded row costs ~2 bytes per head, layer and squared
length (the CPU's SDPA with a mask). The default micro-batch of 16,384 tokens of 2K-token MemAgent rows then
needs ~24 GB: on a laptop or a 24 GB CI machine the kernel killed the process in its first update, with no
message and nothing written, after minutes of rollout.

Splitting a mini-batch into more micro-batches changes neither the loss nor its gradient (they are accumulated
with each micro-batch's share), so the update splits further where the estimate says it must, and says so once.
Not where the split is shared: several processes (each rank must run as many passes) and
``algorithm.top_entropy_quantile`` below 1 (its threshold is a quantile of each micro-batch's tokens).
The estimate is from the model's config, not exact, and errs large: a SmolLM2 LoRA step on a CPU, split to spend
~15.2 GiB, peaked at 13.0 GB of RSS, the process included. ``trainer.gradient_checkpointing=true`` (which it leaves
alone) is the real cure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

HEADROOM = 0.7  # of the free memory: the logits chunks, the reference pass, the engine's cache


@dataclass(frozen=True)
class MemoryModel:
    """Bytes a micro-batch of ``rows`` rows padded to ``longest`` tokens keeps for backward, against a budget."""

    per_token: int
    per_square: int  # per row and squared length: attention without a fused kernel
    budget: float

    def cost(self, rows: int, longest: int) -> float:
        return rows * (longest * self.per_token + longest * longest * self.per_square)

    def fits(self, rows: int, longest: int) -> bool:
        return self.cost(rows, longest) <= self.budget


def _text_config(model: Any) -> Any:
    base = model.get_base_model() if hasattr(model, "peft_config") and hasattr(model, "get_base_model") else model
    config = getattr(base, "config", None)
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def activation_bytes(model: Any, device: torch.device) -> tuple[int, int] | None:
    """``(bytes per token, bytes per row and squared length)`` of activations, or None for an unusual config."""
    config = _text_config(model)
    layers, hidden = getattr(config, "num_hidden_layers", None), getattr(config, "hidden_size", None)
    if not layers or not hidden:
        return None
    inner = int(getattr(config, "intermediate_size", None) or 4 * hidden)
    heads = int(getattr(config, "num_attention_heads", None) or 1)
    param = next(model.parameters(), None)
    size = 4 if param is None else max(param.element_size(), 2)
    per_layer = 10 * int(hidden) + 4 * inner
    if hasattr(model, "peft_config"):  # LoRA's dropout copies each adapted layer's input
        per_layer += 6 * int(hidden) + inner
    attention = str(getattr(config, "_attn_implementation", "sdpa") or "sdpa")
    square = 2 * size if attention == "eager" else size // 2 if device.type == "cpu" else 0
    return int(layers) * per_layer * size, int(layers) * heads * square


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
    """Gradients and Adam's two moments of the trainable weights (allocated at the first step)."""
    return sum(3 * p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)


def memory_model(cfg: Any, model: Any, device: torch.device, world: int = 1) -> MemoryModel | None:
    """The estimate the update splits by, or None where it must not split by memory (see the module docstring)."""
    if cfg.trainer.gradient_checkpointing or world > 1 or cfg.algorithm.top_entropy_quantile < 1.0:
        return None
    sizes, free = activation_bytes(model, device), free_bytes(device)
    if sizes is None or free is None:
        return None
    return MemoryModel(sizes[0], sizes[1], HEADROOM * free - state_bytes(model))


def split_note(model: MemoryModel, rows: int, longest: int, configured: int) -> str:
    """The line said the first time memory splits a micro-batch further than ``trainer.micro_batch_tokens``."""
    return (f"micro-batches split further than trainer.micro_batch_tokens={configured}: {rows} rows of {longest} "
            f"tokens would keep ~{model.cost(rows, longest) / 2**30:.1f} GiB of activations for the backward pass "
            f"and ~{model.budget / 2**30:.1f} GiB can be spent (the same loss and gradient, over more passes; "
            "trainer.gradient_checkpointing=true keeps them whole)")
