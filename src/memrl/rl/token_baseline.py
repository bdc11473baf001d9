"""verl's optimal token baseline (``algorithm.adv_estimator=optimal_token_baseline``): a baseline per token.

Why: GRPO subtracts one number, the group's mean reward, from every token of an episode. The variance-optimal
baseline for the policy gradient of token t weights each episode's return by how much gradient that episode's
path carries up to t; verl's OTB estimates that weight with the path-variance proxy
``W_t = sum_{j<=t} (1 - 2 pi_j + sum_v pi_v^2)`` (``pi_j`` the trainer's probability of the generated token
j, ``sum_v pi_v^2`` the squared norm of its next-token distribution, both from the log-prob pass before the update),
and takes ``B_t = sum_i G_i,t W_i,t / sum_i W_i,t`` over the group's episodes still generating at t. With
rollout correction weights ``rho``, each token's term is scaled by ``rho^2``.

Positions count an episode's *generated* tokens in order, across its conversations and skipping tool or user
tokens between turns, as verl's ``tir_optimal_token_baseline`` compacts them; for an episode of one
conversation without such spans that is also verl's ``optimal_token_baseline``. A group of one episode has no
baseline (its return stays), and by default the positions of the group's longest episode beyond the second
longest get none either (verl's ``handle_zero_tail``). ``tests/rl/test_token_baseline.py`` runs verl's two
functions from a checkout against this one.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch

from memrl.rl.estimator_base import _groups, register_adv_est


def token_baseline_advantages(returns: torch.Tensor, weights: torch.Tensor, lengths: torch.Tensor,
                              group_ids: Sequence[Hashable], *, zero_tail: bool = True,
                              epsilon: float = 1e-8) -> torch.Tensor:
    """``[N, L]`` advantages ``G - B`` of N episodes whose ``lengths[i]`` generated tokens come first in each row of
    ``returns`` (the return at each) and ``weights`` (``1 - 2 pi + sum pi^2``, times ``rho^2`` under a rollout
    correction); positions past an episode's length are 0."""
    n, width = returns.shape
    valid = torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)
    cumulative = (weights * valid).cumsum(dim=-1) * valid
    g = returns * valid
    baselines = torch.zeros_like(g)
    for all_rows in _groups(group_ids).values():
        rows = [i for i in all_rows if int(lengths[i]) > 0]  # an episode with no token kept is not in its group
        if len(rows) < 2:
            continue  # no other episode: no baseline
        index = torch.tensor(rows)
        w, r = cumulative[index], g[index]
        baselines[index] = ((r * w).sum(dim=0) / (w.sum(dim=0) + epsilon)).to(baselines.dtype)
        if zero_tail:
            _zero_tail(baselines, rows, lengths)
    return (g - baselines) * valid


def _zero_tail(baselines: torch.Tensor, rows: list[int], lengths: torch.Tensor) -> None:
    """verl's handle_zero_tail: the one longest episode of a group gets no baseline past the second longest."""
    own = lengths[torch.tensor(rows)]
    ordered = torch.sort(own).values
    longest, second = int(ordered[-1]), int(ordered[-2])
    at = (own == longest).nonzero(as_tuple=True)[0]
    if at.numel() == 1 and longest > second:
        baselines[rows[int(at[0])], second:] = 0.0


@register_adv_est("optimal_token_baseline", needs_group=True, policy_stats=True)
def optimal_token_baseline(scores: torch.Tensor, group_ids: Sequence[Hashable], *,
                           epsilon: float = 1e-6) -> torch.Tensor:
    """Each episode's return (its reward, on every generated token); the trainer replaces it by ``G_t - B_t``
    once its log-prob pass has given each token's ``pi`` and ``sum pi^2`` (:func:`token_baseline_advantages`)."""
    return scores.clone().float()
