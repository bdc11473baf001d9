"""``algorithm.policy_loss`` in a real training step: the trainer calls the chosen loss with its inputs."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from memrl import Trainer
from memrl.io.metrics import read_metrics
from memrl.rl.policy_losses import gspo_loss
from tests.train.test_turn_credit_train import WORDS, Steps

CALLS: list[dict] = []


def spy(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor, response_mask: torch.Tensor,
        **kw: object):
    """A policy loss given by import path: records what the trainer hands it, then computes GSPO."""
    CALLS.append({"grad": log_prob.requires_grad, "weights": kw.get("weights"), "agg": kw.get("loss_agg_mode"),
                  "shape": tuple(log_prob.shape)})
    return gspo_loss(old_log_prob, log_prob, advantages, response_mask, **kw)  # type: ignore[arg-type]


def _config(tmp_path: Path, **algorithm: object) -> dict:
    return {"model": {"path": "tiny"}, "engine": {"device": "cpu"},
            "algorithm": {"n": 4, "adv_estimator": "grpo", **algorithm},
            "trainer": {"total_steps": 2, "prompts_per_step": 2, "lr": 1e-3, "output_dir": str(tmp_path / "run")}}


@pytest.mark.parametrize("loss", ["gspo", "cispo", "sapo", "geo_mean", "gpg"])
def test_a_run_trains_with_the_chosen_loss(tmp_path: Path, loss: str) -> None:
    trainer = Trainer(_config(tmp_path, policy_loss=loss), workflow=Steps(), train=WORDS)
    before = [p.detach().clone() for p in trainer.policy.parameters() if p.requires_grad][:3]
    trainer.run()
    assert trainer.step == 2
    rows = read_metrics(tmp_path / "run")
    after = [p.detach() for p in trainer.policy.parameters() if p.requires_grad][:3]
    assert any(not torch.equal(a, b) for a, b in zip(before, after))
    assert len(rows) == 2 and all(math.isfinite(r["pg_loss"]) for r in rows)


def test_the_trainer_hands_the_loss_its_aggregation_and_the_correction_weights(tmp_path: Path) -> None:
    CALLS.clear()
    cfg = _config(tmp_path, policy_loss="tests.train.test_policy_loss_train:spy",
                  loss_agg_mode="seq-mean-token-mean",
                  rollout_correction={"rollout_is": "token", "rollout_is_threshold": 2.0})
    Trainer(cfg, workflow=Steps(), train=WORDS).run()
    assert CALLS and all(c["grad"] and c["agg"] == "seq-mean-token-mean" for c in CALLS)
    assert all(c["weights"] is not None and c["weights"].shape == c["shape"] for c in CALLS)
    CALLS.clear()
    Trainer(_config(tmp_path / "plain", policy_loss="tests.train.test_policy_loss_train:spy"), workflow=Steps(),
            train=WORDS).run()
    assert CALLS and all(c["weights"] is None and c["agg"] == "token-mean" for c in CALLS)
