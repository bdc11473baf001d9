"""Policy losses that bound a divergence instead of the ratio: verl's dppo_tv, dppo_kl and dro.

Why: PPO's ratio clip treats a token whose probability moves from 0.001 to 0.002 (ratio 2, clipped) like one that
moves from 0.4 to 0.8, although the first barely changes the policy. DPPO (arXiv 2602.04879) keeps or drops a
token's gradient by how far its *probability* moved: the total variation ``|p - p_old|`` (``dppo_tv``) or the
binary KL between ``Bernoulli(p_old)`` and ``Bernoulli(p)`` (``dppo_kl``), against ``clip_ratio_high`` where the
advantage is positive and ``clip_ratio_low`` where it is not (verl's recipe: 0.15 for TV, 0.05 for KL). The kept
tokens' REINFORCE term ``-A log p`` is weighted by the stop-gradient ratio truncated at ``clip_ratio_c`` (truncated
importance sampling in place of the dual clip). DRO adds no clip at all: a quadratic penalty ``beta/2 (log r)^2``
holds the policy near the one that sampled.

Each follows ``compute_policy_loss_<name>`` of ``verl/trainer/ppo/core_algos.py`` (verl 0.9) step for step;
``tests/rl/test_policy_losses.py`` runs verl's own functions from a checkout against these.
"""

from __future__ import annotations

import torch

from memrl.rl.functional import masked_mean
from memrl.rl.losses import agg_loss
from memrl.rl.policy_loss_base import LossOut, register_policy_loss


def _dppo(valid: torch.Tensor, ratio: torch.Tensor, neg_kl: torch.Tensor, log_prob: torch.Tensor,
          advantages: torch.Tensor, response_mask: torch.Tensor, clip_ratio_c: float, loss_agg_mode: str,
          norm_length: int | None, weights: torch.Tensor | None) -> LossOut:
    """The loss both DPPO variants share once they know which tokens stay (``valid``, 0/1 per token)."""
    truncated = torch.clamp(ratio, max=clip_ratio_c).detach()
    losses = -advantages * truncated * log_prob * valid
    if weights is not None:
        losses = losses * weights
    loss = agg_loss(losses, response_mask, loss_agg_mode, norm_length)
    dropped = masked_mean(1.0 - valid, response_mask)
    truncated_kept = masked_mean((ratio > clip_ratio_c).float() * valid, response_mask)
    return loss, dropped, masked_mean(-neg_kl, response_mask), truncated_kept


def _log_ratio(log_prob: torch.Tensor, old_log_prob: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """verl clamps the log-ratio to +-20 before ``exp`` in both DPPO variants."""
    neg_kl = torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)
    return neg_kl, torch.exp(neg_kl)


@register_policy_loss("dppo_tv", token_linear=True)
def dppo_tv_loss(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                 response_mask: torch.Tensor, *, cliprange_low: float = 0.2, cliprange_high: float = 0.2,
                 clip_ratio_c: float = 3.0, loss_agg_mode: str = "token-mean", norm_length: int | None = None,
                 weights: torch.Tensor | None = None) -> LossOut:
    """DPPO-Binary-TV: a token keeps its gradient while ``p - p_old <= clip_ratio_high`` (A > 0) or
    ``p - p_old >= -clip_ratio_low`` (A <= 0), probabilities not ratios.

    ``clipfrac``: tokens dropped; ``clipfrac_lower``: kept tokens whose ratio was truncated at ``clip_ratio_c``."""
    neg_kl, ratio = _log_ratio(log_prob, old_log_prob)
    moved = torch.exp(log_prob) - torch.exp(old_log_prob)
    valid = torch.where(advantages > 0, moved <= cliprange_high, moved >= -cliprange_low).detach().float()
    return _dppo(valid, ratio, neg_kl, log_prob, advantages, response_mask, clip_ratio_c, loss_agg_mode,
                 norm_length, weights)


@register_policy_loss("dppo_kl", token_linear=True)
def dppo_kl_loss(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                 response_mask: torch.Tensor, *, cliprange_low: float = 0.2, cliprange_high: float = 0.2,
                 clip_ratio_c: float = 3.0, loss_agg_mode: str = "token-mean", norm_length: int | None = None,
                 weights: torch.Tensor | None = None) -> LossOut:
    """DPPO-Binary-KL: the token's binary KL ``KL(Bern(p_old) || Bern(p))`` against the thresholds, checked only
    in the direction the advantage pushes (A > 0: while p rises; A <= 0: while p falls).

    ``clipfrac``: tokens dropped; ``clipfrac_lower``: kept tokens whose ratio was truncated at ``clip_ratio_c``."""
    neg_kl, ratio = _log_ratio(log_prob, old_log_prob)
    p, p_old = torch.exp(log_prob), torch.exp(old_log_prob)
    binary_kl = p_old * (old_log_prob - log_prob) + (1 - p_old) * torch.log((1.0 - p_old + 1e-8) / (1.0 - p + 1e-8))
    rising = (binary_kl <= cliprange_high) | (p <= p_old)
    falling = (binary_kl <= cliprange_low) | (p >= p_old)
    valid = torch.where(advantages > 0, rising, falling).detach().float()
    return _dppo(valid, ratio, neg_kl, log_prob, advantages, response_mask, clip_ratio_c, loss_agg_mode,
                 norm_length, weights)


@register_policy_loss("dro", options=("dro_beta",), required=("dro_beta",), dual_clip=False, clip_range=False)
def dro_loss(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
             response_mask: torch.Tensor, *, cliprange_low: float = 0.2, cliprange_high: float = 0.2,
             clip_ratio_c: float = 3.0, loss_agg_mode: str = "token-mean", norm_length: int | None = None,
             weights: torch.Tensor | None = None, dro_beta: float | None = None) -> LossOut:
    """DRO: ``-(A log p - beta/2 (log p - log p_old)^2)`` per token; ``dro_beta`` (> 0) has no default, as in verl.

    No clip: ``clipfrac`` and ``clipfrac_lower`` are 0."""
    if dro_beta is None or dro_beta <= 0:
        raise ValueError("policy_loss=dro needs algorithm.dro_beta > 0 (the weight of its log-ratio penalty)")
    log_ratio = log_prob - old_log_prob
    losses = -(log_prob * advantages - 0.5 * dro_beta * log_ratio.square())
    if weights is not None:
        losses = losses * weights
    loss = agg_loss(losses, response_mask, loss_agg_mode, norm_length)
    zero = torch.zeros((), device=loss.device)
    return loss, zero, masked_mean(-log_ratio, response_mask), zero.clone()
