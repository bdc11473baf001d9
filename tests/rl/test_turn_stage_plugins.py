"""A plug-in estimator's per-turn stage (``register_adv_est(..., turns=)``) gets its options and is checked."""

from __future__ import annotations

import pytest
import torch

from memrl.config.registry import ADV_ESTIMATORS
from memrl.rl.advantages import register_adv_est, turn_advantages
from memrl.rl.turn_credit import TurnRows

ROWS = TurnRows(episode=[0, 0, 1], turn=[0, 1, 0], group=["g", "g", "g"], state=[None, None, None],
                scores=[1.0, 0.0], turn_rewards=[[0.5, 1.0], [0.0]])


@pytest.fixture
def scaled():
    seen = {}

    def per_turn(rows, *, gamma, episode_weight, step_weight, beta=1.0):
        seen["beta"] = beta
        return torch.tensor([beta * rows.turn_rewards[e][t] for e, t in zip(rows.episode, rows.turn)])

    def per_episode(scores, group_ids, *, epsilon, beta=1.0):
        return scores * beta

    register_adv_est("test_scaled_turns", turns=per_turn)(per_episode)
    yield seen
    ADV_ESTIMATORS.remove("test_scaled_turns")


def test_its_options_reach_the_per_turn_stage(scaled):
    out = turn_advantages("test_scaled_turns", ROWS, options={"beta": 0.3})
    assert scaled["beta"] == 0.3 and out.tolist() == pytest.approx([0.15, 0.3, 0.0])


def test_a_wrong_shape_or_nan_is_one_line_naming_the_estimator(monkeypatch):
    def short(rows, *, gamma, episode_weight, step_weight):
        return torch.zeros(2)

    def nan(rows, *, gamma, episode_weight, step_weight):
        return torch.full((3,), float("nan"))

    for name, fn, why in (("test_short_turns", short, r"returned \(2,\); it must return one value per conversation "
                           r"row, shape \(3,\)"), ("test_nan_turns", nan, "returned non-finite values")):
        register_adv_est(name, turns=fn)(lambda s, g, *, epsilon: s)
        try:
            with pytest.raises(ValueError, match=f"advantage estimator '{name}' {why}"):
                turn_advantages(name, ROWS)
        finally:
            ADV_ESTIMATORS.remove(name)


def test_a_policy_loss_breaking_its_contract_is_one_line_naming_it():
    from memrl.rl.policy_loss_base import PolicyLoss

    t = torch.zeros(1, 3)
    kw = {"cliprange_low": 0.2, "weights": None}
    def one_value(old, logp, adv, mask, **k):
        return (logp.sum(),)

    with pytest.raises(ValueError, match=r"policy loss .*one_value returned a 1-tuple; it must return \(loss"):
        PolicyLoss(one_value)(t, t, t, t, **kw)

    def no_keywords(old, logp, adv, mask):
        return logp.sum(), 0.0, 0.0, 0.0

    with pytest.raises(TypeError, match=r"policy loss .*no_keywords: .*unexpected keyword argument .* takes "
                                        r"\(old_log_prob, log_prob, advantages, response_mask, \*, cliprange_low"):
        PolicyLoss(no_keywords)(t, t, t, t, **kw)

    def float_stats(old, logp, adv, mask, **k):
        return logp.sum(), 0.0, 0.5, 0.0

    loss, clipfrac, kl, low = PolicyLoss(float_stats)(t, t, t, t, **kw)
    assert isinstance(kl, torch.Tensor) and float(kl) == 0.5  # plain numbers as stats are taken

