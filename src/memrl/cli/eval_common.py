"""What every ``memrl eval`` suite shares: the output folder, the progress bar, and how a run ends.

QA files, RULER and tool-agent tasks differ in what an episode is; they do not differ in how
results are kept (resumable, ``--restart`` deletes only memrl's files), in the progress shown,
or in what Ctrl-C, a dead engine or an all-failed run print and exit with.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import Awaitable, Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from memrl import interrupts
from memrl.cli.progress import progress
from memrl.cli.signal_wakeup import signals_wake_loop

Started = Callable[[int, int], None]
Advance = Callable[[], None]


def prepare_out(out: Path, restart: bool, outputs: Iterable[str], cfg: Any = None,
                data: dict[str, str] | None = None, written: Iterable[str] = ()) -> None:
    """A writable ``out``, cleared of memrl's own files with ``--restart``, bound to ``cfg``'s settings and to
    the ``data`` its results come from (``memrl.eval.files.data_record``); ``written``: outputs this eval
    already wrote (an online gateway's online.json), kept by ``--restart``."""
    from memrl.data.outdir import check_writable_dir, clear_outputs, record_outputs
    from memrl.eval.runner import check_resume

    check_writable_dir(out)
    if restart:
        clear_outputs(out, "--restart", by="memrl eval", keep=tuple(written))
    record_outputs(out, outputs, by="memrl eval", written=tuple(written))
    if cfg is not None:
        check_resume(out, cfg, data)


@contextlib.contextmanager
def out_lock(out: Path, console: Console) -> Iterator[Any]:
    """Hold ``--out`` for this eval: a second ``memrl eval`` on the same folder refuses in one line. A folder
    this call created is removed again if the eval stopped before writing anything into it."""
    from memrl.data.outdir import check_writable_dir
    from memrl.data.runlock import hold_folder

    new = not out.exists()
    check_writable_dir(out)
    if (out / "checkpoints").is_dir() or (out / "metrics.jsonl").is_file():  # results would hide its rollouts
        raise ValueError(f"--out {out} is a training run (it holds checkpoints or metrics.jsonl); memrl eval writes "
                         "its results into a folder of their own: give another --out")
    try:
        with hold_folder(out, "memrl eval", "--out",
                         lambda msg: console.print(f"notice: {msg}", highlight=False, markup=False)) as held:
            yield held
    finally:
        if new and out.is_dir() and not any(out.iterdir()):
            out.rmdir()


@contextlib.contextmanager
def sigterm_cancels(loop: asyncio.AbstractEventLoop) -> Iterator[None]:
    """While active, SIGTERM cancels the running main task as Ctrl-C does: episodes end through their own
    cleanup (an agent command's process group is killed) instead of the process dying under them."""
    task = asyncio.current_task()
    if task is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    loop.add_signal_handler(signal.SIGTERM, task.cancel)
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


def run_with_progress(console: Console, out: Path, engine: Any,
                      run: Callable[[Started, Advance], Awaitable[dict[str, Any]]], noun: str = "episodes") -> dict:
    """Run ``run(started, advance)`` under a progress bar; close the engine; turn endings into exit codes."""
    from memrl.engines.base import EngineDeadError
    from memrl.eval.runner import AllEpisodesFailedError

    try:
        with progress(console, "eval", noun=noun) as bar:  # plain lines when stderr is a log, not a terminal

            def started(total: int, done: int) -> None:
                if done:
                    console.print(f"resuming: {done} of {total} {noun} already done")
                bar.update(total=total, completed=done)

            async def main() -> dict[str, Any]:
                loop = asyncio.get_running_loop()
                with signals_wake_loop(loop), sigterm_cancels(loop):  # Ctrl-C stops a loop waiting on a long timer
                    try:
                        return await run(started, bar.advance)
                    finally:
                        await engine.close()

            with interrupts.python_sigint():  # asyncio.run's own Ctrl-C: a cancel of the run, not of an episode
                return asyncio.run(main())
    except (KeyboardInterrupt, asyncio.CancelledError) as stop:
        console.print(f"interrupted — re-run the same command to resume (finished {noun} are kept in {out})",
                      highlight=False, markup=False)
        raise typer.Exit(130 if isinstance(stop, KeyboardInterrupt) else 128 + signal.SIGTERM) from None
    except EngineDeadError as exc:
        console.print(f"error: the engine is gone ({exc}); stopped. Finished {noun} are kept in {out}; "
                      "re-run the same command to resume", highlight=False, markup=False)
        raise typer.Exit(1) from None
    except AllEpisodesFailedError as exc:
        console.print(f"error: {exc} (see {out}); fix the cause and re-run the same command to retry",
                      highlight=False, markup=False)
        raise typer.Exit(1) from None
