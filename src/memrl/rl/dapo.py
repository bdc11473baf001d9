"""DAPO helpers: dynamic sampling (drop all-equal groups) and overlong reward shaping."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence

import numpy as np


def keep_groups(scores: Sequence[float], group_ids: Sequence[Hashable], max_mean: float | None = None,
                weights: Sequence[float] | None = None) -> list[bool]:
    """Per episode: keep it if its group's scores vary (population std > 0) or the group has one episode.

    Groups whose episodes all scored the same give zero advantage under GRPO:
    training on them only costs compute. ``max_mean``: keep a group whose mean score is at most that
    instead (AReaL's tau2 ``group_filter``, ``mean <= 0.95``), the mean weighted by ``weights`` (AReaL
    averages over its rows, one per model call, each carrying its episode's reward).
    """
    by_group: dict[Hashable, list[float]] = defaultdict(list)
    weight: dict[Hashable, list[float]] = defaultdict(list)
    for i, (s, g) in enumerate(zip(scores, group_ids)):
        by_group[g].append(float(s))
        weight[g].append(1.0 if weights is None else float(weights[i]))
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
