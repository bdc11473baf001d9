"""DPPO-TV/KL, DRO, Clip-Cov and KL-Cov (``algorithm.policy_loss``): hand-checked values and gradients, verl's own
functions from a checkout, and the config's options."""

from __future__ import annotations

import math
import os
import types

import pytest
import torch

from memrl.config import ConfigError, load_config
from memrl.config.algorithm import LOSS_OPTION_FIELDS
from memrl.config.registry import POLICY_LOSSES
from memrl.rl.covariance_losses import clip_cov_loss, kl_cov_loss
from memrl.rl.divergence_losses import dppo_kl_loss, dppo_tv_loss, dro_loss
from memrl.rl.policy_losses import policy_loss
from tests.rl.verl_policy_losses import ActorConfig, random_batch

LN = math.log
# one row: A = 1, 1, -1, 1; probabilities before -> after: 0.5 -> 0.8, 0.5 -> 0.6, 0.5 -> 0.2, 0.01 -> 0.05
ADV = torch.tensor([[1.0, 1.0, -1.0, 1.0]])
OLD = torch.log(torch.tensor([[0.5, 0.5, 0.5, 0.01]]))
NEW = [0.8, 0.6, 0.2, 0.05]
MASK = torch.ones(1, 4)


def _new() -> torch.Tensor:
    return torch.log(torch.tensor([NEW])).requires_grad_()


def test_dppo_tv_by_hand():
    # moved +0.3 (> 0.28, A > 0: dropped), +0.1 (kept), -0.3 (< -0.2, A < 0: dropped), +0.04 (kept; ratio 5 -> 3)
    new = _new()
    loss, dropped, _, truncated = dppo_tv_loss(OLD, new, ADV, MASK, cliprange_low=0.2, cliprange_high=0.28,
                                               clip_ratio_c=3.0)
    assert loss.item() == pytest.approx((-1.2 * LN(0.6) - 3.0 * LN(0.05)) / 4, abs=1e-5)
    assert dropped.item() == 0.5 and truncated.item() == 0.25
    loss.backward()  # the ratio is a stopped weight: d/dlogp = -A * w / 4 on kept tokens
    torch.testing.assert_close(new.grad, torch.tensor([[0.0, -1.2 / 4, 0.0, -3.0 / 4]]), rtol=0, atol=1e-5)


def _binary_kl(p_old: float, p: float) -> float:
    return p_old * LN(p_old / p) + (1 - p_old) * LN((1 - p_old) / (1 - p))


def test_dppo_kl_by_hand():
    kls = [_binary_kl(0.5, 0.8), _binary_kl(0.5, 0.6), _binary_kl(0.5, 0.2), _binary_kl(0.01, 0.05)]
    assert kls[0] == pytest.approx(0.2231, abs=1e-4) and kls[2] == pytest.approx(kls[0])  # symmetric around 0.5
    new = _new()  # with 0.28 above and 0.2 below: the first token stays (0.223 <= 0.28), the third goes (> 0.2)
    loss, dropped, _, truncated = dppo_kl_loss(OLD, new, ADV, MASK, cliprange_low=0.2, cliprange_high=0.28,
                                               clip_ratio_c=3.0)
    assert loss.item() == pytest.approx((-1.6 * LN(0.8) - 1.2 * LN(0.6) - 3.0 * LN(0.05)) / 4, abs=1e-5)
    assert dropped.item() == 0.25 and truncated.item() == 0.25
    loss.backward()
    torch.testing.assert_close(new.grad, torch.tensor([[-1.6 / 4, -1.2 / 4, 0.0, -3.0 / 4]]), rtol=0, atol=1e-5)
    # a falling probability with A > 0 is never dropped, however far it falls
    keep, *_ = dppo_kl_loss(torch.log(torch.tensor([[0.9]])), torch.log(torch.tensor([[0.01]])), torch.ones(1, 1),
                            torch.ones(1, 1), cliprange_low=0.05, cliprange_high=0.05)
    assert keep.item() == pytest.approx(-math.exp(LN(0.01) - LN(0.9)) * LN(0.01), abs=1e-6)


def test_dro_by_hand_and_needs_beta():
    old = torch.tensor([[-1.0, -2.0]])
    new = torch.tensor([[-0.8, -2.5]], requires_grad=True)
    adv = torch.tensor([[1.0, -1.0]])
    loss, clipfrac, ppo_kl, _ = dro_loss(old, new, adv, torch.ones(1, 2), dro_beta=0.5)
    assert loss.item() == pytest.approx((-(-0.8 - 0.25 * 0.04) - (2.5 - 0.25 * 0.25)) / 2, abs=1e-6)
    assert clipfrac.item() == 0.0 and ppo_kl.item() == pytest.approx((-0.2 + 0.5) / 2)
    loss.backward()  # -(A - beta * log r) / 2
    torch.testing.assert_close(new.grad, torch.tensor([[-(1 - 0.5 * 0.2) / 2, -(-1 + 0.5 * 0.5) / 2]]))
    with pytest.raises(ValueError, match="dro_beta"):
        dro_loss(old, new, adv, torch.ones(1, 2))


# covariances (A - mean A)(log p - mean log p) over one row: A = 2, 1, -1, -2 (mean 0)
COV_ADV = torch.tensor([[2.0, 1.0, -1.0, -2.0]])


def test_clip_cov_drops_tokens_with_covariance_inside_the_bounds():
    new = torch.tensor([[-1.0, -2.0, -4.0, -5.0]], requires_grad=True)  # deviations 2, 1, -1, -2: cov 4, 1, 1, 4
    loss, dropped, *_ = clip_cov_loss(new.detach(), new, COV_ADV, torch.ones(1, 4), clip_cov_ratio=0.5)
    assert dropped.item() == 0.5  # 4 is inside (1, 5) and 1 is not; half the tokens may go: both 4s go
    loss.backward()
    torch.testing.assert_close(new.grad, torch.tensor([[0.0, -0.25, 0.25, 0.0]]))
    one, dropped_one, *_ = clip_cov_loss(new.detach(), new, COV_ADV, torch.ones(1, 4), clip_cov_ratio=0.25)
    assert dropped_one.item() == 0.25  # one of the two, at random
    _, none, *_ = clip_cov_loss(new.detach(), new, COV_ADV, torch.ones(1, 4), clip_cov_ratio=0.5, clip_cov_lb=4.5)
    assert none.item() == 0.0


def test_kl_cov_penalises_the_largest_covariance():
    lp = [-1.0, -2.0, -4.0, -6.0]  # deviations from -3.25: 2.25, 1.25, -0.75, -2.75: cov 4.5, 1.25, 0.75, 5.5
    new = torch.tensor([lp], requires_grad=True)
    old = torch.tensor([lp]) - 0.1
    loss, share, ppo_kl, _ = kl_cov_loss(old, new, COV_ADV, torch.ones(1, 4), kl_cov_ratio=0.25, kl_cov_coef=0.1)
    e = math.exp(0.1)
    assert loss.item() == pytest.approx((-2 * e - e + e + 2 * e + 0.1 * 0.1) / 4, abs=1e-6)
    assert share.item() == 0.25 and ppo_kl.item() == pytest.approx(0.1)  # mean |log r|, as verl's kl_cov
    loss.backward()  # -A r per token (no clip), and the |log r| penalty's slope on the last
    torch.testing.assert_close(new.grad, torch.tensor([[-2 * e / 4, -e / 4, e / 4, (2 * e + 0.1) / 4]]))


VERL = os.environ.get("MEMRL_VERL_REPO")
NAMES = ("dppo_tv", "dppo_kl", "clip_cov", "kl_cov", "dro")
OPTIONS = {"clip_cov": dict(clip_cov_ratio=0.1, clip_cov_lb=0.02, clip_cov_ub=0.5),
           "kl_cov": dict(kl_cov_ratio=0.1, kl_cov_coef=0.3), "dro": dict(dro_beta=0.4)}
VERL_NAMES = {"kl_cov_coef": "ppo_kl_coef"}


@pytest.mark.skipif(not VERL, reason="set MEMRL_VERL_REPO to a verl checkout to compare with verl's own losses")
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("clip", [(0.2, 0.28, 3.0), (0.05, 0.03, 1.1)])
def test_equal_to_verl(verl_losses: types.SimpleNamespace, name: str, weighted: bool,
                       clip: tuple[float, float, float]) -> None:
    options = OPTIONS.get(name, {})
    config = ActorConfig(clip[0], clip[1], clip_ratio_c=clip[2],
                         **{VERL_NAMES.get(k, k): v for k, v in options.items()})
    for seed in range(3):
        old, new0, adv, mask, w = random_batch(seed, weighted=weighted)
        new_v, new_m = new0.clone().requires_grad_(), new0.clone().requires_grad_()
        torch.manual_seed(seed)  # clip_cov draws its tokens from torch's global generator, in both
        v_loss, v_metrics = getattr(verl_losses, name)(old, new_v, adv, mask, loss_agg_mode="token-mean",
                                                       config=config, rollout_is_weights=w)
        torch.manual_seed(seed)
        loss, clipfrac, ppo_kl, lower = policy_loss(name)(old, new_m, adv, mask, cliprange_low=clip[0],
                                                          cliprange_high=clip[1], clip_ratio_c=clip[2],
                                                          loss_agg_mode="token-mean", weights=w, **options)
        torch.testing.assert_close(loss, v_loss, rtol=0, atol=1e-6)
        v_loss.backward(), loss.backward()
        torch.testing.assert_close(new_m.grad, new_v.grad, rtol=0, atol=1e-7)
        assert ppo_kl.item() == pytest.approx(v_metrics["actor/ppo_kl"], abs=1e-6)
        if "actor/pg_clipfrac" in v_metrics:
            assert clipfrac.item() == pytest.approx(v_metrics["actor/pg_clipfrac"], abs=1e-7)
        if "actor/pg_clipfrac_lower" in v_metrics:
            assert lower.item() == pytest.approx(v_metrics["actor/pg_clipfrac_lower"], abs=1e-7)
        if name == "clip_cov":
            assert clipfrac.item() > 0  # the bounds were chosen so that some tokens are dropped


def test_config_options_belong_to_their_loss():
    assert set(LOSS_OPTION_FIELDS) == {o for n in POLICY_LOSSES.names for o in policy_loss(n).options}
    with pytest.raises(ConfigError, match="needs dro_beta"):
        load_config(None, ["algorithm.policy_loss=dro"])
    with pytest.raises(ConfigError, match="dro_beta is read by policy_loss=dro only"):
        load_config(None, ["algorithm.dro_beta=0.1"])
    with pytest.raises(ConfigError, match="kl_cov_coef is read by policy_loss=kl_cov only .policy_loss is 'clip_cov'"):
        load_config(None, ["algorithm.policy_loss=clip_cov", "algorithm.kl_cov_coef=0.5"])
    a = load_config(None, ["algorithm.policy_loss=kl_cov", "algorithm.kl_cov_ratio=0.01"]).algorithm
    assert a.kl_cov_ratio == 0.01 and a.loss_agg_mode == "token-mean"


def test_the_objective_passes_dro_its_beta():
    from memrl.rl.objective import policy_objective

    gen = torch.Generator().manual_seed(2)
    old, new = torch.randn(3, 4, generator=gen), torch.randn(3, 4, generator=gen)
    adv, mask = torch.randn(3, 4, generator=gen), torch.ones(3, 4)
    a = load_config(None, ["algorithm.policy_loss=dro", "algorithm.dro_beta=0.7"]).algorithm
    loss, _ = policy_objective(new, old, adv, mask, a, entropy=torch.zeros(3, 4))
    assert loss.item() == pytest.approx(dro_loss(old, new, adv, mask, dro_beta=0.7)[0].item())
    assert loss.item() != pytest.approx(dro_loss(old, new, adv, mask, dro_beta=0.1)[0].item())
