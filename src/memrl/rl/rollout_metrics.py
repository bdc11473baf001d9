"""Diagnostics of the trainer/engine mismatch, named and computed as verl 0.9's ``rollout_corr/*`` metrics.

Kept equal to verl (``rollout_corr_helper``) so a dashboard built for verl reads memrl's
``metrics.jsonl`` unchanged, and so a number quoted from a verl run means the same here:
KL (direct and k3), perplexities and their log difference, chi-square (token and sequence),
the effective sample size of the IS weights, and per-option rejection statistics.
"""

from __future__ import annotations

import torch

# exp(20) ~ 4.9e8: beyond it a weight only turns a loss into inf (verl's safety bound)
SAFETY_BOUND = 20.0


def vmasked_sum(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Masked sum that ignores NaN/inf outside the mask (verl's ``masked_sum``)."""
    kept = torch.where(mask.bool(), values, torch.zeros((), dtype=values.dtype, device=values.device)) * mask
    return kept.sum() if dim is None else kept.sum(dim=dim)


def vmasked_mean(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """``masked_sum / (sum(mask) + 1e-8)``, NaN-safe outside the mask."""
    count = mask.sum() if dim is None else mask.sum(dim=dim)
    return vmasked_sum(values, mask, dim) / (count + 1e-8)


def _clamped_std(values: torch.Tensor, mask: torch.Tensor, low: float, high: float) -> float:
    if mask.sum() <= 1:
        return 0.0
    clamped = values.clamp(min=low, max=high)
    mean = vmasked_mean(clamped, mask)
    var = vmasked_mean(clamped.square(), mask) - mean.square()
    return torch.sqrt(torch.clamp(var, min=0.0)).item()


def _row_summary(prefix: str, rows: torch.Tensor, upper: float, lower: float | None, ideal: float) -> dict[str, float]:
    """Mean/std/max/min/deviation/high-low fractions of one value per valid row."""
    if rows.numel() == 0:
        out = {f"{prefix}_seq_{k}": 0.0 for k in ("mean", "std", "max", "min", "max_deviation", "fraction_high")}
        out[f"{prefix}_seq_fraction_low"] = 0.0
        return out
    out = {
        f"{prefix}_seq_mean": rows.mean().item(),
        f"{prefix}_seq_std": rows.std().item() if rows.numel() > 1 else 0.0,
        f"{prefix}_seq_max": rows.max().item(),
        f"{prefix}_seq_min": rows.min().item(),
        f"{prefix}_seq_max_deviation": (rows - ideal).abs().max().item(),
        f"{prefix}_seq_fraction_high": (rows > upper).float().mean().item(),
    }
    if lower is not None:
        out[f"{prefix}_seq_fraction_low"] = (rows < lower).float().mean().item()
    return out


def rs_metrics(option: str, stat: torch.Tensor, mask: torch.Tensor, seq_valid: torch.Tensor, *,
               row_values: torch.Tensor | None, upper: float, lower: float, use_lower: bool) -> dict[str, float]:
    """One rejection option's statistics (``rollout_rs_<option>_*``); ``stat`` is per token ``[B, T]``."""
    if not mask.any():
        raise ValueError("response_mask must contain at least one valid token")
    prefix = f"rollout_rs_{option}"
    per_row = row_values if row_values is not None else vmasked_mean(stat, mask, -1)
    rows = per_row[seq_valid]
    sequence = row_values is not None and rows.numel() > 0
    valid = mask.bool()
    out = {f"{prefix}_mean": vmasked_mean(stat, mask).item()}
    if sequence:
        out[f"{prefix}_max"], out[f"{prefix}_min"] = rows.max().item(), rows.min().item()
        out[f"{prefix}_fraction_high"] = (rows > upper).float().mean().item()
        out[f"{prefix}_fraction_low"] = (rows < lower).float().mean().item() if use_lower else 0.0
    else:
        out[f"{prefix}_max"] = stat.masked_fill(~valid, float("-inf")).max().item()
        out[f"{prefix}_min"] = stat.masked_fill(~valid, float("inf")).min().item()
        out[f"{prefix}_fraction_high"] = vmasked_mean((stat > upper).float(), mask).item()
        out[f"{prefix}_fraction_low"] = vmasked_mean((stat < lower).float(), mask).item() if use_lower else 0.0
    out[f"{prefix}_std"] = _clamped_std(stat, mask, lower if use_lower else 0.0, upper)
    out.update(_row_summary(prefix, rows, upper, lower if use_lower else None, 0.0))
    return out


def is_metrics(weights: torch.Tensor, raw: torch.Tensor, log_ratio: torch.Tensor, mask: torch.Tensor, level: str,
               upper: float, lower: float | None) -> dict[str, float]:
    """Statistics of the applied IS weights (``rollout_is_*``), before any batch normalisation.

    ``log_ratio`` is per token (``[B, T]``) at token level and the row sums (``[B, 1]``) at
    sequence level; ``raw`` are the weights before truncation/IcePop.
    """
    if not mask.any():
        raise ValueError("response_mask must contain at least one valid token")
    lower = 1.0 / upper if lower is None else lower
    log_up = torch.log(torch.tensor(upper, device=weights.device))
    log_low = torch.log(torch.tensor(lower, device=weights.device))
    out: dict[str, float] = {"rollout_is_mean": vmasked_mean(weights, mask).item()}
    if level == "sequence":
        out["rollout_is_max"] = torch.exp(torch.clamp(log_ratio.max(), max=SAFETY_BOUND)).item()
        out["rollout_is_min"] = torch.exp(log_ratio.min()).item()
        out["rollout_is_ratio_fraction_high"] = (log_ratio > log_up).float().mean().item()
        out["rollout_is_ratio_fraction_low"] = (log_ratio < log_low).float().mean().item()
    else:
        valid = mask.bool()
        out["rollout_is_ratio_fraction_high"] = vmasked_mean((raw > upper).float(), mask).item()
        out["rollout_is_ratio_fraction_low"] = vmasked_mean((raw < lower).float(), mask).item()
        out["rollout_is_max"] = weights.masked_fill(~valid, float("-inf")).max().item()
        out["rollout_is_min"] = weights.masked_fill(~valid, float("inf")).min().item()
    out["rollout_is_std"] = _clamped_std(weights, mask, 0.0, upper)
    clamped = weights.clamp(min=0.0, max=upper)
    normalised = clamped / (vmasked_mean(clamped, mask) + 1e-8)
    spread = vmasked_mean(normalised.square(), mask).item()
    # every weight 0 (a token band that drops every token): no effective sample (verl's tensor division gives inf)
    out["rollout_is_eff_sample_size"] = 1.0 / spread if spread > 0 else 0.0
    rows = vmasked_mean(weights, mask, -1)
    summary = _row_summary("rollout_is", rows, float("inf"), None, 1.0)
    summary.pop("rollout_is_seq_fraction_high")
    out.update(summary)
    raw_rows = vmasked_mean(raw, mask, -1)  # before truncation: a clamped mean never exceeds the bound
    out["rollout_is_seq_fraction_high"] = (raw_rows > upper).float().mean().item()
    out["rollout_is_seq_fraction_low"] = (raw_rows < lower).float().mean().item()
    return out


def offpolicy_metrics(old_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor | None,
                      mask: torch.Tensor) -> dict[str, float]:
    """KL, k3, perplexities, their log difference and chi-square between trainer and engine (verl's names)."""
    if not mask.any():
        raise ValueError("response_mask must contain at least one valid token")
    train_lp = vmasked_mean(old_log_prob, mask, -1)
    out = {"training_ppl": torch.exp(-train_lp).mean().item(), "training_log_ppl": (-train_lp).mean().item()}
    if rollout_log_prob is None:
        return out
    log_ratio = old_log_prob - rollout_log_prob
    roll_lp = vmasked_mean(rollout_log_prob, mask, -1)
    diff = roll_lp - train_lp
    safe = torch.clamp(log_ratio, min=-SAFETY_BOUND, max=SAFETY_BOUND)
    seq_sum = torch.clamp(vmasked_sum(log_ratio, mask, -1), min=-SAFETY_BOUND, max=SAFETY_BOUND)
    out.update({
        "kl": vmasked_mean(rollout_log_prob - old_log_prob, mask).item(),
        "k3_kl": vmasked_mean(torch.exp(log_ratio) - log_ratio - 1, mask).item(),
        "rollout_ppl": torch.exp(-roll_lp).mean().item(),
        "rollout_log_ppl": (-roll_lp).mean().item(),
        "log_ppl_diff": diff.mean().item(),
        "log_ppl_abs_diff": diff.abs().mean().item(),
        "log_ppl_diff_max": diff.max().item(),
        "log_ppl_diff_min": diff.min().item(),
        "ppl_ratio": torch.exp(diff).mean().item(),
        "chi2_token": (vmasked_mean(torch.exp(safe).square(), mask) - 1.0).item(),
        "chi2_seq": (torch.exp(2.0 * seq_sum).mean() - 1.0).item(),
    })
    return out
