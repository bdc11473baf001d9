"""Advantages of a step: one value per episode within its group, given to every generated token of every
conversation of that episode (or, with ReMemR1's step rewards, mixed with each conversation's own reward;
or, with a per-turn estimator such as gigpo, one value per conversation from its turn reward and anchor).
"""

from __future__ import annotations

import math
from collections import Counter

import torch

from memrl.config import MemRLConfig
from memrl.config.registry import ADV_ESTIMATORS
from memrl.rl.advantages import (broadcast, combine_step_advantages, episode_advantages, get_estimator,
                                  turn_advantages)
from memrl.rl.turn_credit import TurnRows
from memrl.train.batch import Row
from memrl.train.greedy_baseline import BASELINE_METRIC
from memrl.types import Trajectory


def without_non_finite(trajs: list[Trajectory]) -> tuple[list[Trajectory], list[Trajectory]]:
    """(episodes with a finite reward, the others): a NaN/inf reward (a plug-in workflow's) is never trained
    on, since it would turn every advantage of its group into NaN."""
    good = [t for t in trajs if math.isfinite(t.reward)]
    return good, [t for t in trajs if not math.isfinite(t.reward)]


def unread_turn_rewards(cfg: MemRLConfig, trajs: list[Trajectory]) -> str | None:
    """A note when episodes carry per-turn rewards (``ep.turn_reward``) that the configured estimator does not
    read: per-turn credit needs a per-turn estimator (or ReMemR1's state advantages), else they change nothing.
    Under an estimator comparing turns by state, a note when the turns give it nothing to compare."""
    a = cfg.algorithm
    if a.step_rewards:
        return None
    est = get_estimator(a.adv_estimator)
    if est.turns is not None:
        return stateless_turns(a.adv_estimator, trajs) if est.states else None
    if not any(c.reward is not None for t in trajs for c in t.conversations):
        return None
    per_turn = [n for n in ADV_ESTIMATORS.names if getattr(ADV_ESTIMATORS.get(n), "turns", None) is not None]
    return (f"note: the episodes carry per-turn rewards (ep.turn_reward), which adv_estimator={a.adv_estimator!r} "
            f"does not read: only the episode reward trains (per-turn credit: algorithm.adv_estimator="
            f"{' or '.join(per_turn)}; ReMemR1's state rewards: algorithm.step_rewards=true)")


def stateless_turns(name: str, trajs: list[Trajectory]) -> str | None:
    """Why a state-comparing estimator (gigpo) would quietly reduce to a scaled GRPO: every episode is one
    conversation (merged turns: one step per episode), or turns have no anchor state (each stands alone:
    its step term is 0, so its per-turn reward changes nothing)."""
    convs = [c for t in trajs for c in t.conversations if any(c.loss_mask)]
    if trajs and all(sum(map(any, (c.loss_mask for c in t.conversations))) <= 1 for t in trajs):
        return (f"note: every episode is one trained conversation (merged turns), so adv_estimator={name!r} has one "
                "step per episode and trains as a scaled GRPO; per-turn credit needs a conversation per turn "
                "(the tool agent's workflow.record=turns, or ep.generate(merge=False))")
    bare = sum(c.state is None for c in convs)
    if bare:
        return (f"note: {bare} of {len(convs)} turns have no anchor state (ep.generate(state=...)); under "
                f"adv_estimator={name!r} each stands alone: its step term is 0, and its per-turn reward changes "
                "nothing")
    return None


def lone_episodes(groups: list[str]) -> set[int]:
    """The episodes whose group has no other (the others failed): they have no baseline."""
    sizes = Counter(groups)
    return {i for i, g in enumerate(groups) if sizes[g] == 1}


def without_lone_groups(ep_adv: torch.Tensor, groups: list[str]) -> torch.Tensor:
    """A group left with one episode (the others failed) has no baseline: advantage 0, as TRL gives it (verl's
    mean 0 / std 1 for one-sample groups, meant for n = 1, would train on its raw reward)."""
    lone = lone_episodes(groups)
    return torch.where(torch.tensor([i in lone for i in range(len(groups))]), torch.zeros_like(ep_adv), ep_adv)


def assign_advantages(cfg: MemRLConfig, trajs: list[Trajectory], rows: list[Row],
                      state_advantage: tuple[float, float] | None = None) -> None:
    """Set ``row.advantages`` (one value per target position) for every row of ``trajs``.

    ``state_advantage``: (alpha, scale) of per-turn state advantages under ``algorithm.step_rewards``, as the
    run's workflow gives them (:meth:`memrl.Workflow.state_advantage`)."""
    a = cfg.algorithm
    scores = torch.tensor([t.reward for t in trajs], dtype=torch.float32)
    groups = [t.group_id for t in trajs]
    ep_adv = episode_advantages(scores, groups, a.adv_estimator, a.epsilon, estimator_inputs(cfg, trajs))
    lone = lone_episodes(groups) if get_estimator(a.adv_estimator).needs_group and a.n >= 2 else set()
    ep_adv = without_lone_groups(ep_adv, groups) if lone else ep_adv
    width = max(len(r) for r in rows) - 1
    mask = torch.zeros((len(rows), width))
    for i, r in enumerate(rows):
        if r.episode not in lone:  # a lone episode trains on nothing, nor counts in a batch-wide whitening (gdpo)
            mask[i, : len(r) - 1] = torch.tensor(r.loss_mask[1:], dtype=torch.float32)
    conv_episode = [r.episode for r in rows]
    per_turn = turn_advantages(a.adv_estimator, turn_rows(trajs, rows), gamma=a.gamma,
                               episode_weight=a.episode_weight, step_weight=a.step_weight, norm=a.turn_norm,
                               similarity=a.state_similarity, options=a.adv_estimator_options) \
        if get_estimator(a.adv_estimator).turns is not None else None
    if per_turn is not None:
        tok = per_turn.unsqueeze(-1) * mask
    elif a.step_rewards:
        alpha, scale = state_advantage or (1.0, 1.0)
        est = get_estimator(a.adv_estimator)
        per_row = combine_step_advantages(ep_adv, torch.tensor([r.step_reward for r in rows]), conv_episode,
                                          groups, [r.step for r in rows], alpha, scale,
                                          est.fn if est.per_step else None, a.epsilon)
        tok = per_row.unsqueeze(-1) * mask
    else:
        tok = broadcast(ep_adv, conv_episode, mask, a.adv_estimator, a.gamma)
    for i, r in enumerate(rows):
        r.advantages = tok[i, : len(r) - 1].clone()


def estimator_inputs(cfg: MemRLConfig, trajs: list[Trajectory]) -> dict[str, object]:
    """The episode stage's keywords beyond the scores: a plug-in's own options, and what a built-in asks for
    (GDPO: each episode's reward components, its named metrics; OPO: its generated tokens)."""
    a = cfg.algorithm
    options: dict[str, object] = dict(a.adv_estimator_options)
    est = get_estimator(a.adv_estimator)
    if est.components:
        options.update(components=reward_components(trajs, a.gdpo_reward_keys), weights=a.gdpo_reward_weights)
    if est.lengths:
        options.update(lengths=torch.tensor([t.num_generated_tokens for t in trajs]))
    if est.baselines:
        options.update(baselines=greedy_baselines(trajs, a.adv_estimator))
    return options


def greedy_baselines(trajs: list[Trajectory], name: str) -> torch.Tensor:
    """Each episode's greedy-baseline reward (ReMax's), which the rollout writes; a ValueError naming the first
    episode without one (it did not come from memrl's rollout, which runs the group's greedy episode)."""
    for t in trajs:
        if BASELINE_METRIC not in t.metrics:
            raise ValueError(f"adv_estimator={name!r} needs each episode's greedy baseline reward (metric "
                             f"{BASELINE_METRIC!r}, written by memrl's rollout); episode {t.sample_id} of group "
                             f"{t.group_id} has none")
    return torch.tensor([float(t.metrics[BASELINE_METRIC]) for t in trajs])


def reward_components(trajs: list[Trajectory], keys: list[str]) -> torch.Tensor:
    """``[episodes, len(keys)]``: each episode's metric of each name; a ValueError naming the first episode that
    lacks one (verl asserts each key is among the reward's returned fields)."""
    for t in trajs:
        missing = [k for k in keys if k not in t.metrics]
        if missing:
            raise ValueError(f"episode {t.sample_id!r} has no metric {missing[0]!r} for algorithm.gdpo_reward_keys "
                             f"(its metrics: {', '.join(sorted(t.metrics)) or 'none'}): log it with ep.metric")
        bad = [k for k in keys if not math.isfinite(float(t.metrics[k]))]
        if bad:
            raise ValueError(f"episode {t.sample_id!r} has a non-finite {bad[0]!r} ({t.metrics[bad[0]]}), one of "
                             "algorithm.gdpo_reward_keys")
    return torch.tensor([[float(t.metrics[k]) for k in keys] for t in trajs], dtype=torch.float32)


def turn_rows(trajs: list[Trajectory], rows: list[Row]) -> TurnRows:
    """The turns of a batch as the per-turn estimators read them: each row's episode, conversation
    position, group and anchor state; each episode's outcome reward and all its conversations' rewards."""
    convs = [trajs[r.episode].conversations[r.step] for r in rows]
    return TurnRows(episode=[r.episode for r in rows], turn=[r.step for r in rows],
                    group=[trajs[r.episode].group_id for r in rows], state=[c.state for c in convs],
                    scores=[t.reward for t in trajs],
                    turn_rewards=[[float(c.reward or 0.0) for c in t.conversations] for t in trajs])
