"""What every advantage estimator shares: the :class:`AdvantageEstimator` record, its registration and lookup.

Why a module of its own: the built-in estimators live in several modules (:mod:`memrl.rl.advantages`,
:mod:`memrl.rl.outcome_estimators`) that all register here, and the registry imports them through
:mod:`memrl.rl.advantages`; with the decorator below them there is no import cycle.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from memrl.config.registry import ADV_ESTIMATORS, origin
from memrl.rl.functional import masked_whiten


def spread(per_row: torch.Tensor, mask: torch.Tensor, *, gamma: float = 1.0) -> torch.Tensor:
    """Each row's value on every generated token of the row (the default token stage)."""
    return per_row.unsqueeze(-1) * mask


@dataclass(frozen=True)
class AdvantageEstimator:
    """An estimator in two stages: one value per episode, then token-level values per conversation row.

    ``episode(scores, group_ids, *, epsilon)`` gets each episode's scalar score and group and
    returns one value per episode; ``tokens(per_row, mask, *, gamma)`` gets each conversation row's
    episode value and the ``[C, T]`` float mask of generated tokens. ``needs_group`` marks estimators
    that compare episodes of a group (meaningless with ``algorithm.n=1``). ``turns(rows: TurnRows, *,
    gamma, episode_weight, step_weight[, norm])``, where set, gives each conversation row its own value instead
    (per-turn credit); the episode stage then only serves callers that want one value per episode.
    Calling the object calls ``episode``.
    """

    fn: Callable[..., torch.Tensor]
    tokens: Callable[..., torch.Tensor] = spread
    needs_group: bool = False
    turns: Callable[..., torch.Tensor] | None = None
    per_step: bool = False  # its episode stage also normalises ReMemR1's state rewards per (group, turn)
    states: bool = False  # its turn stage compares turns by their anchor state (ep.generate(state=...))
    # its episode stage also takes ``components`` ([episodes, K]: algorithm.gdpo_reward_keys' metrics) and ``weights``
    components: bool = False
    lengths: bool = False  # its episode stage also takes ``lengths``: each episode's generated tokens (OPO's)
    baselines: bool = False  # the rollout adds one greedy episode per group; the stage takes its reward (ReMax's)
    # the trainer replaces its per-token values after its log-prob pass, from each token's pi and sum pi^2 (OTB's)
    policy_stats: bool = False

    @property
    def spreads(self) -> bool:
        """Whether its token stage gives each row its value as is (not whitened or discounted over the batch, nor
        replaced token by token in the update)."""
        return self.tokens is spread and not self.policy_stats

    def __call__(self, scores: torch.Tensor, group_ids: Sequence[Hashable], **kw: Any) -> torch.Tensor:
        out = self.fn(scores, group_ids, **kw)
        name = origin(self.fn, ":")
        if not isinstance(out, torch.Tensor) or out.shape != scores.shape:
            got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            raise ValueError(f"advantage estimator {name} returned {got}; it must return a tensor of one value per "
                             f"episode, shape {tuple(scores.shape)}")
        if bool(torch.isfinite(scores).all()) and not bool(torch.isfinite(out).all()):
            raise ValueError(f"advantage estimator {name} returned non-finite values (NaN or inf) for finite rewards")
        return out


def register_adv_est(name: str, *, tokens: Callable[..., torch.Tensor] = spread, needs_group: bool = False,
                     turns: Callable[..., torch.Tensor] | None = None, per_step: bool = False,
                     states: bool = False, components: bool = False, lengths: bool = False,
                     baselines: bool = False, policy_stats: bool = False,
                     ) -> Callable[[Callable[..., torch.Tensor]], AdvantageEstimator]:
    """Decorator: register ``fn(scores, group_ids, *, epsilon) -> per-episode values`` as ``name``
    (``turns``: a per-turn stage, ``states`` if it compares turns by anchor state; ``per_step``: ReMemR1's
    state advantage uses ``fn`` too, see :class:`AdvantageEstimator` and :func:`combine_step_advantages`;
    ``components``: ``fn`` also takes the episodes' reward components, GDPO's; ``lengths``: their generated
    tokens, OPO's)."""
    def decorate(fn: Callable[..., torch.Tensor]) -> AdvantageEstimator:
        return ADV_ESTIMATORS.register(name, AdvantageEstimator(fn, tokens, needs_group, turns, per_step, states,
                                                                components, lengths, baselines, policy_stats))
    return decorate


def get_estimator(name: str) -> AdvantageEstimator:
    """The estimator ``algorithm.adv_estimator`` names; a plain function given by import path gets the defaults."""
    obj = ADV_ESTIMATORS.get(name)
    return obj if isinstance(obj, AdvantageEstimator) else AdvantageEstimator(obj)


def _groups(index: Sequence[Hashable]) -> dict[Hashable, list[int]]:
    groups: dict[Hashable, list[int]] = defaultdict(list)
    for i, g in enumerate(index):
        groups[g].append(i)
    return groups


def batch_std(values: torch.Tensor) -> torch.Tensor:
    """The unbiased std of every value of the batch, 0 for a batch of one (TRL's nanstd there gives no spread)."""
    return values.std() if values.numel() > 1 else torch.zeros((), dtype=values.dtype)


def group_normalize(scores: torch.Tensor, index: Sequence[Hashable], norm_by_std: bool = True,
                    epsilon: float = 1e-6) -> torch.Tensor:
    """GRPO on a vector of scalar scores: ``(r - mean_g) / (std_g + eps)`` (std unbiased).

    A one-sample group uses mean 0 and std 1, as verl does, so its advantage
    is its raw score (divided by ``1 + eps``).
    """
    out = scores.clone().float()
    for rows in _groups(index).values():
        s = scores[rows].float()
        if len(rows) == 1:
            mean, std = torch.tensor(0.0), torch.tensor(1.0)
        else:
            mean, std = s.mean(), s.std()
        out[rows] = (s - mean) / (std + epsilon) if norm_by_std else s - mean
    return out


def _whitened(per_row: torch.Tensor, mask: torch.Tensor, *, gamma: float = 1.0) -> torch.Tensor:
    """REINFORCE++-baseline: the spread values whitened over all valid tokens of the batch."""
    return masked_whiten(spread(per_row, mask), mask) * mask
