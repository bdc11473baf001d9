"""pass^k as τ²-bench reports it: how reliably an agent solves a task every time, not once.

For one task run ``n`` times with ``c`` successes, pass^k = C(c, k) / C(n, k): the chance that
k trials drawn without replacement from the n all succeed (the unbiased estimate of p^k). The
benchmark's number is the mean over tasks, for k = 1 .. the fewest trials any task has; pass^1
is the success rate. A trial succeeds when its reward is 1 (within 1e-6), so partial-credit
rewards never count as a pass.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence


def is_success(reward: float) -> bool:
    """τ²-bench's success test: the reward is 1 up to float error."""
    return 1 - 1e-6 <= reward <= 1 + 1e-6


def pass_hat_k(num_trials: int, successes: int, k: int) -> float:
    """pass^k of one task from ``successes`` of ``num_trials`` trials."""
    if not 1 <= k <= num_trials:
        raise ValueError(f"pass^{k} needs 1 <= k <= trials ({num_trials})")
    if not 0 <= successes <= num_trials:
        raise ValueError(f"{successes} successes out of {num_trials} trials")
    return math.comb(successes, k) / math.comb(num_trials, k)


def pass_hat_ks(outcomes: Mapping[str, Sequence[bool]]) -> dict[int, float]:
    """{k: mean over tasks of pass^k} for k = 1 .. the smallest number of trials of any task."""
    if not outcomes:
        return {}
    max_k = min(len(v) for v in outcomes.values())
    return {k: sum(pass_hat_k(len(v), sum(map(bool, v)), k) for v in outcomes.values()) / len(outcomes)
            for k in range(1, max_k + 1)}
