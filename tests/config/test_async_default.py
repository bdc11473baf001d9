"""Asynchronous runs clip against the behaviour policy by default (verl's bypass ppo_clip); a config's own choice wins."""

from __future__ import annotations

import pytest

from memrl.config import load_config


@pytest.mark.parametrize("overrides, bypass, off_policy", [
    (["trainer.mode=async"], True, "none"),  # eta = 1 by default: every sample one version stale
    (["trainer.mode=async", "trainer.async.max_staleness=2"], True, "none"),
    (["trainer.mode=async", "trainer.async.max_staleness=0"], False, "none"),  # eta = 0 is the synchronous trainer
    (["trainer.mode=async", "algorithm.off_policy=none"], False, "none"),  # asked for: kept
    (["trainer.mode=async", "algorithm.off_policy=decoupled"], False, "decoupled"),  # AReaL's, asked for
    (["trainer.mode=async", "algorithm.rollout_correction.rollout_is=token"], False, "none"),  # another correction
    (["trainer.mode=async", "algorithm.rollout_correction.bypass_mode=false"], False, "none"),  # explicitly off
    ([], False, "none"),
])
def test_async_default_correction(overrides: list[str], bypass: bool, off_policy: str) -> None:
    algorithm = load_config(None, overrides).algorithm
    assert algorithm.rollout_correction.bypass_mode is bypass
    assert algorithm.rollout_correction.loss_type == "ppo_clip"
    assert algorithm.off_policy == off_policy


def test_the_resolved_choice_is_what_the_run_records() -> None:
    """config.yaml holds the bypass choice, so a resumed run keeps it (and an old run's own settings stay)."""
    from memrl.config import MemRLConfig

    dumped = load_config(None, ["trainer.mode=async"]).model_dump(mode="json", by_alias=True)
    assert dumped["algorithm"]["rollout_correction"]["bypass_mode"] is True
    dumped["algorithm"]["rollout_correction"]["bypass_mode"] = False
    assert MemRLConfig.model_validate(dumped).algorithm.rollout_correction.bypass_mode is False
