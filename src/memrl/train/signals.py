"""Ctrl-C / SIGTERM during training: finish the step, checkpoint it, exit; a second signal exits at once.

Python's default SIGINT raises KeyboardInterrupt wherever the main thread
happens to be (inside an optimizer step, half-way through a checkpoint), so a
stopped run lost everything since the last ``trainer.save_every``. Here the
first signal only sets a flag that the training loop reads between steps.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from types import FrameType, TracebackType
from typing import Any

from memrl import interrupts
from memrl.signal_watch import exit_now, watch_stops

HANDLED = (signal.SIGINT, signal.SIGTERM)
SECOND_SIGNAL_GRACE_S = 2.0  # how long the main thread may take to act on a second signal itself
_stop_at: list[float] = []  # monotonic time of the first stop signal of the active StopRequest (empty: none)


def stop_requested_at() -> float | None:
    """When (``time.monotonic()``) the training loop was asked to stop, or None: running episodes read it
    to end within ``trainer.stop_grace_s``."""
    return _stop_at[0] if _stop_at else None


class TrainingInterrupted(Exception):
    """The run stopped on a signal after saving step ``step``; ``exit_code`` is the shell's 128 + signal."""

    def __init__(self, step: int, signum: int) -> None:
        super().__init__(f"interrupted at step {step} — re-run the same command to resume")
        self.step = step
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class _SignalScope:
    """Context manager: while active, SIGINT/SIGTERM call ``self._handle``; the previous handlers come back after.

    Outside the main thread signal handlers cannot be installed; the scope then does nothing.
    """

    def __init__(self) -> None:
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _SignalScope:
        if threading.current_thread() is threading.main_thread():
            for sig in HANDLED:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        raise NotImplementedError


class StopRequest(_SignalScope):
    """While active, SIGINT/SIGTERM ask the loop to stop instead of killing it (``signum`` records the signal;
    it stays None outside the main thread, where no handler can be installed).

    Episodes still running ``grace_s`` after the signal are failed (:func:`stop_requested_at`), so a
    hung agent cannot hold the stop for its whole ``timeout_s``: container runtimes send SIGKILL
    after a grace period of their own (Kubernetes: 30 s).
    """

    def __init__(self, grace_s: float = 30.0) -> None:
        super().__init__()
        self.signum: int | None = None
        self.grace_s = grace_s
        self._seen = 0  # stop signals the watcher thread saw arrive
        self._closed = threading.Event()
        self._watch: contextlib.AbstractContextManager[None] | None = None

    def __enter__(self) -> StopRequest:
        super().__enter__()
        _stop_at.clear()
        if self._previous:
            self._closed.clear()
            self._watch = watch_stops(self._on_arrival)
            self._watch.__enter__()
            swallowed = interrupts.take()  # a Ctrl-C swallowed while the run started: act on it as if it came now
            if swallowed is not None:
                self._seen += 1
                self._handle(swallowed, None)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._closed.set()
        if self._watch is not None:
            self._watch.__exit__(None, None, None)
            self._watch = None
        super().__exit__(exc_type, exc, tb)
        _stop_at.clear()

    def _on_arrival(self, signum: int) -> None:
        """In the watcher thread: a second signal exits even while the main thread is inside one long torch
        call (a CPU backward), where the handler below would run only when the call returns."""
        self._seen += 1
        if self._seen >= 2 and not self._closed.wait(SECOND_SIGNAL_GRACE_S):
            _exit_now(signum)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.signum is not None:
            _exit_now(signum)
        self.signum = signum
        _stop_at[:] = [time.monotonic()]
        os.write(2, f"\n{name}: finishing the current step (episodes still running in {self.grace_s:g} s are "
                    f"failed: trainer.stop_grace_s), then saving a checkpoint (send it again to exit at once)\n"
                    .encode())


def _exit_now(signum: int) -> None:
    """The second signal: say so, stop what the hooks name (agent process groups) and end the process."""
    # os.write: a handler may run while the console is mid-print, and print() is not reentrant
    os.write(2, f"\n{signal.Signals(signum).name} again: exiting now without a checkpoint (re-running the same "
                "command resumes from the last saved one, and redoes the steps after it)\n".encode())
    exit_now(128 + signum)


class StageInterrupted(Exception):
    """A signal arrived outside the training loop (data, warm start, evaluation); ``exit_code`` is 128 + signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"{signal.Signals(signum).name}: stopped — re-run the same command to resume "
                         f"(finished stages are kept)")
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class RaiseOnSignal(_SignalScope):
    """While active, SIGINT/SIGTERM raise :class:`StageInterrupted` in the main thread.

    For jobs whose stages write their outputs atomically (nothing half-written to save), so
    stopping at once is safe; a :class:`StopRequest` inside (the training loop) takes over the
    signals while it is active and gives them back after.
    """

    def __enter__(self) -> RaiseOnSignal:
        super().__enter__()
        swallowed = interrupts.take() if self._previous else None  # a Ctrl-C lost while the command started
        if swallowed is not None:
            super().__exit__(None, None, None)
            raise StageInterrupted(swallowed)
        return self

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        raise StageInterrupted(signum)
