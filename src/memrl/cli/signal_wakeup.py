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
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import threading
from collections.abc import Iterator


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
