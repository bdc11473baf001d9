"""DAPO helpers: dynamic sampling (drop all-equal groups) and overlong reward shaping."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence

import numpy as np

from memrl.types import Trajectory


def keep_groups(scores: Sequence[float], group_ids: Sequence[Hashable], max_mean: float | None = None,
                weights: Sequence[float] | None = None, min_size: int = 1) -> list[bool]:
    """Per episode: keep it if its group's scores vary (population std > 0) or the group has one episode.

    Groups whose episodes all scored the same give zero advantage under GRPO:
    training on them only costs compute. ``min_size``: groups with fewer episodes are dropped (2 where n >= 2:
    a group whose other episodes failed is left with one, which verl's n = 1 rule would keep and train on its
    raw score). ``max_mean``: keep a group whose mean score is at most that
    instead (AReaL's tau2 ``group_filter``, ``mean <= 0.95``), the mean weighted by ``weights`` (AReaL
    averages over its rows, one per model call, each carrying its episode's reward).
    """
    by_group: dict[Hashable, list[float]] = defaultdict(list)
    weight: dict[Hashable, list[float]] = defaultdict(list)
    for i, (s, g) in enumerate(zip(scores, group_ids)):
        by_group[g].append(float(s))
        weight[g].append(1.0 if weights is None else float(weights[i]))
    if min_size > 1:
        return [len(by_group[g]) >= min_size and k for g, k in
                zip(group_ids, keep_groups(scores, group_ids, max_mean, weights))]
    if max_mean is not None:
        keep = {g: float(np.average(v, weights=weight[g])) <= max_mean if sum(weight[g]) > 0 else True
                for g, v in by_group.items()}
    else:
        keep = {g: len(v) == 1 or float(np.std(v)) > 0 for g, v in by_group.items()}
    return [keep[g] for g in group_ids]


def overlong_penalty(response_length: int, max_length: int, buffer: int, penalty: float = 1.0) -> float:
    """DAPO soft overlong punishment: 0 until ``max_length - buffer``, then linear down to ``-penalty``."""
    expected = max_length - buffer
    exceed = response_length - expected
    return min(-exceed / buffer * penalty, 0.0)


def response_tokens(traj: Trajectory) -> int:
    """The response length verl's DAPO reward manager reads: of the episode's last conversation ("for
    multi-sequence outputs, we only compute reward based on the last sequence"), every token after its first
    prompt (generated ones, tool results and user turns of a multi-turn conversation, the end token)."""
    last = traj.conversations[-1] if traj.conversations else None
    return 0 if last is None else len(last.token_ids) - last.prompt_length


def shape_overlong(traj: Trajectory, max_length: int, buffer: int, penalty: float) -> None:
    """Add DAPO's overlong penalty to ``traj.reward`` in place (verl's DAPO reward manager, ``overlong_buffer``);
    the reward before it stays as the ``score`` metric (what ``filter_groups.metric: acc`` filters on), with
    ``overlong_reward`` and ``overlong`` (1 where the penalty applies), which verl logs with ``overlong_buffer.log``."""
    shaped = overlong_penalty(response_tokens(traj), max_length, buffer, penalty)
    traj.metrics.update(score=traj.reward, overlong_reward=shaped, overlong=float(shaped < 0))
    traj.reward += shaped
