"""A plug-in estimator that returns the wrong shape or NaN is named in a one-line error, not a traceback."""

from __future__ import annotations

import pytest
import torch

from memrl.rl.advantages import AdvantageEstimator, episode_advantages


def wrong_shape(scores, group_ids, *, epsilon):
    return scores[:1]


def not_a_number(scores, group_ids, *, epsilon):
    return scores * float("nan")


def test_an_estimator_must_return_one_finite_value_per_episode():
    scores = torch.tensor([1.0, 0.0, 1.0])
    with pytest.raises(ValueError, match=r"estimator .*:wrong_shape returned \(1,\); it must return .* shape \(3,\)"):
        AdvantageEstimator(wrong_shape)(scores, [0, 0, 0], epsilon=1e-6)
    with pytest.raises(ValueError, match=r"estimator .*:not_a_number returned non-finite values"):
        AdvantageEstimator(not_a_number)(scores, [0, 0, 0], epsilon=1e-6)
    assert episode_advantages(scores, [0, 0, 0]).shape == (3,)  # the built-ins pass
