"""One memrl run per folder: an advisory lock file that names its holder.

Two ``memrl train`` on one ``trainer.output_dir`` (or two ``memrl eval`` on one ``--out``) used
to interleave their metrics, overwrite each other's rollouts and rename each other's
checkpoints, and both reported success. A run now takes an exclusive ``flock`` on
``FOLDER/.memrl-lock`` for as long as it writes there, and records in that file who holds it
(command, pid, host, start time); a second run refuses in one line naming that holder.

The kernel drops a ``flock`` when its process dies, however it dies (SIGKILL, OOM, power
off), so a crashed run never blocks the next one: its lock file still names the dead run but
holds no lock, and the next run takes it over with a notice. A run that ends removes the file
(while still holding the lock; a run that locked a file that was removed meanwhile tries again).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from memrl.signal_watch import on_hard_exit

LOCK_NAME = ".memrl-lock"


class FolderBusyError(ValueError):
    """Another live memrl process holds the folder's lock."""


def _holder_text(info: dict[str, Any]) -> str:
    """``memrl train (pid 12, host h, started 2025-01-02 03:04:05)`` from a lock file's contents."""
    if not info:
        return "another memrl process (it has not written its details yet)"
    started = info.get("started")
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)) if isinstance(started, (int, float)) else "?"
    return f"{info.get('command', 'memrl')} (pid {info.get('pid', '?')} on {info.get('host', '?')}, started {when})"


def _read(fd: int) -> dict[str, Any]:
    os.lseek(fd, 0, os.SEEK_SET)
    raw = b""
    while chunk := os.read(fd, 4096):
        raw += chunk
    try:
        info = json.loads(raw.decode("utf-8")) if raw.strip() else {}
    except (ValueError, UnicodeDecodeError):
        return {"command": "an unknown process (unreadable lock file)"}
    return info if isinstance(info, dict) else {}


def _write(fd: int, info: dict[str, Any]) -> None:
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, (json.dumps(info) + "\n").encode())
    os.fsync(fd)


def _alive_here(info: dict[str, Any]) -> bool:
    """Whether the recorded holder is a live process on this machine (the fallback without ``flock``)."""
    pid = info.get("pid")
    if info.get("host") != socket.gethostname() or not isinstance(pid, int) or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _lock(fd: int) -> str:
    """``ours``, ``busy`` (another process holds it) or ``unsupported`` (no ``flock`` on this file system)."""
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:
        if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return "busy"
        if err.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
            return "unsupported"
        raise
    return "ours"


def _open_locked(path: Path) -> tuple[int, str]:
    """Open (creating) the lock file and try to lock it; see :func:`_lock` for the second value.

    A holder removes the file when it is done; a process that opened it just before and locked it
    just after would hold a lock on a file nobody else can see, so a lock on a file that is no
    longer at ``path`` is dropped and the open is tried again.
    """
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        got = _lock(fd)
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same or got == "busy":
            return fd, got
        os.close(fd)


def _unlink(path: Path) -> None:
    with contextlib.suppress(OSError):  # removed while still locked: whoever opens it next re-checks
        os.unlink(path)


@contextlib.contextmanager
def hold_folder(folder: Path, command: str, flag: str, notice: Callable[[str], None]) -> Iterator[Path]:
    """Hold ``folder``'s lock (creating the folder) for the block; FolderBusyError if a live run holds it.

    ``flag`` names the setting in messages (``trainer.output_dir``, ``--out``); ``notice`` gets the
    one line said when the lock of a dead run is taken over. Yields the lock file's path.
    """
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK_NAME
    fd, got = _open_locked(path)
    try:
        previous = _read(fd)
        # without flock, the recorded pid is all there is to go by (a recycled pid is taken for the holder)
        if got == "busy" or (got == "unsupported" and _alive_here(previous)):
            raise FolderBusyError(f"{flag} {folder} is in use by {_holder_text(previous)}; wait for it to finish "
                                  f"or choose another {flag}")
        if previous.get("pid") is not None:
            # a clean end (an error, Ctrl-C, SIGTERM) removes the lock: one left behind means the process was killed
            notice(f"taking over the lock of {folder}: {_holder_text(previous)} is no longer running and did not "
                   "end cleanly (killed: out of memory, SIGKILL or a reboot; `dmesg` says if the kernel killed it)")
        _write(fd, {"command": command, "pid": os.getpid(), "host": socket.gethostname(), "started": time.time()})
        remove_hook = on_hard_exit(lambda: _unlink(path))  # a second Ctrl-C's os._exit skips the finally
        try:
            yield path
        finally:
            remove_hook()
            _unlink(path)
    finally:
        os.close(fd)  # closing the descriptor releases the flock
