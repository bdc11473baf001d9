"""TRL's sequence-level policy losses: LUSPO and VESPO (``algorithm.policy_loss=luspo`` / ``vespo``).

Why: GSPO's one ratio per sequence averages each row's loss over its tokens, so a long answer weighs as much as a
short one: LUSPO (arXiv 2602.05261) scales each row's GSPO loss by its length, that is, it sums where GSPO
averages. VESPO (arXiv 2602.10693) drops the hard clip: each token's REINFORCE term ``-A log pi`` is weighted by a
smooth function of the *sequence's* importance weight ``w = prod_t pi_t / pi_old_t``,
``phi(w) = exp(lambda) w^k exp(-lambda w)`` (1 at ``w = 1``, fading on both sides), with ``k`` and ``lambda`` chosen
by the advantage's sign.

Both follow ``trl/trainer/grpo_trainer.py`` (``_compute_loss``, ``get_gamma_weights``) at f2cd577 step for step;
``tests/rl/test_trl_deepseek_losses.py`` checks them against TRL's formulas on random batches.
"""

from __future__ import annotations

import math

import torch

from memrl.rl.functional import masked_mean
from memrl.rl.losses import agg_loss, gspo_aggregated
from memrl.rl.policy_loss_base import LossOut, register_policy_loss

LOG_SMALLEST = math.log(1e-8)  # TRL's lower clamp of a sequence's log-weight (and of a token's correction weight)


@register_policy_loss("luspo", aggregation="seq-mean-token-sum", dual_clip=False, row_linear=True,
                      sequence_ratio=True)
def luspo_loss(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
               response_mask: torch.Tensor, *, cliprange_low: float = 0.2, cliprange_high: float = 0.2,
               clip_ratio_c: float = 3.0, loss_agg_mode: str = "seq-mean-token-sum", norm_length: int | None = None,
               weights: torch.Tensor | None = None) -> LossOut:
    """LUSPO (TRL's ``loss_type="luspo"`` with ``importance_sampling_level="sequence"``): GSPO's clipped sequence
    ratio, each row's loss times its length, mean over rows.

    TRL's ``(per-row loss * mask.sum(1)).mean()``: the sum of a row's per-token losses, each of which is the row's
    loss, so it is GSPO aggregated with ``seq-mean-token-sum``; the gradient flows through every token's
    log-prob, as TRL's sequence-level ratio. A row with no trained token counts as 0 in the mean, as in TRL."""
    return gspo_aggregated(old_log_prob, log_prob, advantages, response_mask, cliprange_low, cliprange_high,
                           weights, "seq-mean-token-sum")


def gamma_weights(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                  response_mask: torch.Tensor, weights: torch.Tensor | None, k_pos: float, lambda_pos: float,
                  k_neg: float, lambda_neg: float) -> torch.Tensor:
    """VESPO's ``phi(w)`` per token (TRL's get_gamma_weights), no gradient.

    ``log w`` is the row's sum of token log-ratios (each clamped to +-20), plus the log of the rollout correction's
    token weights (each clamped to [log 1e-8, 20]: a weight of 0, a token IcePop's band drops, shrinks the whole
    row's phi), clamped to [log 1e-8, 20]. ``k`` and ``lambda`` are the ``_pos`` ones where the advantage is >= 0;
    ``lambda`` at least 1e-4. A non-finite phi is 0."""
    with torch.no_grad():
        token = torch.clamp(log_prob - old_log_prob, -20.0, 20.0)
        if weights is not None:  # the engine-to-trainer correction joins the sequence weight instead of the loss
            token = token + torch.clamp(torch.log(weights), LOG_SMALLEST, 20.0)
        log_w = torch.clamp((token * response_mask).sum(dim=-1, keepdim=True), LOG_SMALLEST, 20.0)
        nonneg = advantages >= 0
        k = torch.where(nonneg, k_pos, k_neg).to(log_w.dtype)
        lam = torch.where(nonneg, lambda_pos, lambda_neg).to(log_w.dtype).clamp(min=1e-4)
        phi = torch.exp(lam + k * log_w - lam * torch.exp(log_w))
        return phi.nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)


@register_policy_loss("vespo", options=("vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg", "vespo_lambda_neg"),
                      dual_clip=False, token_linear=True, token_weights_only=True, clip_range=False)
def vespo_loss(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
               response_mask: torch.Tensor, *, cliprange_low: float = 0.2, cliprange_high: float = 0.2,
               clip_ratio_c: float = 3.0, loss_agg_mode: str = "token-mean", norm_length: int | None = None,
               weights: torch.Tensor | None = None, vespo_k_pos: float = 2.0, vespo_lambda_pos: float = 3.0,
               vespo_k_neg: float = 3.0, vespo_lambda_neg: float = 2.0) -> LossOut:
    """VESPO (TRL's ``loss_type="vespo"``): ``-phi(w) * A * log pi`` per token, ``phi`` detached.

    No clip: ``clip_ratio_low`` / ``clip_ratio_high`` are unused and ``clipfrac`` is 0. The rollout correction's
    token weights enter ``w`` (TRL's vLLM importance ratio, token modes only) instead of multiplying the loss.
    TRL divides by the batch's tokens (as its dapo): ``loss_agg_mode=token-mean``, the default."""
    phi = gamma_weights(old_log_prob, log_prob, advantages, response_mask, weights, vespo_k_pos, vespo_lambda_pos,
                        vespo_k_neg, vespo_lambda_neg)
    losses = -phi * advantages * log_prob
    loss = agg_loss(losses, response_mask, loss_agg_mode, norm_length)
    zero = torch.zeros((), device=loss.device)
    return loss, zero, masked_mean(old_log_prob - log_prob.detach(), response_mask), zero.clone()
