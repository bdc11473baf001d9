"""verl's other outcome estimators: GRPO for pass@k (``grpo_passk``), GPG's (``gpg``), GDPO (``gdpo``), OPO
(``opo``) and ReMax (``remax``).

Why: both change *which* episodes of a group carry a signal, not only how much. Pass@k training (arXiv
2503.19595) rewards a group for its best answer: only the group's best episode gets an advantage, the margin
of its reward over the runner-up's (divided by the group's std), so the policy is pushed to make *some* answer
right rather than every answer alike. GPG (arXiv 2504.02546), the estimator of verl's GPG recipe with
``policy_loss=gpg``, centres each reward on its group's mean and scales every advantage by
``episodes / episodes with a non-zero reward``, so a batch where few episodes score does not shrink the
gradient. GDPO (arXiv 2601.05242) trains on several rewards at once (a format reward and an accuracy reward,
say): summed first, the one with the larger spread drowns the other's signal in the group's std, so each
component is normalised in its group on its own, then they are summed with weights and whitened over the
batch's tokens. OPO (arXiv 2505.23585) subtracts the group's length-weighted mean reward, the baseline of least
variance when each token carries the gradient of its sequence's reward. ReMax (arXiv 2310.10505) subtracts the
reward of the policy's own greedy answer to the prompt (:mod:`memrl.train.greedy_baseline` runs that episode).

Each follows ``compute_grpo_passk_outcome_advantage`` / ``compute_gpg_outcome_advantage`` /
``compute_gdpo_outcome_advantage`` / ``compute_opo_outcome_advantage`` / ``compute_remax_outcome_advantage`` of
``verl/trainer/ppo/core_algos.py`` step for step, on one value per episode (memrl's groups are of episodes);
``tests/rl/test_outcome_estimators.py`` runs verl's own functions from a checkout against these.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch

from memrl.rl.estimator_base import (_groups as _members, _whitened, batch_std, group_normalize,
                                     register_adv_est)


@register_adv_est("grpo_passk", needs_group=True)
def grpo_passk(scores: torch.Tensor, group_ids: Sequence[Hashable], *, epsilon: float = 1e-6) -> torch.Tensor:
    """Pass@k: the group's best episode gets ``(r_max - r_second) / (std + epsilon)`` (unbiased std), every other
    episode 0. The best is ``torch.topk``'s first, as verl picks it; a tie for best gives 0. A group of one
    episode has no runner-up: its advantage is 0 (verl raises)."""
    out = torch.zeros_like(scores, dtype=torch.float32)
    for rows in _members(group_ids).values():
        if len(rows) < 2:
            continue
        rewards = scores[rows].float()
        top, where = torch.topk(rewards, 2)
        out[rows[int(where[0])]] = (top[0] - top[1]) / (torch.std(rewards) + epsilon)
    return out


@register_adv_est("gpg", needs_group=True)
def gpg(scores: torch.Tensor, group_ids: Sequence[Hashable], *, epsilon: float = 1e-6) -> torch.Tensor:
    """GPG: ``alpha * (r - group mean)``, ``alpha`` = episodes / episodes with a non-zero reward (at least one).
    A group of one episode subtracts 0, as verl; where other groups have several (a lone one is what failures
    left, and memrl trains it on nothing), alpha counts only the episodes of groups of several."""
    rewards = scores.float()
    groups = list(_members(group_ids).values())
    kept = [i for rows in groups if len(rows) > 1 for i in rows] if any(len(r) > 1 for r in groups) else \
        list(range(rewards.numel()))
    alpha = len(kept) / torch.count_nonzero(rewards[kept]).clamp(min=1)
    out = rewards.clone()
    for rows in groups:
        if len(rows) > 1:
            out[rows] = rewards[rows] - rewards[rows].mean()
    return alpha * out


@register_adv_est("gdpo", needs_group=True, tokens=_whitened, components=True)
def gdpo(scores: torch.Tensor, group_ids: Sequence[Hashable], *, epsilon: float = 1e-6,
         components: torch.Tensor | None = None, weights: Sequence[float] | None = None) -> torch.Tensor:
    """GDPO: ``sum_k w_k * GRPO_k``, each component (a column of ``components``, the episodes' metrics named by
    ``algorithm.gdpo_reward_keys``) normalised in its group as GRPO's; whitened over the batch's generated
    tokens by the token stage, as verl's masked_whiten. No components: the reward alone (verl's fallback).
    ``weights``: ``algorithm.gdpo_reward_weights``, else 1 each."""
    parts = scores.float().unsqueeze(-1) if components is None else components.float()
    w = [1.0] * parts.shape[1] if weights is None else list(weights)
    out = torch.zeros(parts.shape[0])
    for k in range(parts.shape[1]):
        out += w[k] * group_normalize(parts[:, k], group_ids, True, epsilon)
    return out


@register_adv_est("normalize_then_sum", needs_group=True, components=True)
def normalize_then_sum(scores: torch.Tensor, group_ids: Sequence[Hashable], *, epsilon: float = 1e-6,
                       components: torch.Tensor | None = None, weights: Sequence[float] | None = None) -> torch.Tensor:
    """TRL's GDPO (``multi_objective_aggregation="normalize_then_sum"``): each component normalised in its group
    (unbiased std, ``+ epsilon``), summed with ``weights``, then normalised over the batch's episodes (its mean,
    its unbiased std ``+ epsilon``), where verl's ``gdpo`` whitens the sum over tokens. A group of one episode
    subtracts itself (0, as TRL's); a batch of one has std 0."""
    summed = gdpo.fn(scores, group_ids, epsilon=epsilon, components=components, weights=weights)
    for rows in _members(group_ids).values():
        if len(rows) == 1:
            summed[rows] = 0.0  # TRL's group of one: its value minus its own mean
    return (summed - summed.mean()) / (batch_std(summed) + epsilon)


@register_adv_est("opo", needs_group=True, lengths=True)
def opo(scores: torch.Tensor, group_ids: Sequence[Hashable], *, epsilon: float = 1e-6,
        lengths: torch.Tensor | None = None) -> torch.Tensor:
    """OPO: ``r_i - sum_g(len_j r_j) / sum_g(len_j)``, ``len`` an episode's generated tokens (every conversation's);
    a group of one subtracts 0, as verl. No lengths: the plain group mean."""
    rewards = scores.float()
    weight = torch.ones_like(rewards) if lengths is None else lengths.float()
    out = rewards.clone()
    for rows in _members(group_ids).values():
        if len(rows) > 1:
            w = weight[rows] if weight[rows].sum() > 0 else torch.ones(len(rows))  # no token generated: plain mean
            out[rows] = rewards[rows] - (w * rewards[rows]).sum() / w.sum()
    return out


@register_adv_est("remax", baselines=True)
def remax(scores: torch.Tensor, group_ids: Sequence[Hashable], *, epsilon: float = 1e-6,
          baselines: torch.Tensor | None = None) -> torch.Tensor:
    """ReMax: ``r - b``, ``b`` the reward of the group's greedy episode (generated, never trained on), shared by
    the group's n episodes; no std, no group mean (verl's reverse cumulative sum of a reward on the last token is
    that value on every generated token)."""
    if baselines is None:
        raise ValueError("remax needs each episode's greedy baseline reward (baselines=)")
    return scores.float() - baselines.float()
