"""policy_objective: the whole micro-batch loss from tensors and the algorithm config, checked by hand."""

import math

import pytest
import torch

from memrl.config.algorithm import AlgorithmConfig
from memrl.rl import decoupled_policy_loss, objective_metric_names, policy_objective, tis_policy_loss

# the PPO clip-higher case of test_losses: A=+1 at ratio 1.5 -> -1.28; A=-1 at ratio 0.5 -> 0.8
ADV = torch.tensor([[1.0, -1.0]])
OLD = torch.zeros(1, 2)
LOGP = torch.log(torch.tensor([[1.5, 0.5]]))
MASK = torch.ones(1, 2)
PG = (-1.28 + 0.8) / 2


def test_pg_entropy_and_kl_terms_by_hand():
    a = AlgorithmConfig(clip_ratio_high=0.28, entropy_coef=0.1, kl_coef=0.5, kl_estimator="k1")
    logp = LOGP.clone().requires_grad_()
    entropy = torch.tensor([[2.0, 4.0]], requires_grad=True)
    loss, m = policy_objective(logp, OLD, ADV, MASK, a, entropy=entropy, ref_log_prob=torch.zeros(1, 2))
    kl = (math.log(1.5) + math.log(0.5)) / 2  # k1 = logp - ref, token-mean
    assert m["pg_loss"].item() == pytest.approx(PG)
    assert m["entropy"].item() == pytest.approx(3.0) and m["kl"].item() == pytest.approx(kl)
    assert loss.item() == pytest.approx(PG - 0.1 * 3.0 + 0.5 * kl)
    assert m["clipfrac"].item() == 1.0 and m["clipfrac_lower"].item() == 0.0
    assert tuple(m) == objective_metric_names(a) == ("pg_loss", "clipfrac", "clipfrac_lower", "ppo_kl", "entropy",
                                                     "kl")
    loss.backward()
    assert entropy.grad[0].tolist() == pytest.approx([-0.05, -0.05])  # -coef / 2 tokens


def test_zero_coefficients_leave_entropy_out_of_the_graph():
    a = AlgorithmConfig(clip_ratio_high=0.28)
    entropy = torch.tensor([[2.0, 4.0]], requires_grad=True)
    behaviour = torch.zeros(3)  # misshapen but unread: off_policy=none does not look at it
    loss, m = policy_objective(LOGP.clone().requires_grad_(), OLD, ADV, MASK, a, entropy=entropy,
                               behaviour_log_prob=behaviour)
    assert loss.item() == pytest.approx(PG) and m["kl"].item() == 0.0 and m["entropy"].item() == pytest.approx(3.0)
    assert not m["entropy"].requires_grad
    with pytest.raises(ValueError, match="ref_log_prob is required"):
        policy_objective(LOGP, OLD, ADV, MASK, AlgorithmConfig(kl_coef=0.1), entropy=entropy)


def test_corrections_match_their_losses_and_report_their_stats():
    g = torch.Generator().manual_seed(0)
    logp, old, behav, adv = (torch.randn(3, 5, generator=g) * 0.3 for _ in range(4))
    mask = (torch.rand(3, 5, generator=g) > 0.2).float()
    ent = torch.zeros(3, 5)
    a = AlgorithmConfig(off_policy="decoupled", behav_imp_weight_cap=1.3, loss_agg_mode="seq-mean-token-sum-norm")
    loss, m = policy_objective(logp, old, adv, mask, a, entropy=ent, behaviour_log_prob=behav, norm_length=7)
    want, stats = decoupled_policy_loss(logp, old, behav, adv, mask, cliprange_low=0.2, cliprange_high=0.2,
                                        clip_ratio_c=3.0, behav_imp_weight_cap=1.3,
                                        loss_agg_mode="seq-mean-token-sum-norm", norm_length=7)
    assert loss.item() == want.item() and m["is_capped_frac"].item() == stats["is_capped_frac"].item() > 0
    a = AlgorithmConfig(off_policy="tis", tis_level="sequence", tis_cap=1.1)
    loss, m = policy_objective(logp, old, adv, mask, a, entropy=ent, behaviour_log_prob=behav)
    want, stats = tis_policy_loss(logp, old, behav, adv, mask, tis_cap=1.1, tis_level="sequence")
    assert loss.item() == want.item() and m["is_weight_mean"].item() == stats["is_weight_mean"].item()
    assert objective_metric_names(a)[-3:] == ("is_weight_mean", "is_capped_frac", "behav_kl")
    with pytest.raises(ValueError, match="behaviour_log_prob is required"):
        policy_objective(logp, old, adv, mask, a, entropy=ent)
