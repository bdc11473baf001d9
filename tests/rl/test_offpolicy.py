import math

import pytest
import torch

from memrl.config import ConfigError, load_config
from memrl.rl.losses import AGG_MODES, compute_policy_loss
from memrl.rl.offpolicy import (
    decoupled_policy_loss,
    off_policy_kwargs,
    off_policy_loss,
    tis_policy_loss,
    truncated_is_weights,
)

LOG = math.log


def _areal_reference(logprobs, proximal_logprobs, old_logprobs, advantages, eps_clip, loss_mask,
                     eps_clip_higher=None, c_clip=None, behav_imp_weight_cap=None):
    """AReaL's published decoupled objective (ppo_actor_loss_fn), written out term by term.

    old_logprobs are the engine's (behaviour) log-probs; loss_mask is boolean; the
    loss is a sum over the mask divided by the number of valid tokens.
    """
    count = loss_mask.count_nonzero() or 1
    ratio = torch.where(loss_mask, torch.exp(logprobs - proximal_logprobs), 0)
    high = eps_clip if eps_clip_higher is None else eps_clip_higher
    loss1 = -advantages * ratio
    loss2 = -advantages * torch.clamp(ratio, 1.0 - eps_clip, 1.0 + high)
    clip_mask = (loss1.detach() < loss2.detach()) & loss_mask
    loss = torch.max(loss1, loss2)
    if c_clip is not None:
        loss3 = torch.sign(advantages) * c_clip * advantages
        loss = torch.min(loss, loss3)
    weight = (proximal_logprobs - old_logprobs).exp()
    keep = loss_mask if behav_imp_weight_cap is None else (weight <= behav_imp_weight_cap) & loss_mask
    weight = torch.where(keep, weight, 0.0)
    loss = loss * weight
    total = torch.where(loss_mask, loss, 0).sum() / count
    return total, clip_mask, weight, keep


def _random_batch(seed, rows=4, width=7, spread=0.3):
    g = torch.Generator().manual_seed(seed)
    prox = -torch.rand(rows, width, generator=g) * 3
    logp = prox + torch.randn(rows, width, generator=g) * spread
    logp[0, 0] = prox[0, 0] + 1.5  # ratio e^1.5 > 3 on a negative advantage: the dual clip acts
    logp.requires_grad_(True)
    behav = prox + torch.randn(rows, width, generator=g) * 2 * spread
    adv = torch.randn(rows, 1, generator=g).expand(rows, width).clone()
    adv[0] = -adv[0].abs()
    mask = (torch.rand(rows, width, generator=g) < 0.8).float()
    mask[:, 0] = 1.0
    return logp, prox, behav, adv, mask


def test_decoupled_by_hand():
    # proximal log-probs 0, so the trainer ratio r = exp(logp) and the behaviour weight w = exp(-behav)
    logp = torch.tensor([[LOG(1.5), LOG(0.5), 0.0]])
    prox = torch.zeros(1, 3)
    behav = torch.tensor([[-LOG(1.5), -LOG(0.5), -LOG(3.0)]])
    adv = torch.tensor([[1.0, -1.0, 1.0]])
    mask = torch.ones(1, 3)
    loss, st = decoupled_policy_loss(logp, prox, behav, adv, mask, cliprange=0.2, clip_ratio_c=3.0,
                                     behav_imp_weight_cap=2.0)
    # token 1: A=+1, r=1.5 -> max(-1.5, -1.2) = -1.2, w=1.5            -> -1.8
    # token 2: A=-1, r=0.5 -> max(0.5, 0.8) = 0.8, min(0.8, 3) = 0.8, w=0.5 -> 0.4
    # token 3: A=+1, r=1   -> -1, but w=3 > cap 2: dropped (weight 0)   -> 0
    # token-mean over all 3 response tokens (the dropped one still counts): (-1.8 + 0.4 + 0) / 3
    assert loss.item() == pytest.approx(-1.4 / 3)
    assert st["clipfrac"].item() == pytest.approx(2 / 3)  # tokens 1 and 2 hit the clip
    assert st["clipfrac_lower"].item() == 0.0
    assert st["ppo_kl"].item() == pytest.approx((-LOG(1.5) - LOG(0.5) - 0.0) / 3)
    assert st["is_weight_mean"].item() == pytest.approx((1.5 + 0.5) / 2)  # over the kept tokens
    assert st["is_capped_frac"].item() == pytest.approx(1 / 3)
    assert st["behav_kl"].item() == pytest.approx((LOG(1.5) + LOG(0.5)) / 2)  # AReaL: over the kept tokens
    # without a cap token 3 counts with its weight 3: (-1.8 + 0.4 - 3) / 3
    uncapped, st = decoupled_policy_loss(logp, prox, behav, adv, mask, cliprange=0.2)
    assert uncapped.item() == pytest.approx(-4.4 / 3)
    assert st["behav_kl"].item() == pytest.approx((LOG(1.5) + LOG(0.5) + LOG(3.0)) / 3)
    assert st["is_capped_frac"].item() == 0.0


def test_decoupled_cap_drops_instead_of_clamping():
    # w = 3 against cap 2.5: AReaL masks the token out; a clamp would have kept it at 2.5
    adv, mask = torch.tensor([[1.0, 1.0]]), torch.ones(1, 2)
    zeros = torch.zeros(1, 2)
    behav = torch.tensor([[-LOG(3.0), 0.0]])
    loss, st = decoupled_policy_loss(zeros, zeros, behav, adv, mask, behav_imp_weight_cap=2.5)
    assert loss.item() == pytest.approx((0.0 - 1.0) / 2)  # not (-2.5 - 1) / 2
    assert st["is_capped_frac"].item() == pytest.approx(0.5)
    # a weight just under the cap is kept, an overflowing one (exp(200) = inf) is dropped
    at_cap, _ = decoupled_policy_loss(zeros, zeros, torch.tensor([[-LOG(2.0), -200.0]]), adv, mask,
                                      behav_imp_weight_cap=2.0 + 1e-6)
    assert at_cap.item() == pytest.approx(-2.0 / 2)


def test_decoupled_dual_clip_and_clip_higher_by_hand():
    # A=-1, r=5: max(5, 1.2) = 5 > c=3 -> 3, times w=2 -> 6;  A=+1, r=1.5, clip-higher 0.28: -1.28, w=1 -> -1.28
    logp = torch.tensor([[LOG(5.0), LOG(1.5)]])
    behav = torch.tensor([[-LOG(2.0), 0.0]])
    loss, st = decoupled_policy_loss(logp, torch.zeros(1, 2), behav, torch.tensor([[-1.0, 1.0]]), torch.ones(1, 2),
                                     cliprange_low=0.2, cliprange_high=0.28, clip_ratio_c=3.0)
    assert loss.item() == pytest.approx((6.0 - 1.28) / 2)
    assert st["clipfrac_lower"].item() == pytest.approx(0.5)
    # without the dual clip (AReaL's c_clip=None) the first token keeps 5 * 2
    plain, st = decoupled_policy_loss(logp, torch.zeros(1, 2), behav, torch.tensor([[-1.0, 1.0]]),
                                      torch.ones(1, 2), cliprange_low=0.2, cliprange_high=0.28, clip_ratio_c=None)
    assert plain.item() == pytest.approx((10.0 - 1.28) / 2)
    assert st["clipfrac_lower"].item() == 0.0


@pytest.mark.parametrize("mode", AGG_MODES)
def test_decoupled_equals_ppo_when_behaviour_is_proximal(mode):
    logp, prox, _, adv, mask = _random_batch(1, spread=0.5)
    kw = dict(cliprange_low=0.2, cliprange_high=0.28, clip_ratio_c=3.0, loss_agg_mode=mode, norm_length=9)
    ref, clipfrac, ppo_kl, lower = compute_policy_loss(prox, logp, adv, mask, **kw)
    (g_ref,) = torch.autograd.grad(ref, logp)
    loss, st = decoupled_policy_loss(logp, prox, prox.clone(), adv, mask, behav_imp_weight_cap=1.5, **kw)
    (g,) = torch.autograd.grad(loss, logp)
    assert loss.item() == pytest.approx(ref.item(), abs=1e-6)
    torch.testing.assert_close(g, g_ref)
    assert (st["clipfrac"].item(), st["ppo_kl"].item(), st["clipfrac_lower"].item()) == pytest.approx(
        (clipfrac.item(), ppo_kl.item(), lower.item()))
    assert lower.item() > 0 and clipfrac.item() > 0  # both clips were exercised
    assert st["is_weight_mean"].item() == pytest.approx(1.0) and st["is_capped_frac"].item() == 0.0


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("cap", [None, 1.3, 3.0])
def test_decoupled_matches_areal_formula(seed, cap):
    logp, prox, behav, adv, mask = _random_batch(seed + 10)
    ref, clip_mask, weight, keep = _areal_reference(logp, prox, behav, adv, 0.2, mask.bool(), eps_clip_higher=0.28,
                                                    c_clip=3.0, behav_imp_weight_cap=cap)
    (g_ref,) = torch.autograd.grad(ref, logp)
    loss, st = decoupled_policy_loss(logp, prox, behav, adv, mask, cliprange_low=0.2, cliprange_high=0.28,
                                     clip_ratio_c=3.0, behav_imp_weight_cap=cap)
    (g,) = torch.autograd.grad(loss, logp)
    assert loss.item() == pytest.approx(ref.item(), abs=1e-6)
    torch.testing.assert_close(g, g_ref)
    assert st["clipfrac"].item() == pytest.approx(clip_mask.float().sum().item() / mask.sum().item())
    assert st["is_weight_mean"].item() == pytest.approx(weight.sum().item() / keep.sum().item())
    assert st["is_capped_frac"].item() == pytest.approx(1 - keep.sum().item() / mask.sum().item())
    if cap == 1.3:
        assert 0 < st["is_capped_frac"].item() < 1  # the cap really dropped some tokens, not all


def test_gradient_flows_only_through_logp():
    logp, prox, behav, adv, mask = _random_batch(3)
    prox, behav, adv = (t.clone().requires_grad_(True) for t in (prox, behav, adv))
    for kind in ("decoupled", "tis"):
        loss, st = off_policy_loss(kind, logp, prox, behav, adv, mask, behav_imp_weight_cap=None, tis_cap=2.0)
        loss.backward()
        assert logp.grad is not None and logp.grad.abs().sum() > 0
        assert prox.grad is None and behav.grad is None and adv.grad is None, kind
        assert all(not v.requires_grad for v in st.values())
        logp.grad = None


def test_tis_token_level_by_hand():
    # old 0, engine log-probs log(1/4) and log(2): raw weights 4 and 0.5, truncated at C=2 -> 2 and 0.5
    old = torch.zeros(1, 2)
    behav = torch.tensor([[LOG(0.25), LOG(2.0)]])
    weights, over = truncated_is_weights(old, behav, torch.ones(1, 2), tis_cap=2.0)
    torch.testing.assert_close(weights, torch.tensor([[2.0, 0.5]]))
    assert over.tolist() == [[True, False]]
    # logp = old: r = 1, per-token PPO loss -A = [-1, +1], times the weights -> [-2, 0.5], token-mean -0.75
    loss, st = tis_policy_loss(old.clone(), old, behav, torch.tensor([[1.0, -1.0]]), torch.ones(1, 2), tis_cap=2.0)
    assert loss.item() == pytest.approx(-0.75)
    assert st["is_weight_mean"].item() == pytest.approx(1.25)
    assert st["is_capped_frac"].item() == pytest.approx(0.5)
    assert st["behav_kl"].item() == pytest.approx((LOG(4.0) + LOG(0.5)) / 2)


def test_tis_sequence_level_by_hand():
    # row 1: log-ratios log 2 + log 1.5 -> weight 3, truncated to 2 on both tokens;
    # row 2: log 0.5 on its one response token (the padded +5 is ignored) -> 0.5
    old = torch.zeros(2, 2)
    behav = torch.tensor([[-LOG(2.0), -LOG(1.5)], [-LOG(0.5), -5.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    weights, over = truncated_is_weights(old, behav, mask, tis_cap=2.0, tis_level="sequence")
    torch.testing.assert_close(weights, torch.tensor([[2.0, 2.0], [0.5, 0.0]]))
    assert over.tolist() == [[True, True], [False, False]]
    adv = torch.tensor([[1.0, 1.0], [-1.0, -1.0]])
    loss, st = tis_policy_loss(old.clone(), old, behav, adv, mask, tis_cap=2.0, tis_level="sequence")
    # per-token losses -1, -1 | +1 times weights 2, 2 | 0.5 -> (-2 - 2 + 0.5) / 3 response tokens
    assert loss.item() == pytest.approx(-3.5 / 3)
    assert st["is_capped_frac"].item() == pytest.approx(2 / 3)
    seq_mean, _ = tis_policy_loss(old.clone(), old, behav, adv, mask, tis_cap=2.0, tis_level="sequence",
                                  loss_agg_mode="seq-mean-token-mean")
    assert seq_mean.item() == pytest.approx((-2.0 + 0.5) / 2)


@pytest.mark.parametrize("mode", AGG_MODES)
def test_tis_and_none_equal_ppo_without_mismatch(mode):
    logp, old, _, adv, mask = _random_batch(4, spread=0.5)
    kw = dict(cliprange_low=0.2, cliprange_high=0.28, clip_ratio_c=3.0, loss_agg_mode=mode, norm_length=9)
    ref, clipfrac, ppo_kl, lower = compute_policy_loss(old, logp, adv, mask, **kw)
    for kind, behav in (("tis", old.clone()), ("none", None)):
        loss, st = off_policy_loss(kind, logp, old, behav, adv, mask, tis_cap=2.0, tis_level="token",
                                   behav_imp_weight_cap=None, **kw)
        assert loss.item() == pytest.approx(ref.item(), abs=1e-6), kind
        assert st["clipfrac"].item() == pytest.approx(clipfrac.item()), kind
        assert st["ppo_kl"].item() == pytest.approx(ppo_kl.item()), kind
        assert st["clipfrac_lower"].item() == pytest.approx(lower.item()), kind
        assert st["is_weight_mean"].item() == pytest.approx(1.0) and st["is_capped_frac"].item() == 0.0


def test_none_is_compute_policy_loss_even_with_stale_behaviour():
    logp, old, behav, adv, mask = _random_batch(5, spread=1.0)
    ref = compute_policy_loss(old, logp, adv, mask)[0]
    loss, _ = off_policy_loss("none", logp, old, behav, adv, mask, behav_imp_weight_cap=2.0)
    assert loss.item() == ref.item()


def test_errors_name_the_bad_argument():
    logp, old, behav, adv, mask = _random_batch(6)
    with pytest.raises(ValueError, match="off_policy kind 'vtrace'"):
        off_policy_loss("vtrace", logp, old, behav, adv, mask)
    with pytest.raises(ValueError, match="behaviour_log_prob is required"):
        off_policy_loss("decoupled", logp, old, None, adv, mask)
    with pytest.raises(ValueError, match="behaviour_log_prob has shape"):
        off_policy_loss("tis", logp, old, behav[:, :3], adv, mask)
    with pytest.raises(ValueError, match="behav_imp_weight_cap must be > 1"):
        decoupled_policy_loss(logp, old, behav, adv, mask, behav_imp_weight_cap=0.9)
    with pytest.raises(ValueError, match="tis_level"):
        truncated_is_weights(old, behav, mask, tis_level="geometric")
    with pytest.raises(ValueError, match="tis_cap"):
        truncated_is_weights(old, behav, mask, tis_cap=0.0)
    with pytest.raises(ValueError, match="clip_ratio_c"):
        decoupled_policy_loss(logp, old, behav, adv, mask, clip_ratio_c=1.0)


def test_config_fields_feed_the_dispatcher():
    cfg = load_config(None, ["algorithm.off_policy=decoupled", "algorithm.behav_imp_weight_cap=5",
                             "algorithm.clip_ratio_high=0.28"])
    kw = off_policy_kwargs(cfg.algorithm, norm_length=9)
    assert kw["behav_imp_weight_cap"] == 5.0 and kw["cliprange_high"] == 0.28 and kw["norm_length"] == 9
    logp, old, behav, adv, mask = _random_batch(7)
    loss, _ = off_policy_loss(cfg.algorithm.off_policy, logp, old, behav, adv, mask, **kw)
    direct, _ = decoupled_policy_loss(logp, old, behav, adv, mask, cliprange_low=0.2, cliprange_high=0.28,
                                      clip_ratio_c=3.0, behav_imp_weight_cap=5.0, norm_length=9)
    assert loss.item() == direct.item()
    tis = load_config(None, ["algorithm.off_policy=tis", "algorithm.tis_level=sequence", "algorithm.tis_cap=4"])
    assert (tis.algorithm.tis_cap, tis.algorithm.tis_level) == (4.0, "sequence")
    assert load_config(None, []).algorithm.off_policy == "none"


@pytest.mark.parametrize("override, message", [
    (["algorithm.off_policy=vtrace"], "algorithm.off_policy"),
    (["algorithm.off_policy=decoupled", "algorithm.behav_imp_weight_cap=1"], "algorithm.behav_imp_weight_cap"),
    (["algorithm.behav_imp_weight_cap=5"], "behav_imp_weight_cap needs off_policy=decoupled"),
    (["algorithm.off_policy=tis", "algorithm.tis_cap=0"], "algorithm.tis_cap"),
    (["algorithm.off_policy=tis", "algorithm.tis_level=geometric"], "algorithm.tis_level"),
])
def test_config_validation_is_one_line(override, message):
    with pytest.raises(ConfigError, match=message) as info:
        load_config(None, override)
    assert "\n" not in str(info.value)
