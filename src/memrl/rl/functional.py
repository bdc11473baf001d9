"""Masked tensor statistics and log-prob/entropy helpers (verl's ``torch_functional`` semantics).

``masked_mean = sum(x*m) / (sum(m) + 1e-8)``; ``masked_var`` is unbiased (Bessel
over the number of valid entries); ``masked_whiten`` subtracts the mean and
multiplies by ``rsqrt(var + 1e-8)``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def masked_sum(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    return (values * mask).sum() if dim is None else (values * mask).sum(dim=dim)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    return masked_sum(values, mask, dim) / ((mask.sum() if dim is None else mask.sum(dim=dim)) + 1e-8)


def masked_var(values: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    mean = masked_mean(values, mask)
    var = masked_mean((values - mean) ** 2, mask)
    if unbiased:
        n = mask.sum()
        if n == 0:
            raise ValueError("masked_var: the mask selects no values")
        if n == 1:
            raise ValueError("masked_var: one value has no unbiased variance")
        var = var * (n / (n - 1))
    return var


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True) -> torch.Tensor:
    mean, var = masked_mean(values, mask), masked_var(values, mask)
    out = (values - mean) * torch.rsqrt(var + 1e-8)
    return out if shift_mean else out + mean


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Categorical entropy over the last dim: ``logsumexp(z) - sum(softmax(z) * z)``."""
    p = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (p * logits).sum(dim=-1)


def sum_pi_squared_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """``sum_v softmax(z)_v^2`` over the last dim, as ``exp(logsumexp(2z) - 2 logsumexp(z))`` (verl's
    calculate_sum_pi_squared_from_logits): the squared norm of the next-token distribution, which the optimal token
    baseline's variance proxy ``1 - 2 pi_t + sum pi^2`` reads."""
    return torch.exp(torch.logsumexp(2.0 * logits, dim=-1) - 2.0 * torch.logsumexp(logits, dim=-1))


def second_stat(logits: torch.Tensor, with_entropy: bool, sum_pi_squared: bool) -> torch.Tensor | None:
    """The per-position value computed beside the log-probs from the same (temperature-scaled) logits: the
    entropy, or the distribution's ``sum pi^2`` (the optimal token baseline's); None: neither."""
    if sum_pi_squared:
        if with_entropy:
            raise ValueError("second_stat: with_entropy and sum_pi_squared are both set; one second value per pass")
        return sum_pi_squared_from_logits(logits)
    return entropy_from_logits(logits) if with_entropy else None


def logprobs_from_logits(logits: torch.Tensor, labels: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Log-prob of ``labels`` under ``softmax(logits / temperature)``, in float32."""
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    return torch.log_softmax(logits, dim=-1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)


def high_entropy_mask(entropy: torch.Tensor, mask: torch.Tensor, quantile: float,
                      pool: Callable[[torch.Tensor], torch.Tensor] | None = None) -> torch.Tensor:
    """The tokens of ``mask`` whose entropy is at least the ``quantile`` of theirs (TRL's get_high_entropy_mask):
    the threshold interpolates linearly between order statistics, as ``torch.quantile`` does, its rank computed
    in the values' dtype as there (``torch.quantile`` refuses more than 2**24 values; this sorts instead).
    ``pool``: maps this call's token entropies to those the threshold is taken over (TRL: every process's,
    :func:`memrl.rl.across_ranks.all_ranks`); None: this call's own. No token in the pool: an empty mask."""
    values = entropy[mask.bool()].float()
    if pool is not None:  # before the empty check: a rank with no token still joins a collective pool
        values = pool(values)
    if values.numel() == 0:
        return torch.zeros_like(mask, dtype=torch.bool)
    ordered = values.sort().values
    rank = torch.tensor(quantile, dtype=ordered.dtype, device=ordered.device) * (ordered.numel() - 1)
    below = rank.long()
    above = torch.clamp(below + 1, max=ordered.numel() - 1)
    threshold = torch.lerp(ordered[below], ordered[above], rank - below)
    return ((entropy * mask.float()) >= threshold) & mask.bool()
