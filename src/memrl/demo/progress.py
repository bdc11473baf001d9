"""Progress for a long demo stage, on a terminal and off it.

A rich progress bar is invisible when output goes to a file or a CI log (``make demo > log``
printed nothing for minutes), so off a terminal the same stage prints a plain line every tenth
of the way instead.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn


@contextlib.contextmanager
def step_progress(console: Console, label: str, total: int) -> Iterator[Callable[[int, float], None]]:
    """Yields ``tick(step, loss)`` for ``sft(on_step=...)``-style callbacks."""
    if console.is_terminal:
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TextColumn("loss {task.fields[loss]}"), TimeRemainingColumn())
        with Progress(*columns, console=console, transient=True) as bar:
            task = bar.add_task(label, total=total, loss="-")
            yield lambda step, loss: bar.update(task, completed=step, loss=f"{loss:.3f}")
        return
    console.print(f"{label}: {total} steps")
    every = max(1, total // 10)

    def tick(step: int, loss: float) -> None:
        if step % every == 0 or step == total:
            console.print(f"  step {step}/{total}  loss {loss:.3f}")

    yield tick
