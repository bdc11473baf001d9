"""Policy loss, loss aggregation, KL estimators (verl ``core_algos`` semantics).

``agg_loss`` must see the whole mini-batch for ``token-mean``: the trainer
scales each micro-batch by its share of the mini-batch's tokens so the sum over
micro-batches equals one token-mean over the mini-batch.
"""

from __future__ import annotations

from typing import Literal

import torch

from memrl.rl.functional import masked_mean

AggMode = Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
AGG_MODES: tuple[str, ...] = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
KL_ESTIMATORS: tuple[str, ...] = ("k1", "kl", "abs", "k2", "mse", "k3", "low_var_kl")


def agg_loss(loss_mat: torch.Tensor, loss_mask: torch.Tensor, loss_agg_mode: str = "token-mean",
             norm_length: int | None = None) -> torch.Tensor:
    """Reduce a ``[B, T]`` loss to a scalar.

    ``seq-mean-token-sum-norm`` divides the total by ``B * L`` (verl 0.9.1), with
    ``L = norm_length`` or the padded width ``T``: a constant normaliser, so
    long answers are not down-weighted (Dr. GRPO).
    """
    if loss_agg_mode == "token-mean":
        return masked_mean(loss_mat, loss_mask)
    seq = (loss_mat * loss_mask).sum(dim=-1)
    if loss_agg_mode == "seq-mean-token-sum":
        return seq.mean()
    if loss_agg_mode == "seq-mean-token-mean":
        return (seq / loss_mask.sum(dim=-1)).mean()
    if loss_agg_mode == "seq-mean-token-sum-norm":
        length = norm_length if norm_length is not None else loss_mask.shape[-1]
        return seq.sum() / (loss_mask.shape[0] * length)
    raise ValueError(f"unknown loss_agg_mode {loss_agg_mode!r}; choose one of {', '.join(AGG_MODES)}")


def compute_policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    cliprange: float = 0.2,
    cliprange_low: float | None = None,
    cliprange_high: float | None = None,
    clip_ratio_c: float = 3.0,
    loss_agg_mode: str = "token-mean",
    norm_length: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """PPO clipped surrogate with DAPO clip-higher and dual clip.

    Returns ``(pg_loss, clipfrac, ppo_kl, clipfrac_lower)`` like verl.
    ``norm_length`` is the constant of ``seq-mean-token-sum-norm`` (see :func:`agg_loss`).
    """
    if clip_ratio_c <= 1.0:
        raise ValueError(f"clip_ratio_c must be > 1 for dual-clip PPO, got {clip_ratio_c}")
    low = cliprange if cliprange_low is None else cliprange_low
    high = cliprange if cliprange_high is None else cliprange_high
    neg_kl = torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)
    ratio = torch.exp(neg_kl)
    ppo_kl = masked_mean(-neg_kl, response_mask)
    l1 = -advantages * ratio
    l2 = -advantages * torch.clamp(ratio, 1 - low, 1 + high)
    c1 = torch.maximum(l1, l2)
    clipfrac = masked_mean(torch.gt(l2, l1).float(), response_mask)
    l3 = -advantages * clip_ratio_c
    c2 = torch.minimum(l3, c1)
    clipfrac_lower = masked_mean(torch.gt(c1, l3).float() * (advantages < 0).float(), response_mask)
    losses = torch.where(advantages < 0, c2, c1)
    return agg_loss(losses, response_mask, loss_agg_mode, norm_length), clipfrac, ppo_kl, clipfrac_lower


def kl_penalty(logprob: torch.Tensor, ref_logprob: torch.Tensor, kl_penalty: str = "low_var_kl") -> torch.Tensor:
    """Per-token KL estimate between the policy and the reference.

    k1 ``d``; abs ``|d|``; k2/mse ``0.5 d^2`` with ``d = logp - ref``;
    k3/low_var_kl ``exp(k) - k - 1`` with ``k = clamp(ref - logp, ±20)``, clamped to [-10, 10].
    """
    d = logprob - ref_logprob
    if kl_penalty in ("k1", "kl"):
        return d
    if kl_penalty == "abs":
        return d.abs()
    if kl_penalty in ("k2", "mse"):
        return 0.5 * d.square()
    if kl_penalty in ("k3", "low_var_kl"):
        k = torch.clamp(ref_logprob - logprob, min=-20, max=20)
        return torch.clamp(torch.exp(k) - k - 1, min=-10, max=10)
    raise ValueError(f"unknown KL estimator {kl_penalty!r}; choose one of {', '.join(KL_ESTIMATORS)}")
