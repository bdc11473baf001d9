"""Supervised fine-tuning on trajectories: next-token loss on the generated tokens only.

Used for warm starts (the demo) and rejection-sampling fine-tuning: keep the
trajectories you like (e.g. reward 1), train on exactly the tokens the model
should produce, never on prompts, tool outputs or user turns.

The loss is TRL's SFTTrainer's with ``assistant_only_loss``: summed over the trained targets of an
optimizer batch and divided by their count (transformers' ``num_items_in_batch``; a generated first
token is no target, nothing precedes it), so micro-batching changes nothing. AdamW: ``memrl sft``
passes TRL's weight decay (0.0; when asked for, not on biases and norm weights, as transformers
excludes them); the function's own default (0.01 on every parameter, torch's) is what the demos'
warm starts were tuned with. The learning rate is constant by default (runs here are a few hundred
steps on trajectories already chosen, where a decay to 0 would mostly shorten the run);
``schedule="linear"`` is TRL's default (transformers' linear decay to 0, no warmup).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

import torch

from memrl.train.batch import Row, collate, micro_batches, rows_from_trajectories, token_logprobs
from memrl.types import Trajectory


SCHEDULES = ("constant", "linear")


def targets(row: Row) -> int:
    """Trained positions of ``row``: its generated tokens but a first one (no token precedes it to predict it)."""
    return sum(row.loss_mask[1:])


def _adamw(params: list[Any], lr: float, weight_decay: float, decay_biases_and_norms: bool) -> Any:
    """AdamW with weight decay on matrices, and on biases and norm weights only if asked (TRL decays neither)."""
    flat = 0.0 if not decay_biases_and_norms else weight_decay
    return torch.optim.AdamW([{"params": [p for p in params if p.ndim >= 2], "weight_decay": weight_decay},
                              {"params": [p for p in params if p.ndim < 2], "weight_decay": flat}], lr=lr)


def sft(
    policy: Any,
    trajectories: Sequence[Trajectory],
    *,
    epochs: int = 1,
    lr: float = 1e-4,
    weight_decay: float = 0.01,
    decay_biases_and_norms: bool = True,
    batch_rows: int = 32,
    micro_batch_tokens: int = 16384,
    pad_id: int = 0,
    seed: int = 0,
    schedule: str = "constant",
    on_step: Callable[[int, float], None] | None = None,
    on_start: Callable[[int], None] | None = None,
) -> list[float]:
    """Train ``policy`` in place; returns the mean token loss of each optimizer step. ``on_start(steps)`` is told
    the number of optimizer steps before the first, ``on_step(step, loss)`` after each."""
    if epochs < 1 or batch_rows < 1 or not lr > 0 or schedule not in SCHEDULES:
        raise ValueError(f"sft: epochs {epochs} and batch_rows {batch_rows} must be >= 1, lr {lr} > 0 and "
                         f"schedule {schedule!r} one of {', '.join(SCHEDULES)}")
    rows: list[Row] = [r for r in rows_from_trajectories(trajectories) if targets(r)]
    if not rows:
        raise ValueError("no generated tokens to train on")
    device = next(policy.parameters()).device
    params = [p for p in policy.parameters() if p.requires_grad]
    opt = _adamw(params, lr, weight_decay, decay_biases_and_norms)
    steps = epochs * -(-len(rows) // batch_rows)
    decay = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 if schedule == "constant" else (steps - s) / steps)
    rng = random.Random(seed)
    if on_start:
        on_start(steps)
    losses = []
    policy.train()
    step = 0
    for _ in range(epochs):
        order = list(range(len(rows)))
        rng.shuffle(order)
        for start in range(0, len(order), batch_rows):
            batch_rows_ = [rows[i] for i in order[start: start + batch_rows]]
            n_tok = sum(targets(r) for r in batch_rows_)
            opt.zero_grad(set_to_none=True)
            total = 0.0
            for micro in micro_batches(batch_rows_, micro_batch_tokens):
                group = [batch_rows_[i] for i in micro]
                b = collate(group, pad_id, device)
                logp, _ = token_logprobs(policy, b)
                loss = -(logp * b.loss_mask).sum() / n_tok
                loss.backward()
                total += float(loss.detach())
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            decay.step()
            step += 1
            losses.append(total)
            if on_step:
                on_step(step, total)
    policy.eval()
    return losses
