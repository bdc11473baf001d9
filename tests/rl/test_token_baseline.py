"""``adv_estimator=optimal_token_baseline``: by hand, on training rows, and against verl's own
``compute_optimal_token_baseline_advantage`` / ``compute_multi_turn_optimal_token_baseline_advantage`` cut out of a
checkout (``MEMRL_VERL_REPO``, verl 0.9.0's core_algos.py)."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
import torch

from memrl.rl.functional import sum_pi_squared_from_logits
from memrl.rl.token_baseline import token_baseline_advantages
from memrl.train.batch import Row
from memrl.train.token_baseline import apply_token_baseline

VERL = os.environ.get("MEMRL_VERL_REPO")


def test_sum_pi_squared_by_hand():
    """Uniform over 4: 4 x (1/4)^2 = 0.25; one-hot: 1; logits (0, ln 3): probabilities 1/4, 3/4 -> 10/16."""
    logits = torch.tensor([[0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 60.0]])
    assert sum_pi_squared_from_logits(logits).tolist() == pytest.approx([0.25, 1.0])
    assert sum_pi_squared_from_logits(torch.tensor([0.0, math.log(3.0)])).item() == pytest.approx(10 / 16)


def test_the_baseline_weighs_each_return_by_its_path_variance():
    """Two episodes of one group, rewards 1 and 0, weights 1 and 3 per token: W after one token 1 and 3, so
    B_1 = (1 x 1 + 0 x 3) / 4 = 0.25; after two 2 and 6: 0.25 again; the longer one's third token has no baseline
    (verl's zero tail) and keeps its return."""
    returns = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    weights = torch.tensor([[1.0, 1.0, 0.0], [3.0, 3.0, 3.0]])
    got = token_baseline_advantages(returns, weights, torch.tensor([2, 3]), ["g", "g"], epsilon=0.0)
    assert got.tolist() == [[0.75, 0.75, 0.0], [-0.25, -0.25, 0.0]]
    alone = token_baseline_advantages(returns, weights, torch.tensor([2, 3]), ["a", "b"])
    assert torch.equal(alone, returns * torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]]))  # no partner: G


def row(episode: int, group: str, mask: list[int], ret: float, logp: float, spp: float) -> Row:
    r = Row(token_ids=list(range(len(mask))), loss_mask=mask, engine_logprobs=[0.0] * len(mask), episode=episode,
            step=0, group=group)
    targets = torch.tensor(mask[1:], dtype=torch.float32)
    r.advantages, r.old_logprobs = ret * targets, torch.full((len(mask) - 1,), logp)
    r.sum_pi_squared = torch.full((len(mask) - 1,), spp)
    return r


def test_rows_of_an_episode_are_its_generated_tokens_in_order():
    """Episode 0: two conversations of 2 and 1 generated tokens (a tool token between); episode 1: 3 tokens in one;
    both 3 tokens long (no zero tail)."""
    rows = [row(0, "g", [0, 1, 0, 1], 1.0, math.log(0.5), 0.5), row(0, "g", [0, 0, 1], 1.0, math.log(0.5), 0.5),
            row(1, "g", [0, 1, 1, 1], 0.0, math.log(0.5), 0.5)]
    apply_token_baseline(rows)
    # w = 1 - 2 x 0.5 + 0.5 = 0.5 everywhere: equal weights, B = mean of the returns = 0.5 on both episodes' tokens
    assert rows[0].advantages.tolist() == pytest.approx([0.5, 0.0, 0.5])
    assert rows[1].advantages.tolist() == pytest.approx([0.0, 0.5])
    assert rows[2].advantages.tolist() == pytest.approx([-0.5, -0.5, -0.5])


@pytest.fixture(scope="module")
def verl_otb():
    if not VERL:
        pytest.skip("set MEMRL_VERL_REPO to a verl checkout to compare with verl's own estimators")
    from tests.rl.verl_policy_losses import verl_estimators

    ns = verl_estimators(str(VERL), "OPTIMAL_TOKEN_BASELINE", "TIR_OPTIMAL_TOKEN_BASELINE")
    return ns["compute_optimal_token_baseline_advantage"], ns["compute_multi_turn_optimal_token_baseline_advantage"]


def _batch(seed: int, gaps: bool):
    g = torch.Generator().manual_seed(seed)
    sizes = torch.randint(1, 5, (3,), generator=g).tolist()
    index = np.array([i for i, n in enumerate(sizes) for _ in range(n)])
    b, width = len(index), 10
    lengths = torch.randint(1, width + 1, (b,), generator=g)
    mask = torch.zeros(b, width)
    for i, n in enumerate(lengths.tolist()):
        mask[i, :n] = 1.0
        if gaps and n > 3:
            mask[i, 1:3] = 0.0  # a tool result inside the response
    scores = torch.rand(b, generator=g)
    rewards = torch.zeros(b, width)
    rewards[torch.arange(b), lengths - 1] = scores
    old = -torch.rand(b, width, generator=g) * 3
    spp = torch.rand(b, width, generator=g) * 0.5 + 0.2
    rho = torch.rand(b, width, generator=g) + 0.5 if seed % 2 else None
    return index, mask, scores, rewards, old, spp, rho


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("gaps", [False, True])
def test_equal_to_verls(verl_otb, seed, gaps):
    """Rows of one conversation each: without masked spans verl's optimal_token_baseline, with them its
    tir_optimal_token_baseline (which compacts the generated tokens as memrl does), both with IS weights on odd
    seeds; compared on the generated tokens."""
    plain, tir = verl_otb
    index, mask, scores, rewards, old, spp, rho = _batch(seed, gaps)
    want, _ = (tir if gaps else plain)(token_level_rewards=rewards, response_mask=mask, index=index,
                                       old_log_probs=old, sum_pi_squared=spp, rollout_is_weights=rho)
    rows = []
    for i in range(len(index)):
        r = Row(token_ids=list(range(11)), loss_mask=[0] + mask[i].int().tolist(), engine_logprobs=[0.0] * 11,
                episode=i, step=0, group=str(index[i]))
        r.advantages, r.old_logprobs, r.sum_pi_squared = scores[i] * mask[i], old[i].clone(), spp[i].clone()
        r.is_weights = None if rho is None else rho[i].clone()
        rows.append(r)
    apply_token_baseline(rows)
    got = torch.stack([r.advantages for r in rows])
    torch.testing.assert_close(got * mask, want * mask, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("seed", range(8))
def test_after_rejection_equal_to_verls_tir_on_the_rejected_mask(verl_otb, seed):
    """verl runs the baseline on the response mask after the rollout correction's rejection; memrl keeps the loss
    mask and reads the rows' train_mask. Rejected: some interior tokens and one whole row (never a row's last kept
    token: verl's rewards * mask would lose the reward there, memrl keeps it)."""
    _, tir = verl_otb
    index, mask, scores, rewards, old, spp, rho = _batch(seed, gaps=False)
    g = torch.Generator().manual_seed(100 + seed)
    keep = mask.clone()
    for i in range(len(index)):
        n = int(mask[i].sum())
        if n > 2:
            keep[i, : n - 1] *= (torch.rand(n - 1, generator=g) > 0.3).float()
    keep[0] = 0.0  # a rejected sequence
    want, _ = tir(token_level_rewards=rewards * keep, response_mask=keep, index=index, old_log_probs=old,
                  sum_pi_squared=spp, rollout_is_weights=rho)
    rows = []
    for i in range(len(index)):
        r = Row(token_ids=list(range(11)), loss_mask=[0] + mask[i].int().tolist(), engine_logprobs=[0.0] * 11,
                episode=i, step=0, group=str(index[i]))
        r.advantages, r.old_logprobs, r.sum_pi_squared = scores[i] * mask[i], old[i].clone(), spp[i].clone()
        r.is_weights, r.train_mask = (None if rho is None else rho[i].clone()), keep[i].clone()
        rows.append(r)
    apply_token_baseline(rows)
    got = torch.stack([r.advantages for r in rows])
    torch.testing.assert_close(got * keep, want * keep, rtol=1e-5, atol=1e-6)
