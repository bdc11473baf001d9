"""Tinker's built-in losses (``memrl.tinker.losses``): hand-checked values, memrl's own RL functions, the SDK's.

* Hand-checked: small datums whose loss and gradient are worked out in the comments.
* memrl: ``ppo`` equals memrl's clipped surrogate (``compute_policy_loss`` against the sampler's
  log-probs, summed), ``cispo`` equals verl's bypass-mode REINFORCE with token-level truncated IS
  weights (``bypass_policy_loss``), and ``importance_sampling`` has that REINFORCE's gradient.
* Tinker itself: the SDK's ``forward_backward_custom`` turns any client-side loss into a
  ``cross_entropy`` request with weights ``-dC/dlogprobs`` (``TrainingClient._compute_custom_loss``),
  so the server's cross-entropy must give back exactly the custom loss's gradient; and
  tinker-cookbook's ``compute_mean_nll`` (what ``sl_loop`` logs) must equal the summed
  ``loss:sum`` over the summed ``weights:sum``. Both skip without the package installed.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from memrl.rl import compute_policy_loss, logprobs_from_logits
from memrl.rl.offpolicy import clipped_token_losses
from memrl.rl.rollout_loss import bypass_policy_loss
from memrl.tinker.losses import LOSSES, REFUSED, UnsupportedLoss, tinker_loss

LOG = math.log


def _rl_inputs(q: list[float], adv: list[float], **extra: torch.Tensor) -> dict[str, torch.Tensor]:
    return {"target_tokens": torch.arange(len(q)), "logprobs": torch.tensor(q), "advantages": torch.tensor(adv),
            **extra}


def _loss_and_grad(loss_fn: str, p: list[float], inputs: dict, config: dict | None = None):
    logp = torch.tensor(p, requires_grad=True)
    loss, metrics = tinker_loss(loss_fn, logp, inputs, config)
    (grad,) = torch.autograd.grad(loss, logp)
    return float(loss.detach()), grad.tolist(), metrics


# Two sampled tokens: the trainer gives 0.5 and 0.25 where the sampler gave 0.25 and 0.5, so the
# ratios are r = (2, 0.5); advantages (1, -1).
P = [LOG(0.5), LOG(0.25)]
Q = [LOG(0.25), LOG(0.5)]
A = [1.0, -1.0]


def test_losses_listed():
    assert LOSSES == ("cross_entropy", "importance_sampling", "ppo", "cispo", "dro")


def test_cross_entropy_hand_checked():
    # -(0 * log .5 + 1 * log .25 + 2 * log .5) = log 4 + 2 log 2 = 4 log 2; dL/dp = -weights
    inputs = {"target_tokens": torch.tensor([3, 4, 5]), "weights": torch.tensor([0.0, 1.0, 2.0])}
    loss, grad, metrics = _loss_and_grad("cross_entropy", [LOG(0.5), LOG(0.25), LOG(0.5)], inputs)
    assert loss == pytest.approx(4 * LOG(2))
    assert grad == [0.0, -1.0, -2.0]
    assert metrics == {"loss:sum": pytest.approx(4 * LOG(2)), "weights:sum": 3.0}


def test_cross_entropy_top_k_targets():
    # [T, K] targets (the cookbook's top-k distillation): the same sum over every entry
    logp = torch.log(torch.tensor([[0.5, 0.25], [0.125, 0.5]]))
    inputs = {"target_tokens": torch.tensor([[1, 2], [3, 4]]), "weights": torch.tensor([[1.0, 0.0], [0.5, 0.5]])}
    loss, _ = tinker_loss("cross_entropy", logp, inputs)
    assert float(loss) == pytest.approx(LOG(2) + 0.5 * LOG(8) + 0.5 * LOG(2))


def test_importance_sampling_hand_checked():
    # -(2 * 1 + 0.5 * -1) = -1.5; dL/dp = -r * A = (-2, 0.5)
    loss, grad, metrics = _loss_and_grad("importance_sampling", P, _rl_inputs(Q, A))
    assert loss == pytest.approx(-1.5)
    assert grad == pytest.approx([-2.0, 0.5])
    assert metrics == {"loss:sum": pytest.approx(-1.5), "tokens:sum": 2.0, "ratio:max": pytest.approx(2.0)}


def test_ppo_hand_checked_default_thresholds():
    # clip to [0.8, 1.2]: min(2*1, 1.2*1) = 1.2; min(0.5*-1, 0.8*-1) = -0.8; loss -(1.2 - 0.8) = -0.4.
    # Both tokens are clipped, so neither has a gradient.
    loss, grad, metrics = _loss_and_grad("ppo", P, _rl_inputs(Q, A))
    assert loss == pytest.approx(-0.4)
    assert grad == [0.0, 0.0]
    assert metrics["clipped:sum"] == 2.0


def test_ppo_inside_the_band_is_importance_sampling():
    # r = (1.1, 0.9), inside [0.8, 1.2]: ppo's loss and gradient are importance_sampling's
    p, q = [LOG(0.55), LOG(0.45)], [LOG(0.5), LOG(0.5)]
    ppo = _loss_and_grad("ppo", p, _rl_inputs(q, [2.0, -3.0]))
    is_ = _loss_and_grad("importance_sampling", p, _rl_inputs(q, [2.0, -3.0]))
    assert ppo[0] == pytest.approx(-(1.1 * 2 - 0.9 * 3)) == pytest.approx(is_[0])
    assert ppo[1] == pytest.approx(is_[1])
    assert ppo[2]["clipped:sum"] == 0.0


def test_ppo_config_thresholds_numbers_or_strings():
    # tighter [0.9, 1.1] on r = (1.15, 0.85), A = (1, -1): min(1.15, 1.1) = 1.1, min(-0.85, -0.9) = -0.9
    p, q = [LOG(0.575), LOG(0.425)], [LOG(0.5), LOG(0.5)]
    for config in ({"clip_low_threshold": 0.9, "clip_high_threshold": 1.1},
                   {"clip_low_threshold": "0.9", "clip_high_threshold": "1.1"}):
        loss, grad, _ = _loss_and_grad("ppo", p, _rl_inputs(q, A), config)
        assert loss == pytest.approx(-(1.1 - 0.9))
        assert grad == [0.0, 0.0]
    # the defaults leave both inside the band
    assert _loss_and_grad("ppo", p, _rl_inputs(q, A))[0] == pytest.approx(-(1.15 - 0.85))


def test_ppo_per_token_thresholds_in_inputs():
    # the SDK types clip_*_threshold as loss_fn_inputs tensors too: token 0 gets [0.9, 1.1], token 1 the wide band
    p, q = [LOG(0.575), LOG(0.425)], [LOG(0.5), LOG(0.5)]
    inputs = _rl_inputs(q, A, clip_low_threshold=torch.tensor([0.9, 0.5]),
                        clip_high_threshold=torch.tensor([1.1, 1.5]))
    loss, grad, metrics = _loss_and_grad("ppo", p, inputs)
    assert loss == pytest.approx(-(1.1 - 0.85))
    assert grad == pytest.approx([0.0, 0.85])
    assert metrics["clipped:sum"] == 1.0


def test_cispo_hand_checked():
    # defaults [0, 4] leave r = (2, 0.5): -(2 * log .5 * 1 + 0.5 * log .25 * -1) = log 2; dL/dp = -sg(r) * A
    loss, grad, metrics = _loss_and_grad("cispo", P, _rl_inputs(Q, A))
    assert loss == pytest.approx(LOG(2))
    assert grad == pytest.approx([-2.0, 0.5])
    assert metrics["clipped:sum"] == 0.0
    # a cap of 1.5 bounds the first token's coefficient but keeps its gradient (PPO would drop it)
    loss, grad, metrics = _loss_and_grad("cispo", P, _rl_inputs(Q, A), {"clip_high_threshold": 1.5})
    assert loss == pytest.approx(-(1.5 * LOG(0.5) - 0.5 * LOG(0.25)))
    assert grad == pytest.approx([-1.5, 0.5])
    assert metrics["clipped:sum"] == 1.0


def test_dro_hand_checked():
    # Tinker's DRO page: -(p * A - 0.5 * beta * (p - q)^2).sum(); p - q = (log 2, log 0.5), A = (1, -1)
    d = LOG(2)
    loss, grad, metrics = _loss_and_grad("dro", P, _rl_inputs(Q, A), {"beta": 0.4})
    assert loss == pytest.approx(-(LOG(0.5) - 0.2 * d * d) - (-LOG(0.25) - 0.2 * d * d))
    assert grad == pytest.approx([-1 + 0.4 * d, 1 - 0.4 * d])  # dL/dp = -A + beta * (p - q)
    assert metrics["ratio:max"] == pytest.approx(2.0) and metrics["tokens:sum"] == 2.0
    default, _, _ = _loss_and_grad("dro", P, _rl_inputs(Q, A))  # beta 0.05, the docs' example value
    assert default == pytest.approx(-(LOG(0.5) - 0.025 * d * d) - (-LOG(0.25) - 0.025 * d * d))
    with pytest.raises(ValueError, match="takes only beta; got clip_high_threshold"):
        tinker_loss("dro", torch.tensor(P), _rl_inputs(Q, A), {"clip_high_threshold": 2})
    with pytest.raises(ValueError, match="beta'] must be >= 0"):
        tinker_loss("dro", torch.tensor(P), _rl_inputs(Q, A), {"beta": -1})


@pytest.mark.parametrize("loss_fn", ["importance_sampling", "ppo", "cispo", "dro"])
def test_zero_advantage_positions_add_nothing_and_stay_finite(loss_fn):
    # the cookbook pads the prompt with q = 0 and A = 0; an extreme q at A = 0 must not give NaN either
    # (DRO's penalty is a sampler's q, so for DRO only the prompt's q = 0 padding is tried)
    p = P + [LOG(1e-30), LOG(0.5)]
    base = _loss_and_grad(loss_fn, P, _rl_inputs(Q, A))
    extreme = 0.0 if loss_fn == "dro" else -1e4
    padded = _loss_and_grad(loss_fn, p, _rl_inputs(Q + [extreme, 0.0], A + [0.0, 0.0]))
    assert padded[0] == pytest.approx(base[0])
    assert padded[1] == pytest.approx(base[1] + [0.0, 0.0])
    assert padded[2]["tokens:sum"] == 2.0


def test_dro_pulls_a_constant_reward_groups_tokens_towards_the_sampler():
    # A = 0 on sampled tokens (every reward of the group equal; the cookbook trains such groups by default):
    # no policy-gradient term, but the penalty -(-beta/2 (p - q)^2) still applies where q is the sampler's
    p, q, beta = [-1.0, -2.0], [-1.5, -1.0], 0.05
    loss, grad, _ = _loss_and_grad("dro", p, _rl_inputs(q, [0.0, 0.0]), {"beta": beta})
    assert loss == pytest.approx(0.5 * beta * (0.5 ** 2 + 1.0 ** 2))  # 0.03125
    assert grad == pytest.approx([beta * 0.5, beta * -1.0])  # dL/dp = beta * (p - q)


@pytest.mark.parametrize("name", ["gspo", "stable_reinforce", "custom", "nope"])
def test_unsupported_losses_refused(name):
    with pytest.raises(UnsupportedLoss, match="supported: cross_entropy, importance_sampling, ppo, cispo, dro"):
        tinker_loss(name, torch.zeros(2), _rl_inputs(Q, A))
    assert issubclass(UnsupportedLoss, ValueError)


@pytest.mark.parametrize("name", ["gspo", "stable_reinforce"])
def test_cookbook_rl_losses_refused_with_what_to_pass(name):
    """rl_loop offers both; the one line says which loss_fn to pass instead."""
    with pytest.raises(UnsupportedLoss, match=r"pass loss_fn='importance_sampling'.*rl_loop"):
        tinker_loss(name, torch.zeros(2), _rl_inputs(Q, A))


@pytest.mark.parametrize(("loss_fn", "inputs", "config", "match"), [
    ("cross_entropy", {"target_tokens": torch.tensor([1, 2])}, None, "missing: weights"),
    ("ppo", {"target_tokens": torch.tensor([1, 2]), "logprobs": torch.zeros(2)}, None, "missing: advantages"),
    ("importance_sampling", _rl_inputs([0.0, 0.0, 0.0], [1.0, 1.0, 1.0]), None, r"shape \(3,\), expected \(2,\)"),
    ("cross_entropy", {"target_tokens": torch.tensor([1, 2]), "weights": torch.ones(2)},
     {"clip_low_threshold": 0.9}, "takes no loss_fn_config"),
    ("ppo", _rl_inputs(Q, A), {"clip_low": 0.9}, "takes only clip_low_threshold, clip_high_threshold; got clip_low"),
    ("ppo", _rl_inputs(Q, A), {"clip_low_threshold": 1.3}, "0 <= clip_low_threshold <= clip_high_threshold"),
    ("ppo", _rl_inputs(Q, A), {"clip_low_threshold": "tight"}, "must be a number"),
    ("ppo", _rl_inputs(Q, A), {"clip_high_threshold": float("inf")}, "must be finite"),
    ("cispo", _rl_inputs(Q, A, clip_high_threshold=torch.tensor(2.0)), {"clip_high_threshold": 2.0},
     "both in loss_fn_config and in loss_fn_inputs"),
])
def test_bad_requests_refused_in_one_line(loss_fn, inputs, config, match):
    with pytest.raises(ValueError, match=match) as err:
        tinker_loss(loss_fn, torch.zeros(2), inputs, config)
    assert not isinstance(err.value, UnsupportedLoss)


def test_inputs_a_loss_does_not_read_are_ignored():
    # the cookbook's RL datums carry a "mask" it strips before sending; one left in changes nothing
    plain = _loss_and_grad("importance_sampling", P, _rl_inputs(Q, A))
    masked = _loss_and_grad("importance_sampling", P, _rl_inputs(Q, A, mask=torch.ones(2)))
    assert masked[:2] == plain[:2]


# ---- memrl's own functions compute the same ----

def _random_datum(seed: int, n: int = 12, spread: float = 0.6):
    g = torch.Generator().manual_seed(seed)
    q = -torch.rand(n, generator=g) * 3 - 0.05
    p = q + (torch.rand(n, generator=g) * 2 - 1) * spread  # ratios in [e^-spread, e^spread], under 3
    adv = torch.randn(n, generator=g)
    return p, q, adv


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(("low", "high"), [(0.8, 1.2), (0.9, 1.1), (0.5, 1.5)])
def test_ppo_equals_memrl_clipped_surrogate(seed, low, high):
    """Tinker's ppo is memrl's PPO loss against the sampler's log-probs with bounds 1 - eps_low, 1 + eps_high,
    summed over tokens (seq-mean-token-sum of one row); memrl's dual clip (at 3) never binds with ratios under 3."""
    p, q, adv = _random_datum(seed)
    config = {"clip_low_threshold": low, "clip_high_threshold": high}
    logp = p.clone().requires_grad_(True)
    ours, _ = tinker_loss("ppo", logp, {"target_tokens": torch.arange(12), "logprobs": q, "advantages": adv}, config)
    (g_ours,) = torch.autograd.grad(ours, logp)
    logp2 = p.clone().unsqueeze(0).requires_grad_(True)
    memrl, *_ = compute_policy_loss(q.unsqueeze(0), logp2, adv.unsqueeze(0), torch.ones(1, 12),
                                    cliprange_low=1 - low, cliprange_high=high - 1, loss_agg_mode="seq-mean-token-sum")
    (g_memrl,) = torch.autograd.grad(memrl, logp2)
    torch.testing.assert_close(ours, memrl, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(g_ours, g_memrl[0], rtol=1e-6, atol=1e-6)
    # with any ratio, memrl's per-token losses without the dual clip sum to the same
    tokens, _ = clipped_token_losses(p - q, adv, torch.ones(12), 1 - low, high - 1, None)
    torch.testing.assert_close(ours, tokens.sum(), rtol=1e-6, atol=1e-6)


def _bypass_reinforce(p: torch.Tensor, q: torch.Tensor, adv: torch.Tensor, threshold: float):
    """memrl's verl bypass mode, loss_type reinforce: -A * min(pi/pi_engine, threshold) * log pi, summed."""
    correction = SimpleNamespace(loss_type="reinforce", rollout_is="token", rollout_is_threshold=threshold,
                                 rollout_is_batch_normalize=False, rollout_rs=None, rollout_rs_threshold=None)
    logp = p.clone().unsqueeze(0).requires_grad_(True)
    loss, _ = bypass_policy_loss(logp, q.unsqueeze(0), adv.unsqueeze(0), torch.ones(1, len(p)), correction,
                                 cliprange_low=0.2, cliprange_high=0.2, clip_ratio_c=None,
                                 loss_agg_mode="seq-mean-token-sum", norm_length=None)
    (grad,) = torch.autograd.grad(loss, logp)
    return loss, grad[0]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("high", [4.0, 1.3])
def test_cispo_equals_memrl_bypass_reinforce_with_truncated_is(seed, high):
    """CISPO with the default one-sided clip [0, c] is, value and gradient, memrl's bypass REINFORCE whose
    token IS weights are truncated at c (verl's TIS): both are -sg(min(r, c)) * A * log pi summed."""
    p, q, adv = _random_datum(seed)
    logp = p.clone().requires_grad_(True)
    ours, _ = tinker_loss("cispo", logp, {"target_tokens": torch.arange(12), "logprobs": q, "advantages": adv},
                          {"clip_high_threshold": high})
    (g_ours,) = torch.autograd.grad(ours, logp)
    memrl, g_memrl = _bypass_reinforce(p, q, adv, high)
    torch.testing.assert_close(ours, memrl, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(g_ours, g_memrl, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_importance_sampling_has_memrl_bypass_reinforce_gradient(seed):
    """-(r A).sum() and memrl's -(sg(r) A log pi).sum() differ in value but not in gradient (-r A grad log pi)."""
    p, q, adv = _random_datum(seed, spread=2.0)
    logp = p.clone().requires_grad_(True)
    ours, _ = tinker_loss("importance_sampling", logp,
                          {"target_tokens": torch.arange(12), "logprobs": q, "advantages": adv})
    (g_ours,) = torch.autograd.grad(ours, logp)
    _, g_memrl = _bypass_reinforce(p, q, adv, 1e9)  # a cap no ratio reaches: plain IS weights
    torch.testing.assert_close(g_ours, g_memrl, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cispo_under_its_cap_has_importance_sampling_gradient(seed):
    """With every ratio under CISPO's cap (4), -sg(r) A grad p is -r A grad p: the two RL runs of
    docs/benchmarks.md coincide until rounding parts them."""
    p, q, adv = _random_datum(seed, spread=1.0)
    grads = []
    for loss_fn in ("cispo", "importance_sampling"):
        logp = p.clone().requires_grad_(True)
        loss, _ = tinker_loss(loss_fn, logp, {"target_tokens": torch.arange(12), "logprobs": q, "advantages": adv})
        grads.append(torch.autograd.grad(loss, logp)[0])
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-6, atol=1e-6)


def test_cross_entropy_equals_torch_and_memrl_logprobs():
    """With memrl's log-probs of the targets, -(w * logp).sum() is torch's per-token cross-entropy, weighted."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(7, 11, generator=g)
    targets = torch.randint(0, 11, (7,), generator=g)
    weights = torch.tensor([0.0, 0.0, 1.0, 1.0, 0.5, 2.0, 1.0])
    logp = logprobs_from_logits(logits, targets)
    ours, metrics = tinker_loss("cross_entropy", logp, {"target_tokens": targets, "weights": weights})
    expected = (torch.nn.functional.cross_entropy(logits, targets, reduction="none") * weights).sum()
    torch.testing.assert_close(ours, expected)
    assert metrics["weights:sum"] == 5.5


# ---- the Tinker SDK and tinker-cookbook ----

def test_sdk_forward_backward_custom_linearisation():
    """The SDK sends a custom loss C as cross_entropy with weights -dC/dlogprobs: our cross-entropy's gradient
    must then be C's own gradient (and its loss the surrogate the SDK reports as surrogate_loss:sum)."""
    tinker = pytest.importorskip("tinker")
    from tinker.lib.public_interfaces.training_client import TrainingClient

    logprobs = [torch.tensor([-0.7, -1.2, -0.1]), torch.tensor([-2.0, -0.3])]
    data = [tinker.Datum(model_input=tinker.ModelInput.from_ints(list(range(len(lp)))),
                         loss_fn_inputs={"target_tokens": list(range(1, len(lp) + 1))}) for lp in logprobs]
    forward = tinker.ForwardBackwardOutput(
        loss_fn_output_type="cross_entropy", metrics={},
        loss_fn_outputs=[{"logprobs": tinker.TensorData.from_torch(lp)} for lp in logprobs])

    def custom(_data, lps):  # a loss cross_entropy is not: squared log-probs (the SDK tutorial's example)
        loss = sum((lp ** 2).sum() for lp in lps)
        return loss, {"custom:sum": float(loss.detach())}

    result = TrainingClient._compute_custom_loss(data, custom, forward)
    for datum, lp in zip(result.data, logprobs):
        weights = datum.loss_fn_inputs["weights"].to_torch()
        targets = datum.loss_fn_inputs["target_tokens"].to_torch()
        logp = lp.clone().requires_grad_(True)
        loss, _ = tinker_loss("cross_entropy", logp, {"target_tokens": targets, "weights": weights})
        (grad,) = torch.autograd.grad(loss, logp)
        torch.testing.assert_close(grad, 2 * lp)  # d/dlp of lp^2
        torch.testing.assert_close(loss, (2 * lp * lp).sum())


def test_cookbook_mean_nll_is_summed_loss_over_summed_weights():
    """sl_loop logs compute_mean_nll(logprobs, weights); from our per-datum metrics it is sum(loss) / sum(weights)."""
    pytest.importorskip("tinker_cookbook")
    from tinker import TensorData
    from tinker_cookbook.supervised.common import compute_mean_nll

    logprobs = [torch.tensor([-0.5, -1.5, -2.0]), torch.tensor([-0.1, -3.0])]
    weights = [torch.tensor([0.0, 1.0, 1.0]), torch.tensor([1.0, 0.5])]
    found = [tinker_loss("cross_entropy", lp, {"target_tokens": torch.zeros(len(lp), dtype=torch.long),
                                               "weights": w})[1] for lp, w in zip(logprobs, weights)]
    ours = sum(m["loss:sum"] for m in found) / sum(m["weights:sum"] for m in found)
    cookbook = compute_mean_nll([TensorData.from_torch(lp) for lp in logprobs],
                                [TensorData.from_torch(w) for w in weights])
    assert ours == pytest.approx(cookbook)


def test_every_loss_the_sdk_names_is_computed_or_refused_by_name():
    tinker_types = pytest.importorskip("tinker.types")
    import typing

    named = set(typing.get_args(tinker_types.LossFnType))
    assert named <= set(LOSSES) | set(REFUSED), named - set(LOSSES) - set(REFUSED)
