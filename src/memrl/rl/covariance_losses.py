"""Policy losses that keep entropy from collapsing: verl's clip_cov and kl_cov (arXiv 2505.22617).

Why: "The Entropy Mechanism of RL for Reasoning LMs" shows the policy's entropy falls in step with the
covariance between a token's log-prob and its advantage; a few tokens with a large covariance drive the
collapse. Both losses single out those tokens within each (micro-)batch and restrain only them:

- ``clip_cov``: among tokens the PPO clip did not already clip, those whose covariance lies in
  ``(clip_cov_lb, clip_cov_ub)``, a random ``clip_cov_ratio`` share of the tokens (at least one) lose their
  gradient. The draw uses torch's global generator, as verl's does (memrl seeds it per run).
- ``kl_cov``: the ``kl_cov_ratio`` share of tokens with the largest covariance (at least one) get the penalty
  ``kl_cov_coef * |log r|`` added to the unclipped ``-A r``; every other token is ``-A r`` with no clip at all.

Covariance per token: ``(A - mean A) * (log p - mean log p)`` over the batch's trained tokens. Each loss follows
``compute_policy_loss_<name>`` of ``verl/trainer/ppo/core_algos.py`` (verl 0.9); ``tests/rl/test_policy_losses.py``
compares them with verl's own functions under the same seed.
"""

from __future__ import annotations

import torch

from memrl.rl.functional import masked_mean
from memrl.rl.losses import agg_loss
from memrl.rl.policy_loss_base import LossOut, register_policy_loss


@register_policy_loss("clip_cov", options=("clip_cov_ratio", "clip_cov_lb", "clip_cov_ub"), dual_clip=False)
def clip_cov_loss(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                  response_mask: torch.Tensor, *, cliprange_low: float = 0.2, cliprange_high: float = 0.2,
                  clip_ratio_c: float = 3.0, loss_agg_mode: str = "token-mean", norm_length: int | None = None,
                  weights: torch.Tensor | None = None, clip_cov_ratio: float = 0.0002, clip_cov_lb: float = 1.0,
                  clip_cov_ub: float = 5.0) -> LossOut:
    """PPO clip, and a random few high-covariance tokens detached (``clipfrac``: the share detached).

    No dual clip, ``clipfrac_lower`` 0, as in verl."""
    neg_kl = log_prob - old_log_prob
    ratio = torch.exp(neg_kl)
    l1 = -advantages * ratio
    l2 = -advantages * torch.clamp(ratio, 1 - cliprange_low, 1 + cliprange_high)
    trained = response_mask > 0
    cov = (advantages - masked_mean(advantages, response_mask)) * \
        (log_prob.detach() - masked_mean(log_prob.detach(), response_mask))
    cov = cov.masked_fill(~trained | ((l2 > l1) & trained), -torch.inf)
    count = max(int(clip_cov_ratio * response_mask.sum().item()), 1)
    candidates = torch.nonzero((cov < clip_cov_ub) & (cov > clip_cov_lb) & trained)
    keep = torch.ones_like(advantages)
    if len(candidates) > 0:
        chosen = candidates[torch.randperm(len(candidates))[:min(count, len(candidates))]]
        keep[chosen[:, 0], chosen[:, 1]] = 0
    losses = torch.maximum(l1, l2) * keep
    if weights is not None:
        losses = losses * weights
    loss = agg_loss(losses, response_mask, loss_agg_mode, norm_length)
    return (loss, masked_mean((keep == 0).float(), response_mask), masked_mean(-neg_kl, response_mask),
            torch.zeros((), device=loss.device))


@register_policy_loss("kl_cov", options=("kl_cov_ratio", "kl_cov_coef"), dual_clip=False, clip_range=False)
def kl_cov_loss(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                response_mask: torch.Tensor, *, cliprange_low: float = 0.2, cliprange_high: float = 0.2,
                clip_ratio_c: float = 3.0, loss_agg_mode: str = "token-mean", norm_length: int | None = None,
                weights: torch.Tensor | None = None, kl_cov_ratio: float = 0.0002,
                kl_cov_coef: float = 0.1) -> LossOut:
    """Unclipped ``-A r``, plus ``kl_cov_coef * |log r|`` on the highest-covariance tokens.

    ``clipfrac``: the share of tokens given the penalty (verl reports none); ``clipfrac_lower`` 0; ``ppo_kl`` the
    mean of ``|log r|``, as verl's kl_cov reports it (the other losses report the mean of ``-log r``)."""
    neg_kl = log_prob - old_log_prob
    ratio = torch.exp(neg_kl)
    losses = -advantages * ratio
    trained = response_mask > 0
    flat = torch.nonzero(trained.reshape(-1), as_tuple=True)[0]
    adv = advantages[trained].detach().reshape(-1).cpu()
    logp = log_prob[trained].detach().reshape(-1).cpu()
    penalised = torch.zeros_like(advantages)
    if len(adv) > 0 and kl_cov_ratio > 0:
        cov = (adv - adv.mean()) * (logp - logp.mean())
        top = flat[torch.topk(cov, max(1, int(len(cov) * kl_cov_ratio)), largest=True).indices.to(flat.device)]
        rows, cols = top // advantages.shape[1], top % advantages.shape[1]
        losses = losses.index_put((rows, cols), losses[rows, cols] + kl_cov_coef * neg_kl[rows, cols].abs())
        penalised[rows, cols] = 1.0
    if weights is not None:
        losses = losses * weights
    loss = agg_loss(losses, response_mask, loss_agg_mode, norm_length)
    return (loss, masked_mean(penalised, response_mask), masked_mean(neg_kl.abs(), response_mask),
            torch.zeros((), device=loss.device))
