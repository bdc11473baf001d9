"""``adv_estimator=grpo_passk`` and ``gpg``: by hand, and against verl's own functions cut out of a checkout
(``MEMRL_VERL_REPO``, verl 0.9.0's core_algos.py), one row per episode."""

from __future__ import annotations

import os
import types
from typing import Any

import numpy as np
import pytest
import torch

from memrl.rl.outcome_estimators import gpg, grpo_passk

VERL = os.environ.get("MEMRL_VERL_REPO")


def test_pass_at_k_credits_only_the_groups_best_by_its_margin():
    """Group a: 0.2 0.9 0.5 -> the 0.9 gets (0.9 - 0.5) / std (unbiased: 0.35119); group b ties for best: 0;
    a lone episode has no runner-up: 0."""
    scores = torch.tensor([0.2, 0.9, 0.5, 1.0, 1.0, 0.0, 0.7])
    out = grpo_passk(scores, ["a", "a", "a", "b", "b", "b", "c"])
    assert out[1].item() == pytest.approx(0.4 / (0.351188 + 1e-6), rel=1e-5)
    assert out[[0, 2, 3, 4, 5, 6]].abs().max().item() == 0.0


def test_gpg_centres_on_the_group_and_scales_by_the_share_that_scored():
    """4 episodes, 2 with a non-zero reward: alpha 2; group means 0.5."""
    out = gpg(torch.tensor([1.0, 0.0, 0.0, 1.0]), ["a", "a", "b", "b"])
    assert out.tolist() == [1.0, -1.0, -1.0, 1.0]
    assert gpg(torch.zeros(3), ["a", "a", "b"]).tolist() == [0.0, 0.0, 0.0]  # nobody scored: alpha 3 / 1, all 0


@pytest.fixture(scope="module")
def verl() -> types.SimpleNamespace:
    if not VERL:
        pytest.skip("set MEMRL_VERL_REPO to a verl checkout to compare with verl's own estimators")
    from tests.rl.verl_policy_losses import verl_estimators

    ns = verl_estimators(str(VERL), "GRPO_PASSK", "GPG")
    return types.SimpleNamespace(passk=ns["compute_grpo_passk_outcome_advantage"],
                                 gpg=ns["compute_gpg_outcome_advantage"])


def random_groups(seed: int, groups: int) -> tuple[torch.Generator, np.ndarray]:
    """A seeded generator and the group index of ``groups`` groups of 2 to 5 episodes."""
    g = torch.Generator().manual_seed(seed)
    sizes = torch.randint(2, 6, (groups,), generator=g).tolist()
    return g, np.array([i for i, n in enumerate(sizes) for _ in range(n)])


@pytest.mark.parametrize("seed", range(20))
def test_both_equal_verls_on_random_groups(verl, seed):
    """Scores on each row's last token (rows of one episode each); groups of 2 to 5; binary and real rewards."""
    g, index = random_groups(seed, 4)
    scores = torch.rand(len(index), generator=g)
    if seed % 2:
        scores = (scores > 0.6).float()
    rewards, mask = torch.zeros(len(index), 5), torch.ones(len(index), 5)
    rewards[:, -1] = scores
    want, _ = verl.passk(rewards, mask, index, config={})
    torch.testing.assert_close(grpo_passk(scores, index.tolist()), want[:, 0])
    want, _ = verl.gpg(rewards.clone(), mask, index)
    torch.testing.assert_close(gpg(scores, index.tolist()), want[:, 0])


def test_opo_subtracts_the_length_weighted_mean():
    """Rewards 1, 0 with 30 and 10 tokens: baseline (30 + 0) / 40 = 0.75."""
    from memrl.rl.outcome_estimators import opo

    out = opo(torch.tensor([1.0, 0.0, 2.0]), ["a", "a", "b"], lengths=torch.tensor([30, 10, 5]))
    assert out.tolist() == pytest.approx([0.25, -0.75, 2.0])  # a lone episode subtracts 0, as verl


@pytest.fixture(scope="module")
def verl_opo() -> Any:
    if not VERL:
        pytest.skip("set MEMRL_VERL_REPO to a verl checkout to compare with verl's own estimators")
    from tests.rl.verl_policy_losses import verl_estimators

    return verl_estimators(str(VERL), "OPO")["compute_opo_outcome_advantage"]


@pytest.mark.parametrize("seed", range(10))
def test_opo_equals_verls(verl_opo, seed):
    from memrl.rl.outcome_estimators import opo

    g, index = random_groups(seed, 3)
    b = len(index)
    mask = torch.zeros(b, 8)
    lengths = torch.randint(1, 9, (b,), generator=g)
    for i, n in enumerate(lengths.tolist()):
        mask[i, :n] = 1.0
    scores = torch.rand(b, generator=g)
    rewards = torch.zeros(b, 8)
    rewards[torch.arange(b), lengths - 1] = scores
    want, _ = verl_opo(rewards, mask, index)
    torch.testing.assert_close(opo(scores, index.tolist(), lengths=lengths)[:, None] * mask, want)


def test_batch_std_is_trls_scale_rewards_batch():
    """TRL: group means 2/3 and 1/3; the batch's unbiased std of three 1s and three 0s is sqrt(0.3), + 1e-4."""
    from memrl.rl.advantages import grpo_batch_std

    scores = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0])
    got = grpo_batch_std(scores, ["a", "a", "a", "b", "b", "b"], epsilon=1e-4)
    want = torch.tensor([1 / 3, -2 / 3, 1 / 3, 2 / 3, -1 / 3, -1 / 3]) / (0.3 ** 0.5 + 1e-4)
    assert got.tolist() == pytest.approx(want.tolist(), abs=1e-6)
    assert grpo_batch_std(torch.tensor([0.7]), ["a"], epsilon=1e-4).tolist() == [0.0]  # TRL: a lone one is its mean
    same = grpo_batch_std(torch.ones(4), ["a", "a", "b", "b"], epsilon=1e-4)
    assert same.tolist() == [0.0] * 4  # std 0: divided by epsilon, numerators 0


def test_batch_std_equals_trls_code():
    """TRL's sum_then_normalize branch with scale_rewards="batch", transcribed from grpo_trainer.py (f2cd577):
    mean over each group of num_generations, nanstd (unbiased) over the whole batch, + 1e-4."""
    from memrl.rl.advantages import grpo_batch_std

    for seed in range(10):
        g = torch.Generator().manual_seed(seed)
        groups, num_generations = 3, 4
        rewards = torch.rand(groups * num_generations, generator=g)
        mean = rewards.view(-1, num_generations).mean(dim=1).repeat_interleave(num_generations, dim=0)
        variance = ((rewards - rewards.mean()) ** 2).sum() / (rewards.numel() - 1)
        want = (rewards - mean) / (variance.sqrt() + 1e-4)
        ids = [i // num_generations for i in range(rewards.numel())]
        torch.testing.assert_close(grpo_batch_std(rewards, ids, epsilon=1e-4), want)


def test_normalize_then_sum_is_trls_gdpo():
    """TRL's normalize_then_sum branch (grpo_trainer.py at f2cd577), transcribed: per reward function, group mean
    and unbiased std (+ 1e-4); weighted sum; then the batch's mean and unbiased std (+ 1e-4)."""
    from memrl.rl.outcome_estimators import normalize_then_sum

    for seed in range(10):
        g = torch.Generator().manual_seed(seed)
        groups, num_generations, funcs = 3, 4, 2
        per_func = torch.rand(groups * num_generations, funcs, generator=g)
        if seed % 2:
            per_func = (per_func > 0.5).float()
        weights = torch.tensor([1.0, 0.5])
        grouped = per_func.view(-1, num_generations, funcs)
        mean_k = grouped.mean(dim=1, keepdim=True)
        std_k = grouped.std(dim=1, keepdim=True)
        reward = (((grouped - mean_k) / (std_k + 1e-4)).view(-1, funcs) * weights).sum(dim=1)
        want = (reward - reward.mean()) / (reward.std() + 1e-4)
        ids = [i // num_generations for i in range(per_func.shape[0])]
        got = normalize_then_sum(per_func.sum(1), ids, epsilon=1e-4, components=per_func, weights=[1.0, 0.5])
        torch.testing.assert_close(got, want)
