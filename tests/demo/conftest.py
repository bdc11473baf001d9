"""The short needle-demo run (seed 3, ``SMALL``) that several tests build on, run once per session.

Each test that continues it (another estimator, the async stage) copies the folder into its own
``tmp_path`` first, so it starts from exactly what ``run_demo`` left there and never touches the original.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def small_demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """(folder, summary) of ``run_demo(folder, rl_steps=2, seed=3, scale=SMALL)``; read it, do not write to it."""
    from memrl_demo.run import run_demo
    from tests.demo.test_determinism import SMALL

    out = tmp_path_factory.mktemp("demo_small") / "run"
    return out, run_demo(out, rl_steps=2, seed=3, scale=SMALL)


def copy_of(small_demo: tuple[Path, dict], dest: Path) -> dict:
    """Copy the shared run's folder to ``dest``; returns its summary (what ``run_demo`` returned there)."""
    shutil.copytree(small_demo[0], dest, dirs_exist_ok=True)
    return dict(small_demo[1])
