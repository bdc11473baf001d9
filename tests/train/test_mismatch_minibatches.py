"""``logprob_mismatch`` compares the engine with the trainer under the *same* weights, however the update splits.

With several mini-batches (verl's default batch 1024 / mini-batch 256 makes four) or PPO epochs, the update's own
forward passes after the first optimizer step run on moved weights; measured there, the mismatch grew with the
learning rate and the trainer warned that engine and trainer disagree, which they did not.
"""

from __future__ import annotations

import json

import pytest

from tests.train.helpers import config


@pytest.mark.parametrize("split", [{"trainer__mini_batches": 2}, {"algorithm__ppo_epochs": 3}])
def test_the_mismatch_is_measured_before_the_weights_move(tmp_path, capsys, split):
    from memrl.train.trainer import Trainer

    cfg = config(tmp_path, trainer__lr=5e-2, trainer__total_steps=1, algorithm__entropy_coef=0.05, **split)
    Trainer(cfg).run()
    row = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines() if '"step": 1' in x][0]
    assert row["logprob_mismatch"] < 1e-4  # the embedded engine and the trainer agree to float32 rounding
    assert abs(row["ppo_kl"]) > 1e-3  # while the weights did move within the step (the old measure saw this)
    assert "disagree" not in capsys.readouterr().err
