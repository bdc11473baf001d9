"""The optimal token baseline on training rows (:mod:`memrl.rl.token_baseline`), after the log-prob pass.

Why in the update: the baseline of each token reads the trainer's probability of it and the squared norm of its
next-token distribution, which only the pass over the rows before the first optimizer step computes (verl's
``calculate_sum_pi_squared`` on its old-log-prob pass). The scoring stage leaves each episode's return on its rows
(the reward on every generated token); this replaces it by ``G_t - B_t``, identically on every rank (each holds
every row).
"""

from __future__ import annotations

from collections import defaultdict

import torch
from torch.nn.utils.rnn import pad_sequence

from memrl.rl.token_baseline import token_baseline_advantages
from memrl.rl.variance_proxy import variance_proxy_metrics
from memrl.train.batch import Row


def _positions(row: Row) -> torch.Tensor:
    """The row's generated target positions (its loss mask shifted to targets), in order, less those the rollout
    correction rejected: verl computes the baseline on the mask after rejection (a rejected sequence leaves its
    group, a rejected token adds nothing to W), keeping here each kept token's return."""
    kept = torch.tensor(row.loss_mask[1:], dtype=torch.bool)
    if row.train_mask is not None:
        kept = kept & (row.train_mask[: kept.numel()] > 0)
    return torch.nonzero(kept, as_tuple=True)[0]


def _check_row(row: Row) -> None:
    """The fields the baseline and the variance proxies read, set by the update's log-prob pass and the scoring."""
    missing = [a for a in ("old_logprobs", "sum_pi_squared", "advantages") if getattr(row, a) is None]
    if missing:
        raise ValueError(f"optimal_token_baseline: the row of episode {row.episode}, conversation {row.step} has "
                         f"no {missing[0]} (the update's log-prob pass and the scoring set them)")


def _variance_terms(row: Row, at: torch.Tensor) -> torch.Tensor:
    """``1 - 2 pi + sum pi^2`` at the positions ``at`` (times ``rho^2`` where the rollout correction weighs them)."""
    _check_row(row)
    term = 1.0 - 2.0 * torch.exp(row.old_logprobs[at].float()) + row.sum_pi_squared[at].float()
    return term if row.is_weights is None else term * row.is_weights[at].float() ** 2


def _by_episode(rows: list[Row]) -> dict[int, list[tuple[Row, torch.Tensor]]]:
    """Each episode's rows in order, with their kept generated positions."""
    episodes: dict[int, list[tuple[Row, torch.Tensor]]] = defaultdict(list)
    for r in rows:
        episodes[r.episode].append((r, _positions(r)))
    return episodes


def _padded(parts: list[list[torch.Tensor]]) -> torch.Tensor:
    return pad_sequence([torch.cat(p).float() for p in parts], batch_first=True)


def variance_proxy(rows: list[Row], grad_norm: float | None) -> dict[str, float]:
    """verl's ``variance_proxy/*`` metrics (:mod:`memrl.rl.variance_proxy`) of the step's episodes, after the
    update: each episode's kept generated tokens in order, with the advantages the update trained on."""
    episodes = list(_by_episode(rows).values())
    if not episodes:
        return {}
    for r in rows:
        _check_row(r)
    lengths = [sum(len(at) for _, at in rs) for rs in episodes]
    mask = torch.arange(max(lengths, default=0)).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)

    def field(name: str) -> torch.Tensor:  # the episodes' values of a row field at their kept positions, padded
        return _padded([[getattr(r, name)[at] if getattr(r, name) is not None else torch.ones(len(at))
                         for r, at in rs] for rs in episodes])

    weighted = any(r.is_weights is not None for r in rows)  # rows without weights: 1 (verl's unweighted tokens)
    return variance_proxy_metrics(field("advantages"), field("old_logprobs"), field("sum_pi_squared"), mask,
                                  field("is_weights") if weighted else None, grad_norm)


def apply_token_baseline(rows: list[Row], *, epsilon: float = 1e-8) -> None:
    """Set ``row.advantages`` to OTB's ``G - B`` at each generated token (0 at rejected ones, which do not train);
    an episode's tokens are its rows' in order. Needs ``old_logprobs`` and ``sum_pi_squared`` on every row (and
    reads ``is_weights`` where the rollout correction set them: each token's variance term is scaled by their
    square, as verl's)."""
    episodes = _by_episode(rows)
    if not episodes:
        return
    order = list(episodes)
    weights = [torch.cat([_variance_terms(r, at) for r, at in episodes[e]]) for e in order]  # checks each row first
    returns = [torch.cat([r.advantages[at].float() for r, at in episodes[e]]) for e in order]
    lengths = torch.tensor([len(g) for g in returns])
    adv = token_baseline_advantages(pad_sequence(returns, batch_first=True), pad_sequence(weights, batch_first=True),
                                    lengths, [episodes[e][0][0].group for e in order], epsilon=epsilon)
    for i, e in enumerate(order):
        start = 0
        for r, at in episodes[e]:
            out = torch.zeros_like(r.advantages)
            out[at] = adv[i, start:start + len(at)].to(out.dtype)
            r.advantages, start = out, start + len(at)
