"""Ctrl-C / SIGTERM during training: finish the step, checkpoint it, exit; a second signal exits at once.

Python's default SIGINT raises KeyboardInterrupt wherever the main thread
happens to be (inside an optimizer step, half-way through a checkpoint), so a
stopped run lost everything since the last ``trainer.save_every``. Here the
first signal only sets a flag that the training loop reads between steps.
"""

from __future__ import annotations

import os
import signal
import threading
from types import FrameType, TracebackType
from typing import Any

HANDLED = (signal.SIGINT, signal.SIGTERM)


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
    it stays None outside the main thread, where no handler can be installed)."""

    def __init__(self) -> None:
        super().__init__()
        self.signum: int | None = None

    def __enter__(self) -> StopRequest:
        super().__enter__()
        return self

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.signum is not None:
            # os.write: a handler may run while the console is mid-print, and print() is not reentrant
            os.write(2, f"\n{name} again: exiting now without a checkpoint\n".encode())
            os._exit(128 + signum)
        self.signum = signum
        os.write(2, f"\n{name}: finishing the current step, then saving a checkpoint "
                    f"(send it again to exit at once)\n".encode())


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

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        raise StageInterrupted(signum)
