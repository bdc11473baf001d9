"""DAPO's dynamic-sampling rounds and overlong shaping, as verl's DAPO trainer and reward manager run them
(verl-recipe dapo/dapo_ray_trainer.py, verl/workers/reward_manager/dapo.py)."""

from __future__ import annotations

import pytest

from memrl.config import MemRLConfig
from memrl.models.resolve import load_tokenizer
from memrl.rl.dapo import keep_groups, response_tokens, shape_overlong
from memrl.testing import ScriptedEngine
from memrl.train.trainer import Trainer
from memrl.types import Conversation, Trajectory
from tests.train.helpers import config


def varying_engine(tok, varying: set[int]):
    """Questions in ``varying`` get a right then a wrong answer in turn (their groups vary); the others are
    always answered wrong (uniform groups, which dynamic sampling drops). Records the questions answered."""
    asked: list[int] = []
    state = {"flip": 0}

    def reply(prompt, params):
        if params.max_new_tokens != 6:
            return [tok.eos_token_id]
        idx = int(tok.decode(prompt).split("Which letter ")[1].split("?")[0])
        asked.append(idx)
        right = "c" if idx % 2 else "b"
        state["flip"] += 1
        ans = right if idx in varying and state["flip"] % 2 else "z"
        return tok.encode("\\boxed{" + ans + "}", add_special_tokens=False) + [tok.eos_token_id]

    return ScriptedEngine(reply), asked


def one_step(tmp_path, varying, **over):
    tok = load_tokenizer("tiny")
    engine, asked = varying_engine(tok, varying)
    cfg = config(tmp_path, algorithm__dynamic_sampling=True, trainer__total_steps=1, trainer__prompts_per_step=2,
                 data__shuffle=False, **over)
    warnings: list[str] = []
    trainer = Trainer(cfg, engine=engine)
    trainer.runner.warn = warnings.append
    kept, generated, stats = trainer.rollout()
    return kept, generated, stats, sorted(set(asked)), warnings


def test_each_round_draws_the_missing_groups_by_default(tmp_path):
    kept, _, stats, asked, warnings = one_step(tmp_path, {1, 5}, algorithm__max_gen_batches=0)
    # round 0: samples 0, 1 (1 kept); round 1: 2; round 2: 3; round 3: 4; round 4: 5 -> full
    assert asked == [0, 1, 2, 3, 4, 5] and stats["gen_rounds"] == 5 and stats["kept_groups"] == 2
    assert sorted({t.sample_id for t in kept}) == ["1", "5"] and not warnings


def test_gen_batch_size_rounds_draw_that_many_and_keep_the_first_groups_in_draw_order(tmp_path):
    kept, generated, stats, asked, _ = one_step(tmp_path, {1, 2, 3, 7}, algorithm__dynamic_sampling_prompts=6)
    # one round of 6 prompts (verl's gen_batch_size): 1, 2 and 3 vary; the first two in draw order train
    assert asked == [0, 1, 2, 3, 4, 5] and stats["gen_rounds"] == 1
    assert sorted({t.sample_id for t in kept}) == ["1", "2"] and len(generated) == 24
    assert stats["kept_groups"] == 2 and stats["dropped_groups"] == 3


def test_a_step_short_of_groups_after_the_last_round_says_so(tmp_path):
    kept, _, stats, _, warnings = one_step(tmp_path, {1}, algorithm__max_gen_batches=2)
    assert stats["kept_groups"] == 1 and {t.sample_id for t in kept} == {"1"}
    assert len(warnings) == 1 and "kept 1 of 2 groups in 2 rounds (algorithm.max_gen_batches)" in warnings[0]
    assert "max_gen_batches 0" in warnings[0]


def test_a_group_left_with_one_episode_is_not_kept():
    assert keep_groups([1.0, 0.0, 0.0], ["g1", "g2", "g2"]) == [True, False, False]  # verl's n = 1 rule
    assert keep_groups([1.0, 0.0, 1.0], ["g1", "g2", "g2"], min_size=2) == [False, True, True]


def traj(prompt: int, generated: int, reward: float = 1.0, extra: tuple[int, int] | None = None) -> Trajectory:
    def conv(p: int, g: int) -> Conversation:
        return Conversation(token_ids=list(range(p + g)), loss_mask=[0] * p + [1] * g, logprobs=[0.0] * (p + g))
    convs = [conv(prompt, generated)] + ([conv(*extra)] if extra else [])
    return Trajectory(conversations=convs, reward=reward, sample_id="s", group_id="g")


def test_overlong_shaping_is_dapos_on_the_last_response():
    # verl: exceed = L - (max_resp_len - buffer); reward += min(-exceed / buffer * factor, 0)
    t = traj(prompt=7, generated=18, reward=1.0)
    shape_overlong(t, max_length=20, buffer=4, penalty=1.0)
    assert t.reward == pytest.approx(1.0 - 0.5) and t.metrics == {"score": 1.0, "overlong_reward": -0.5,
                                                                  "overlong": 1.0}
    t = traj(prompt=50, generated=16, reward=-1.0)
    shape_overlong(t, 20, 4, 1.0)
    assert t.reward == -1.0 and t.metrics["overlong"] == 0.0
    t = traj(prompt=3, generated=30, reward=0.0, extra=(40, 22))  # the last conversation counts, as verl's
    assert response_tokens(t) == 22
    shape_overlong(t, 20, 4, 2.0)
    assert t.reward == pytest.approx(-3.0)


def test_overlong_shaping_trains_and_filtering_on_score_ignores_it(tmp_path):
    """Wrong answers of two lengths: the penalty makes their rewards differ within a group, so filtering on the
    reward keeps every group, and on the score (verl's acc) only the groups whose answers differ."""
    tok = load_tokenizer("tiny")
    flip = {"n": 0}

    def reply(prompt, params):
        if params.max_new_tokens != 12:
            return [tok.eos_token_id]
        idx = int(tok.decode(prompt).split("Which letter ")[1].split("?")[0])
        flip["n"] += 1
        if idx in (1, 3) and flip["n"] % 2:
            ans = "c"
        else:
            ans = "z" if flip["n"] % 2 else "zzzz"
        return tok.encode("\\boxed{" + ans + "}", add_special_tokens=False) + [tok.eos_token_id]

    kept = {}
    for metric in ("score", "reward"):
        cfg = config(tmp_path / metric, algorithm__dynamic_sampling=True, algorithm__max_gen_batches=1,
                     algorithm__overlong_buffer=10, algorithm__overlong_max_tokens=12, workflow__final_tokens=12,
                     algorithm__dynamic_sampling_metric=metric, trainer__total_steps=1, trainer__prompts_per_step=4,
                     data__shuffle=False)
        trainer = Trainer(cfg, engine=ScriptedEngine(reply))
        got, generated, _ = trainer.rollout()
        assert all(t.reward == pytest.approx(t.metrics["score"] + t.metrics["overlong_reward"]) for t in generated)
        assert len({t.metrics["overlong_reward"] for t in generated}) > 1
        kept[metric] = sorted({t.sample_id for t in got})
    assert kept == {"score": ["1", "3"], "reward": ["0", "1", "2", "3"]}


@pytest.mark.parametrize("over, why", [
    ({"overlong_buffer": 4}, "overlong_buffer and overlong_max_tokens come together"),
    ({"overlong_buffer": 40, "overlong_max_tokens": 20}, "longer than overlong_max_tokens"),
    ({"dynamic_sampling_prompts": 6}, "dynamic_sampling=true only"),
])
def test_settings_that_would_do_nothing_are_refused(over, why):
    with pytest.raises(ValueError, match=why):
        MemRLConfig.model_validate({"model": {"path": "tiny"}, "algorithm": over})


def test_gen_batch_size_rounds_are_synchronous():
    with pytest.raises(ValueError, match="asynchronous run refills group by group"):
        MemRLConfig.model_validate({"model": {"path": "tiny"}, "trainer": {"mode": "async"},
                                    "algorithm": {"dynamic_sampling": True, "dynamic_sampling_prompts": 6}})


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_no_round_limit_still_ends_a_step_whose_every_episode_fails(tmp_path, mode):
    """max_gen_batches 0 generates until the batch is full; a round in which every episode failed (a broken
    engine, a broken reward) ends the step instead of drawing forever, and the failure guard stops the run."""
    from memrl.train.guards import NothingTrainableError
    from tests.train.test_run_guards import failing_engine

    cfg = config(tmp_path, algorithm__dynamic_sampling=True, algorithm__max_gen_batches=0, trainer__total_steps=2,
                 trainer__max_failed_steps=1, trainer__mode=mode)
    with pytest.raises(NothingTrainableError):
        Trainer(cfg, engine=failing_engine(RuntimeError("broken"))).run()
