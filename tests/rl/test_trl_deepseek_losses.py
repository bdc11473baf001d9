"""TRL's LUSPO and VESPO losses, its off-policy sequence mask and importance-weighted KL (DeepSeek-V3.2), against
TRL's own formulas (trl/trainer/grpo_trainer.py at f2cd577: _compute_loss, get_off_policy_mask,
get_gamma_weights), transcribed below, on random batches: loss and gradient; plus hand-checked cases."""

from __future__ import annotations

import math

import pytest
import torch

from memrl.config.algorithm import AlgorithmConfig
from memrl.rl import policy_objective
from memrl.rl.sequence_losses import gamma_weights


@torch.no_grad()
def trl_gamma(adv, log_ratio, mask, is_ratio, k_pos=2.0, lam_pos=3.0, k_neg=3.0, lam_neg=2.0):
    """TRL's get_gamma_weights (no gradient: phi only scales the REINFORCE term's)."""
    lower = math.log(1e-8)
    seq = torch.sum(torch.clamp(log_ratio, -20.0, 20.0) * mask, dim=-1, keepdim=True)
    if is_ratio is not None:
        seq = seq + torch.sum(torch.clamp(torch.log(is_ratio), lower, 20.0), dim=-1, keepdim=True)
    log_w = torch.clamp(seq, lower, 20.0)
    nonneg = adv >= 0
    k = torch.where(nonneg, k_pos, k_neg)
    lam = torch.where(nonneg, lam_pos, lam_neg).clamp(min=1e-4)
    return torch.exp(lam + k * log_w - lam * torch.exp(log_w)).nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)


def trl_loss(logp, old, adv, mask, loss_type, *, eps=0.2, beta=0.0, ref=None, bias_kl=False, opsm=None,
             sampling=None, is_ratio=None, entropy_mask=None):
    """TRL's _compute_loss for one process, one micro-batch; ``adv`` is (B, 1); ``gspo``: loss_type grpo with
    importance_sampling_level sequence."""
    if opsm is not None:
        s = old if sampling is None else sampling
        seq_kl = ((s - logp.detach()) * mask).sum(1, keepdim=True) / mask.sum(1, keepdim=True).clamp(min=1.0)
        off_mask = ((adv >= 0) | (seq_kl <= opsm)).to(mask.dtype)
    log_ratio = logp - old
    if loss_type in ("luspo", "gspo"):
        liw = ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)
    else:
        liw = log_ratio
    coef_1 = torch.exp(liw)
    if beta:
        kl = torch.exp(ref - logp) - (ref - logp) - 1
        if bias_kl:
            kl = kl * coef_1
    if loss_type == "vespo":
        phi = trl_gamma(adv, log_ratio, mask, is_ratio)
        loss = -phi * adv * logp
    else:
        coef_2 = torch.clamp(coef_1, 1 - eps, 1 + eps)
        loss = -torch.min(coef_1 * adv, coef_2 * adv)
    if opsm is not None:
        loss = loss * off_mask
    if entropy_mask is not None:
        loss = loss * entropy_mask
    if is_ratio is not None and loss_type != "vespo":
        loss = loss * is_ratio
    if beta:
        loss = loss + beta * kl
    if loss_type in ("grpo", "gspo"):
        return ((loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    if loss_type == "luspo":
        return (loss * mask.sum(1, keepdim=True)).mean()
    return (loss * mask).sum() / mask.sum().clamp(min=1.0)  # dapo, vespo (one process)


def batch(seed, rows=4, width=7, spread=0.3):
    g = torch.Generator().manual_seed(seed)
    mask = (torch.rand(rows, width, generator=g) < 0.8).float()
    mask[:, 0] = 1.0
    old = -torch.rand(rows, width, generator=g) * 2
    logp = (old + torch.randn(rows, width, generator=g) * spread).clamp(max=-1e-3)
    adv = torch.randn(rows, 1, generator=g)
    return g, mask, old, logp, adv


def memrl(logp, old, adv, mask, algorithm, **kw):
    x = logp.clone().requires_grad_(True)
    loss, metrics = policy_objective(x, old, adv.expand_as(logp).contiguous(), mask, algorithm,
                                     entropy=torch.zeros_like(logp), **kw)
    loss.backward()
    return loss.detach(), x.grad, metrics


def reference(logp, *args, **kw):
    x = logp.clone().requires_grad_(True)
    loss = trl_loss(x, *args, **kw)
    loss.backward()
    return loss.detach(), x.grad


NO_DUAL = {"clip_ratio_c": 1e9}  # TRL's delta=None: no bound on negative advantages


@pytest.mark.parametrize("loss_type, config", [
    ("luspo", {"policy_loss": "luspo"}),
    ("vespo", {"policy_loss": "vespo"}),
])
def test_luspo_and_vespo_are_trls_on_random_batches(loss_type, config):
    for seed in range(40):
        _, mask, old, logp, adv = batch(seed)
        got, grad, _ = memrl(logp, old, adv, mask, AlgorithmConfig(**config))
        want, want_grad = reference(logp, old, adv, mask, loss_type)
        assert got.item() == pytest.approx(want.item(), rel=1e-5, abs=1e-6), seed
        assert torch.allclose(grad, want_grad, rtol=1e-4, atol=1e-6), seed


def test_luspo_is_gspo_times_each_rows_length():
    """Rows of 2 and 4 tokens, on-policy (ratio 1): GSPO's row loss is -A; LUSPO's mean is (-2 A0 - 4 A1) / 2."""
    mask = torch.tensor([[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    adv = torch.tensor([[0.5], [-1.0]])
    logp = torch.full((2, 4), -1.0)
    got, _, _ = memrl(logp, logp, adv, mask, AlgorithmConfig(policy_loss="luspo"))
    assert got.item() == pytest.approx((-2 * 0.5 + 4 * 1.0) / 2)
    assert AlgorithmConfig(policy_loss="luspo").loss_agg_mode == "seq-mean-token-sum"


def test_vespos_weight_by_hand():
    """One row of two tokens with log-ratios 0.1 and 0.2: w = e^0.3; A >= 0: phi = e^3 w^2 e^(-3 w)."""
    old = torch.tensor([[-1.0, -2.0]])
    logp = old + torch.tensor([[0.1, 0.2]])
    mask = torch.ones(1, 2)
    w = math.exp(0.3)
    phi = gamma_weights(old, logp, torch.ones(1, 2), mask, None, 2.0, 3.0, 3.0, 2.0)
    assert phi[0, 0].item() == pytest.approx(math.exp(3) * w ** 2 * math.exp(-3 * w), rel=1e-6)
    neg = gamma_weights(old, logp, -torch.ones(1, 2), mask, None, 2.0, 3.0, 3.0, 2.0)
    assert neg[0, 0].item() == pytest.approx(math.exp(2) * w ** 3 * math.exp(-2 * w), rel=1e-6)
    on_policy = gamma_weights(old, old, torch.ones(1, 2), mask, None, 2.0, 3.0, 3.0, 2.0)
    assert torch.allclose(on_policy, torch.ones(1, 2))  # phi(1) = 1: on-policy VESPO is REINFORCE


def test_vespo_folds_token_correction_weights_into_w_as_trl():
    """TRL's token_truncate / token_mask ratio joins log w (a 0 drops the row's phi to ~0) and never multiplies
    the loss; memrl's rollout_correction weights, token level, do the same."""
    algorithm = AlgorithmConfig(policy_loss="vespo", rollout_correction={"rollout_is": "token",
                                                                         "rollout_is_threshold": "0.5_2.0"})
    for seed in range(20):
        g, mask, old, logp, adv = batch(seed)
        ratio = torch.exp(torch.randn(*logp.shape, generator=g) * 0.4)
        ratio = torch.where((ratio >= 0.5) & (ratio <= 2.0), ratio, torch.zeros_like(ratio))
        trl_ratio = torch.where(mask > 0, ratio, torch.ones_like(ratio))  # TRL's padding has ratio exp(0)
        got, grad, _ = memrl(logp, old, adv, mask, algorithm, is_weights=ratio * mask)
        want, want_grad = reference(logp, old, adv, mask, "vespo", is_ratio=trl_ratio)
        assert got.item() == pytest.approx(want.item(), rel=1e-5, abs=1e-6), seed
        assert torch.allclose(grad, want_grad, rtol=1e-4, atol=1e-6), seed


@pytest.mark.parametrize("loss_type, config", [
    ("dapo", {**NO_DUAL}),
    ("grpo", {**NO_DUAL, "loss_agg_mode": "seq-mean-token-mean"}),
    ("luspo", {"policy_loss": "luspo"}),
    ("vespo", {"policy_loss": "vespo"}),
])
def test_the_off_policy_sequence_mask_is_trls(loss_type, config):
    """The engine's log-probs are TRL's sampling_per_token_logps; delta 0.05 drops some rows, keeps others."""
    algorithm = AlgorithmConfig(off_policy_mask_threshold=0.05, **config)
    dropped_any = kept_negative = False
    for seed in range(40):
        g, mask, old, logp, adv = batch(seed)
        sampling = old + torch.randn(*old.shape, generator=g) * 0.3
        got, grad, metrics = memrl(logp, old, adv, mask, algorithm, behaviour_log_prob=sampling)
        want, want_grad = reference(logp, old, adv, mask, loss_type, opsm=0.05, sampling=sampling)
        assert got.item() == pytest.approx(want.item(), rel=1e-5, abs=1e-6), seed
        assert torch.allclose(grad, want_grad, rtol=1e-4, atol=1e-6), seed
        seq_kl = ((sampling - logp) * mask).sum(1) / mask.sum(1)
        negative = adv[:, 0] < 0
        dropped_any |= bool((negative & (seq_kl > 0.05)).any())
        kept_negative |= bool((negative & (seq_kl <= 0.05)).any())
        share = (mask * ((negative & (seq_kl > 0.05)).float()[:, None])).sum() / mask.sum()
        assert metrics["off_policy_masked"].item() == pytest.approx(share.item(), abs=1e-6)
    assert dropped_any and kept_negative  # the random batches exercise both sides of delta


def test_the_mask_reads_the_old_log_probs_without_the_engines_and_drops_by_hand():
    """No engine log-probs: TRL's fallback, the old ones. Row 0: A < 0, KL from old = mean(0.5, 0.3) = 0.4 >
    0.25, dropped; row 1: A > 0, kept whatever its KL. token-mean over all 4 tokens, ratio e^(-0.5), e^(-0.3)."""
    old = torch.tensor([[-1.0, -1.0], [-1.0, -1.0]])
    logp = torch.tensor([[-1.5, -1.3], [-1.5, -1.3]])
    adv = torch.tensor([[-1.0], [1.0]])
    mask = torch.ones(2, 2)
    algorithm = AlgorithmConfig(off_policy_mask_threshold=0.25, clip_ratio_low=0.9, clip_ratio_high=0.9)
    got, _, metrics = memrl(logp, old, adv, mask, algorithm)
    assert got.item() == pytest.approx(-(math.exp(-0.5) + math.exp(-0.3)) / 4, rel=1e-6)
    assert metrics["off_policy_masked"].item() == pytest.approx(0.5)
    kept, _, _ = memrl(logp, old, adv, mask, AlgorithmConfig(off_policy_mask_threshold=0.5, clip_ratio_low=0.9,
                                                               clip_ratio_high=0.9))
    assert kept.item() == pytest.approx(0.0, abs=1e-7)  # delta 0.5 > 0.4: both rows stay, -A r cancels


@pytest.mark.parametrize("loss_type, config", [
    ("dapo", {**NO_DUAL}),
    ("gspo", {"policy_loss": "gspo"}),
    ("luspo", {"policy_loss": "luspo"}),
])
def test_the_importance_weighted_kl_is_trls(loss_type, config):
    """use_bias_correction_kl: k3 times coef_1 (per token; LUSPO's per row), gradient through both."""
    algorithm = AlgorithmConfig(kl_coef=0.3, kl_bias_correction=True, **config)
    for seed in range(30):
        g, mask, old, logp, adv = batch(seed)
        ref = old + torch.randn(*old.shape, generator=g) * 0.2
        got, grad, _ = memrl(logp, old, adv, mask, algorithm, ref_log_prob=ref)
        if loss_type == "luspo":  # TRL scales its (B, T) KL by the row lengths over padding too; memrl aggregates
            # the KL as the loss (seq-mean-token-sum), each token's k3 times TRL's sequence-level coef_1
            pg, pg_grad = reference(logp, old, adv, mask, "luspo")
            x = logp.clone().requires_grad_(True)
            lr = ((x - old) * mask).sum(-1, keepdim=True) / mask.sum(-1, keepdim=True)
            term = (((torch.exp(ref - x) - (ref - x) - 1) * torch.exp(lr)) * mask).sum(-1).mean()
            term.backward()
            want, want_grad = pg + 0.3 * term.detach(), pg_grad + 0.3 * x.grad
        else:
            want, want_grad = reference(logp, old, adv, mask, loss_type, beta=0.3, ref=ref, bias_kl=True)
        assert got.item() == pytest.approx(want.item(), rel=1e-5, abs=1e-6), seed
        assert torch.allclose(grad, want_grad, rtol=1e-4, atol=1e-6), seed


@pytest.mark.parametrize("settings, message", [
    ({"off_policy_mask_threshold": 0.5, "policy_loss": "dro", "dro_beta": 0.1},
     "off_policy_mask_threshold needs a policy loss where a row with zero advantages adds 0"),
    ({"off_policy_mask_threshold": 0.5, "off_policy": "tis"}, "off_policy_mask_threshold works with off_policy none"),
    ({"kl_bias_correction": True}, "kl_bias_correction weights the KL term to the reference: set kl_coef > 0"),
    ({"policy_loss": "vespo", "rollout_correction": {"rollout_is": "sequence"}},
     "folds token importance weights into its sequence weight"),
    ({"vespo_k_pos": 1.0}, "vespo_k_pos is read by policy_loss=vespo only"),
    ({"policy_loss": "vespo", "clip_ratio_high": 0.28}, "clip_ratio_high is read by policy_loss=vanilla or "),
])
def test_settings_that_would_silently_mean_something_else_are_refused(settings, message):
    with pytest.raises(ValueError, match=message):
        AlgorithmConfig(**settings)


def test_a_training_step_masks_by_the_engines_log_probs(tmp_path):
    """In the trainer the mask reads the engine's sampling log-probs (-0.5 a token here; the tiny model's own are
    near -log(vocab)): negative-advantage conversations go at delta 0.5 and stay at a delta past their KL. The
    trainer's old log-probs would give KL 0 and mask nothing."""
    from memrl.models.resolve import load_tokenizer
    from memrl.testing import ScriptedEngine
    from memrl.train.trainer import Trainer
    from tests.train.helpers import coin_engine, config

    tok = load_tokenizer("tiny")
    shares = []
    for delta in (0.5, 1e6):
        cfg = config(tmp_path / str(delta), algorithm__off_policy_mask_threshold=delta, trainer__total_steps=1)
        metrics = Trainer(cfg, engine=ScriptedEngine(coin_engine(tok).reply, logprob=-0.5)).train_step()
        shares.append(metrics["off_policy_masked"])
    assert 0 < shares[0] < 1 and shares[1] == 0


def test_the_mask_with_correction_weights_and_with_the_entropy_mask_is_trls():
    """TRL's vLLM token_truncate ratio (memrl: rollout_is=token, threshold 2, from memrl's own is_weights) and its
    entropy mask both multiply the masked loss; off_policy_masked counts every token of a dropped row, also those
    the entropy mask leaves out."""
    from memrl.rl.functional import high_entropy_mask
    from memrl.rl.rollout_corr import is_weights

    weighted = AlgorithmConfig(off_policy_mask_threshold=0.05, rollout_correction={"rollout_is": "token",
                                                                                   "rollout_is_threshold": 2.0},
                               **NO_DUAL)
    both = AlgorithmConfig(off_policy_mask_threshold=0.05, top_entropy_quantile=0.5, **NO_DUAL)
    for seed in range(20):
        g, mask, old, logp, adv = batch(seed)
        sampling = old + torch.randn(*old.shape, generator=g) * 0.3
        weights, _ = is_weights(old - sampling, mask, "token", 2.0)
        got, grad, _ = memrl(logp, old, adv, mask, weighted, behaviour_log_prob=sampling, is_weights=weights)
        trl_ratio = torch.where(mask > 0, torch.exp(old - sampling).clamp(max=2.0), torch.ones_like(old))
        want, want_grad = reference(logp, old, adv, mask, "dapo", opsm=0.05, sampling=sampling, is_ratio=trl_ratio)
        assert got.item() == pytest.approx(want.item(), rel=1e-5, abs=1e-6), seed
        assert torch.allclose(grad, want_grad, rtol=1e-4, atol=1e-6), seed
        entropy = torch.rand(*old.shape, generator=g)
        x = logp.clone().requires_grad_(True)
        got, metrics = policy_objective(x, old, adv.expand_as(logp).contiguous(), mask, both, entropy=entropy,
                                        behaviour_log_prob=sampling)
        ent_mask = high_entropy_mask(entropy, mask, 0.5).float()
        want = trl_loss(logp, old, adv, mask, "dapo", opsm=0.05, sampling=sampling, entropy_mask=ent_mask)
        assert got.item() == pytest.approx(want.item(), rel=1e-5, abs=1e-6), seed
        seq_kl = ((sampling - logp) * mask).sum(1) / mask.sum(1)
        dropped = ((adv[:, 0] < 0) & (seq_kl > 0.05)).float()[:, None]
        assert metrics["off_policy_masked"].item() == pytest.approx(((mask * dropped).sum() / mask.sum()).item(),
                                                                     abs=1e-6)


def test_a_token_band_that_drops_every_token_reports_no_effective_sample():
    """IcePop's band with every weight outside it: the weights are all 0 and the effective sample size is 0
    (the metric divided by zero and failed the step)."""
    from memrl.rl.rollout_corr import is_weights

    weights, metrics = is_weights(torch.full((1, 3), -5.0), torch.ones(1, 3), "token", "0.5_2.0")
    assert not weights.any() and metrics["rollout_is_eff_sample_size"] == 0.0
