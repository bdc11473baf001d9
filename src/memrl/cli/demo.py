"""``memrl demo``: the job ``make demo`` runs (see memrl.demo.run)."""

from __future__ import annotations

from pathlib import Path

import typer

from memrl.cli.errors import user_errors


@user_errors
def demo(
    out: Path = typer.Option(Path("runs/demo"), "--out", help="Output folder; an interrupted demo resumes."),
    steps: int = typer.Option(30, "--steps", min=1, help="GRPO steps."),
    seed: int = typer.Option(0, "--seed", min=0, help="Seeds data, model init, warm start and RL; the same seed "
                             "prints the same numbers on every run on a given machine."),
    fresh: bool = typer.Option(False, "--fresh", help="Delete the demo's earlier outputs in --out first (only what "
                               "the demo wrote; refuses if the folder holds anything else)."),
) -> None:
    """Tiny model, SFT warm start, then MemAgent GRPO on a long-context needle task; CPU, no download.

    Prints held-out accuracy (documents ~3x longer than any training document) before and after RL
    and writes the reward curve to OUT/rl/curves.png.
    """
    from memrl.data.outdir import check_writable_dir, clear_outputs
    from memrl.demo.run import LEGACY_DEMO, run_demo

    check_writable_dir(out)
    if fresh:
        clear_outputs(out, "--fresh", legacy=LEGACY_DEMO)
    run_demo(out, rl_steps=steps, seed=seed)
