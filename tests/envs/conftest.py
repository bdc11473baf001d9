"""Fixtures shared by the environment tests."""

from __future__ import annotations

import pytest

from memrl.envs.domain import load_domain


@pytest.fixture(scope="module")
def telecom(tau2_dir):
    """τ²-bench's telecom domain from ../shared/tau2 (loaded once per test module; skipped without it)."""
    if not (tau2_dir / "telecom" / "tasks.json").is_file():
        pytest.skip(f"no telecom data in {tau2_dir}")
    return load_domain("telecom", tau2_dir)
