"""A Ctrl-C received while a command starts, kept until the command can act on it.

Python's default SIGINT handler raises KeyboardInterrupt wherever the main thread is. While a command
imports its libraries and loads a model, that is often inside a finalizer, a weakref callback or a C++
callback: Python prints "Exception ignored in ..." and drops it (or pybind11 aborts), and the command
ran to its end, an eval or a training run included. Commands run under :func:`remembered`, whose
handler raises as Python's does and also records the signal; places a command passes often (a progress
bar's step, the training loop's start) call :func:`check` or :func:`take`, so a swallowed Ctrl-C still
stops the command there, with its usual message.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

_pending: list[int] = []


def _record_and_raise(signum: int, frame: FrameType | None) -> None:
    _pending[:] = [signum]
    raise KeyboardInterrupt


@contextlib.contextmanager
def remembered() -> Iterator[None]:
    """While active, SIGINT raises KeyboardInterrupt as Python's handler does and is also recorded (main thread
    only, and only where nobody installed a handler of their own)."""
    own = threading.current_thread() is threading.main_thread() and \
        signal.getsignal(signal.SIGINT) is signal.default_int_handler
    previous = signal.signal(signal.SIGINT, _record_and_raise) if own else None
    _pending.clear()  # (kept after the block: whoever reports how the command ended reads it with take())
    try:
        yield
    finally:
        if own:
            signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def python_sigint() -> Iterator[None]:
    """Python's own SIGINT handler while the block runs (main thread, where :func:`remembered`'s is in place):
    ``asyncio.run`` turns Ctrl-C into a cancel of its main task only when it finds Python's handler; with
    another one, the KeyboardInterrupt landed inside an episode's code and was recorded as its failure."""
    ours = threading.current_thread() is threading.main_thread() and \
        signal.getsignal(signal.SIGINT) is _record_and_raise
    if ours:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        if ours:
            signal.signal(signal.SIGINT, _record_and_raise)


def record(signum: int) -> None:
    """Record ``signum`` from a handler of the caller's own (SIGTERM's) that raises something else."""
    _pending[:] = [signum]


def take() -> int | None:
    """The signal recorded and not yet acted on (forgotten once taken); None when there is none."""
    return _pending.pop() if _pending else None


def check() -> None:
    """Raise KeyboardInterrupt for a Ctrl-C recorded earlier whose own KeyboardInterrupt was swallowed."""
    if take() is not None:
        raise KeyboardInterrupt
