"""Make a signal wake the running event loop at once, whichever thread the kernel hands it to.

``asyncio.run`` turns Ctrl-C into a cancel of the main task, but only from a Python-level
SIGINT handler, and Python runs that handler in the main thread when the main thread next
executes bytecode. An event loop waiting on a long timer (the OpenAI engine waits up to
``timeout_s`` for an answer) sits in ``epoll_wait``; the signal ends that wait only if it
interrupts that very system call. It does not when the kernel delivers the signal to another
thread (torch and tokenizers start several; POSIX lets any thread take a process signal), nor
when it lands in the instant between the loop's last check and the call. Then Ctrl-C was
noticed only when the timer ran out: ``memrl eval`` under load ignored it for ten minutes.

``signal.set_wakeup_fd`` is the interpreter's remedy: its C handler writes a byte to a socket on
every signal. Registering that socket with the loop ends the wait, and the Python handler runs.

The same byte serves code with no loop (:func:`exit_if_stuck`): a fine-tuning step is one long
call into torch, and no Python handler runs before it returns (an hour-long backward ignored
SIGTERM for that hour). A thread reading the socket sees the signal at once and, when the main
thread has not answered it within a grace period, ends the process itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import threading
import os
import sys
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def signals_wake_loop(loop: asyncio.AbstractEventLoop) -> Iterator[None]:
    """While active, any signal wakes ``loop`` (main thread only; elsewhere signals are not handled)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    reader, writer = socket.socketpair()
    reader.setblocking(False)
    writer.setblocking(False)

    def drain() -> None:
        with contextlib.suppress(OSError):
            while reader.recv(4096):
                pass

    loop.add_reader(reader.fileno(), drain)
    previous = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    try:
        yield
    finally:
        signal.set_wakeup_fd(previous)
        loop.remove_reader(reader.fileno())
        reader.close()
        writer.close()


@contextlib.contextmanager
def exit_if_stuck(grace_s: float, say: Callable[[int], str]) -> Iterator[threading.Event]:
    """While active, a SIGINT/SIGTERM the main thread has not acted on within ``grace_s`` ends the process:
    ``say(signum)`` goes to stderr and the exit status is 128 + signum, as the shell reports a signal.

    Only for work that keeps nothing until it ends (a fine-tuning run exports its model at the end), so
    stopping mid-call loses nothing a normal interrupt would have kept. The caller sets the yielded event
    when it has handled the signal itself (its ``except KeyboardInterrupt``); leaving the block sets it too.
    """
    handled = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield handled
        return
    reader, writer = socket.socketpair()
    writer.setblocking(False)
    previous = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    stops = {int(signal.SIGINT), int(signal.SIGTERM)}

    def watch() -> None:
        with contextlib.suppress(OSError):
            while not handled.is_set():
                data = reader.recv(64)
                if not data:  # the block ended and closed the writer
                    return
                got = [b for b in data if b in stops]
                if got and not handled.wait(grace_s):
                    print(say(got[0]), file=sys.stderr, flush=True)
                    os._exit(128 + got[0])

    watcher = threading.Thread(target=watch, name="memrl-stop-watch", daemon=True)
    watcher.start()
    try:
        yield handled
    finally:
        handled.set()
        signal.set_wakeup_fd(previous)
        writer.close()  # the watcher's recv returns b"" and it ends
        watcher.join(timeout=5)
        reader.close()
