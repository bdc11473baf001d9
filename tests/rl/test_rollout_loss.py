"""Policy losses under algorithm.rollout_correction: weighted PPO (decoupled) and verl's bypass mode."""

from __future__ import annotations

import math

import pytest
import torch

from memrl.config.rollout_corr import RolloutCorrectionConfig
from memrl.rl import compute_policy_loss, tis_policy_loss, truncated_is_weights
from memrl.rl.rollout_loss import bypass_policy_loss, weighted_policy_loss

CLIP = dict(cliprange_low=0.2, cliprange_high=0.28, clip_ratio_c=3.0, loss_agg_mode="token-mean", norm_length=None)


def _tensors(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    logp = (torch.randn(3, 5, generator=g) * 0.3 - 1.0).requires_grad_()
    old = logp.detach() + torch.randn(3, 5, generator=g) * 0.1
    engine = old + torch.randn(3, 5, generator=g) * 0.2
    adv = torch.randn(3, 1, generator=g).expand(3, 5).clone()
    mask = torch.ones(3, 5)
    mask[2, 3:] = 0
    return logp, old, engine, adv, mask


def test_weighted_loss_without_weights_is_ppo():
    logp, old, _, adv, mask = _tensors()
    loss, stats = weighted_policy_loss(logp, old, adv, mask, None, **CLIP)
    ref, clipfrac, _, _ = compute_policy_loss(old, logp, adv, mask, cliprange_low=0.2, cliprange_high=0.28)
    assert torch.allclose(loss, ref) and torch.allclose(stats["clipfrac"], clipfrac)


def test_weighted_loss_equals_tis_with_the_same_weights():
    logp, old, engine, adv, mask = _tensors(1)
    weights, _ = truncated_is_weights(old, engine, mask, 2.0, "token")
    loss, _ = weighted_policy_loss(logp, old, adv, mask, weights, **CLIP)
    tis, _ = tis_policy_loss(logp, old, engine, adv, mask, cliprange_low=0.2, cliprange_high=0.28, tis_cap=2.0)
    assert torch.allclose(loss, tis)


def test_bypass_ppo_clip_clips_against_the_engine():
    logp, _, engine, adv, mask = _tensors(2)
    rc = RolloutCorrectionConfig(bypass_mode=True, rollout_is="token")
    loss, stats = bypass_policy_loss(logp, engine, adv, mask, rc, **CLIP)
    ref, _, ppo_kl, _ = compute_policy_loss(engine, logp, adv, mask, cliprange_low=0.2, cliprange_high=0.28)
    assert torch.allclose(loss, ref)  # the ratio is the IS weight: none applied on top (verl)
    assert torch.allclose(stats["ppo_kl"], ppo_kl)
    assert stats["rs_masked_frac"] == 0


def test_bypass_reinforce_by_hand():
    logp = torch.tensor([[math.log(0.5), math.log(0.25)]], requires_grad=True)
    engine = torch.tensor([[math.log(0.25), math.log(0.25)]])
    adv, mask = torch.tensor([[1.0, 1.0]]), torch.ones(1, 2)
    rc = RolloutCorrectionConfig(bypass_mode=True, loss_type="reinforce", rollout_is="token", rollout_is_threshold=1.5)
    loss, stats = bypass_policy_loss(logp, engine, adv, mask, rc, **CLIP)
    # weights: min(0.5/0.25, 1.5) = 1.5 and 1; loss = -(1.5 ln 0.5 + 1 ln 0.25) / 2
    assert loss.item() == pytest.approx(-(1.5 * math.log(0.5) + math.log(0.25)) / 2)
    assert stats["is_weight_mean"].item() == pytest.approx(1.25)
    loss.backward()  # gradient through log pi only (the weight is detached): -A*w/2
    assert torch.allclose(logp.grad, torch.tensor([[-0.75, -0.5]]))


def test_bypass_rejection_removes_tokens_from_the_loss_not_from_the_token_count():
    logp = torch.tensor([[-1.0, -1.0, -1.0]], requires_grad=True)
    engine = torch.tensor([[-1.0, -1.0, -3.0]])  # third token: ratio e^2, outside [1/2, 2]
    adv, mask = torch.ones(1, 3), torch.ones(1, 3)
    rc = RolloutCorrectionConfig(bypass_mode=True, loss_type="reinforce", rollout_rs="token_k1",
                                 rollout_rs_threshold=2.0)
    loss, stats = bypass_policy_loss(logp, engine, adv, mask, rc, **CLIP)
    # token-mean: the kept tokens' -A * logp (1 + 1) over all 3 valid tokens, as verl's agg_loss divides by the
    # batch's token count taken before rejection (compute_policy_loss_bypass_mode with global_batch_info)
    assert loss.item() == pytest.approx(2 / 3)
    assert stats["rs_masked_frac"].item() == pytest.approx(1 / 3)
    # per-row modes average each row over its kept tokens (both verl and memrl): (1 + 1) / 2
    loss, _ = bypass_policy_loss(logp, engine, adv, mask, rc, **{**CLIP, "loss_agg_mode": "seq-mean-token-mean"})
    assert loss.item() == pytest.approx(1.0)
    rc = RolloutCorrectionConfig(bypass_mode=True, loss_type="ppo_clip", rollout_rs="token_k1", rollout_rs_threshold=2.0)
    loss, _ = bypass_policy_loss(logp, engine, adv, mask, rc, **CLIP)
    # ppo_clip: ratio 1 on the kept tokens, -A * 1 each: (-1 - 1) / 3
    assert loss.item() == pytest.approx(-2 / 3)
