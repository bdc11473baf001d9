import math

import pytest
import torch

from memrl.rl.dapo import keep_groups, overlong_penalty
from memrl.rl.losses import agg_loss, compute_policy_loss, kl_penalty


def test_agg_modes_by_hand():
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    assert agg_loss(loss, mask, "token-mean").item() == pytest.approx(7 / 3)
    assert agg_loss(loss, mask, "token-sum").item() == pytest.approx(7)
    assert agg_loss(loss, mask, "seq-mean-token-sum").item() == pytest.approx(3.5)
    assert agg_loss(loss, mask, "seq-mean-token-mean").item() == pytest.approx(2.75)
    # no norm_length: L = the widest response span (row 0: positions 0-1), not the row's padded width 3
    assert agg_loss(loss, mask, "seq-mean-token-sum-norm").item() == pytest.approx(7 / 4)
    prompted = torch.tensor([[0.0, 1.0, 1.0], [0.0, 0.0, 1.0]])  # a prompt token before each response
    assert agg_loss(loss, prompted, "seq-mean-token-sum-norm").item() == pytest.approx((2 + 3 + 6) / 4)
    assert agg_loss(loss, mask, "seq-mean-token-sum-norm", norm_length=7).item() == pytest.approx(7 / 14)
    with pytest.raises(ValueError, match="loss_agg_mode"):
        agg_loss(loss, mask, "mean")


def test_ppo_clip_higher_by_hand():
    adv = torch.tensor([[1.0, -1.0]])
    old = torch.zeros(1, 2)
    logp = torch.log(torch.tensor([[1.5, 0.5]]))
    mask = torch.ones(1, 2)
    loss, clipfrac, ppo_kl, lower = compute_policy_loss(old, logp, adv, mask, cliprange=0.2, cliprange_low=0.2,
                                                        cliprange_high=0.28)
    # A=+1: max(-1.5, -1.28) = -1.28;  A=-1: max(0.5, 0.8) = 0.8, min with 3 -> 0.8
    assert loss.item() == pytest.approx((-1.28 + 0.8) / 2)
    assert clipfrac.item() == 1.0 and lower.item() == 0.0
    assert ppo_kl.item() == pytest.approx((-math.log(1.5) - math.log(0.5)) / 2)


def test_dual_clip_by_hand():
    adv = torch.tensor([[-1.0, -1.0]])
    logp = torch.log(torch.tensor([[5.0, 1.0]]))
    loss, _, _, lower = compute_policy_loss(torch.zeros(1, 2), logp, adv, torch.ones(1, 2), clip_ratio_c=3.0)
    # ratio 5, A=-1: c1 = max(5, 1.2) = 5 > 3 -> dual clip to 3;  ratio 1: loss 1
    assert loss.item() == pytest.approx((3.0 + 1.0) / 2)
    assert lower.item() == pytest.approx(0.5)
    with pytest.raises(ValueError):
        compute_policy_loss(torch.zeros(1, 2), logp, adv, torch.ones(1, 2), clip_ratio_c=1.0)


def test_kl_estimators_by_hand():
    logp, ref = torch.tensor([math.log(0.5)]), torch.tensor([math.log(0.25)])
    d = math.log(2)
    assert kl_penalty(logp, ref, "k1").item() == pytest.approx(d)
    assert kl_penalty(logp, ref, "abs").item() == pytest.approx(d)
    assert kl_penalty(ref, logp, "abs").item() == pytest.approx(d)
    assert kl_penalty(logp, ref, "k2").item() == pytest.approx(0.5 * d * d)
    assert kl_penalty(logp, ref, "mse").item() == pytest.approx(0.5 * d * d)
    assert kl_penalty(logp, ref, "k3").item() == pytest.approx(0.5 + d - 1)  # e^-d - (-d) - 1
    assert kl_penalty(logp, ref, "low_var_kl").item() == pytest.approx(0.5 + d - 1)
    # clamps: k = clamp(30, 20) -> e^20 - 21 -> clamped to 10
    assert kl_penalty(torch.tensor([0.0]), torch.tensor([30.0]), "k3").item() == 10.0
    with pytest.raises(ValueError):
        kl_penalty(logp, ref, "k4")


def test_straight_through_kl_has_the_value_of_its_estimator_and_the_gradient_of_k2():
    d = math.log(2)
    for name, value in (("k1+", d), ("k3+", 0.5 + d - 1), ("low_var_kl+", 0.5 + d - 1), ("abs+", d),
                        ("k2+", 0.5 * d * d)):
        logp = torch.tensor([math.log(0.5)], requires_grad=True)
        kl = kl_penalty(logp, torch.tensor([math.log(0.25)]), name)
        assert kl.item() == pytest.approx(value), name
        kl.sum().backward()
        assert logp.grad.item() == pytest.approx(d), name  # d/dlogp 0.5 (logp - ref)^2 = logp - ref
    logp = torch.tensor([math.log(0.5)], requires_grad=True)
    kl_penalty(logp, torch.tensor([math.log(0.25)]), "k3").sum().backward()
    assert logp.grad.item() == pytest.approx(1 - 0.5)  # k3's own gradient: 1 - e^(ref - logp), not d


def test_dapo_dynamic_sampling_and_overlong():
    assert keep_groups([1, 1, 0, 1, 0.3], ["a", "a", "b", "b", "c"]) == [False, False, True, True, True]
    # AReaL's tau2 group_filter (mean <= 0.95): all-failed groups stay, solved ones go
    groups = ["all0"] * 8 + ["7of8"] * 8 + ["all1"] * 8
    scores = [0.0] * 8 + [1.0] * 7 + [0.0] + [1.0] * 8
    kept = keep_groups(scores, groups, max_mean=0.95)
    assert sorted({g for g, k in zip(groups, kept) if k}) == ["7of8", "all0"]
    # AReaL averages over its model calls: 7 solved 20-call episodes and a failed 5-call one average 140/145
    calls = [20] * 7 + [5]
    assert keep_groups([1.0] * 7 + [0.0], ["g"] * 8, max_mean=0.95, weights=calls) == [False] * 8
    assert keep_groups([1.0] * 7 + [0.0], ["g"] * 8, max_mean=0.95) == [True] * 8  # per episode: 0.875
    assert overlong_penalty(80, 100, 20) == 0.0
    assert overlong_penalty(90, 100, 20) == pytest.approx(-0.5)
    assert overlong_penalty(100, 100, 20, penalty=2.0) == pytest.approx(-2.0)
    assert overlong_penalty(50, 100, 20) == 0.0
