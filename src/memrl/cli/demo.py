"""``memrl demo``: the job ``make demo`` runs (see memrl_demo.run)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer

from memrl.cli.errors import user_errors
from memrl.data.outdir import check_writable_dir, clear_outputs
from memrl.models.resolve import quiet_hub_progress


@user_errors
def demo(
    task: str = typer.Option("needle", "--task", help="needle: MemAgent on a long-context needle task; tools: a "
                             "tool agent on the built-in library help desk (tau2-bench rules)."),
    out: Path = typer.Option(None, "--out", help="Output folder; an interrupted demo resumes "
                             "(default runs/demo, or runs/demo_tools for --task tools)."),
    steps: int = typer.Option(None, "--steps", min=1, help="GRPO steps (default: 40 for needle, then 10 more at a "
                             "time, at most 20, while the training reward of the last 5 steps is under 0.9; 60 for "
                             "tools). A number given here is trained exactly."),
    reward: str = typer.Option("tau2", "--reward", help="--task tools: train on tau2 (tau2-bench's reward) or "
                               "progress (fraction of checks passed; not a tau2-bench number). Held-out success "
                               "is always tau2-bench's."),
    seed: int = typer.Option(0, "--seed", min=0, max=2**32 - 1, help="Seeds data, model init, warm start and RL; the same seed "
                             "prints the same numbers on every run on a given machine."),
    asynchronous: bool = typer.Option(False, "--async", help="--task needle: run the GRPO stage with "
                                      "trainer.mode=async (rollouts continue during updates) into OUT/rl_async; "
                                      "its numbers can vary a little between runs (timing decides which "
                                      "episodes finish first)."),
    max_staleness: int = typer.Option(None, "--max-staleness", min=0, help="With --async: "
                                      "trainer.async.max_staleness (default 1)."),
    estimator: str = typer.Option(None, "--estimator", help="algorithm.adv_estimator of the RL stage (default "
                                  "grpo): a registered name (memrl config schema lists them, e.g. gigpo: "
                                  "turn-level credit by anchor state) or an import path. Another than the "
                                  "default trains in OUT/rl_<estimator> and writes summary_<estimator>.json, "
                                  "after the same warm start."),
    record: str = typer.Option(None, "--record", help="--task tools: workflow.options.record of the RL stage: "
                               "episode (default: one conversation per episode) or turns (each model call its own "
                               "conversation with its anchor state, so gigpo credits turns); turns trains in "
                               "OUT/rl[_<estimator>]_turns and writes summary[_<estimator>]_turns.json."),
    fresh: bool = typer.Option(False, "--fresh", help="Delete the demo's earlier outputs in --out first (only what "
                               "the demo wrote; refuses if the folder holds anything else)."),
) -> None:
    """Tiny model, SFT warm start, then GRPO on a CPU, no download.

    --task needle (default): MemAgent on a long-context needle task; prints held-out accuracy (documents
    ~3x longer than any training document) before and after RL. --task tools: a tool agent on library
    help-desk tickets; prints held-out test-ticket success (tau2-bench reward), tool-call validity and
    turns per episode before and after RL. Both write the reward curve to OUT/rl/curves.png.
    """
    checked_flags(task, reward, asynchronous, record, max_staleness)
    given: dict[str, Any] = {} if steps is None else {"rl_steps": steps}  # else each demo's own default
    if estimator is not None:
        given["estimator"] = checked_estimator(estimator)
    out = out or Path("runs/demo" if task == "needle" else "runs/demo_tools")
    check_writable_dir(out)
    quiet_hub_progress()  # the warm start's save and load printed transformers' bars between the demo's lines
    with stopped_cleanly():
        if task == "tools":
            from memrl_demo.tools_run import run_tools_demo

            if fresh:
                clear_outputs(out, "--fresh", by="memrl demo")
            run_tools_demo(out, seed=seed, reward=reward, record=record or "episode", **given)
            return
        from memrl_demo.run import LEGACY_DEMO, run_demo

        if fresh:
            clear_outputs(out, "--fresh", legacy=LEGACY_DEMO, by="memrl demo")
        run_demo(out, seed=seed, asynchronous=asynchronous, max_staleness=1 if max_staleness is None else max_staleness,
                 **given)


def checked_flags(task: str, reward: str, asynchronous: bool, record: str | None,
                  max_staleness: int | None = None) -> None:
    """A usage error, before anything runs, for a value a flag does not take or a flag the task does not have."""
    if max_staleness is not None and not asynchronous:
        raise ValueError("--max-staleness applies with --async only")
    if task not in ("needle", "tools"):
        raise ValueError(f"--task must be needle or tools, not {task!r}")
    if reward not in ("tau2", "progress"):
        raise ValueError(f"--reward must be tau2 or progress, not {reward!r}")
    if asynchronous and task != "needle":
        raise ValueError("--async applies to --task needle only")
    if task == "needle" and reward != "tau2":
        raise ValueError("--reward applies to --task tools only")
    if record is not None and task != "tools":
        raise ValueError("--record applies to --task tools only")
    if record not in (None, "episode", "turns"):
        raise ValueError(f"--record must be episode or turns, not {record!r}")


def checked_estimator(name: str) -> str:
    """``name`` if the advantage-estimator registry knows it (or it is a loadable import path), else a usage error."""
    from memrl.config.registry import ADV_ESTIMATORS

    try:
        return ADV_ESTIMATORS.validate(name)
    except ValueError as exc:
        raise ValueError(f"--estimator: {exc}") from None


@contextlib.contextmanager
def stopped_cleanly() -> Iterator[None]:
    """Ctrl-C / SIGTERM end the demo with one line and exit code 128 + signal, as ``memrl train`` does.

    Inside the GRPO stage the trainer finishes its step and checkpoints; elsewhere every stage's
    output is written atomically, so stopping at once loses nothing finished; a re-run resumes.
    """
    from memrl.train.signals import RaiseOnSignal, StageInterrupted, TrainingInterrupted

    try:
        with RaiseOnSignal():
            yield
    except (TrainingInterrupted, StageInterrupted) as stop:
        print(str(stop), file=sys.stderr)
        raise typer.Exit(stop.exit_code) from None
