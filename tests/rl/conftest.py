"""Fixtures shared by the tests that compare memrl's policy losses with verl's own."""

from __future__ import annotations

import os
import types

import pytest


@pytest.fixture(scope="module")
def verl_losses(request: pytest.FixtureRequest) -> types.SimpleNamespace:
    """verl's agg_loss and compute_policy_loss_<name> for each of the test module's NAMES, run from its source."""
    from tests.rl.verl_policy_losses import load_verl_losses

    return load_verl_losses(str(os.environ["MEMRL_VERL_REPO"]), request.module.NAMES)
