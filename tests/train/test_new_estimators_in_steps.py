"""The estimators added from verl (grpo_passk, gpg, gdpo, opo) inside memrl's scoring: episodes of several
conversations, groups failures left with one episode, empty episodes; and what the scoring passes them."""

from __future__ import annotations

import pytest
import torch

from memrl.config import MemRLConfig
from memrl.config.algorithm import AlgorithmConfig
from memrl.train.batch import rows_from_trajectories
from memrl.train.scoring import assign_advantages, estimator_inputs
from memrl.types import Conversation, Trajectory


def episode(group: str, reward: float, lengths=(3,), metrics=None) -> Trajectory:
    convs = [Conversation(token_ids=[1] + [2] * n, loss_mask=[0] + [1] * n, logprobs=[0.0] * (n + 1))
             for n in lengths]
    return Trajectory(conversations=convs, reward=reward, sample_id=group, group_id=group,
                      metrics=dict(metrics or {}))


def cfg(**algorithm) -> MemRLConfig:
    return MemRLConfig.model_validate({"model": {"path": "tiny"}, "algorithm": {"n": 4, **algorithm}})


def advantages(c, trajs):
    rows = rows_from_trajectories(trajs)
    assign_advantages(c, trajs, rows)
    return rows


def test_gdpo_leaves_a_lone_episode_out_of_its_whitening():
    """The lone episode trains on nothing and the group's whitened values are those of the group alone."""
    m = lambda em: {"em": em}  # noqa: E731
    group = [episode("g", 1.0, (4,), m(1.0)), episode("g", 0.0, (2,), m(0.0)), episode("g", 0.0, (2,), m(0.0))]
    c = cfg(adv_estimator="gdpo", gdpo_reward_keys=["em"])
    alone = advantages(c, group)
    mixed = advantages(c, [*group, episode("lone", 1.0, (4,), m(1.0))])
    assert torch.count_nonzero(mixed[3].advantages) == 0
    for a, b in zip(alone, mixed[:3]):
        torch.testing.assert_close(a.advantages, b.advantages)


def test_gdpo_weights_and_opo_lengths_reach_the_estimators():
    trajs = [episode("g", 1.0, (2, 3), {"a": 1.0, "b": 0.0}), episode("g", 0.0, (5,), {"a": 0.0, "b": 1.0})]
    got = estimator_inputs(cfg(adv_estimator="gdpo", gdpo_reward_keys=["a", "b"], gdpo_reward_weights=[1.0, 3.0]),
                           trajs)
    assert got["weights"] == [1.0, 3.0] and got["components"].tolist() == [[1.0, 0.0], [0.0, 1.0]]
    assert estimator_inputs(cfg(adv_estimator="opo"), trajs)["lengths"].tolist() == [5, 5]  # 2 + 3 turns, 5
    rows = advantages(cfg(adv_estimator="opo"), [episode("g", 1.0, (6,)), episode("g", 0.0, (2,))])
    assert rows[0].advantages[1].item() == pytest.approx(1.0 - 6 / 8)  # baseline (6 x 1 + 2 x 0) / 8


def test_opo_with_a_group_that_generated_nothing_does_not_fail_the_step():
    rows = advantages(cfg(adv_estimator="opo"), [episode("g", 1.0, (3,)), episode("g", 0.0, (3,)),
                                                 episode("cut", 0.0, (0,)), episode("cut", 1.0, (0,))])
    assert all(torch.isfinite(r.advantages).all() for r in rows)


def test_gpg_scales_by_the_episodes_it_trains():
    """A lone episode (its partners failed) is trained on nothing: it does not change the others' alpha."""
    group = [episode("g", 1.0), episode("g", 0.0), episode("g", 0.0), episode("g", 0.0)]
    alone = advantages(cfg(adv_estimator="gpg"), group)
    mixed = advantages(cfg(adv_estimator="gpg"), [*group, episode("lone", 1.0)])
    for a, b in zip(alone, mixed[:4]):
        torch.testing.assert_close(a.advantages, b.advantages)
    assert alone[0].advantages[1].item() == pytest.approx(4 / 1 * 0.75)  # alpha 4 / 1 scorer, 1 - mean 0.25


@pytest.mark.parametrize("settings, message", [
    ({"adv_estimator": "gdpo", "gdpo_reward_keys": ["em"], "step_rewards": True},
     "would skip adv_estimator='gdpo''s own token stage"),
    ({"adv_estimator": "reinforce_plus_plus", "step_rewards": True}, "own token stage"),
    ({"gdpo_reward_weights": [1.0, 2.0]},
     "gdpo_reward_weights is read by adv_estimator=gdpo or normalize_then_sum only"),
])
def test_pairs_that_would_silently_change_meaning_are_refused(settings, message):
    with pytest.raises(ValueError, match=message):
        AlgorithmConfig(**settings)


def test_from_verl_skips_what_it_cannot_keep():
    from memrl.config.from_verl import translate

    t = translate({"algorithm.adv_estimator": "gdpo", "algorithm.gdpo_reward_weights": "[1.0,0.5]"})
    assert "algorithm.gdpo_reward_weights" not in t.settings and "algorithm.adv_estimator" not in t.settings
    t = translate({"algorithm.adv_estimator": "grpo_passk", "algorithm.norm_adv_by_std_in_grpo": "False"})
    assert "algorithm.adv_estimator" not in t.settings and "divides by it" in t.skipped["algorithm.adv_estimator"]
    assert translate({"algorithm.adv_estimator": "opo"}).settings["algorithm.adv_estimator"][0] == "opo"
    assert translate({"algorithm.adv_estimator": "remax"}).settings["algorithm.adv_estimator"][0] == "remax"
    for name in ("optimal_token_baseline", "tir_optimal_token_baseline"):
        t = translate({"algorithm.adv_estimator": name, "actor_rollout_ref.actor.calculate_sum_pi_squared": "True"})
        assert t.settings["algorithm.adv_estimator"][0] == "optimal_token_baseline"
        assert t.settings["algorithm.variance_proxy"][0] is True  # verl logs its variance proxies with it
    t = translate({"algorithm.adv_estimator": "gdpo", "algorithm.norm_adv_by_std_in_grpo": "False",
                   "algorithm.gdpo_reward_keys": "[a,b]"})
    assert "algorithm.adv_estimator" not in t.settings and "gdpo without the std" in t.skipped["algorithm.adv_estimator"]
    t = translate({"actor_rollout_ref.actor.policy_loss.loss_mode": "luspo"})  # TRL's: verl has none of that name
    assert "algorithm.policy_loss" not in t.settings
