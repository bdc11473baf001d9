"""GSPO and CISPO (``algorithm.policy_loss``): hand-checked values and gradients, verl's own functions, the trainer."""

from __future__ import annotations

import math
import os
import types

import pytest
import torch

from memrl.config import ConfigError, load_config
from memrl.rl.losses import agg_loss, compute_policy_loss
from memrl.rl.policy_losses import (cispo_loss, geo_mean_loss, gpg_loss, gspo_loss, policy_loss, sapo_loss,
                                    vanilla_loss)
from tests.rl.verl_policy_losses import ActorConfig, random_batch

CLIP = dict(cliprange_low=0.2, cliprange_high=0.28, clip_ratio_c=3.0)


def test_gspo_by_hand():
    # row 0: two tokens with log-ratios 0.1 and 0.3 -> s = exp(0.2); row 1: one token, log-ratio -0.5 -> exp(-0.5)
    old = torch.tensor([[-1.0, -2.0], [-1.0, -3.0]])
    new = torch.tensor([[-0.9, -1.7], [-1.5, -9.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    adv = torch.tensor([[1.0, 1.0], [-2.0, -2.0]])
    loss, clipfrac, ppo_kl, lower = gspo_loss(old, new, adv, mask, **CLIP)
    s0, s1 = math.exp(0.2), math.exp(-0.5)  # s1 < 0.8: clipped; with A < 0 the clipped term is the max
    want = 0.5 * (-1.0 * s0 + (-(-2.0) * 0.8))
    assert loss.item() == pytest.approx(want, abs=1e-6)
    assert clipfrac.item() == pytest.approx(1 / 3) and lower.item() == 0.0
    assert ppo_kl.item() == pytest.approx(-(0.1 + 0.3 - 0.5) / 3, abs=1e-6)
    loss.backward()
    # row 0 unclipped: d/d logp_t of -A s e^{logp - sg logp} / |y| / B = -A s / (|y| B); row 1 clipped: 0
    torch.testing.assert_close(new.grad, torch.tensor([[-s0 / 4, -s0 / 4], [0.0, 0.0]]), rtol=0, atol=1e-6)


def test_cispo_by_hand():
    old = torch.tensor([[-1.0, -1.0, -1.0]])
    new = torch.tensor([[-0.5, -1.0, -1.6]], requires_grad=True)  # ratios e^0.5 (clipped to 1.28), 1, e^-0.6 (to 0.8)
    mask = torch.ones(1, 3)
    adv = torch.tensor([[2.0, 2.0, 2.0]])
    loss, clipfrac, _, lower = cispo_loss(old, new, adv, mask, **CLIP)
    w = [1.28, 1.0, 0.8]
    assert loss.item() == pytest.approx(-sum(wi * 2.0 * lp for wi, lp in zip(w, [-0.5, -1.0, -1.6])) / 3, abs=1e-6)
    assert clipfrac.item() == pytest.approx(2 / 3) and lower.item() == 0.0
    loss.backward()  # every token keeps a gradient, weighted by its clipped ratio (stopped)
    torch.testing.assert_close(new.grad, torch.tensor([[-wi * 2.0 / 3 for wi in w]]), rtol=0, atol=1e-6)


def test_sapo_by_hand():
    # at r = 1 the gate is sigmoid(0) * 4 / tau = 2 / tau and its slope in log pi is A * 1/4 * 4 = A
    old = torch.tensor([[-1.0], [-2.0]])
    new = old.clone().requires_grad_()
    adv = torch.tensor([[1.0], [-1.0]])
    loss, clipfrac, ppo_kl, lower = sapo_loss(old, new, adv, torch.ones(2, 1), sapo_tau_pos=1.0, sapo_tau_neg=1.05)
    assert loss.item() == pytest.approx(0.5 * (-2.0 / 1.0 + 2.0 / 1.05), abs=1e-6)
    assert clipfrac.item() == lower.item() == ppo_kl.item() == 0.0
    loss.backward()
    torch.testing.assert_close(new.grad, torch.tensor([[-0.5], [0.5]]), rtol=0, atol=1e-6)


def test_geo_mean_by_hand():
    # log-ratios 0.1 and 0.5 with A > 0 and a 0.2 clip: the second is clipped to 0.2, ratio exp(0.15)
    old = torch.tensor([[-1.0, -1.0]])
    new = torch.tensor([[-0.9, -0.5]], requires_grad=True)
    loss, clipfrac, _, lower = geo_mean_loss(old, new, torch.ones(1, 2), torch.ones(1, 2), cliprange_low=0.2,
                                             cliprange_high=0.2)
    assert loss.item() == pytest.approx(-math.exp(0.15), abs=1e-6)
    assert clipfrac.item() == 0.5 and lower.item() == 0.0
    loss.backward()  # the clipped token's log-ratio is a constant
    torch.testing.assert_close(new.grad, torch.tensor([[-math.exp(0.15) / 2, 0.0]]), rtol=0, atol=1e-6)


def test_gpg_is_reinforce():
    new = torch.tensor([[-1.0, -2.0, -3.0]], requires_grad=True)
    adv = torch.tensor([[0.5, 0.5, 0.5]])
    loss, *_ = gpg_loss(new.detach(), new, adv, torch.tensor([[1.0, 1.0, 0.0]]))
    assert loss.item() == pytest.approx(-(0.5 * -1.0 + 0.5 * -2.0) / 2)
    loss.backward()
    torch.testing.assert_close(new.grad, torch.tensor([[-0.25, -0.25, 0.0]]))


def test_weights_multiply_each_tokens_loss_and_vanilla_is_ppo():
    gen = torch.Generator().manual_seed(3)
    old, new = torch.randn(4, 6, generator=gen), torch.randn(4, 6, generator=gen)
    adv, mask = torch.randn(4, 6, generator=gen), (torch.rand(4, 6, generator=gen) > 0.3).float()
    w = torch.rand(4, 6, generator=gen)
    base = compute_policy_loss(old, new, adv, mask, **CLIP)
    got = vanilla_loss(old, new, adv, mask, **CLIP)
    assert all(torch.allclose(a, b, atol=1e-7) for a, b in zip(base, got))
    for fn in (vanilla_loss, gspo_loss, cispo_loss, sapo_loss, geo_mean_loss, gpg_loss):
        kw = {**CLIP, "loss_agg_mode": "seq-mean-token-mean"}
        plain, weighted = fn(old, new, adv, mask, **kw)[0], fn(old, new, adv, mask, weights=w, **kw)[0]
        assert not torch.isclose(plain, weighted)
        assert fn(old, new, adv, mask, weights=torch.ones_like(w), **kw)[0].item() == pytest.approx(plain.item())


def test_a_row_with_no_token_counts_as_zero_per_sequence():
    losses = torch.ones(2, 3)
    mask = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])  # the second row rejected whole
    assert agg_loss(losses, mask, "seq-mean-token-mean").item() == 0.5


def test_config_sets_or_refuses_the_aggregation_and_the_combinations():
    a = load_config(None, ["algorithm.policy_loss=gspo"]).algorithm
    assert a.loss_agg_mode == "seq-mean-token-mean" and a.replaces_ppo
    assert load_config(None, ["algorithm.policy_loss=cispo"]).algorithm.loss_agg_mode == "token-mean"
    assert not load_config(None, []).algorithm.replaces_ppo
    assert policy_loss("gspo").aggregation == "seq-mean-token-mean"
    assert load_config(None, ["algorithm.policy_loss=sapo"]).algorithm.loss_agg_mode == "seq-mean-token-mean"
    assert load_config(None, ["algorithm.policy_loss=gpg"]).algorithm.loss_agg_mode == "token-mean"
    refused = {("algorithm.policy_loss=gspo", "algorithm.loss_agg_mode=token-mean"): "aggregates per sequence",
               ("algorithm.policy_loss=cispo", "algorithm.off_policy=decoupled"): "cannot be combined with off_policy",
               ("algorithm.policy_loss=gspo", "algorithm.rollout_correction.rollout_is=token",
                "algorithm.rollout_correction.bypass_mode=true"): "cannot be combined with rollout_correction.bypass",
               ("algorithm.policy_loss=gspo", "trainer.mode=async"): "decoupled mode"}
    for overrides, words in refused.items():
        with pytest.raises(ConfigError, match=words):
            load_config(None, list(overrides))
    ok = load_config(None, ["algorithm.policy_loss=gspo", "trainer.mode=async",
                            "algorithm.rollout_correction.rollout_is=token"]).algorithm
    assert ok.rollout_correction.enabled and not ok.rollout_correction.bypass_mode


VERL = os.environ.get("MEMRL_VERL_REPO")
NAMES = ("gspo", "cispo", "sapo", "geo_mean", "gpg")
SEQUENCE_LEVEL = ("gspo", "sapo", "geo_mean")
TAUS = (1.0, 1.05)  # verl's defaults; memrl's sapo_tau_pos / sapo_tau_neg


@pytest.mark.skipif(not VERL, reason="set MEMRL_VERL_REPO to a verl checkout to compare with verl's own losses")
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("clip", [(0.2, 0.28), (3e-4, 4e-4)])
def test_equal_to_verl(verl_losses: types.SimpleNamespace, name: str, weighted: bool,
                       clip: tuple[float, float]) -> None:
    for seed in range(3):
        old, new0, adv, mask, w = random_batch(seed, weighted=weighted, sequence_advantages=True)
        new_v, new_m = new0.clone().requires_grad_(), new0.clone().requires_grad_()
        agg = "seq-mean-token-mean" if name in SEQUENCE_LEVEL else "token-mean"
        v_loss, v_metrics = getattr(verl_losses, name)(old, new_v, adv, mask, loss_agg_mode=agg,
                                                       config=ActorConfig(*clip), rollout_is_weights=w)
        chosen = policy_loss(name)
        options = dict(zip(chosen.options, TAUS))
        loss, clipfrac, ppo_kl, lower = chosen(old, new_m, adv, mask, cliprange_low=clip[0],
                                               cliprange_high=clip[1], loss_agg_mode=agg, weights=w, **options)
        torch.testing.assert_close(loss, v_loss, rtol=0, atol=1e-6)
        v_loss.backward(), loss.backward()
        torch.testing.assert_close(new_m.grad, new_v.grad, rtol=0, atol=1e-7)
        if name == "gpg":  # verl reports nothing for it
            assert v_metrics == {} and clipfrac.item() == lower.item() == 0.0
            continue
        assert clipfrac.item() == pytest.approx(v_metrics["actor/pg_clipfrac"], abs=1e-7)
        assert ppo_kl.item() == pytest.approx(v_metrics["actor/ppo_kl"], abs=1e-6)
        assert lower.item() == pytest.approx(v_metrics["actor/pg_clipfrac_lower"], abs=1e-7)


def test_the_objective_passes_a_loss_its_options_and_the_correction_weights():
    from memrl.rl.objective import policy_objective

    gen = torch.Generator().manual_seed(5)
    old, new = torch.randn(3, 4, generator=gen), torch.randn(3, 4, generator=gen)
    adv, mask, w = torch.randn(3, 4, generator=gen), torch.ones(3, 4), torch.rand(3, 4, generator=gen)
    a = load_config(None, ["algorithm.policy_loss=sapo", "algorithm.sapo_tau_pos=2.0", "algorithm.sapo_tau_neg=3.0",
                           "algorithm.rollout_correction.rollout_is=token"]).algorithm
    loss, metrics = policy_objective(new, old, adv, mask, a, entropy=torch.zeros(3, 4), is_weights=w)
    want = sapo_loss(old, new, adv, mask, weights=w, sapo_tau_pos=2.0, sapo_tau_neg=3.0)[0]
    assert loss.item() == pytest.approx(want.item()) and metrics["pg_loss"].item() == pytest.approx(want.item())
    assert want.item() != pytest.approx(sapo_loss(old, new, adv, mask, weights=w)[0].item())
