"""``adv_estimator=optimal_token_baseline`` inside both trainers: the log-prob pass gives every row its sum pi^2,
the rows' advantages vary token by token, and the pairs that would change its meaning are refused."""

from __future__ import annotations

import math

import pytest
import torch

from memrl.config.algorithm import AlgorithmConfig
from tests.train.helpers import config


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_both_trainers_train_with_a_baseline_per_token(tmp_path, mode, monkeypatch):
    import memrl.train.update as update
    from tests.train.test_async import _run

    seen = []
    apply = update.apply_token_baseline

    def spy(rows, **kw):
        assert all(r.sum_pi_squared is not None and r.old_logprobs is not None for r in rows)
        assert all(0.0 < float(r.sum_pi_squared[i]) <= 1.0 for r in rows for i, m in enumerate(r.loss_mask[1:]) if m)
        before = [r.advantages.clone() for r in rows]
        apply(rows, **kw)
        seen.append((before, [r.advantages.clone() for r in rows]))

    monkeypatch.setattr(update, "apply_token_baseline", spy)
    over = {"algorithm__adv_estimator": "optimal_token_baseline", "algorithm__n": 4, "trainer__total_steps": 2,
            "sampling__temperature": 1.0, "workflow__reward": "tests.train.helpers:text_reward"}
    if mode == "async":
        over.update(trainer__mode="async", trainer__max_staleness=0)
    _, steps = _run(config(tmp_path, **over))
    assert len(seen) == 2 and all(torch.isfinite(torch.tensor(s["pg_loss"])) for s in steps)
    before, after = seen[0]
    changed = [not torch.equal(b, a) for b, a in zip(before, after)]
    assert any(changed)  # rewards vary in a group: the returns became G - B
    varies = [a[a != 0] for a in after if (a != 0).sum() > 1]
    assert any(len(set(v.tolist())) > 1 for v in varies)  # one row's tokens got different baselines
    for s in steps:  # verl's variance proxies beside it, the signal from the step's gradient norm
        assert s["variance_proxy/proxy1_signal_strength"] == pytest.approx(s["grad_norm"] ** 2)
        assert s["variance_proxy/proxy2_total_power"] > 0 and s["variance_proxy/expected_w"] > 0


def test_grpo_with_variance_proxy_logs_verls_proxies_from_its_own_pass(tmp_path):
    """An on-policy GRPO update (one mini-batch, one epoch) runs the log-prob pass for sum pi^2 under
    algorithm.variance_proxy: every step logs the five proxies, the signal from the step's gradient norm."""
    from tests.train.test_async import _run

    over = {"trainer__total_steps": 2, "trainer__mini_batches": 1, "algorithm__variance_proxy": True,
            "sampling__temperature": 1.0, "workflow__reward": "tests.train.helpers:text_reward"}
    _, steps = _run(config(tmp_path / "on", **over))
    keys = ("proxy1_signal_strength", "proxy2_total_power", "proxy3_pure_noise", "expected_a_squared", "expected_w")
    for s in steps:
        assert s["variance_proxy/proxy1_signal_strength"] == pytest.approx(s["grad_norm"] ** 2)
        assert all(math.isfinite(s[f"variance_proxy/{k}"]) for k in keys) and s["variance_proxy/expected_w"] > 0
    _, plain = _run(config(tmp_path / "off", **{**over, "algorithm__variance_proxy": False}))
    assert not any(k.startswith("variance_proxy/") for s in plain for k in s)
    assert plain[0]["reward"] == steps[0]["reward"]  # the same rollouts (before the first update)


def test_step_rewards_are_refused_with_it():
    with pytest.raises(ValueError, match="a baseline per token"):
        AlgorithmConfig(adv_estimator="optimal_token_baseline", step_rewards=True)


def test_mask_truncated_completions_is_refused_with_it():
    with pytest.raises(ValueError, match="would lose its tokens"):
        AlgorithmConfig(adv_estimator="optimal_token_baseline", mask_truncated_completions=True)


def test_rejected_tokens_and_rows_leave_the_baseline_as_verls_mask_after_rejection():
    """verl computes the baseline on the response mask after the rollout correction's rejection: a rejected row
    leaves its group (here the partner is then alone: its return stays) and a rejected token adds nothing."""
    from memrl.train.token_baseline import apply_token_baseline
    from tests.rl.test_token_baseline import row

    rows = [row(0, "g", [0, 1, 1], 1.0, -0.7, 0.5), row(1, "g", [0, 1, 1], 0.0, -0.7, 0.5)]
    apply_token_baseline(rows)
    assert rows[0].advantages.tolist() == pytest.approx([0.5, 0.5])
    rows = [row(0, "g", [0, 1, 1], 1.0, -0.7, 0.5), row(1, "g", [0, 1, 1], 0.0, -0.7, 0.5)]
    rows[1].train_mask = torch.zeros(2)  # sequence rejected
    apply_token_baseline(rows)
    assert rows[0].advantages.tolist() == pytest.approx([1.0, 1.0]) and rows[1].advantages.tolist() == [0.0, 0.0]
    rows = [row(0, "g", [0, 1, 1], 1.0, -0.7, 0.5), row(1, "g", [0, 1, 1, 1], 0.0, -0.7, 0.5)]
    rows[1].train_mask = torch.tensor([1.0, 0.0, 1.0])  # its 2nd token rejected: 2 kept, as long as episode 0
    apply_token_baseline(rows)
    assert rows[0].advantages.tolist() == pytest.approx([0.5, 0.5])  # no zero tail: equal kept lengths
    assert rows[1].advantages.tolist() == pytest.approx([-0.5, 0.0, -0.5])
