"""The released variant's doubled state advantage, in the mixing function and through the trainer."""

from types import SimpleNamespace

import pytest
import torch

from memrl.config.schema import MemRLConfig
from memrl.rl.advantages import combine_step_advantages
from memrl.train.batch import Row
from memrl.train.trainer import Trainer
from memrl.types import Trajectory


def test_state_scale_doubles_the_centred_state_reward():
    outcome = torch.tensor([1.0, -1.0])
    step_rewards = torch.tensor([1.0, 0.0, 0.0, 0.0])  # rows: ep0 s0, ep0 s1, ep1 s0, ep1 s1
    adv = combine_step_advantages(outcome, step_rewards, [0, 0, 1, 1], ["q", "q"], [0, 1, 0, 1], alpha=0.8,
                                  state_scale=2.0)
    # step-0 group [2, 0] centres to [1, -1]: 0.8 * 1 + 0.2 * 1 = 1.0, 0.8 * -1 + 0.2 * -1 = -1.0
    assert adv.tolist() == pytest.approx([1.0, 0.8, -1.0, -0.8])


@pytest.mark.parametrize("variant,expected", [("memrl", [0.9, 0.8, -0.9, -0.8]),
                                              ("released", [1.0, 0.8, -1.0, -0.8])])
def test_trainer_mixes_by_variant(variant, expected):
    cfg = MemRLConfig.model_validate({"workflow": {"name": "rememr1", "rememr1_variant": variant},
                                      "algorithm": {"adv_estimator": "dr_grpo", "step_rewards": True}})
    # two episodes of one question with rewards 2 and 0: dr_grpo outcome advantages +1 and -1
    trajs = [Trajectory(conversations=[], reward=r, sample_id="s", group_id="q") for r in (2.0, 0.0)]
    rows = [Row([1, 2, 3], [0, 1, 1], [0.0] * 3, episode=e, step=s, step_reward=sr)
            for e, s, sr in ((0, 0, 1.0), (0, 1, 0.0), (1, 0, 0.0), (1, 1, 0.0))]
    Trainer.advantages(SimpleNamespace(cfg=cfg, workflow=cfg.workflow.build()), trajs, rows)  # type: ignore[arg-type]
    # memrl: step-0 states [1, 0] centre to [0.5, -0.5]: 0.8 * 1 + 0.2 * 0.5 = 0.9; released doubles them
    # to [1, -1]: 0.8 + 0.2 = 1.0. Both generated tokens of a row carry the row's advantage.
    for r, v in zip(rows, expected):
        assert r.advantages.tolist() == pytest.approx([v, v])


def test_a_released_training_step_runs(tmp_path):
    import json

    from memrl.models.resolve import load_tokenizer
    from tests.train.helpers import coin_engine, config

    cfg = config(tmp_path, workflow__name="rememr1", workflow__rememr1_variant="released", workflow__memory_tokens=3,
                 workflow__final_tokens=6, workflow__question_tokens=16, algorithm__step_rewards=True,
                 algorithm__adv_estimator="dr_grpo", trainer__total_steps=1)
    Trainer(cfg, engine=coin_engine(load_tokenizer("tiny"))).run()
    (line,) = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert line["step"] == 1 and line["grad_norm"] > 0


def test_under_grpo_the_state_advantage_is_divided_by_its_std_as_remem_r1s_grpo_use_adv_true():
    """ReMemR1 normalises the state rewards per (question, turn) with its compute_1D_grpo_advantage, the std
    division on unless grpo_use_adv=False; memrl's state stage follows the outcome's estimator the same way."""
    cfg = MemRLConfig.model_validate({"workflow": {"name": "rememr1", "rememr1_variant": "memrl"},
                                      "algorithm": {"adv_estimator": "grpo", "step_rewards": True}})
    trajs = [Trajectory(conversations=[], reward=r, sample_id="s", group_id="q") for r in (2.0, 0.0)]
    rows = [Row([1, 2, 3], [0, 1, 1], [0.0] * 3, episode=e, step=s, step_reward=sr)
            for e, s, sr in ((0, 0, 1.0), (0, 1, 0.0), (1, 0, 0.0), (1, 1, 0.0))]
    Trainer.advantages(SimpleNamespace(cfg=cfg, workflow=cfg.workflow.build()), trajs, rows)  # type: ignore[arg-type]
    # outcome: [2, 0] -> +-1 / std sqrt(2) = +-0.7071; step-0 states [1, 0] -> +-0.5 / std 0.7071 = +-0.7071;
    # step-1 states [0, 0] -> 0. Row ep0 s0: 0.8 * 0.7071 + 0.2 * 0.7071 = 0.7071; ep0 s1: 0.8 * 0.7071 = 0.5657
    half = 2 ** -0.5
    expected = [half, 0.8 * half, -half, -0.8 * half]
    for r, v in zip(rows, expected):
        assert r.advantages.tolist() == pytest.approx([v, v], rel=1e-4)
