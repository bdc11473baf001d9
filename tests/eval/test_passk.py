"""pass^k as τ²-bench defines it, on made-up trial outcomes checked by hand."""

from __future__ import annotations

import pytest

from memrl.eval.passk import is_success, pass_hat_k, pass_hat_ks


def test_pass_hat_k_by_hand():
    # 4 trials, 3 successes: pass^1 = 3/4; pass^2 = C(3,2)/C(4,2) = 3/6; pass^3 = 1/4; pass^4 = 0
    assert [pass_hat_k(4, 3, k) for k in (1, 2, 3, 4)] == [0.75, 0.5, 0.25, 0.0]
    assert pass_hat_k(5, 5, 5) == 1.0 and pass_hat_k(3, 0, 1) == 0.0
    with pytest.raises(ValueError):
        pass_hat_k(2, 1, 3)  # more than the trials
    with pytest.raises(ValueError):
        pass_hat_k(2, 3, 1)


def test_mean_over_tasks_up_to_the_fewest_trials():
    outcomes = {"a": [True, True, True, True], "b": [True, False, True, False], "c": [False] * 4}
    got = pass_hat_ks(outcomes)
    # a: 1, 1, 1, 1; b: 1/2, C(2,2)/C(4,2) = 1/6, 0, 0; c: 0 -> means over 3 tasks
    assert got == pytest.approx({1: 0.5, 2: (1 + 1 / 6) / 3, 3: 1 / 3, 4: 1 / 3})
    assert set(pass_hat_ks({"a": [True] * 3, "b": [True, False]})) == {1, 2}
    assert pass_hat_ks({}) == {}


def test_success_is_a_reward_of_one():
    assert is_success(1.0) and is_success(1 - 1e-7) and not is_success(0.999) and not is_success(0.5)
