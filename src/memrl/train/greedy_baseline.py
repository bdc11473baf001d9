"""ReMax's baseline (``algorithm.adv_estimator=remax``, arXiv 2310.10505): one greedy episode per group.

Why: ReMax replaces the critic, and GRPO's group mean, by the reward of the policy's own greedy answer to the same
prompt, an action-independent baseline that costs one extra episode per prompt instead of n. verl generates it
in the same request as the sampled ones (temperature 0, top-p 1, top-k off), scores it with the same reward
(shaping included), gives its reward to each of the prompt's n samples and drops the greedy sequence; memrl runs
it as the group's (n+1)-th episode with ``SamplingParams(greedy=True)`` beside the others, in the same rollout (and,
under asynchronous training, the same policy-version window), and never trains on it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from memrl.rl.advantages import get_estimator

if TYPE_CHECKING:
    from memrl.config import MemRLConfig
    from memrl.types import Trajectory

BASELINE_METRIC = "baseline_reward"
BASELINE_SCORE = "baseline_score"  # the greedy episode's reward before shaping (its ``score`` metric), when shaped


def baseline_keeps(scores: list[float], group_ids: list[str], baselines: list[float]) -> tuple[list[float], list[str]]:
    """Dynamic sampling's input under ReMax: each group's rewards and, as one more member, its baseline (a group
    whose n rewards are equal still trains when the greedy reward differs: its advantages ``r - b`` are not 0)."""
    per_group = dict(zip(group_ids, baselines))  # a group's episodes share one baseline
    return [*scores, *per_group.values()], [*group_ids, *per_group]


def greedy_baseline(cfg: MemRLConfig) -> bool:
    """Whether the configured estimator reads a greedy baseline (each group then runs one more episode)."""
    return get_estimator(cfg.algorithm.adv_estimator).baselines


def with_baseline(results: list[Trajectory | None], failed: Callable[[str | None], None]) -> list[Trajectory]:
    """A group's sampled episodes (``results`` but its last, the greedy one, which is dropped), each carrying the
    greedy episode's reward as ``metrics['baseline_reward']``. A greedy episode that failed, or whose reward is not
    finite, leaves its group without a baseline: none of it is trained on (``failed`` is told why: None when the
    episode raised, which was reported already, else the reward it returned)."""
    *sampled, greedy = results
    if greedy is None or not math.isfinite(greedy.reward):
        failed(None if greedy is None else f"it returned reward {greedy.reward}")
        return []
    kept = [t for t in sampled if t is not None]
    for t in kept:
        t.metrics[BASELINE_METRIC] = greedy.reward
        if "score" in greedy.metrics:  # dynamic_sampling_metric=score compares scores with it
            t.metrics[BASELINE_SCORE] = greedy.metrics["score"]
    return kept
