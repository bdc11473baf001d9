"""Rollout correction over a step's rows, and the trainer/engine mismatch diagnostics logged every step.

Rows are conversations of different lengths; :func:`memrl.rl.rollout_correction` works on
``[B, T]`` tensors, so the rows are padded into one batch (target positions: the engine's
log-prob of token ``t+1`` sits at ``t``), corrected once per step over the whole batch (verl
corrects the whole batch too, so batch normalisation and the episode rule see every row), and
the weights and the reduced loss mask are written back to each row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from memrl.rl.rollout_corr import rollout_correction
from memrl.rl.rollout_metrics import offpolicy_metrics
from memrl.train.batch import Row

# The mean |engine - trainer| log-prob per token that rounding alone explains, by the trainer's dtype:
# float32 measured at 1.5e-7 (HF and vLLM's CPU build); bf16 at 0.0065-0.014 on an H200 (0.5B/1.5B).
MISMATCH_EXPLAINED = {"float32": 1e-3, "float16": 0.02, "bfloat16": 0.05}


def _padded(rows: Sequence[Row]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(trainer log-probs, engine log-probs, loss mask)`` as ``[B, T]`` over target positions."""
    width = max(len(r) - 1 for r in rows)
    old = torch.zeros((len(rows), width), dtype=torch.float32)
    eng = torch.zeros_like(old)
    mask = torch.zeros_like(old)
    for i, r in enumerate(rows):
        n = len(r) - 1
        assert r.old_logprobs is not None
        old[i, :n] = r.old_logprobs[:n]
        eng[i, :n] = torch.as_tensor(list(r.engine_logprobs[1:]), dtype=torch.float32)[:n]
        mask[i, :n] = torch.as_tensor(r.loss_mask[1:], dtype=torch.float32)
    return old, eng, mask


def apply_rollout_correction(rows: Sequence[Row], correction: Any) -> dict[str, float]:
    """Weights and rejection for every row (``row.is_weights``, ``row.train_mask``); verl's metrics."""
    old, eng, mask = _padded(rows)
    for i, r in enumerate(rows):
        r.train_mask, r.is_weights = mask[i, : len(r) - 1].clone(), None
    if not mask.any():
        return {}
    episodes = torch.tensor([r.episode for r in rows])
    weights, kept, metrics = rollout_correction(
        old, eng, mask, rollout_is=correction.rollout_is, rollout_is_threshold=correction.rollout_is_threshold,
        rollout_is_batch_normalize=correction.rollout_is_batch_normalize, rollout_rs=correction.rollout_rs,
        rollout_rs_threshold=correction.rollout_rs_threshold, episode_ids=episodes,
        episode_rejection=correction.episode_rejection)
    for i, r in enumerate(rows):
        n = len(r) - 1
        r.train_mask = kept[i, :n].clone()
        r.is_weights = None if weights is None else weights[i, :n].clone()
    return metrics


def mismatch_metrics(rows: Sequence[Row]) -> dict[str, float]:
    """verl's ``rollout_corr/`` off-policy diagnostics (KL, k3, PPL, chi-square) over rows the trainer scored."""
    scored = [r for r in rows if r.old_logprobs is not None and r.num_response]
    if not scored:
        return {}
    old, eng, mask = _padded(scored)
    if not mask.any():
        return {}
    return {f"rollout_corr/{k}": v for k, v in offpolicy_metrics(old, eng, mask).items()}


def mismatch_warning(mismatch: float, dtype: str, *, temperature: float, engine: str,
                     label: str | None = None) -> str | None:
    """One line naming the likely cause when the first step's mismatch is more than ``dtype`` explains
    (``label``: how the line names the precision, when not by ``dtype``)."""
    bound = MISMATCH_EXPLAINED.get(dtype, MISMATCH_EXPLAINED["bfloat16"])
    if not mismatch > bound:  # NaN is reported elsewhere
        return None
    hint = (f"sampling.temperature={temperature:g}: does the {engine} engine return log-probs of the "
            "temperature-scaled distribution?" if temperature != 1.0 else
            f"is the {engine} engine's log-prob definition the trainer's?")
    return (f"engine and trainer disagree at step 1 by {mismatch:.3g} nats/token, more than {label or dtype} rounding "
            f"explains (<= {bound:g}); likely causes: {hint} a chat template that differs between the two; "
            "a tokenizer difference. See docs/guides/mismatch.md")
