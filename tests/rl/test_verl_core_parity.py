"""memrl's REINFORCE++ returns, KL estimators (``+`` variants included) and ``token-sum`` against verl's own code.

verl's functions are cut out of a checkout (``MEMRL_VERL_REPO``) and run with their imports stubbed
(:mod:`tests.rl.verl_policy_losses`). The masks have gaps: a multi-turn row's tool and user tokens sit between
its assistant turns with mask 0, where verl carries the running return through.
"""

from __future__ import annotations

import os
import types
from typing import Any, Optional

import pytest
import torch

from memrl.rl.advantages import compute_reinforce_plus_plus_outcome_advantage
from memrl.rl.losses import agg_loss, kl_penalty

VERL = os.environ.get("MEMRL_VERL_REPO")
pytestmark = pytest.mark.skipif(not VERL, reason="set MEMRL_VERL_REPO to a verl checkout to compare with verl")

KL_NAMES = ("k1", "kl", "abs", "k2", "mse", "k3", "low_var_kl", "k1+", "kl+", "abs+", "k2+", "mse+", "k3+",
            "low_var_kl+")


@pytest.fixture(scope="module")
def verl() -> types.SimpleNamespace:
    from tests.rl.verl_policy_losses import top_level_block, verl_source

    tf = verl_source(str(VERL), "verl/utils/torch_functional.py")
    core = verl_source(str(VERL), "verl/trainer/ppo/core_algos.py")
    ns_f: dict[str, Any] = {"torch": torch}
    exec(tf[tf.index("def masked_sum"):tf.index("def get_response_mask")], ns_f)
    verl_f = types.SimpleNamespace(**{k: ns_f[k] for k in ("masked_sum", "masked_mean", "masked_var",
                                                             "masked_whiten")})
    ns: dict[str, Any] = {"torch": torch, "verl_F": verl_f, "Optional": Optional, "Any": Any,
                          "AlgoConfig": object, "register_adv_est": lambda name: (lambda fn: fn),
                          "AdvantageEstimator": types.SimpleNamespace(REINFORCE_PLUS_PLUS="reinforce_plus_plus")}
    for start in ("def agg_loss(", "@register_adv_est(AdvantageEstimator.REINFORCE_PLUS_PLUS)", "def kl_penalty(",
                  "def kl_penalty_forward("):
        exec(top_level_block(core, start), ns)
    return types.SimpleNamespace(**{k: ns[k] for k in ("agg_loss", "kl_penalty")},
                                 reinforce_pp=ns["compute_reinforce_plus_plus_outcome_advantage"])


def _gapped(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rewards on each row's last valid token (and a few inside), masks with gaps, a padded tail."""
    gen = torch.Generator().manual_seed(seed)
    mask = (torch.rand(5, 12, generator=gen) > 0.35).float()
    mask[:, 0] = 1.0
    mask[:, 10:] = 0.0
    rewards = torch.randn(5, 12, generator=gen) * (torch.rand(5, 12, generator=gen) > 0.7).float() * mask
    return rewards, mask


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("gamma", [1.0, 0.9])
def test_reinforce_plus_plus_matches_verl_across_gaps(verl, seed, gamma):
    rewards, mask = _gapped(seed)
    want_adv, want_ret = verl.reinforce_pp(rewards, mask, config=types.SimpleNamespace(gamma=gamma))
    adv, ret = compute_reinforce_plus_plus_outcome_advantage(rewards, mask, gamma=gamma)
    torch.testing.assert_close(ret, want_ret)
    torch.testing.assert_close(adv, want_adv)


@pytest.mark.parametrize("name", KL_NAMES)
def test_kl_estimators_match_verl_in_value_and_gradient(verl, name):
    gen = torch.Generator().manual_seed(3)
    ref = torch.randn(4, 7, generator=gen) * 3
    base = ref + torch.randn(4, 7, generator=gen) * 8  # log-ratios past verl's clamps too
    grads = []
    for fn in (verl.kl_penalty, kl_penalty):
        logp = base.clone().requires_grad_()
        value = fn(logp, ref, name)
        (value * torch.linspace(0.5, 2, 7)).sum().backward()
        grads.append((value.detach(), logp.grad))
    torch.testing.assert_close(grads[1][0], grads[0][0])
    torch.testing.assert_close(grads[1][1], grads[0][1])


def test_token_sum_matches_verl(verl):
    rewards, mask = _gapped(7)
    torch.testing.assert_close(agg_loss(rewards, mask, "token-sum"), verl.agg_loss(rewards, mask, "token-sum"))
