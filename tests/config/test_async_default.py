"""Asynchronous runs correct their stale samples by default (AReaL's decoupled objective); a config's own choice wins."""

from __future__ import annotations

import pytest

from memrl.config import load_config


@pytest.mark.parametrize("overrides, expected", [
    (["trainer.mode=async"], "decoupled"),  # eta = 1 by default: every sample one version stale
    (["trainer.mode=async", "trainer.async.max_staleness=2"], "decoupled"),
    (["trainer.mode=async", "trainer.async.max_staleness=0"], "none"),  # eta = 0 is the synchronous trainer
    (["trainer.mode=async", "algorithm.off_policy=none"], "none"),  # asked for: kept
    (["trainer.mode=async", "algorithm.off_policy=tis"], "tis"),
    (["trainer.mode=async", "algorithm.rollout_correction.rollout_is=token"], "none"),  # corrected another way
    ([], "none"),
])
def test_async_default_correction(overrides: list[str], expected: str) -> None:
    assert load_config(None, overrides).algorithm.off_policy == expected


def test_the_resolved_choice_is_what_the_run_records() -> None:
    """config.yaml holds the decoupled choice, so a resumed run keeps it (and an old run's explicit none stays)."""
    dumped = load_config(None, ["trainer.mode=async"]).model_dump(mode="json", by_alias=True)
    assert dumped["algorithm"]["off_policy"] == "decoupled"
    from memrl.config import MemRLConfig

    dumped["algorithm"]["off_policy"] = "none"
    assert MemRLConfig.model_validate(dumped).algorithm.off_policy == "none"
