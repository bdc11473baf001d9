"""Turn-level credit: discounted per-turn returns, GiGPO and step-REINFORCE.

An episode of memrl is several conversations (turns); the episode-level estimators give every turn the
episode's one advantage. The functions here give each turn its own, with ROLL's numbers
(``roll/pipeline/agentic/utils.py``: ``compute_discounted_returns`` and ``compute_response_level_rewards``
with ``adv_estimator`` ``gigpo`` or ``step_reinforce``), so a run here and a run there credit turns alike:

* a turn's *step return* is its discounted return ``G_t = r_t + gamma * G_{t+1}`` within its episode;
* GiGPO: ``episode_weight * norm(episode score within the prompt group) + step_weight * norm(step return
  within the steps that share an anchor state)``;
* step-REINFORCE: the step return normalised within the prompt group.

Every input is one entry per *step* (turn), as ROLL's batch rows are; an episode score is repeated on each
of its steps, so an episode with more turns weighs more in its group's mean and std (as in ROLL).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import Literal

import torch

NormMethod = Literal["mean_std", "mean", "identity"]
_ROLL_EPS = 1e-6  # ROLL's fixed std epsilon and its "std is zero" threshold


def turn_returns(rewards: Sequence[float] | torch.Tensor, gamma: float) -> torch.Tensor:
    """Discounted returns of one episode's turns: ``G_t = r_t + gamma * G_{t+1}``, ``G_T = 0`` (float32).

    Computed back to front in float32 as ROLL's ``compute_discounted_returns`` does, so the values are
    bit-for-bit ROLL's ``step_rewards``.
    """
    r = torch.as_tensor(rewards, dtype=torch.float32).reshape(-1)
    out = torch.empty_like(r)
    running: torch.Tensor | float = 0.0
    for t in reversed(range(r.numel())):
        running = r[t] + gamma * running
        out[t] = running
    return out


def _keyed_groups(keys: Sequence[Hashable]) -> list[list[int]]:
    """Indices sharing a key, keys compared as ``str(key)`` as ROLL's ``DataProto.group_by`` compares them."""
    groups: dict[str, list[int]] = defaultdict(list)
    for i, k in enumerate(keys):
        groups[str(k)].append(i)
    return list(groups.values())


def group_norm(scores: torch.Tensor, keys: Sequence[Hashable], method: NormMethod = "mean_std") -> torch.Tensor:
    """ROLL's ``agentic_reward_norm`` with group mean and std: ``(x - mean) / (std + 1e-6)`` per key.

    The std is unbiased (torch's default); a one-entry group or one whose std is at most 1e-6 gets 0
    (not the raw score, unlike :func:`memrl.rl.advantages.group_normalize`). ``mean`` only centres,
    ``identity`` returns the scores.
    """
    x = torch.as_tensor(scores, dtype=torch.float32).reshape(-1)
    if len(keys) != x.numel():
        raise ValueError(f"{x.numel()} scores but {len(keys)} group keys")
    if method == "identity":
        return x.clone()
    out = torch.empty_like(x)
    for rows in _keyed_groups(keys):
        s = x[rows]
        if method == "mean":
            out[rows] = s - s.mean()
            continue
        std = s.std() if len(rows) > 1 else None
        if std is not None and std.abs() > _ROLL_EPS:
            out[rows] = (s - s.mean()) / (std + _ROLL_EPS)
        else:
            out[rows] = 0.0
    return out


def gigpo_advantages(episode_scores: Sequence[float] | torch.Tensor, step_returns: Sequence[float] | torch.Tensor,
                     traj_group: Sequence[Hashable], state: Sequence[Hashable], *, episode_weight: float = 1.0,
                     step_weight: float = 1.0, method: NormMethod = "mean_std") -> torch.Tensor:
    """GiGPO's advantage of each step, as ROLL computes it (one float32 value per step).

    ``episode_scores[i]``: the score of step i's episode; ``step_returns[i]``: its discounted return
    (:func:`turn_returns`); ``traj_group[i]``: its prompt group; ``state[i]``: its anchor state.
    The episode term is normalised within the prompt group, the step term within the steps sharing
    an anchor state. As in ROLL, anchor steps are grouped by the state key alone, across prompt
    groups: give states of different prompts different keys (memrl's trainer prefixes the group).
    ``method`` is ROLL's ``reward_normalization.method`` (its GiGPO examples use ``mean_std`` and ``mean``).
    """
    n = len(traj_group)
    if not (len(episode_scores) == len(step_returns) == len(state) == n):
        raise ValueError("episode_scores, step_returns, traj_group and state need one entry per step")
    episode = group_norm(torch.as_tensor(episode_scores, dtype=torch.float32), traj_group, method)
    step = group_norm(torch.as_tensor(step_returns, dtype=torch.float32), state, method)
    return episode_weight * episode + step_weight * step


def step_reinforce_advantages(step_returns: Sequence[float] | torch.Tensor, traj_group: Sequence[Hashable], *,
                              method: NormMethod = "mean_std") -> torch.Tensor:
    """ROLL's ``step_reinforce``: each step's discounted return normalised within its prompt group."""
    return group_norm(torch.as_tensor(step_returns, dtype=torch.float32), traj_group, method)


@dataclass(frozen=True)
class TurnRows:
    """What the per-turn estimators read of a batch: one entry per trained conversation row.

    ``episode[i]``/``turn[i]`` locate row i (its episode's index and its conversation's position);
    ``group[i]``: its prompt group; ``state[i]``: its anchor (None: a state of its own). Per episode,
    ``scores[e]`` is the outcome reward and ``turn_rewards[e]`` the rewards of all its conversations.
    """

    episode: Sequence[int]
    turn: Sequence[int]
    group: Sequence[Hashable]
    state: Sequence[Hashable | None]
    scores: Sequence[float]
    turn_rewards: Sequence[Sequence[float]]

    def step_rewards(self, e: int) -> list[float]:
        """Episode e's per-turn rewards, its outcome reward added to the last turn's (where an env puts it)."""
        r = [float(x) for x in self.turn_rewards[e]]
        if r:
            r[-1] += float(self.scores[e])
        return r

    def step_returns(self, gamma: float) -> torch.Tensor:
        """Each row's discounted return within its episode."""
        per_episode = {e: turn_returns(self.step_rewards(e), gamma) for e in set(self.episode)}
        return torch.stack([per_episode[e][t] for e, t in zip(self.episode, self.turn)]) if self.episode \
            else torch.zeros(0)

    def anchors(self) -> list[str]:
        """Anchor keys scoped to the prompt group; a row without a state is an anchor of its own."""
        return [f"{g}|{s}" if s is not None else _own_anchor(g, e, t)
                for g, s, e, t in zip(self.group, self.state, self.episode, self.turn)]


def _own_anchor(group: Hashable, episode: int, turn: int) -> str:
    """The key of a turn without a state: an anchor set of its own."""
    return f"{group}|#{episode}.{turn}"


def similar_anchors(rows: TurnRows, threshold: float) -> list[str]:
    """Anchor keys that group *similar* states (verl-agent's ``gigpo.enable_similarity``): within a prompt
    group, in batch order, a turn's state joins the first cluster whose first state matches it with a
    ``difflib.SequenceMatcher`` ratio of at least ``threshold``, else starts a cluster. Meant for states that
    are the observation's text (``ep.generate(..., state=text)``); a row without a state is its own anchor."""
    firsts: dict[Hashable, list[str]] = {}
    keys = []
    for g, s, e, t in zip(rows.group, rows.state, rows.episode, rows.turn):
        if s is None:
            keys.append(_own_anchor(g, e, t))
            continue
        clusters, text = firsts.setdefault(g, []), str(s)
        found = next((i for i, first in enumerate(clusters) if SequenceMatcher(None, text, first).ratio() >= threshold),
                     None)
        if found is None:
            clusters.append(text)
            found = len(clusters) - 1
        keys.append(f"{g}|~{found}")
    return keys


def gigpo_rows(rows: TurnRows, *, gamma: float = 1.0, episode_weight: float = 1.0,
               step_weight: float = 1.0, norm: NormMethod = "mean_std", similarity: float | None = None) -> torch.Tensor:
    """The ``gigpo`` estimator's advantage of each row (:func:`gigpo_advantages` on the batch's turns).

    ``norm`` is ``algorithm.turn_norm``: verl-agent's ``algorithm.gigpo.mode`` ``mean_std_norm`` (its
    examples' setting) is ``mean_std``, its ``mean_norm`` is ``mean``. ``similarity`` is
    ``algorithm.state_similarity``: None groups equal states, a ratio groups similar ones (:func:`similar_anchors`)."""
    scores = [float(rows.scores[e]) for e in rows.episode]
    anchors = rows.anchors() if similarity is None else similar_anchors(rows, similarity)
    return gigpo_advantages(scores, rows.step_returns(gamma), rows.group, anchors,
                            episode_weight=episode_weight, step_weight=step_weight, method=norm)


def step_reinforce_rows(rows: TurnRows, *, gamma: float = 1.0, episode_weight: float = 1.0,
                        step_weight: float = 1.0, norm: NormMethod = "mean_std") -> torch.Tensor:
    """The ``step_reinforce`` estimator's advantage of each row (the weights are GiGPO's, unused here)."""
    return step_reinforce_advantages(rows.step_returns(gamma), rows.group, method=norm)
