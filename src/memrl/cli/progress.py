"""Progress that shows on a terminal and in a log file alike.

A rich progress bar redraws itself in place, so when output goes to a file or a pipe (``nohup``,
CI, ``| tee``) rich shows nothing until the end: ``memrl demo`` printed nothing for ten minutes
of warm start when redirected. Commands use this module instead: on a terminal it is a rich bar
(or spinner); elsewhere it prints plain lines, the first at once, then at most one every
``every_s`` seconds, and the last when the work ends. When nothing advances for ``heartbeat_s``
(60 s, as training's heartbeat) the same line is printed again with the time elapsed: an eval whose
episodes take minutes printed ``eval: 0/6 episodes (0%)`` and then nothing, as if it had hung.

Usage (``console`` is the command's rich ``Console``, usually on stderr)::

    from memrl.cli.progress import busy, progress

    with progress(console, "warm start", total=20, noun="epochs") as bar:
        for epoch in range(20):
            ...
            bar.advance()            # or bar.update(completed=k, total=n)

    with busy(console, "loading the model"):   # no count: after 2 s a line, then "still ..." lines, "done"
        model = load_model(...)
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from memrl import interrupts


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


HEARTBEAT_S = 60.0  # in a log, work that does not advance says it is alive this often (training's too)


class LineProgress:
    """Counted progress as plain lines: ``eval: 12/40 episodes (30%), 1m05s elapsed, ~2m31s left``."""

    def __init__(self, write: Callable[[str], None], label: str, total: int | None = None, noun: str = "",
                 every_s: float = 10.0, clock: Callable[[], float] = time.monotonic,
                 heartbeat_s: float | None = None) -> None:
        self.write, self.label, self.total, self.noun = write, label, total, noun
        self.every_s, self.clock, self.heartbeat_s = every_s, clock, heartbeat_s
        self._lock = threading.Lock()  # the heartbeat thread writes too
        self.completed = 0
        self._start = clock()
        self._first = self.completed  # where this session started (resumed work is not timed)
        self._last: float | None = None
        self._said = -1

    def line(self) -> str:
        noun = f" {self.noun}" if self.noun else ""
        elapsed = self.clock() - self._start
        text = f"{self.label}: {self.completed}" + (f"/{self.total}" if self.total else "") + noun
        if self.total:
            text += f" ({100 * self.completed / self.total:.0f}%)"
        text += f", {_duration(elapsed)} elapsed"
        done_now = self.completed - self._first
        if self.total and 0 < done_now and self.completed < self.total:
            text += f", ~{_duration(elapsed / done_now * (self.total - self.completed))} left"
        return text

    def update(self, completed: int | None = None, total: int | None = None, advance: int = 0) -> None:
        _stop_if_asked()
        if total is not None:
            self.total = total
        if completed is not None:
            self.completed = completed
            if self._last is None:  # work done before (a resumed run) is not part of this session's rate
                self._first = completed
        self.completed += advance
        now = self.clock()
        finished = self.total is not None and self.completed >= self.total
        if self._last is None or now - self._last >= self.every_s or (finished and self._said != self.completed):
            self._say(now)

    def _say(self, now: float) -> None:
        with self._lock:
            self._last = now
            self._said = self.completed
            self.write(self.line())

    def beat(self) -> None:
        """The line again if none was written for ``heartbeat_s`` (called by a timer): slow work is not silent."""
        now = self.clock()
        if self.heartbeat_s and self._last is not None and now - self._last >= self.heartbeat_s:
            self._say(now)

    def advance(self, n: int = 1) -> None:
        self.update(advance=n)

    def close(self) -> None:
        if self._said != self.completed:
            self._say(self.clock())


class _RichBar:
    """The same two methods over a rich progress bar."""

    def __init__(self, progress: Progress, total: int | None) -> None:
        self.progress = progress
        self.task = progress.add_task("", total=total)

    def update(self, completed: int | None = None, total: int | None = None, advance: int = 0) -> None:
        _stop_if_asked()
        self.progress.update(self.task, completed=completed, total=total, advance=advance or None)

    def advance(self, n: int = 1) -> None:
        _stop_if_asked()
        self.progress.advance(self.task, n)


def _stop_if_asked() -> None:
    """A Ctrl-C swallowed while the command started (memrl.interrupts) stops it at its next step of progress."""
    if threading.current_thread() is threading.main_thread():
        interrupts.check()


def _plain(console: Console) -> Callable[[str], None]:
    return lambda text: console.print(text, highlight=False, markup=False, soft_wrap=True)


@contextlib.contextmanager
def progress(console: Console, label: str, total: int | None = None, noun: str = "",
             every_s: float = 10.0, heartbeat_s: float = HEARTBEAT_S) -> Iterator[Any]:
    """A counted progress display: a rich bar on a terminal, plain lines otherwise (see the module doc)."""
    _stop_if_asked()
    if console.is_terminal:
        columns = (TextColumn(f"[bold]{label}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   TimeRemainingColumn())
        with Progress(*columns, console=console) as bar:
            yield _RichBar(bar, total)
        return
    lines = LineProgress(_plain(console), label, total, noun, every_s, heartbeat_s=heartbeat_s)
    stop = threading.Event()

    def tick() -> None:
        while not stop.wait(min(heartbeat_s, 5.0)):
            lines.beat()

    thread = threading.Thread(target=tick, daemon=True, name=f"{label} heartbeat")
    thread.start()
    try:
        yield lines
    finally:
        stop.set()
        thread.join()
        lines.close()


@contextlib.contextmanager
def busy(console: Console, text: str, every_s: float = 30.0, quiet_s: float = 2.0) -> Iterator[None]:
    """Work with no count: a spinner on a terminal. Otherwise nothing for work shorter than ``quiet_s``
    (no noise before a one-line error); then ``text ...``, ``text: still running (1m30s)`` every
    ``every_s`` seconds, and ``text: done in 42s`` at the end."""
    if console.is_terminal:
        with console.status(text):
            yield
        return
    say = _plain(console)
    start = time.monotonic()
    stop = threading.Event()
    spoke = threading.Event()

    def tick() -> None:
        if stop.wait(quiet_s):
            return
        say(f"{text} ...")
        spoke.set()
        while not stop.wait(every_s):
            say(f"{text}: still running ({_duration(time.monotonic() - start)})")

    thread = threading.Thread(target=tick, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
    if spoke.is_set():
        say(f"{text}: done in {_duration(time.monotonic() - start)}")
