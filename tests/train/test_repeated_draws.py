"""A step that crosses an epoch can draw a sample twice: each draw is a group of its own with seeds of its own
(verl gives every batch row its own uid; memrl used to merge the two into one group of 2n with pairwise equal
seeds, so a seeded engine generated every episode twice)."""

from __future__ import annotations

from collections import Counter

from memrl.config import MemRLConfig
from memrl.train.rollout import RolloutRunner
from memrl.train.sampler import ResumableSampler
from memrl.types import Conversation, Trajectory


class Recorder:
    """Episodes that only record the seed and group they were given."""

    async def episode(self, sample, *, engine, tokenizer, sampling, sample_id, group_id, **kw):
        return Trajectory(conversations=[Conversation.from_prompt_response([1], [2], [0.0])], reward=0.0,
                          sample_id=sample_id, group_id=group_id, info={"seed": sampling.seed})


def test_a_sample_drawn_twice_in_a_step_makes_two_groups_with_distinct_seeds():
    cfg = MemRLConfig.model_validate({"algorithm": {"n": 4}, "trainer": {"prompts_per_step": 8}})
    sampler = ResumableSampler(12, 42)
    runner = RolloutRunner(cfg, Recorder(), list(range(12)), sampler, None, print)
    runner.engine = object()
    runner.rollout(1)
    drawn = ResumableSampler(12, 42)
    drawn.take(8)
    second = drawn.take(8)  # the second step's draws: 4 from epoch 0, 4 from epoch 1
    repeated = [i for i, c in Counter(second).items() if c > 1]
    assert repeated, "the seed no longer draws a sample twice in step 2; pick another"
    kept, _, _ = runner.rollout(2)
    groups = Counter(t.group_id for t in kept)
    assert len(groups) == 8 and set(groups.values()) == {4}  # 8 draws, 8 groups of n
    for idx in repeated:
        both = [t for t in kept if t.sample_id == str(idx)]
        assert len({t.group_id for t in both}) == 2 and len({t.info["seed"] for t in both}) == 8
    once = next(i for i in second if i not in repeated)
    assert {t.group_id for t in kept if t.sample_id == str(once)} == {f"2:0:{once}"}  # unchanged for single draws


def test_data_shuffle_false_visits_the_file_in_order_every_epoch():
    sampler = ResumableSampler(5, 42, shuffle=False)
    assert sampler.take(7) == [0, 1, 2, 3, 4, 0, 1]
    assert ResumableSampler(5, 42).take(5) != [0, 1, 2, 3, 4]  # the default shuffles (seeded)
    assert MemRLConfig.model_validate({"data": {"shuffle": False}}).data.shuffle is False
