"""algorithm.rollout_correction in the trainer: rows corrected once per step, metrics logged, no-op when engine == trainer."""

from __future__ import annotations

import json

import torch

from memrl.models.resolve import load_tokenizer
from memrl.train.batch import Row
from memrl.train.correction import apply_rollout_correction, mismatch_warning
from memrl.train.trainer import Trainer
from memrl.config.rollout_corr import RolloutCorrectionConfig
from tests.train.helpers import coin_engine, config


def _metrics(run) -> list[dict]:
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


def test_rows_get_weights_and_masks_at_their_target_positions():
    # prompt [1, 2], response [3, 4]: target positions 0..2, the response's log-probs at 1 and 2
    rows = [Row([1, 2, 3, 4], [0, 0, 1, 1], [0.0, 0.0, -1.0, -1.0], episode=0, step=0),
            Row([1, 2, 5], [0, 0, 1], [0.0, 0.0, -2.0], episode=1, step=0)]
    rows[0].old_logprobs = torch.tensor([-9.0, -1.0 + 0.5, -1.0 - 0.5])
    rows[1].old_logprobs = torch.tensor([-9.0, -2.0])
    rc = RolloutCorrectionConfig(rollout_is="token", rollout_is_threshold=1.5, rollout_rs="token_k1",
                                 rollout_rs_threshold=1.5)
    metrics = apply_rollout_correction(rows, rc)
    assert torch.allclose(rows[0].is_weights, torch.tensor([0.0, 1.5, torch.exp(torch.tensor(-0.5))]))
    assert torch.equal(rows[0].train_mask, torch.tensor([0.0, 0.0, 0.0]))  # |log r| = 0.5 > ln 1.5
    assert torch.equal(rows[1].train_mask, torch.tensor([0.0, 1.0]))
    assert rows[0].num_trained == 0 and rows[1].num_trained == 1
    assert abs(metrics["rollout_corr/rollout_rs_masked_fraction"] - 2 / 3) < 1e-6


def test_correction_is_a_no_op_when_engine_and_trainer_agree(tmp_path):
    """HF engine in float32 (mismatch ~1e-7): the corrected run trains the same weights as the plain one."""
    states, logs = [], []
    for name, over in (("plain", {}), ("rc", {"algorithm__rollout_correction": {
            "rollout_is": "token", "rollout_rs": "token_k1,seq_mean_k1", "rollout_rs_threshold": "2.0,1.1",
            "episode_rejection": "any"}})):
        cfg = config(tmp_path / name, trainer__total_steps=1, **over)
        trainer = Trainer(cfg)
        trainer.run()
        states.append({k: v.clone() for k, v in trainer.policy.state_dict().items()})
        logs.append(_metrics(tmp_path / name / "run")[0])
    for k in states[0]:
        assert torch.allclose(states[0][k], states[1][k], atol=1e-6), k
    rc = logs[1]
    assert rc["rollout_corr/rollout_rs_masked_fraction"] == 0
    assert abs(rc["rollout_corr/kl"]) < 1e-5 and rc["rollout_corr/rollout_is_mean"] > 0.999
    assert "rollout_corr/kl" in logs[0]  # the diagnostics are logged without any correction too


def test_disagreeing_engine_is_rejected_and_reported(tmp_path):
    """A scripted engine claims log-prob -0.5 for every token: far from the tiny model's, so k1 rejects it all."""
    cfg = config(tmp_path, trainer__total_steps=1,
                 algorithm__rollout_correction={"rollout_rs": "token_k1", "rollout_rs_threshold": 2.0})
    trainer = Trainer(cfg, engine=coin_engine(load_tokenizer("tiny")))
    trainer.run()
    line = _metrics(tmp_path / "run")[0]
    assert line["rollout_corr/rollout_rs_masked_fraction"] == 1.0
    assert line["rollout_corr/kl"] > 1.0  # engine (-0.5) far more confident than the trainer


def test_bypass_mode_trains_without_a_recompute_pass(tmp_path):
    cfg = config(tmp_path, trainer__total_steps=1,
                 algorithm__rollout_correction={"bypass_mode": True, "loss_type": "reinforce", "rollout_is": "token"})
    trainer = Trainer(cfg, engine=coin_engine(load_tokenizer("tiny")))  # rewards vary; engine log-probs -0.5
    before = {k: v.clone() for k, v in trainer.policy.state_dict().items()}
    trainer.run()
    line = _metrics(tmp_path / "run")[0]
    assert 0 < line["is_weight_mean"] < 0.1 and line["rs_masked_frac"] == 0  # pi/pi_engine ~ e^-5
    assert any(not torch.equal(before[k], v) for k, v in trainer.policy.state_dict().items())


def test_mismatch_warning_names_the_likely_cause():
    assert mismatch_warning(1e-7, "float32", temperature=0.6, engine="vllm") is None
    line = mismatch_warning(0.17, "float32", temperature=0.6, engine="vllm")
    assert line is not None and "temperature" in line and "0.17" in line and "\n" not in line
    assert mismatch_warning(0.01, "bfloat16", temperature=1.0, engine="hf") is None
    assert "chat template" in (mismatch_warning(0.3, "bfloat16", temperature=1.0, engine="hf") or "")


def test_first_step_warns_when_the_engine_disagrees(tmp_path, capsys):
    cfg = config(tmp_path, trainer__total_steps=1)
    Trainer(cfg, engine=coin_engine(load_tokenizer("tiny"))).run()  # engine claims -0.5 per token
    err = capsys.readouterr()
    assert "engine and trainer disagree at step 1" in err.out + err.err
