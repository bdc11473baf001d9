"""Advantage estimators.

Two layers:

* verl-compatible token-level functions (``compute_*_outcome_advantage``) on
  ``token_level_rewards [B, T]``, ``response_mask [B, T]`` and a group ``index``
  per row; they return ``(advantages, returns)`` with verl's numbers.
* the multi-conversation layer: :func:`episode_advantages` computes one
  advantage per *episode* within its group (so an episode with more
  conversations is not counted more often in the group mean/std) and
  :func:`broadcast` copies it to every generated token of every conversation of
  that episode. :func:`combine_step_advantages` adds ReMemR1's per-turn
  state advantage.
* per-turn estimators (``gigpo``, ``step_reinforce``; :mod:`memrl.rl.turn_credit`) have a ``turns``
  stage instead: one advantage per conversation row from the batch's turns (:class:`TurnRows`).

Estimators of the second layer are registered by name with :func:`register_adv_est`
(``algorithm.adv_estimator`` picks one); a plug-in decorates its own function the same way or is
named by import path.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import torch

from memrl.config.registry import origin
from memrl.rl.estimator_base import (AdvantageEstimator, _groups, _whitened, batch_std,  # noqa: F401
                                     get_estimator, group_normalize, register_adv_est, spread)
from memrl.rl.functional import masked_whiten
from memrl.rl.turn_credit import TurnRows, gigpo_rows, step_reinforce_rows


def rloo(scores: torch.Tensor, index: Sequence[Hashable]) -> torch.Tensor:
    """Leave-one-out baseline: ``r*n/(n-1) - mean*n/(n-1)``; a one-sample group keeps ``r``."""
    out = scores.clone().float()
    for rows in _groups(index).values():
        n = len(rows)
        if n > 1:
            s = scores[rows].float()
            out[rows] = s * n / (n - 1) - s.mean() * n / (n - 1)
    return out


def group_center(scores: torch.Tensor, index: Sequence[Hashable]) -> torch.Tensor:
    """``r - mean_g`` (one-sample groups subtract 0): REINFORCE++-baseline's first step."""
    out = scores.clone().float()
    for rows in _groups(index).values():
        if len(rows) > 1:
            out[rows] = scores[rows].float() - scores[rows].float().mean()
    return out


# -- verl-compatible token-level functions -------------------------------------------------

def compute_grpo_outcome_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor,
                                   index: Sequence[Hashable], epsilon: float = 1e-6,
                                   norm_adv_by_std_in_grpo: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    scores = group_normalize(token_level_rewards.sum(dim=-1), index, norm_adv_by_std_in_grpo, epsilon)
    adv = scores.unsqueeze(-1) * response_mask
    return adv, adv


def compute_rloo_outcome_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor,
                                   index: Sequence[Hashable], epsilon: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    adv = rloo(token_level_rewards.sum(dim=-1), index).unsqueeze(-1) * response_mask
    return adv, adv


def compute_reinforce_plus_plus_baseline_outcome_advantage(
    token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: Sequence[Hashable], epsilon: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    centred = group_center(token_level_rewards.sum(dim=-1), index)
    tiled = centred.unsqueeze(-1).expand_as(response_mask).float() * response_mask
    adv = masked_whiten(tiled, response_mask) * response_mask
    return adv, adv


def compute_reinforce_plus_plus_outcome_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor,
                                                  gamma: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Discounted return per token, whitened over the batch.

    Masked positions (a tool's or user's tokens between two assistant turns of one row) get no return and
    pass the running return through unchanged, undiscounted: a reward at the row's end reaches the turns
    before the gap, as in verl since its multi-turn fix (before it, the return restarted at each gap).
    """
    returns = torch.zeros_like(token_level_rewards, dtype=torch.float32)
    running = torch.zeros(token_level_rewards.shape[0], device=token_level_rewards.device)
    for t in reversed(range(token_level_rewards.shape[1])):
        valid = response_mask[:, t].float()
        new = token_level_rewards[:, t].float() + gamma * running
        returns[:, t] = new * valid
        running = new * valid + running * (1 - valid)
    adv = masked_whiten(returns, response_mask) * response_mask
    return adv, returns


# -- the multi-conversation layer ------------------------------------------------------------

def _discounted_whitened(per_row: torch.Tensor, mask: torch.Tensor, *, gamma: float = 1.0) -> torch.Tensor:
    """REINFORCE++: the episode reward on each row's last generated token, discounted returns, whitened."""
    rewards = torch.zeros_like(mask)
    last = (mask * torch.arange(mask.shape[1], dtype=torch.float32, device=mask.device)).argmax(dim=1)
    has = mask.sum(dim=1) > 0
    rewards[has, last[has]] = per_row[has]
    return compute_reinforce_plus_plus_outcome_advantage(rewards, mask, gamma)[0]


@register_adv_est("grpo", needs_group=True, per_step=True)
def grpo(scores: torch.Tensor, group_ids: Sequence[Hashable], *, epsilon: float = 1e-6) -> torch.Tensor:
    """GRPO: (score - group mean) / (group std + epsilon)."""
    return group_normalize(scores, group_ids, True, epsilon)


@register_adv_est("dr_grpo", needs_group=True, per_step=True)
def dr_grpo(scores: torch.Tensor, group_ids: Sequence[Hashable], *, epsilon: float = 1e-6) -> torch.Tensor:
    """Dr. GRPO: score - group mean (no std division)."""
    return group_normalize(scores, group_ids, False, epsilon)


@register_adv_est("grpo_batch_std", needs_group=True)
def grpo_batch_std(scores: torch.Tensor, group_ids: Sequence[Hashable], *, epsilon: float = 1e-6) -> torch.Tensor:
    """TRL's scale_rewards="batch": (score - group mean) / (std of the batch's scores + epsilon), unbiased std."""
    rewards = scores.float()
    out = torch.zeros_like(rewards)
    for rows in _groups(group_ids).values():  # a group of one is its own mean: 0, as TRL's
        out[rows] = rewards[rows] - rewards[rows].mean()
    return out / (batch_std(rewards) + epsilon)


@register_adv_est("rloo", needs_group=True)
def rloo_estimator(scores: torch.Tensor, group_ids: Sequence[Hashable], *, epsilon: float = 1e-6) -> torch.Tensor:
    """RLOO: score minus the mean of the other episodes of the group, scaled n / (n - 1)."""
    return rloo(scores, group_ids)


@register_adv_est("reinforce_plus_plus", tokens=_discounted_whitened)
def reinforce_plus_plus(scores: torch.Tensor, group_ids: Sequence[Hashable], *,
                        epsilon: float = 1e-6) -> torch.Tensor:
    """REINFORCE++: the score on the last token, discounted returns (gamma), whitened over the batch."""
    return scores.clone().float()


@register_adv_est("reinforce_plus_plus_baseline", tokens=_whitened)
def reinforce_plus_plus_baseline(scores: torch.Tensor, group_ids: Sequence[Hashable], *,
                                 epsilon: float = 1e-6) -> torch.Tensor:
    """REINFORCE++-baseline: score - group mean on every token, whitened over the batch."""
    return group_center(scores, group_ids)


@register_adv_est("gigpo", needs_group=True, turns=gigpo_rows, states=True)
def gigpo(scores: torch.Tensor, group_ids: Sequence[Hashable], *, epsilon: float = 1e-6) -> torch.Tensor:
    """GiGPO, per turn: episode score normalised in the group plus the turn's return normalised by anchor state.

    ROLL's numbers (:func:`memrl.rl.gigpo_advantages`); anchors come from ``ep.generate(..., state=)``,
    the weights are ``algorithm.episode_weight`` / ``step_weight``. Per episode (callers wanting one
    value), GRPO."""
    return group_normalize(scores, group_ids, True, epsilon)


@register_adv_est("step_reinforce", needs_group=True, turns=step_reinforce_rows)
def step_reinforce(scores: torch.Tensor, group_ids: Sequence[Hashable], *, epsilon: float = 1e-6) -> torch.Tensor:
    """Step-REINFORCE, per turn: the turn's discounted return (gamma) normalised in its prompt group.

    ROLL's ``step_reinforce``. Per episode (callers wanting one value), GRPO."""
    return group_normalize(scores, group_ids, True, epsilon)


def turn_advantages(estimator: str, rows: TurnRows, *, gamma: float = 1.0, episode_weight: float = 1.0,
                    step_weight: float = 1.0, norm: str = "mean_std", similarity: float | None = None,
                    options: dict[str, Any] | None = None) -> torch.Tensor | None:
    """One advantage per conversation row from the estimator's per-turn stage; None if it has none.

    ``norm`` (``algorithm.turn_norm``) and ``similarity`` (``algorithm.state_similarity``) reach the stage
    only when they are not the defaults, so a per-turn stage written before the options existed keeps
    working as long as it is not asked for them. ``options`` (``algorithm.adv_estimator_options``): those the
    stage takes, as the episode stage gets them. Its output is checked as the episode stage's is."""
    turns = get_estimator(estimator).turns
    if turns is None:
        return None
    extra: dict[str, Any] = {} if norm == "mean_std" else {"norm": norm}
    if similarity is not None:
        extra["similarity"] = similarity
    params = inspect.signature(turns).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    extra.update({k: v for k, v in (options or {}).items() if takes_any or k in params})
    out = turns(rows, gamma=gamma, episode_weight=episode_weight, step_weight=step_weight, **extra)
    name = origin(turns, ":")
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != (len(rows.episode),):
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ValueError(f"per-turn stage {name} of advantage estimator {estimator!r} returned {got}; it must return "
                         f"one value per conversation row, shape ({len(rows.episode)},)")
    if not bool(torch.isfinite(out).all()):
        raise ValueError(f"per-turn stage {name} of advantage estimator {estimator!r} returned non-finite values")
    return out



def episode_advantages(scores: torch.Tensor, group_ids: Sequence[Hashable], estimator: str = "grpo",
                       epsilon: float = 1e-6, options: dict[str, Any] | None = None) -> torch.Tensor:
    """One scalar per episode from the registered estimator's episode stage (``options``: a plug-in's own
    settings, ``algorithm.adv_estimator_options``).

    Computed per *episode* within its group, so an episode with more conversations is not counted
    more often in the group mean/std.
    """
    return get_estimator(estimator)(scores, group_ids, epsilon=epsilon, **(options or {}))


def broadcast(episode_values: torch.Tensor, conv_episode: Sequence[int], response_mask: torch.Tensor,
              estimator: str = "grpo", gamma: float = 1.0) -> torch.Tensor:
    """Token-level advantages ``[C, T]`` for C conversation rows.

    ``conv_episode[c]`` is the episode of row ``c``; the estimator's token stage turns each row's
    episode value into per-token values (by default: that value on every generated token).
    """
    per_row = episode_values[torch.as_tensor(list(conv_episode), dtype=torch.long)].float()
    return get_estimator(estimator).tokens(per_row, response_mask.float(), gamma=gamma)


def combine_step_advantages(outcome: torch.Tensor, step_rewards: torch.Tensor, conv_episode: Sequence[int],
                            group_ids: Sequence[Hashable], steps: Sequence[int], alpha: float,
                            state_scale: float = 1.0, state_stage: Callable[..., torch.Tensor] | None = None,
                            epsilon: float = 1e-6) -> torch.Tensor:
    """ReMemR1's per-turn advantage ``alpha * A_outcome + (1 - alpha) * state_scale * A_state``.

    ``outcome`` holds one advantage per episode; ``step_rewards[c]`` is row c's
    state reward, normalised within (question group, step index) by ``state_stage`` (the outcome's
    estimator where it is GRPO's: ReMemR1 runs its ``compute_1D_grpo_advantage`` on both, dividing by
    the std unless ``grpo_use_adv=False``), else centred. Returns one advantage per conversation row.
    ``state_scale=2`` reproduces the released ReMemR1 trainer, which tiles each state reward over
    two columns and sums them before centring.
    """
    keys = [(group_ids[e], s) for e, s in zip(conv_episode, steps)]
    scaled = step_rewards.float() * state_scale
    state = group_center(scaled, keys) if state_stage is None else state_stage(scaled, keys, epsilon=epsilon)
    per_row = outcome[torch.as_tensor(list(conv_episode), dtype=torch.long)].float()
    return alpha * per_row + (1 - alpha) * state


# verl's other outcome estimators register on import, after this module's own (names list grpo first)
from memrl.rl import outcome_estimators  # noqa: E402,F401
from memrl.rl import token_baseline  # noqa: E402,F401
