"""Metrics: one console line per step, a JSONL file, optional TensorBoard and wandb."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from memrl.io.atomic import atomic_write
from memrl.io.console import log_console
from memrl.io.metrics import numeric_keys, read_metrics, read_rows

CONSOLE_KEYS = [("reward", "reward", "{:.3f}"), ("acc", "eval/accuracy", "{:.1f}"), ("conv", "num_conversations", "{:.1f}"),
                ("turns", "turns", "{:.1f}"), ("tool-valid", "tool_call_validity", "{:.2f}"),
                ("resp", "response_tokens", "{:.0f}"), ("kl", "kl", "{:.4f}"), ("ent", "entropy", "{:.3f}"),
                ("clip", "clipfrac", "{:.3f}"), ("gnorm", "grad_norm", "{:.2f}"), ("tok/s", "tokens_per_s", "{:.0f}"),
                ("roll", "time/rollout", "{:.1f}s"), ("lp", "time/logprob", "{:.1f}s"), ("upd", "time/update", "{:.1f}s"),
                ("sync", "time/sync", "{:.2f}s")]


def print_warning(console: Console, text: str, label: str = "warning:") -> None:
    """``label`` in yellow, then ``text`` exactly as it is: an episode's error, a command's stderr or a sample
    may hold ``[/INST]``, which rich would read as a closing tag and fail on (MarkupError)."""
    from rich.text import Text

    console.print(Text.assemble((label, "yellow"), " " if label and text else "", text), highlight=False)


HEARTBEAT_S = 60.0  # in a log, a step that runs longer says what it is doing this often


class Tracker:
    def __init__(self, run_dir: Path, resume_step: int, tensorboard: bool = False, wandb_project: str | None = None,
                 config: dict[str, Any] | None = None, console: Console | None = None,
                 total_steps: int | None = None, heartbeat_s: float = HEARTBEAT_S) -> None:
        self.path = run_dir / "metrics.jsonl"
        self.console = console or log_console()
        self.total_steps = total_steps
        self.heartbeat_s = heartbeat_s
        self._since = self._beat = time.monotonic()  # the last step line, the last heartbeat line
        self._progress: Progress | None = None
        if total_steps and self.console.is_terminal:  # a live bar only where someone watches; logs get lines
            self._progress = Progress(TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(),
                                      TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
                                      TextColumn("{task.fields[latest]}"), TextColumn("[dim]{task.fields[phase]}"),
                                      console=self.console, transient=True)
            self._bar = self._progress.add_task("train", total=total_steps, completed=resume_step, latest="",
                                                phase="")
            self._progress.start()
        self._truncate_after(resume_step)
        self._tb = self._wandb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                raise ImportError("trainer.tensorboard=true needs tensorboard: pip install 'memrl[tracking]'") from None
            # events of steps the resumed run logs again are dropped (as metrics.jsonl's rows: _truncate_after)
            self._tb = SummaryWriter(str(run_dir / "tensorboard"), purge_step=resume_step + 1 if resume_step else 0)
        if wandb_project:
            try:
                import wandb
            except ImportError:
                raise ImportError("trainer.wandb_project needs wandb: pip install 'memrl[tracking]'") from None
            self._wandb = wandb.init(project=wandb_project, dir=str(run_dir), config=config, resume="allow",
                                     id=run_dir.name)

    def _truncate_after(self, step: int) -> None:
        """Drop rows the resumed run will log again.

        Resuming from checkpoint ``step`` keeps rows up to and including it
        (a step is logged before it is saved). Starting from scratch (step 0)
        keeps nothing: a run killed before its first checkpoint had logged the
        step-0 eval, which is about to be logged anew.
        """
        rows = read_rows(self.path, warn=lambda msg: print_warning(self.console, msg)) if self.path.is_file() else []
        keep = [r for r in rows if step > 0 and r["step"] <= step]
        dropped = sorted({int(r["step"]) for r in rows if r["step"] > 0}) if step == 0 else []
        if dropped:  # a folder whose run had logged steps but saved no checkpoint (or lost them)
            print_warning(self.console, f"{self.path.parent} has no checkpoint to resume from: the run starts over and "
                          f"the {len(dropped)} step(s) it had logged (up to step {dropped[-1]}) are dropped")
        missing = sorted(set(range(1, step + 1)) - {int(r["step"]) for r in keep})
        if missing:  # the run resumes all the same: its curves just lack these steps
            shown = ", ".join(map(str, missing[:5])) + (", ..." if len(missing) > 5 else "")
            print_warning(self.console, f"{self.path} has no row for step(s) {shown} of the {step} the checkpoint "
                          "holds (deleted or cut short?): the curves will lack them")
        if not self.path.is_file():
            return
        with atomic_write(self.path) as fh:
            fh.write("".join(json.dumps(r) + "\n" for r in keep))

    def phase(self, text: str) -> None:
        """What the step under way is doing (rollout, log-probs, update), so a slow step is not silent: on a
        terminal in the live bar; in a log, one line at most every ``heartbeat_s`` once a step runs that long."""
        if self._progress is not None:
            self._progress.update(self._bar, phase=text)
            return
        now = time.monotonic()
        if now - self._since >= self.heartbeat_s and now - self._beat >= self.heartbeat_s:
            self._beat = now
            self.console.print(f"  ... {text} ({_clock(now - self._since)} since the last step line)",
                               highlight=False, markup=False)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self._since = self._beat = time.monotonic()
        rec = {"step": step, **{k: float(v) for k, v in metrics.items()}}
        with open(self.path, "a") as fh:
            fh.write(json.dumps(rec) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        idle = int(metrics.get("idle_steps", 0))
        counted = step - idle  # steps that trained nothing do not count toward total_steps
        of = f"/{self.total_steps}" if self.total_steps else ""
        parts = [f"[bold]step {step}{of}[/bold]" if not idle else
                 f"[bold]step {step}[/bold] ({counted}{of} trained, {idle} idle)"]
        for label, key, fmt in CONSOLE_KEYS:
            if key in metrics:
                parts.append(f"{label} {fmt.format(metrics[key])}")
        self.console.print("  ".join(parts), highlight=False)
        if self._progress is not None:
            latest = "  ".join(p for p in parts[1:3])
            self._progress.update(self._bar, completed=counted, latest=latest, phase="")
        if self._tb is not None:
            for k, v in metrics.items():
                self._tb.add_scalar(k, v, step)
            self._tb.flush()
        if self._wandb is not None:
            self._wandb.log(metrics, step=step)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def plot_run(run_dir: Path, out: Path | None = None, keys: tuple[str, ...] | None = None) -> Path:
    """PNG with one panel per metric over training steps: ``keys`` that the run has (default: the usual
    curves), as the demos draw theirs."""
    from memrl.train.plots import plot_runs

    present = None
    if keys is not None:
        have = set(numeric_keys(read_metrics(run_dir)))
        present = [k for k in keys if k in have]
        if not present:
            raise ValueError(f"{run_dir}/metrics.jsonl has none of {keys}")
    return plot_runs([run_dir], out or run_dir / "curves.png", present)[0]
