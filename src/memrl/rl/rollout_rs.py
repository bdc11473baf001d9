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
from dataclasses import dataclass

import torch

from memrl.rl.rollout_metrics import SAFETY_BOUND, rs_metrics, vmasked_mean, vmasked_sum

RS_OPTIONS: tuple[str, ...] = (
    "token_k1", "token_k2", "token_k3",
    "seq_sum_k1", "seq_sum_k2", "seq_sum_k3",
    "seq_mean_k1", "seq_mean_k2", "seq_mean_k3",
    "seq_max_k2", "seq_max_k3",
)


@dataclass(frozen=True)
class RsBound:
    """One option's bounds: ``lower`` only for ``*_k1`` (a ratio), ``upper`` always."""

    lower: float | None
    upper: float


def parse_rs_options(rollout_rs: str) -> list[str]:
    """``"token_k1, seq_mean_k3"`` -> the distinct options in order; an unknown name is refused."""
    if not isinstance(rollout_rs, str):
        raise ValueError("rollout_rs must be a non-empty string (comma separated for multiple options)")
    names = [opt.strip() for opt in rollout_rs.split(",") if opt.strip()]
    if not names:
        raise ValueError("rollout_rs must name at least one option")
    for name in names:
        if name not in RS_OPTIONS:
            raise ValueError(f"rollout_rs: unknown option {name!r}; choose from {', '.join(RS_OPTIONS)}")
    return list(dict.fromkeys(names))


def _one_bound(option: str, spec: str) -> RsBound:
    if option.endswith("k1"):
        lower_s, upper_s = spec.split("_", 1) if "_" in spec else (str(1.0 / float(spec)), spec)
        try:
            lower, upper = float(lower_s), float(upper_s)
        except ValueError:
            raise ValueError(f"rollout_rs_threshold: {spec!r} is not a number for option {option!r}") from None
        if lower <= 0 or upper <= 0 or lower > upper:
            raise ValueError(f"rollout_rs_threshold for {option!r} must be 0 < lower <= upper, got {spec!r}")
        return RsBound(lower, upper)
    if "_" in spec:
        raise ValueError(f"rollout_rs_threshold for {option!r} takes one upper bound (no '_'), got {spec!r}")
    try:
        upper = float(spec)
    except ValueError:
        raise ValueError(f"rollout_rs_threshold: {spec!r} is not a number for option {option!r}") from None
    if upper <= 0:
        raise ValueError(f"rollout_rs_threshold for {option!r} must be positive, got {spec!r}")
    return RsBound(None, upper)


def parse_rs_thresholds(options: list[str], spec: str | float | None) -> dict[str, RsBound]:
    """One bound per option from ``"0.5_2.0,0.01"``; a single entry is shared by every option."""
    if spec is None:
        raise ValueError("rollout_rs_threshold is required when rollout_rs is set")
    if isinstance(spec, bool) or not isinstance(spec, (int, float, str)):
        raise TypeError("rollout_rs_threshold must be a number or a string of comma-separated thresholds")
    parts = [str(spec)] if not isinstance(spec, str) else [p.strip() for p in spec.split(",") if p.strip()]
    if not parts:
        raise ValueError("rollout_rs_threshold must hold at least one threshold")
    if len(parts) not in (1, len(options)):
        raise ValueError(f"rollout_rs_threshold: give one threshold for all options or exactly {len(options)} "
                         f"(one per rollout_rs option), got {len(parts)}")
    parts = parts * len(options) if len(parts) == 1 else parts
    return {opt: _one_bound(opt, part) for opt, part in zip(options, parts)}


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
