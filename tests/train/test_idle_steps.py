"""Steps that train nothing (every episode failed) do not count toward ``trainer.total_steps``, as in verl's
DAPO loop and AReaL, where only batches that update the policy are steps; a resumed run knows it too."""

from __future__ import annotations

import torch

from memrl.train import checkpoint
from memrl.train.state import RunState


def test_finished_counts_only_steps_that_trained(tmp_path, tiny_model):
    model, _ = tiny_model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    state = RunState(step=3, data_position=6, idle_steps=1)
    checkpoint.save(tmp_path, 3, model, opt, sched, state.to_json())
    assert checkpoint.finished(tmp_path, 3) is None  # step 3 with one idle step: two trained, one to go
    assert checkpoint.finished(tmp_path, 2) == 3


def test_idle_steps_survive_a_checkpoint():
    state = RunState(step=7, data_position=3, idle_steps=2)
    back = RunState.from_json({"step": 7, **state.to_json()})
    assert back.idle_steps == 2
    assert "idle_steps" not in RunState(step=1).to_json()  # runs without idle steps write what they did before
