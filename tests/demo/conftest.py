"""The short needle-demo run (seed 3, ``SMALL``) and the short tools-demo run (seed 0, its ``SMALL``) that several
tests build on, each run once per session.

Each test that continues the needle run (another estimator, the async stage) copies the folder into its own
``tmp_path`` first, so it starts from exactly what ``run_demo`` left there and never touches the original. The
tools run is checked, and resumed, in place by ``test_tools_demo_small[tau2]``; the other tools tests (another
reward, turn recording) copy its warm start, taken right after the run, into their own ``tmp_path``.
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


# The tools demo's stages before RL (memrl_demo.tools_run: each is reused when its output exists).
TOOLS_WARM_START = ("data", "model_init", "sft_model")


@pytest.fixture(scope="session")
def small_tools_demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, Path]:
    """(folder, summary, warm start) of ``run_tools_demo(folder, rl_steps=2, seed=0, reward="tau2", scale=SMALL)``
    (tests/demo/test_tools_demo.py's ``SMALL``), built from scratch once per session.

    ``folder`` belongs to ``test_tools_demo_small[tau2]``, which checks this fresh run and then calls the demo
    again there (its resume check: the RL folder's config names its paths, so a copy elsewhere cannot resume it).
    ``warm start`` is a copy of its stages before RL (``TOOLS_WARM_START``), taken right after the run, that
    the other tools tests copy with :func:`tools_warm_start_of`; do not write to it."""
    from memrl_demo.tools_run import run_tools_demo
    from tests.demo.test_tools_demo import SMALL

    base = tmp_path_factory.mktemp("tools_demo_small")
    out, warm = base / "demo", base / "warm_start"
    summary = run_tools_demo(out, rl_steps=2, seed=0, reward="tau2", scale=SMALL)
    for name in TOOLS_WARM_START:
        shutil.copytree(out / name, warm / name)
    return out, summary, warm


def tools_warm_start_of(small_tools_demo: tuple[Path, dict, Path], dest: Path) -> None:
    """Copy the shared tools run's warm start (data, tiny model, SFT model: they depend on the seed, 0, and the
    scale, ``SMALL``, not on the reward, estimator, record or RL steps) to ``dest``, so that
    ``run_tools_demo(dest, seed=0, scale=SMALL, ...)`` reuses it and runs from the held-out evaluation before RL
    on. Nothing of the shared run's RL stage or summary comes along."""
    from memrl.data.outdir import record_outputs

    shutil.copytree(small_tools_demo[2], dest, dirs_exist_ok=True)
    record_outputs(dest, TOOLS_WARM_START, by="memrl demo", written=True)  # as the demo recorded them there
