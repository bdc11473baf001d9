"""What a demo folder has cost: wall and CPU seconds per stage, summed over every invocation.

A demo resumes stage by stage, so one invocation's clock is not the demo's cost: a run interrupted
after its warm start and resumed for the RL stage would report only the resume, and re-running a
finished demo would report the seconds of a re-evaluation. ``times.json`` keeps each stage's
seconds across invocations (written when a stage ends, also on Ctrl-C or an error), and the summary
reports the sum of the stages it depended on.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from memrl.io.atomic import atomic_write

TIMES = "times.json"


class StageClock:
    """Seconds spent per stage in ``out`` (``{stage: {"seconds": wall, "cpu_seconds": cpu, "runs": n}}``)."""

    def __init__(self, out: Path) -> None:
        self.path = out / TIMES
        self.stages: dict[str, dict[str, float]] = _read(self.path)
        self._earlier = {k: dict(v) for k, v in self.stages.items()}

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Charge the time spent in the block to ``name``, however the block ends."""
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            row = self.stages.setdefault(name, {"seconds": 0.0, "cpu_seconds": 0.0, "runs": 0})
            row["seconds"] = round(row["seconds"] + time.perf_counter() - wall, 1)
            row["cpu_seconds"] = round(row["cpu_seconds"] + time.process_time() - cpu, 1)
            row["runs"] = int(row["runs"]) + 1
            with atomic_write(self.path) as fh:
                json.dump(self.stages, fh, indent=2)

    def total(self, *names: str) -> tuple[float, float]:
        """(wall, CPU) seconds of these stages over all invocations."""
        rows = [self.stages.get(n, {}) for n in names]
        return (round(sum(r.get("seconds", 0.0) for r in rows), 1),
                round(sum(r.get("cpu_seconds", 0.0) for r in rows), 1))

    def resumed(self, *names: str) -> bool:
        """Whether an earlier invocation spent time in one of these stages (the headline says it sums runs)."""
        return any(n in self._earlier for n in names)


def _read(path: Path) -> dict[str, dict[str, float]]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError:
        return {}  # a damaged ledger costs the earlier seconds, never the demo
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items()
            if isinstance(v, dict) and all(isinstance(v.get(f), (int, float)) for f in ("seconds", "cpu_seconds", "runs"))}


def timing_note(clock: StageClock, *names: str) -> str:
    """``in N s wall, M s CPU`` (with ``over all runs of this folder`` when it was resumed)."""
    wall, cpu = clock.total(*names)
    return f"in {wall:.0f} s wall, {cpu:.0f} s CPU" + (" (all runs in this folder)" if clock.resumed(*names) else "")


def finished(summary_path: Path, run_dir: Path, **expected: object) -> dict | None:
    """The stored summary when this request already finished here (same values for ``expected``'s keys and
    its run folder still there), else None: re-running a finished demo prints it instead of re-evaluating."""
    if not (summary_path.is_file() and run_dir.is_dir()):
        return None
    try:
        summary = json.loads(summary_path.read_text(encoding="utf-8"))
    except ValueError:
        return None
    if not isinstance(summary, dict) or any(summary.get(k) != v for k, v in expected.items()):
        return None
    return summary


def show_finished(out: Path, summary_name: str, rl_name: str, console: Any,
                  headline: Callable[[Any, dict, Path], None], **expected: object) -> dict | None:
    """Print a finished demo's stored result and return it, or None when this request has not finished here."""
    done = finished(out / summary_name, out / rl_name, **expected)
    if done is not None:
        console.print(f"this demo already finished in {out} ({summary_name}); --fresh runs it again")
        headline(console, done, out / rl_name / "curves.png")
    return done
