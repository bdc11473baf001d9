"""verl's gradient-variance proxies (the ``variance_proxy/*`` metrics it logs beside the optimal token baseline).

Why: a baseline is chosen to lower the variance of the policy gradient, and a run should show whether it does.
Computing per-episode gradient norms costs a backward pass each; verl instead estimates an episode's squared
gradient norm as ``A^2 W``, its squared mean advantage times its score-norm proxy
``W = sum_t (1 - 2 pi_t + sum_v pi_v^2)`` over its generated tokens (the same terms the optimal token baseline
reads). From those, with the step's gradient norm ``|g|``:

- ``proxy1_signal_strength`` = ``|g|^2`` (the mean gradient's squared norm);
- ``proxy2_total_power`` = the mean over episodes of ``A^2 W`` (times the squared mean rollout-correction
  weight of the episode, where one is applied; ``W`` then recovered from the ``rho^2``-scaled terms);
- ``proxy3_pure_noise`` = ``max(0, (proxy2 - proxy1) / (N - 1))``, the variance of the mean over N episodes;
- ``expected_a_squared`` and ``expected_w``: the two factors' means (``W`` here with the ``rho^2`` scaling).

An "episode" is verl's row: its generated tokens in order across conversations (as the token baseline counts
them), over the mask left after the rollout correction's rejections. ``tests/rl/test_variance_proxy.py`` runs
verl's ``compute_variance_proxy_metrics`` from a checkout against this.
"""

from __future__ import annotations

import torch

PREFIX = "variance_proxy/"


def _masked_sum(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.where(mask, values, 0.0).sum(dim=-1)


def _masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return _masked_sum(values, mask) / (mask.sum(dim=-1) + 1e-8)  # verl's masked_mean: an empty row gives 0


def variance_proxy_metrics(advantages: torch.Tensor, logprobs: torch.Tensor, sum_pi_squared: torch.Tensor,
                           mask: torch.Tensor, is_weights: torch.Tensor | None = None,
                           grad_norm: float | None = None) -> dict[str, float]:
    """The five ``variance_proxy/*`` metrics of N episodes given as ``[N, L]`` tensors: per-token advantages,
    the trainer's log-probs of the generated tokens, ``sum pi^2``, the mask of the tokens that train and, where
    the rollout correction weighs tokens, its weights. ``grad_norm`` None: proxies 1 and 3 are 0 (verl's)."""
    mask = mask.bool()
    terms = 1.0 - 2.0 * torch.exp(logprobs.float()) + sum_pi_squared.float()
    rho2 = None if is_weights is None else is_weights.float() ** 2
    scaled = terms if rho2 is None else terms * rho2
    a_mean = _masked_mean(advantages.float(), mask)
    w = _masked_sum(scaled, mask)
    if rho2 is None:
        total = (a_mean ** 2 * w.clamp(min=0.0)).mean()
    else:  # the episode's mean weight squared, times W recovered from the scaled terms (verl divides back)
        w_plain = _masked_sum(scaled / rho2.clamp(min=1e-10), mask).clamp(min=0.0)
        total = (_masked_mean(is_weights.float(), mask) ** 2 * a_mean ** 2 * w_plain).mean()
    signal = None if grad_norm is None else float(grad_norm) ** 2
    n = a_mean.shape[0]
    noise = max(0.0, (float(total) - signal) / (n - 1)) if signal is not None and n > 1 else 0.0
    return {f"{PREFIX}proxy1_signal_strength": signal if signal is not None else 0.0,
            f"{PREFIX}proxy2_total_power": float(total), f"{PREFIX}proxy3_pure_noise": noise,
            f"{PREFIX}expected_a_squared": float((a_mean ** 2).mean()), f"{PREFIX}expected_w": float(w.mean())}
