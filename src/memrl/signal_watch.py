"""See SIGINT/SIGTERM the moment they arrive, even while the main thread is inside one long C call.

Python runs a signal's handler in the main thread, between bytecodes. During a torch call that lasts
minutes (a backward over long rows on a CPU is one call), a Ctrl-C waits for the call to return: an
hour-long fine-tuning step ignored SIGTERM for that hour, and the training loop's "send it again to exit
at once" did not exit. The interpreter's C-level handler still runs at once and, given a socket with
``signal.set_wakeup_fd``, writes the signal's number to it; a thread reading that socket learns of the
signal without the main thread's help and can end the process when the main thread does not answer.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator

STOPS = frozenset({int(signal.SIGINT), int(signal.SIGTERM)})
_HARD_EXIT_HOOKS: list[Callable[[], None]] = []


def on_hard_exit(hook: Callable[[], None]) -> Callable[[], None]:
    """Run ``hook`` before a signal ends the process at once (:func:`exit_now`); returns its remover.

    ``os._exit`` skips ``atexit`` and every ``finally``: agent commands in process groups of their own would
    outlive the run, and a run folder's lock would stay behind and read as a run killed by the kernel.
    """
    _HARD_EXIT_HOOKS.append(hook)

    def remove() -> None:
        with contextlib.suppress(ValueError):
            _HARD_EXIT_HOOKS.remove(hook)

    return remove


def exit_now(code: int) -> None:
    """End the process with ``code`` at once, after the :func:`on_hard_exit` hooks (latest first)."""
    for hook in reversed(list(_HARD_EXIT_HOOKS)):
        try:
            hook()
        except Exception:  # noqa: BLE001 - exiting at once matters more than any one hook
            pass
    os._exit(code)


@contextlib.contextmanager
def watch_stops(on_stop: Callable[[int], None]) -> Iterator[None]:
    """While active, ``on_stop(signum)`` runs in a watcher thread for each SIGINT/SIGTERM as it arrives.

    Only signals with a Python-level handler are seen (the interpreter writes the byte from its own C
    handler), so the caller installs its handlers first. Outside the main thread no wakeup socket can be
    set and nothing is watched. ``on_stop`` may block (to give the main thread time to answer); leaving
    the block does not wait for it beyond a moment, so it should also watch an event the caller sets.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    reader, writer = socket.socketpair()
    writer.setblocking(False)
    previous = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)

    def watch() -> None:
        with contextlib.suppress(OSError):
            while data := reader.recv(64):  # b"": the block ended and closed the writer
                for signum in data:
                    if signum in STOPS:
                        on_stop(signum)

    watcher = threading.Thread(target=watch, name="memrl-stop-watch", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        signal.set_wakeup_fd(previous)
        writer.close()
        watcher.join(timeout=1)
        reader.close()


def exit_unless_answered(grace_s: float, answered: threading.Event, say: Callable[[int], str]
                         ) -> Callable[[int], None]:
    """An ``on_stop`` for work that keeps nothing until it ends: unless ``answered`` is set within ``grace_s``
    (the main thread handled the signal, or the work ended), ``say(signum)`` goes to stderr and the process
    ends with 128 + signum, the status a shell reports for a signal."""

    def on_stop(signum: int) -> None:
        if not answered.wait(grace_s):
            print(say(signum), file=sys.stderr, flush=True)
            exit_now(128 + signum)

    return on_stop
