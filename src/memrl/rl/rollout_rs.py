"""Rejection sampling on the trainer/engine log-ratio: verl 0.9's ``rollout_rs`` options, one threshold each.

A rejected token (or every token of a rejected sequence) leaves the response mask, so it
neither contributes to the loss nor to its denominator. The statistics follow verl's
``rollout_corr_helper`` (v0.9.0-0.9.1), with ``log r = log pi_train - log pi_rollout`` clamped to
+-20 first:

* ``k1 = -log r`` (ratio bounds ``lower_upper``, compared in log space; one number ``u``
  means ``[1/u, u]``), ``k2 = (log r)^2 / 2`` and ``k3 = r - 1 - log r`` (upper bound only);
* ``token_k*`` judges each token; ``seq_sum_k*``, ``seq_mean_k*`` (``seq_mean_k1`` is the
  geometric-mean ratio) and ``seq_max_k2/k3`` judge a whole row.

Several options are comma-chained (``"token_k1,seq_mean_k3"``) and all must pass.
"""

from __future__ import annotations

import math

import torch

from memrl.config.rollout_corr import parse_rs_options, parse_rs_thresholds
from memrl.rl.rollout_metrics import SAFETY_BOUND, rs_metrics, vmasked_mean, vmasked_sum

def _seq_max(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Largest value over a row's valid tokens (0 for a row with none)."""
    top = values.masked_fill(~mask.bool(), float("-inf")).max(dim=-1).values
    return torch.where(top == float("-inf"), torch.zeros_like(top), top)


def _statistic(option: str, log_ratio: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(per-token statistic [B, T], per-row statistic [B] or None)`` that ``option`` thresholds."""
    safe = torch.clamp(log_ratio, min=-SAFETY_BOUND, max=SAFETY_BOUND)
    kind = option.rsplit("_", 1)[1]
    token = {"k1": -safe, "k2": 0.5 * safe**2, "k3": torch.exp(safe) - 1.0 - safe}[kind]
    if option.startswith("token_"):
        return token, None
    if option.startswith("seq_sum_"):
        row = vmasked_sum(token, mask, -1)
    elif option.startswith("seq_mean_"):
        row = vmasked_mean(token, mask, -1)
    else:
        row = _seq_max(token, mask)
    return row.unsqueeze(-1).expand_as(mask), row


def rejection_mask(log_ratio: torch.Tensor, response_mask: torch.Tensor, rollout_rs: str,
                   rollout_rs_threshold: str | float | None) -> tuple[torch.Tensor, dict[str, float]]:
    """``(response_mask with rejected tokens zeroed, metrics)``: verl's ``compute_rollout_rejection_mask``."""
    options = parse_rs_options(rollout_rs)
    bounds = parse_rs_thresholds(options, rollout_rs_threshold)
    if log_ratio.shape[0] == 0:
        return response_mask, {}
    valid = response_mask.bool()
    seq_valid = response_mask.sum(dim=-1) > 0
    combined = torch.ones_like(response_mask, dtype=log_ratio.dtype)
    metrics: dict[str, float] = {}
    for option in options:
        bound = bounds[option]
        stat, row_stat = _statistic(option, log_ratio, response_mask)
        is_k1 = bound.lower is not None
        upper = math.log(bound.upper) if is_k1 else bound.upper
        lower = math.log(bound.lower) if bound.lower is not None else 0.0
        keep = (stat <= upper) & (stat >= lower) if is_k1 else stat <= upper
        metrics.update(rs_metrics(option, stat, response_mask, seq_valid, row_values=row_stat, upper=upper,
                                  lower=lower, use_lower=is_k1))
        keep_f = keep.to(dtype=log_ratio.dtype)
        combined = combined * keep_f
        seq_kept = (~(~keep & valid)).all(dim=-1)
        metrics[f"rollout_rs_{option}_masked_fraction"] = vmasked_mean(1 - keep_f, response_mask).item()
        n_valid = seq_valid.float().sum()
        metrics[f"rollout_rs_{option}_seq_masked_fraction"] = (
            (((1.0 - seq_kept.to(log_ratio.dtype)) * seq_valid.float()).sum() / n_valid).item()
            if n_valid > 0 else 0.0)
    metrics["rollout_rs_masked_fraction"] = vmasked_mean(1 - combined, response_mask).item()
    kept = (combined > 0.5) & valid
    metrics["rollout_rs_seq_masked_fraction"] = (~kept & valid).any(dim=-1).float().mean().item()
    return (response_mask * combined).to(dtype=response_mask.dtype), metrics
