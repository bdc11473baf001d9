"""verl's ``variance_proxy/*`` metrics: by hand, on training rows, and against verl's own
``compute_variance_proxy_metrics`` cut out of a checkout (``MEMRL_VERL_REPO``, verl 0.9.0's metric_utils.py)."""

from __future__ import annotations

import math
import os
import types

import pytest
import torch

from memrl.rl.variance_proxy import variance_proxy_metrics
from memrl.train.token_baseline import variance_proxy
from tests.rl.test_token_baseline import row

VERL = os.environ.get("MEMRL_VERL_REPO")
HALF, QUARTER = math.log(0.5), math.log(0.25)


def two_episodes() -> tuple[torch.Tensor, ...]:
    """Episode A: 2 tokens, pi 0.5, sum pi^2 0.5 (each term 0.5, W = 1), advantages 1; episode B: 1 token,
    pi 0.25, sum pi^2 0.25 (term 0.75, W = 0.75), advantage -2."""
    adv = torch.tensor([[1.0, 1.0], [-2.0, 9.0]])  # B's second position is masked: its value is never read
    logp = torch.tensor([[HALF, HALF], [QUARTER, 0.0]])
    spp = torch.tensor([[0.5, 0.5], [0.25, 7.0]])
    mask = torch.tensor([[1, 1], [1, 0]])
    return adv, logp, spp, mask


def test_proxies_by_hand():
    """A^2 W: 1 x 1 and 4 x 0.75 = 3, mean 2; |g| = 1: signal 1, noise (2 - 1) / (2 - 1) = 1;
    E[A^2] = (1 + 4) / 2, E[W] = (1 + 0.75) / 2."""
    got = variance_proxy_metrics(*two_episodes(), grad_norm=1.0)
    assert got == pytest.approx({"variance_proxy/proxy1_signal_strength": 1.0, "variance_proxy/proxy2_total_power": 2.0,
                                 "variance_proxy/proxy3_pure_noise": 1.0, "variance_proxy/expected_a_squared": 2.5,
                                 "variance_proxy/expected_w": 0.875})
    no_norm = variance_proxy_metrics(*two_episodes())
    assert no_norm["variance_proxy/proxy1_signal_strength"] == no_norm["variance_proxy/proxy3_pure_noise"] == 0.0
    big = variance_proxy_metrics(*two_episodes(), grad_norm=3.0)  # (2 - 9) / 1 < 0: clamped at 0
    assert big["variance_proxy/proxy3_pure_noise"] == 0.0 and big["variance_proxy/proxy1_signal_strength"] == 9.0


def test_rollout_weights_by_hand():
    """rho 2 on A's tokens, 0.5 on B's: total power uses each episode's mean rho squared times the unscaled W,
    (4 x 1 x 1 + 0.25 x 4 x 0.75) / 2 = 2.375; E[W] reads the rho^2-scaled terms: (4 x 0.5 x 2 + 0.25 x 0.75) / 2."""
    rho = torch.tensor([[2.0, 2.0], [0.5, 5.0]])
    got = variance_proxy_metrics(*two_episodes(), is_weights=rho)
    assert got["variance_proxy/proxy2_total_power"] == pytest.approx(2.375)
    assert got["variance_proxy/expected_w"] == pytest.approx((4.0 + 0.1875) / 2)
    assert got["variance_proxy/expected_a_squared"] == pytest.approx(2.5)


def test_an_episode_is_its_rows_in_order_less_rejected_tokens():
    """Episode 0 in two conversations (2 + 1 generated tokens) equals the flat three-token episode; a rejected
    token of episode 1 leaves its mask (verl's mask after rejection)."""
    rows = [row(0, "g", [0, 1, 0, 1], 1.0, HALF, 0.5), row(0, "g", [0, 0, 1], 1.0, HALF, 0.5),
            row(1, "g", [0, 1, 1, 1], -1.0, QUARTER, 0.25)]
    rows[2].train_mask = torch.tensor([1.0, 0.0, 1.0])
    got = variance_proxy(rows, grad_norm=0.5)
    flat = variance_proxy_metrics(torch.tensor([[1.0, 1.0, 1.0], [-1.0, -1.0, 0.0]]),
                                  torch.tensor([[HALF] * 3, [QUARTER, QUARTER, 0.0]]),
                                  torch.tensor([[0.5] * 3, [0.25, 0.25, 0.0]]), torch.tensor([[1, 1, 1], [1, 1, 0]]),
                                  grad_norm=0.5)
    assert got == pytest.approx(flat)
    assert got["variance_proxy/expected_w"] == pytest.approx((1.5 + 1.5) / 2)  # 3 x 0.5 and 2 x 0.75
    assert variance_proxy([], 1.0) == {}


@pytest.fixture(scope="module")
def verl_proxy():
    if not VERL:
        pytest.skip("set MEMRL_VERL_REPO to a verl checkout to compare with verl's own metrics")
    from tests.rl.verl_policy_losses import top_level_block, verl_source

    tf = verl_source(str(VERL), "verl/utils/torch_functional.py")
    ns_f: dict = {"torch": torch}
    exec(tf[tf.index("def masked_sum"):tf.index("def masked_var")], ns_f)
    ns: dict = {"torch": torch, "DataProto": object, "verl_F": types.SimpleNamespace(**ns_f)}
    exec(top_level_block(verl_source(str(VERL), "verl/trainer/ppo/metric_utils.py"),
                         "def compute_variance_proxy_metrics("), ns)
    return ns["compute_variance_proxy_metrics"]


@pytest.mark.parametrize("seed", range(12))
def test_equal_to_verls_function(verl_proxy, seed):
    """Random batches: masks of varied lengths (one row empty), with and without IS weights (some tiny, under
    verl's 1e-10 clamp of rho^2), with and without a gradient norm."""
    g = torch.Generator().manual_seed(seed)
    n, width = 6, 9
    lengths = torch.randint(1, width + 1, (n,), generator=g)
    lengths[seed % n] = 0
    mask = (torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)).float()
    batch = {"advantages": torch.randn(n, width, generator=g), "response_mask": mask,
             "old_log_probs": -torch.rand(n, width, generator=g) * 4,
             "sum_pi_squared": torch.rand(n, width, generator=g) * 0.9 + 0.05}
    if seed % 2:
        rho = torch.rand(n, width, generator=g) * 2
        rho[0, 0] = 1e-6
        batch["rollout_is_weights"] = rho
    norm = None if seed % 3 == 0 else float(torch.rand(1, generator=g)) * 2
    want = verl_proxy(types.SimpleNamespace(batch=batch), gradient_norm=norm)
    got = variance_proxy_metrics(batch["advantages"], batch["old_log_probs"], batch["sum_pi_squared"], mask,
                                 batch.get("rollout_is_weights"), norm)
    assert got.keys() == want.keys()
    for k in want:
        assert got[k] == pytest.approx(float(want[k]), rel=1e-5, abs=1e-7), k
