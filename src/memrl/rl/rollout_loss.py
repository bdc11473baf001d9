"""Policy losses under ``algorithm.rollout_correction``: weighted PPO (decoupled) and verl's bypass mode.

* **Decoupled** (three policies, verl's default): the trainer recomputes the old log-probs; the
  PPO clipped loss of each token is multiplied by its importance weight (computed once per
  step over the whole batch by :func:`memrl.rl.rollout_correction`) and aggregated over the
  response mask left after rejection.
* **Bypass** (two policies, ``bypass_mode``): the engine's log-probs *are* the old ones, so no
  recomputation pass runs. ``loss_type="ppo_clip"`` clips the ratio against the engine (the
  ratio already is the importance weight, so none is applied on top); ``"reinforce"`` is
  ``-A * w * log pi`` with the weights ``w = pi / pi_engine`` of the current policy. Both
  apply the rejection mask. As in verl, both are computed per micro-batch from the current
  log-probs, and ``token-mean`` divides by every valid token, the rejected ones included (the
  trainer's token count): rejecting tokens does not enlarge the others' weight.
"""

from __future__ import annotations

from typing import Any

import torch

from memrl.rl.functional import masked_mean
from memrl.rl.losses import agg_loss, compute_policy_loss
from memrl.rl.offpolicy import clipped_token_losses
from memrl.rl.rollout_corr import rollout_correction

BYPASS_STATS = ("is_weight_mean", "rs_masked_frac", "behav_kl")


def weighted_policy_loss(log_prob: torch.Tensor, old_log_prob: torch.Tensor, advantages: torch.Tensor,
                         response_mask: torch.Tensor, weights: torch.Tensor | None, *, cliprange_low: float,
                         cliprange_high: float, clip_ratio_c: float | None, loss_agg_mode: str,
                         norm_length: int | None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """verl's vanilla PPO loss with ``rollout_is_weights``: per-token clipped loss times the weight."""
    losses, stats = clipped_token_losses(log_prob - old_log_prob.detach(), advantages.detach(), response_mask,
                                          cliprange_low, cliprange_high, clip_ratio_c)
    if weights is not None:
        losses = losses * weights.detach()
    return agg_loss(losses, response_mask, loss_agg_mode, norm_length), stats


def bypass_policy_loss(log_prob: torch.Tensor, rollout_log_prob: torch.Tensor, advantages: torch.Tensor,
                       response_mask: torch.Tensor, correction: Any, *, cliprange_low: float, cliprange_high: float,
                       clip_ratio_c: float | None, loss_agg_mode: str,
                       norm_length: int | None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """verl's ``compute_policy_loss_bypass_mode`` for one micro-batch; ``correction`` is the config section."""
    rollout_log_prob = rollout_log_prob.detach()
    if not response_mask.any():  # a dummy or fully rejected pass: nothing to weigh, a zero loss with a graph
        zero = (log_prob * 0).sum()
        return zero, {k: zero.detach() for k in ("clipfrac", "ppo_kl", "clipfrac_lower", *BYPASS_STATS)}
    with torch.no_grad():
        weights, mask, _ = rollout_correction(
            log_prob.detach(), rollout_log_prob, response_mask, rollout_is=correction.rollout_is,
            rollout_is_threshold=correction.rollout_is_threshold,
            rollout_is_batch_normalize=correction.rollout_is_batch_normalize, rollout_rs=correction.rollout_rs,
            rollout_rs_threshold=correction.rollout_rs_threshold)
    if correction.loss_type == "reinforce":
        losses = -advantages.detach() * log_prob * (weights if weights is not None else 1.0)
        loss = agg_loss(losses, mask, loss_agg_mode, norm_length)
        zero = torch.zeros((), device=loss.device)
        stats = {"clipfrac": zero, "clipfrac_lower": zero.clone(),
                 "ppo_kl": masked_mean(rollout_log_prob - log_prob.detach(), mask)}
    else:
        loss, clipfrac, ppo_kl, lower = compute_policy_loss(
            rollout_log_prob, log_prob, advantages.detach(), mask, cliprange_low=cliprange_low,
            cliprange_high=cliprange_high, clip_ratio_c=3.0 if clip_ratio_c is None else clip_ratio_c,
            loss_agg_mode=loss_agg_mode, norm_length=norm_length)
        stats = {"clipfrac": clipfrac.detach(), "ppo_kl": ppo_kl.detach(), "clipfrac_lower": lower.detach()}
    if loss_agg_mode == "token-mean":  # verl divides the kept tokens' sum by every valid token, rejected included
        loss = loss * (mask.sum() / response_mask.sum())
    w = weights if weights is not None else torch.ones_like(log_prob)
    stats["is_weight_mean"] = masked_mean(w, mask).detach()
    stats["rs_masked_frac"] = masked_mean(1.0 - mask.to(log_prob.dtype), response_mask).detach()
    stats["behav_kl"] = masked_mean(log_prob.detach() - rollout_log_prob, response_mask).detach()
    return loss, stats
