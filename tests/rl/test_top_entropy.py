"""``algorithm.top_entropy_quantile``: TRL's (GRPOConfig.top_entropy_quantile, trl/trainer/grpo_trainer.py at
f2cd577: get_high_entropy_mask, then ``per_token_loss = per_token_loss * entropy_mask`` with the loss type's
normaliser over every token), checked on hand-made tensors."""

from __future__ import annotations

import pytest
import torch

from memrl.config.algorithm import AlgorithmConfig
from memrl.rl import policy_objective
from memrl.rl.functional import high_entropy_mask


def trl_mask(entropies: torch.Tensor, mask: torch.Tensor, threshold: float) -> torch.Tensor:
    """TRL's get_high_entropy_mask on one process."""
    local = entropies[mask.bool()].float()
    if local.numel() == 0:
        return torch.zeros_like(entropies, dtype=torch.bool)
    entropy_threshold = torch.quantile(local, threshold)
    return ((entropies * mask.float()) >= entropy_threshold) & mask.bool()


def test_the_mask_is_trls_on_random_batches_and_at_the_ends():
    g = torch.Generator().manual_seed(0)
    for trial in range(200):
        rows, width = 1 + trial % 5, 1 + trial % 9
        entropy = torch.rand(rows, width, generator=g) * 3
        mask = (torch.rand(rows, width, generator=g) < 0.7).float()
        for q in (0.0, 0.2, 0.5, 0.8, 1.0):
            assert torch.equal(high_entropy_mask(entropy, mask, q), trl_mask(entropy, mask, q)), (trial, q)
    none = torch.zeros(2, 3)
    assert not high_entropy_mask(torch.ones(2, 3), none, 0.5).any()


def test_only_the_top_tokens_carry_the_policy_loss_and_every_token_counts_in_the_mean():
    """On-policy (ratio 1): a token's PPO loss is -A. Entropies 0.1 0.9 0.5 | 0.7 0.2 (pad): the median of the
    five is 0.5, so tokens (0,1), (0,2), (1,0) stay; token-mean divides by all five (TRL's dapo/bnpo)."""
    adv = torch.tensor([[1.0, 2.0, -1.0], [3.0, -2.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    entropy = torch.tensor([[0.1, 0.9, 0.5], [0.7, 0.2, 0.0]])
    logp = torch.zeros(2, 3)
    a = AlgorithmConfig(top_entropy_quantile=0.5)
    _, m = policy_objective(logp, logp, adv, mask, a, entropy=entropy)
    assert m["pg_loss"].item() == pytest.approx(-(2.0 - 1.0 + 3.0) / 5)
    seq = AlgorithmConfig(top_entropy_quantile=0.5, loss_agg_mode="seq-mean-token-mean")  # TRL's grpo
    _, m = policy_objective(logp, logp, adv, mask, seq, entropy=entropy)
    assert m["pg_loss"].item() == pytest.approx((-(2.0 - 1.0) / 3 - 3.0 / 2) / 2)
    everything = AlgorithmConfig(top_entropy_quantile=1.0)
    _, m = policy_objective(logp, logp, adv, mask, everything, entropy=entropy)
    assert m["pg_loss"].item() == pytest.approx(-(1.0 + 2.0 - 1.0 + 3.0 - 2.0) / 5)


def test_the_entropy_bonus_acts_on_the_same_tokens():
    """TRL's effective mask for the bonus: its dapo divides the kept tokens' entropies by every token (memrl's
    token-mean), its grpo takes the kept tokens' mean (memrl's per-sequence modes: over the kept ones)."""
    adv = torch.zeros(1, 4)
    mask = torch.ones(1, 4)
    entropy = torch.tensor([[0.4, 0.1, 0.3, 0.2]], requires_grad=True)
    zeros = torch.zeros(1, 4)
    a = AlgorithmConfig(top_entropy_quantile=0.5, entropy_coef=1.0)
    loss, m = policy_objective(zeros, zeros, adv, mask, a, entropy=entropy)
    assert loss.item() == pytest.approx(-(0.4 + 0.3) / 4)
    assert m["entropy"].item() == pytest.approx(0.25)  # the logged entropy is every token's
    seq = AlgorithmConfig(top_entropy_quantile=0.5, entropy_coef=1.0, loss_agg_mode="seq-mean-token-mean")
    loss, _ = policy_objective(zeros, zeros, adv, mask, seq, entropy=entropy)
    assert loss.item() == pytest.approx(-(0.4 + 0.3) / 2)


@pytest.mark.parametrize("loss_type", ["dapo", "grpo"])
def test_loss_and_gradient_are_trls_token_level_ppo_on_random_batches(loss_type):
    """TRL's token-level PPO clip (no delta), per_token_loss * entropy_mask, dapo (over every token) or grpo
    (per-row means): memrl's vanilla loss with no dual clip gives the same loss and gradient."""
    g = torch.Generator().manual_seed(1)
    for _ in range(50):
        rows, width = 3, 6
        mask = (torch.rand(rows, width, generator=g) < 0.8).float()
        entropy = torch.rand(rows, width, generator=g)
        adv = torch.randn(rows, 1, generator=g).expand(rows, width).contiguous()
        old = -torch.rand(rows, width, generator=g)
        logp = (old + 0.3 * torch.randn(rows, width, generator=g)).requires_grad_()
        keep = trl_mask(entropy, mask, 1 - 0.3).float()
        ratio = torch.exp(logp - old)
        per_token = -torch.min(ratio * adv, torch.clamp(ratio, 0.8, 1.28) * adv) * keep
        if loss_type == "dapo":
            trl = (per_token * mask).sum() / mask.sum().clamp(min=1.0)
        else:
            trl = ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
        (trl_grad,) = torch.autograd.grad(trl, logp)
        mode = "token-mean" if loss_type == "dapo" else "seq-mean-token-mean"
        a = AlgorithmConfig(top_entropy_quantile=0.3, clip_ratio_high=0.28, clip_ratio_c=1e9, loss_agg_mode=mode)
        ours, _ = policy_objective(logp, old, adv, mask, a, entropy=entropy)
        (our_grad,) = torch.autograd.grad(ours, logp)
        assert ours.item() == pytest.approx(trl.item(), abs=1e-6)
        torch.testing.assert_close(our_grad, trl_grad, rtol=0, atol=1e-6)


@pytest.mark.parametrize("over, why", [
    ({"policy_loss": "dro", "dro_beta": 0.1}, "a policy loss whose tokens add 0 at advantage 0"),
    ({"policy_loss": "gspo"}, "a policy loss whose tokens add 0 at advantage 0"),  # one ratio per row
    ({"off_policy": "tis", "tis_cap": 2.0}, "off_policy none"),
])
def test_losses_where_a_zero_advantage_is_no_zero_loss_are_refused(over, why):
    with pytest.raises(ValueError, match=why):
        AlgorithmConfig(top_entropy_quantile=0.2, **over)
    AlgorithmConfig(top_entropy_quantile=0.2, policy_loss="cispo")


def test_a_training_step_with_it_runs(tmp_path):
    from memrl.models.resolve import load_tokenizer
    from memrl.train.trainer import Trainer
    from tests.train.helpers import coin_engine, config

    cfg = config(tmp_path, algorithm__top_entropy_quantile=0.2, algorithm__entropy_coef=0.01, trainer__total_steps=1)
    metrics = Trainer(cfg, engine=coin_engine(load_tokenizer("tiny"))).train_step()
    assert metrics["skipped_updates"] == 0.0 and metrics["grad_norm"] == metrics["grad_norm"]
