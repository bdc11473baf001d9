"""A GRPO group that failures left with one episode has no baseline: advantage 0 (TRL's), never its raw reward."""

from __future__ import annotations

import pytest
import torch

from memrl.config import MemRLConfig
from memrl.train.batch import rows_from_trajectories
from memrl.train.scoring import assign_advantages
from memrl.types import Conversation, Trajectory


def episode(group: str, reward: float) -> Trajectory:
    conv = Conversation(token_ids=[1, 2, 3, 4], loss_mask=[0, 1, 1, 1], logprobs=[0.0] * 4)
    return Trajectory(conversations=[conv], reward=reward, sample_id=group, group_id=group)


@pytest.mark.parametrize("estimator, lone", [("grpo", 0.0), ("dr_grpo", 0.0), ("rloo", 0.0)])
def test_a_lone_episode_of_a_group_estimator_gets_no_advantage(estimator, lone):
    cfg = MemRLConfig.model_validate({"model": {"path": "tiny"}, "algorithm": {"adv_estimator": estimator, "n": 4}})
    trajs = [episode("g", 1.0), episode("g", 0.0), episode("lone", 0.5)]
    rows = rows_from_trajectories(trajs)
    assign_advantages(cfg, trajs, rows)
    firsts = [float(r.advantages[r.loss_mask[1:].index(1)]) for r in rows]
    assert firsts[2] == lone and firsts[0] > 0 > firsts[1]


def test_with_one_episode_per_prompt_the_raw_reward_stays_verls():
    cfg = MemRLConfig.model_validate({"model": {"path": "tiny"}, "algorithm": {"adv_estimator": "grpo", "n": 1}})
    trajs = [episode("a", 0.5)]
    rows = rows_from_trajectories(trajs)
    assign_advantages(cfg, trajs, rows)
    assert torch.allclose(rows[0].advantages[rows[0].advantages != 0], torch.tensor(0.5 / (1 + 1e-6)))


def test_turn_rewards_an_estimator_does_not_read_are_noted():
    from memrl.train.scoring import unread_turn_rewards

    rewarded = episode("g", 1.0)
    rewarded.conversations[0].reward = 0.25  # ep.turn_reward
    cfg = MemRLConfig.model_validate({"model": {"path": "tiny"}})
    note = unread_turn_rewards(cfg, [rewarded])
    assert "adv_estimator='grpo' does not read" in note and "gigpo" in note
    assert unread_turn_rewards(cfg, [episode("g", 1.0)]) is None
    steps = MemRLConfig.model_validate({"model": {"path": "tiny"}, "algorithm": {"adv_estimator": "step_reinforce"}})
    assert unread_turn_rewards(steps, [rewarded]) is None  # read, and no state needed


def turns(group: str, states: list[str | None]) -> Trajectory:
    convs = [Conversation(token_ids=[1, 2, 3], loss_mask=[0, 1, 1], logprobs=[0.0] * 3, reward=0.5,
                          meta={} if s is None else {"state": s}) for s in states]
    return Trajectory(conversations=convs, reward=1.0, sample_id=group, group_id=group)


def test_gigpo_says_when_its_turns_give_it_nothing_to_compare():
    """Merged turns (one conversation per episode) or turns without a state make gigpo a scaled GRPO and
    leave its per-turn rewards unread: said, not silent."""
    from memrl.train.scoring import unread_turn_rewards

    gigpo = MemRLConfig.model_validate({"model": {"path": "tiny"}, "algorithm": {"adv_estimator": "gigpo"}})
    merged = unread_turn_rewards(gigpo, [episode("g", 1.0), episode("g", 0.0)])
    assert "one trained conversation" in merged and "record=turns" in merged
    bare = unread_turn_rewards(gigpo, [turns("g", ["a", None, None]), turns("g", ["a", "b", "c"])])
    assert bare.startswith("note: 2 of 6 turns have no anchor state")
    assert unread_turn_rewards(gigpo, [turns("g", ["a", "b"]), turns("g", ["a", "c"])]) is None
