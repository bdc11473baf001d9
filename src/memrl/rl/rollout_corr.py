"""Rollout correction: importance weights and rejection masks for the trainer/engine mismatch (verl 0.9).

The engine that sampled a token (vLLM in bf16, an older weight version, a server) and the
trainer that recomputes its log-prob never agree exactly. :func:`rollout_correction` turns the
two log-probs into what verl's ``compute_rollout_correction_and_rejection_mask`` returns, number
for number (verl 0.9.0-0.9.1, ``rollout_corr_helper``), with verl's option vocabulary:

* ``rollout_is``: ``"token"`` or ``"sequence"`` importance weights ``pi_train / pi_rollout``
  (a row's weight is the product of its token ratios); ``rollout_is_threshold`` a number
  truncates them at that bound (TIS), ``"lower_upper"`` zeroes those outside the band (AReaL's
  IcePop); ``rollout_is_batch_normalize`` rescales them to mean 1;
* ``rollout_rs``: rejection options (:mod:`memrl.rl.rollout_rs`) that drop tokens or rows
  from the response mask.

memrl adds one level of its own, the **conversation** level. A row here is one conversation
of an episode (a MemAgent chunk, a tool agent's dialogue), so verl's ``sequence`` is already
per conversation; ``episode_ids`` with ``episode_rejection`` then rejects a whole episode when
any (``"any"``) or at least a fraction (a float in (0, 1]) of its conversations was rejected,
because an episode's one reward was earned by all of its conversations together.
"""

from __future__ import annotations

import torch

from memrl.config.rollout_corr import IS_LEVELS, parse_is_threshold
from memrl.rl.rollout_metrics import SAFETY_BOUND, is_metrics, offpolicy_metrics, vmasked_mean, vmasked_sum
from memrl.rl.rollout_rs import rejection_mask

def _batch_normalise(weights: torch.Tensor, mask: torch.Tensor, level: str) -> tuple[torch.Tensor, float]:
    """Weights rescaled to mean 1 over tokens (token level) or over rows (sequence level)."""
    if level == "token":
        mean = vmasked_mean(weights, mask)
    else:
        rows = vmasked_mean(weights, mask, -1)
        has = (mask.sum(dim=-1) > 0).to(dtype=weights.dtype)
        mean = (rows * has).sum() / has.sum().clamp_min(1e-8)
    if mean > 1e-8:
        return weights / mean, mean.item()
    return weights, 1.0


def is_weights(log_ratio: torch.Tensor, response_mask: torch.Tensor, rollout_is: str = "token",
               rollout_is_threshold: str | float = 2.0,
               rollout_is_batch_normalize: bool = False) -> tuple[torch.Tensor, dict[str, float]]:
    """Truncated (TIS) or band-limited (IcePop) importance weights, zero on padding; no gradient."""
    if rollout_is not in IS_LEVELS:
        raise ValueError(f"rollout_is must be one of {', '.join(IS_LEVELS)}, got {rollout_is!r}")
    upper, lower = parse_is_threshold(rollout_is_threshold)
    if rollout_is == "token":
        log_for_metrics = log_ratio
        raw = torch.exp(torch.clamp(log_ratio, min=-SAFETY_BOUND, max=SAFETY_BOUND))
    else:
        log_for_metrics = vmasked_sum(log_ratio, response_mask, -1).unsqueeze(-1)
        raw = torch.exp(torch.clamp(log_for_metrics, min=-SAFETY_BOUND, max=SAFETY_BOUND)).expand_as(log_ratio)
    raw = raw * response_mask
    if lower is None:
        weights = raw.clamp(max=upper)
    else:
        weights = torch.where((raw >= lower) & (raw <= upper), raw, torch.zeros_like(raw))
    metrics = is_metrics(weights, raw, log_for_metrics, response_mask, rollout_is, upper, lower)
    if lower is not None:
        metrics["rollout_is_oob_ratio"] = vmasked_mean(((raw < lower) | (raw > upper)).float(),
                                                       response_mask).item()
    weights = weights.detach()
    if rollout_is_batch_normalize:
        weights, factor = _batch_normalise(weights, response_mask, rollout_is)
        metrics["rollout_is_batch_norm_factor"] = factor
    return weights, metrics


def reject_episodes(mask: torch.Tensor, original: torch.Tensor, episode_ids: torch.Tensor,
                    rule: str | float) -> tuple[torch.Tensor, dict[str, float]]:
    """The conversation level: drop every row of an episode whose conversations were rejected.

    A conversation (row) counts as rejected when rejection removed any of its valid tokens.
    ``rule="any"`` rejects the episode on one such conversation; a float ``f`` in (0, 1] when
    at least that fraction of the episode's conversations (rows with valid tokens) was.
    """
    if rule != "any" and not (isinstance(rule, (int, float)) and 0 < float(rule) <= 1):
        raise ValueError(f"episode_rejection must be 'any' or a fraction in (0, 1], got {rule!r}")
    if episode_ids.shape != mask.shape[:1]:
        raise ValueError(f"episode_ids has shape {tuple(episode_ids.shape)}, expected ({mask.shape[0]},)")
    has_tokens = original.sum(dim=-1) > 0
    row_rejected = ((original.bool() & ~mask.bool()).any(dim=-1)) & has_tokens
    episodes, index = torch.unique(episode_ids, return_inverse=True)
    index = index.to(mask.device)  # counted where the masks are (ids often stay on the host)
    n_conv = torch.zeros(len(episodes), dtype=torch.float64, device=mask.device).index_add_(0, index,
                                                                                          has_tokens.double())
    n_bad = torch.zeros(len(episodes), dtype=torch.float64, device=mask.device).index_add_(0, index,
                                                                                         row_rejected.double())
    if rule == "any":
        bad_episode = n_bad > 0
    else:
        bad_episode = (n_bad >= float(rule) * n_conv) & (n_bad > 0)
    drop_rows = bad_episode[index]
    out = torch.where(drop_rows.unsqueeze(-1), torch.zeros_like(mask), mask)
    metrics = {
        "rollout_rs_conversation_rejected_fraction": (row_rejected.double().sum() / has_tokens.sum().clamp_min(1)).item(),
        "rollout_rs_episode_rejected_fraction": bad_episode.double().mean().item(),
        "rollout_rs_masked_fraction_after_episodes": vmasked_mean(1 - out.to(torch.float64),
                                                                  original.to(torch.float64)).item(),
    }
    return out, metrics


def rollout_correction(
    old_log_prob: torch.Tensor,
    rollout_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    rollout_is: str | None = None,
    rollout_is_threshold: str | float | None = 2.0,
    rollout_is_batch_normalize: bool = False,
    rollout_rs: str | None = None,
    rollout_rs_threshold: str | float | None = None,
    episode_ids: torch.Tensor | None = None,
    episode_rejection: str | float | None = None,
) -> tuple[torch.Tensor | None, torch.Tensor, dict[str, float]]:
    """``(weights or None, response mask after rejection, metrics)`` for ``[B, T]`` log-probs.

    Equal to verl 0.9's ``compute_rollout_correction_and_rejection_mask`` (the weights tensor in
    place of its DataProto; metrics prefixed ``rollout_corr/``). ``old_log_prob`` is the trainer's
    (pi_train), ``rollout_log_prob`` the engine's. With ``episode_rejection`` set, ``episode_ids``
    (one episode index per row) applies memrl's conversation level after verl's rejection.
    """
    if not response_mask.any():
        raise ValueError("response_mask must contain at least one valid token")
    for name, t in (("rollout_log_prob", rollout_log_prob), ("response_mask", response_mask)):
        if t.shape != old_log_prob.shape:
            raise ValueError(f"{name} has shape {tuple(t.shape)}, expected {tuple(old_log_prob.shape)} "
                             "like old_log_prob")
    log_ratio = old_log_prob - rollout_log_prob
    metrics: dict[str, float] = {}
    weights = None
    if rollout_is is not None and rollout_is_threshold is not None:
        weights, found = is_weights(log_ratio, response_mask, rollout_is, rollout_is_threshold,
                                    rollout_is_batch_normalize)
        metrics.update(found)
    mask = response_mask.clone()
    if rollout_rs is not None:
        if rollout_rs_threshold is None:
            raise ValueError("rollout_rs_threshold is required when rollout_rs is set")
        mask, found = rejection_mask(log_ratio, response_mask, rollout_rs, rollout_rs_threshold)
        metrics.update(found)
    if episode_rejection is not None:
        if episode_ids is None:
            raise ValueError("episode_rejection needs episode_ids (the episode of each row)")
        mask, found = reject_episodes(mask, response_mask, episode_ids, episode_rejection)
        metrics.update(found)
    metrics.update(offpolicy_metrics(old_log_prob, rollout_log_prob, response_mask))
    return weights, mask, {f"rollout_corr/{k}": v for k, v in metrics.items()}
