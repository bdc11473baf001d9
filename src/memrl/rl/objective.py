"""The policy objective of one micro-batch: tensors and the ``algorithm`` config in, loss and metrics out.

Everything the trainer's update loop does around it (log-prob passes, micro-batch weighting,
gradient steps, reductions over ranks) stays in :mod:`memrl.train.update`; this function is pure,
so a new loss is tested on hand-made tensors without a model or an optimizer. (The one exchange between
ranks, ``top_entropy_quantile``'s threshold, happens only when the trainer asks :func:`bonus_tokens` for it
and hands the kept tokens in.)

The loss is the registered ``algorithm.off_policy`` correction's policy-gradient loss (``none``:
verl's clipped PPO surrogate, or the ``algorithm.policy_loss`` that replaces it: GSPO, CISPO...), minus
``entropy_coef`` times the aggregated entropy, plus
``kl_coef`` times the aggregated KL to the reference (``kl_estimator``); every term is aggregated
with ``loss_agg_mode``.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

import torch

from memrl.rl.across_ranks import all_ranks
from memrl.rl.functional import high_entropy_mask, masked_mean
from memrl.rl.losses import agg_loss, kl_penalty, loss_aggregation
from memrl.rl.off_policy_mask import importance_ratio, off_policy_sequence_mask
from memrl.rl.offpolicy import off_policy_correction, off_policy_kwargs
from memrl.rl.policy_losses import policy_loss
from memrl.rl.rollout_loss import BYPASS_STATS, bypass_policy_loss, weighted_policy_loss

if TYPE_CHECKING:
    from memrl.config.algorithm import AlgorithmConfig

BASE_METRICS = ("pg_loss", "clipfrac", "clipfrac_lower", "ppo_kl", "entropy", "kl")


def objective_metric_names(algorithm: AlgorithmConfig) -> tuple[str, ...]:
    """The keys :func:`policy_objective` returns under ``algorithm``, in a fixed order (for reductions over ranks)."""
    extra = BYPASS_STATS if algorithm.rollout_correction.bypass_mode else ()
    masked = ("off_policy_masked",) if algorithm.off_policy_mask_threshold is not None else ()
    return BASE_METRICS + off_policy_correction(algorithm.off_policy).stats + extra + masked


def _policy_loss(log_prob: torch.Tensor, old_log_prob: torch.Tensor, advantages: torch.Tensor,
                 response_mask: torch.Tensor, algorithm: AlgorithmConfig, behaviour_log_prob: torch.Tensor | None,
                 is_weights: torch.Tensor | None, norm_length: int | None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The policy-gradient term: rollout correction (bypass, or weighted PPO) when on, else the off-policy kind."""
    rc = algorithm.rollout_correction
    kw = off_policy_kwargs(algorithm, norm_length)
    clip = {k: kw[k] for k in ("cliprange_low", "cliprange_high", "clip_ratio_c", "loss_agg_mode", "norm_length")}
    if algorithm.replaces_ppo:  # gspo, cispo...: the config allows them only with off_policy none, no bypass
        weights = is_weights.detach() if rc.enabled and is_weights is not None else None
        chosen = policy_loss(algorithm.policy_loss)
        options = {name: getattr(algorithm, name) for name in chosen.options}
        loss, clipfrac, ppo_kl, lower = chosen(old_log_prob.detach(), log_prob, advantages.detach(), response_mask,
                                               weights=weights, **clip, **options, **algorithm.policy_loss_options)
        return loss, {"clipfrac": clipfrac.detach(), "ppo_kl": ppo_kl.detach(), "clipfrac_lower": lower.detach()}
    if rc.enabled:
        if rc.bypass_mode:
            if behaviour_log_prob is None:
                raise ValueError("rollout_correction.bypass_mode needs the engine's log-probs (behaviour_log_prob)")
            return bypass_policy_loss(log_prob, behaviour_log_prob, advantages, response_mask, rc, **clip)
        return weighted_policy_loss(log_prob, old_log_prob, advantages, response_mask, is_weights, **clip)
    correction = off_policy_correction(algorithm.off_policy)
    return correction(log_prob, old_log_prob, behaviour_log_prob if correction.uses_behaviour else None,
                      advantages, response_mask, **kw)


def _off_policy_masked(advantages: torch.Tensor, log_prob: torch.Tensor, old_log_prob: torch.Tensor,
                       behaviour_log_prob: torch.Tensor | None, response_mask: torch.Tensor,
                       algorithm: AlgorithmConfig) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``off_policy_mask_threshold``: TRL multiplies the policy loss by its mask; memrl zeroes the dropped tokens'
    advantages (the config allows losses where that is the same). The KL is from the engine's log-probs, else the
    old ones (TRL's fallback). Also the share of tokens dropped (None: off)."""
    if algorithm.off_policy_mask_threshold is None:
        return advantages, None
    sampler = old_log_prob if behaviour_log_prob is None else behaviour_log_prob
    keep = off_policy_sequence_mask(advantages, log_prob, sampler, response_mask, algorithm.off_policy_mask_threshold)
    return advantages * keep, masked_mean(1.0 - keep, response_mask)


def bonus_tokens(entropy: torch.Tensor, response_mask: torch.Tensor, algorithm: AlgorithmConfig, *,
                 across_ranks: bool = False, contribute: bool = True) -> torch.Tensor:
    """The tokens the policy loss and the entropy bonus act on: ``response_mask`` itself, or under
    ``top_entropy_quantile`` the highest-entropy ones (TRL's effective mask), the threshold taken over this
    micro-batch's tokens, or with ``across_ranks`` over the tokens of every rank's current micro-batch, as TRL
    gathers its processes' at each loss call. ``across_ranks`` is collective: every rank of the process group must
    call it as often (the trainer asks for it, and pads its passes to one count); ``contribute=False``: a padding
    pass, which joins with no tokens of its own."""
    if algorithm.top_entropy_quantile >= 1.0:
        return response_mask
    pool = partial(all_ranks, contribute=contribute) if across_ranks else None
    return high_entropy_mask(entropy.detach(), response_mask, 1.0 - algorithm.top_entropy_quantile, pool).float()


def _kl_per_token(log_prob: torch.Tensor, old_log_prob: torch.Tensor, ref_log_prob: torch.Tensor,
                  response_mask: torch.Tensor, algorithm: AlgorithmConfig) -> torch.Tensor:
    """Each token's KL estimate to the reference; with ``kl_bias_correction`` times the current/old ratio (TRL's
    ``coef_1``, gradient included: per row for a loss with one ratio per row)."""
    kl = kl_penalty(log_prob, ref_log_prob, algorithm.kl_estimator)
    if not algorithm.kl_bias_correction:
        return kl
    per_row = policy_loss(algorithm.policy_loss).sequence_ratio
    return kl * importance_ratio(log_prob, old_log_prob, response_mask, per_row)


def _kept_entropy(entropy: torch.Tensor, kept: torch.Tensor, response_mask: torch.Tensor, mode: str,
                  norm_length: int | None) -> torch.Tensor:
    """The entropy bonus on the tokens ``top_entropy_quantile`` keeps (TRL's effective mask): a per-token mean
    over every response token, as TRL's dapo/cispo bonus divides by the batch's tokens; per sequence over the
    kept ones, as TRL's other loss types take the kept tokens' mean."""
    if loss_aggregation(mode).per_token:
        return agg_loss(entropy * kept, response_mask, mode, norm_length=norm_length)
    return agg_loss(entropy, kept, mode, norm_length=norm_length)


def policy_objective(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    algorithm: AlgorithmConfig,
    *,
    entropy: torch.Tensor,
    ref_log_prob: torch.Tensor | None = None,
    behaviour_log_prob: torch.Tensor | None = None,
    norm_length: int | None = None,
    is_weights: torch.Tensor | None = None,
    entropy_coef: float | None = None,
    kept: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``(loss, metrics)`` of one micro-batch; all tensors ``[B, T]`` over target positions.

    ``log_prob`` and ``entropy`` carry the gradient (entropy only when ``entropy_coef > 0``);
    ``old_log_prob`` is the trainer's log-prob at the start of the update; ``ref_log_prob`` is
    required when ``kl_coef > 0``; ``behaviour_log_prob`` (the engine's sampling log-probs) when the
    correction reads them. ``metrics`` has :func:`objective_metric_names` keys; ``pg_loss``,
    ``entropy`` and ``kl`` are the aggregated terms before their coefficients. ``entropy_coef``: the bonus's
    coefficient when not ``algorithm.entropy_coef`` (adaptive entropy control sets it every optimizer step).
    ``kept``: :func:`bonus_tokens` when the caller already has them (the trainer reads them for the entropy
    controller too, and their threshold over ranks is a collective it runs once per pass); None: computed here.
    """
    mode = algorithm.loss_agg_mode
    coef = algorithm.entropy_coef if entropy_coef is None else entropy_coef
    # the off-policy mask first: it reads each row's advantages before the entropy mask zeroes some (its metric
    # counts every token of a dropped row)
    advantages, dropped = _off_policy_masked(advantages, log_prob, old_log_prob, behaviour_log_prob, response_mask,
                                             algorithm)
    kept = bonus_tokens(entropy, response_mask, algorithm) if kept is None else kept
    if kept is not response_mask:  # TRL: each token's policy loss times its entropy mask; the losses
        # allowed with it (token_linear) give 0 where the advantage is 0, the normalisers keep every token
        advantages = advantages * kept
    pg, stats = _policy_loss(log_prob, old_log_prob, advantages, response_mask, algorithm, behaviour_log_prob,
                             is_weights, norm_length)
    if dropped is not None:
        stats["off_policy_masked"] = dropped
    if coef == 0:
        entropy = entropy.detach()
    ent_mean = agg_loss(entropy, response_mask, mode, norm_length=norm_length)
    loss = pg
    if coef > 0:
        bonus = ent_mean if kept is response_mask else _kept_entropy(entropy, kept, response_mask, mode, norm_length)
        loss = loss - coef * bonus
    kl = torch.tensor(0.0)
    if algorithm.kl_coef > 0:
        if ref_log_prob is None:
            raise ValueError("ref_log_prob is required when algorithm.kl_coef > 0")
        kl = agg_loss(_kl_per_token(log_prob, old_log_prob, ref_log_prob, response_mask, algorithm), response_mask,
                      mode, norm_length=norm_length)
        loss = loss + algorithm.kl_coef * kl
    metrics = {"pg_loss": pg, "clipfrac": stats["clipfrac"], "clipfrac_lower": stats["clipfrac_lower"],
               "ppo_kl": stats["ppo_kl"], "entropy": ent_mean, "kl": kl}
    metrics.update((k, stats[k]) for k in objective_metric_names(algorithm)[len(BASE_METRICS):])
    return loss, metrics
