"""``memrl demo``: the job ``make demo`` runs (see memrl.demo.run)."""

from __future__ import annotations

from pathlib import Path

import typer

from memrl.cli.errors import user_errors


@user_errors
def demo(
    out: Path = typer.Option(Path("runs/demo"), "--out", help="Output folder; an interrupted demo resumes."),
    steps: int = typer.Option(30, "--steps", help="GRPO steps."),
    seed: int = typer.Option(0, "--seed"),
    fresh: bool = typer.Option(False, "--fresh", help="Delete --out first."),
) -> None:
    """Tiny model, SFT warm start, then MemAgent GRPO on a long-context needle task; CPU, no download.

    Prints held-out accuracy (documents ~3x longer than any training document) before and after RL
    and writes the reward curve to OUT/rl/curves.png.
    """
    import shutil

    from memrl.demo.run import run_demo

    if fresh and out.exists():
        shutil.rmtree(out)
    run_demo(out, rl_steps=steps, seed=seed)
