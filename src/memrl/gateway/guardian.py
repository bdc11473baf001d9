"""A watcher process that kills agent commands' process groups when the trainer dies without cleaning up.

Each command runs in a session of its own (:mod:`memrl.gateway.command`), so a terminal's Ctrl-C
reaches the trainer alone and the trainer kills the groups itself: when an episode ends, at exit, on a
second signal. A trainer killed by SIGKILL (the kernel's out-of-memory killer, ``kill -9``, a
scheduler's hard limit) runs none of that, and its commands ran on, sleeping or calling a gateway that
was gone. ``PR_SET_PDEATHSIG`` does not help: it fires when the *thread* that forked exits, and the
commands are forked from event-loop threads.

So the trainer starts this script once (lazily, at its first command) with a pipe on its stdin and
writes ``+PGID`` / ``-PGID`` lines as groups start and end. The kernel closes the pipe when the
trainer dies, however it dies; at end of file the watcher SIGKILLs the groups still listed and exits.
The script imports nothing but the standard library and runs isolated (``python -I FILE``): it starts
in milliseconds and no user module can shadow what it needs.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading

_lock = threading.Lock()
_watcher: subprocess.Popen[bytes] | None = None


def watch(pgid: int) -> None:
    """Tell the watcher a command's group started (starting the watcher on first use)."""
    _tell(f"+{pgid}\n")


def unwatch(pgid: int) -> None:
    """Tell the watcher a command's group was killed and needs no killing when the trainer dies."""
    _tell(f"-{pgid}\n")


def _tell(line: str) -> None:
    global _watcher
    with _lock:
        if line[0] == "-" and _watcher is None:
            return
        if _watcher is None or _watcher.poll() is not None:
            _watcher = _start()
        if _watcher is None:
            return
        with contextlib.suppress(OSError, ValueError):  # a watcher that died: commands are still killed in-process
            _watcher.stdin.write(line.encode())  # type: ignore[union-attr]
            _watcher.stdin.flush()  # type: ignore[union-attr]


def _start() -> subprocess.Popen[bytes] | None:
    """The watcher, in a session of its own so that a Ctrl-C meant for the trainer leaves it running."""
    try:
        return subprocess.Popen([sys.executable, "-I", os.path.abspath(__file__)], stdin=subprocess.PIPE,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError:
        return None


def _main() -> None:
    """Read ``+PGID`` / ``-PGID`` lines until end of file, then SIGKILL the groups still listed."""
    groups: set[int] = set()
    for raw in sys.stdin.buffer:
        with contextlib.suppress(ValueError):
            pgid = int(raw[1:])
            if pgid > 1:
                (groups.add if raw[:1] == b"+" else groups.discard)(pgid)
    for pgid in groups:
        with contextlib.suppress(OSError):
            os.killpg(pgid, signal.SIGKILL)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _main()
