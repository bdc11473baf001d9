"""``adv_estimator=optimal_token_baseline`` inside both trainers: the log-prob pass gives every row its sum pi^2,
the rows' advantages vary token by token, and the pairs that would change its meaning are refused."""

from __future__ import annotations

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


def test_step_rewards_are_refused_with_it():
    with pytest.raises(ValueError, match="a baseline per token"):
        AlgorithmConfig(adv_estimator="optimal_token_baseline", step_rewards=True)
