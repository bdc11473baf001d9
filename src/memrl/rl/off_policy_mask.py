"""DeepSeek-V3.2's two off-policy fixes, as TRL implements them: the off-policy sequence mask and the
importance-weighted KL.

Why: a sequence the engine sampled far from the policy now being trained (an older weight version under
asynchronous training, several PPO epochs, or a bf16 engine) gives a noisy gradient, and a noisy *negative* one
pushes probability away from tokens the current policy may not even favour. The off-policy sequence mask
(``algorithm.off_policy_mask_threshold``, TRL's ``off_policy_mask_threshold``, Equation 9 of arXiv 2512.02556)
drops a sequence from the policy loss when its advantage is negative and its mean per-token KL from the sampler
exceeds ``delta``. The KL to the reference is estimated on samples from the old policy, not the current one: the
importance-weighted KL (``algorithm.kl_bias_correction``, TRL's ``use_bias_correction_kl``) multiplies each
token's estimate by the current/old ratio, which makes it unbiased.

Both follow ``trl/trainer/grpo_trainer.py`` at f2cd577 (``get_off_policy_mask``; ``per_token_kl * coef_1``).
"""

from __future__ import annotations

import torch


def off_policy_sequence_mask(advantages: torch.Tensor, log_prob: torch.Tensor, sampling_log_prob: torch.Tensor,
                             response_mask: torch.Tensor, threshold: float) -> torch.Tensor:
    """1 where a token stays in the policy loss, 0 where it is dropped; ``[B, T]`` as ``advantages``.

    A row's KL is the mean over its trained tokens of ``log pi_sampler - log pi`` (no gradient); a token is
    dropped when its advantage is negative and its row's KL exceeds ``threshold``. With one advantage per row
    (the usual case) whole rows go, as TRL's ``(B, 1)`` mask; per-token advantages (turn-level credit) are
    compared token by token, as TRL's mask broadcasts over ``(B, T)`` advantages."""
    kl = (sampling_log_prob.detach() - log_prob.detach()) * response_mask
    mean_kl = kl.sum(dim=-1, keepdim=True) / response_mask.sum(dim=-1, keepdim=True).clamp(min=1.0)
    return ((advantages >= 0) | (mean_kl <= threshold)).to(advantages.dtype)


def importance_ratio(log_prob: torch.Tensor, old_log_prob: torch.Tensor, response_mask: torch.Tensor,
                     per_row: bool) -> torch.Tensor:
    """``pi / pi_old`` with its gradient, per token, or per row (``per_row``: the exponent is the mean of the
    row's token log-ratios, TRL's sequence-level ``coef_1``, as GSPO / LUSPO use), ``[B, T]`` or ``[B, 1]``."""
    log_ratio = log_prob - old_log_prob.detach()
    if per_row:
        log_ratio = (log_ratio * response_mask).sum(dim=-1, keepdim=True) / \
            response_mask.sum(dim=-1, keepdim=True).clamp(min=1.0)
    return torch.exp(log_ratio)
