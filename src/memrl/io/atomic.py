"""Atomic file writes: readers never see a half-written file, crashes leave none behind.

A write goes to ``.{name}.memrl-{pid}-{random}.tmp`` next to the target and is renamed into
place when complete. A process killed mid-write (SIGKILL, power loss) cannot remove its temp
file, and for a synthesized long-context file that can be tens of megabytes; because the name
says which target and which process it belongs to, the next write of the *same* target removes
the leftovers of dead processes (never another target's, never a live writer's on this machine).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

_TEMP = re.compile(r"^\.(?P<target>.+)\.memrl-(?P<pid>\d+)-[0-9a-f]{8}\.tmp$")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# Temp files and folders are created 0600/0700; finished outputs get the usual 0666/0777 & ~umask, so
# another user (a vLLM server reading an exported model or a checkpoint) can read what the umask allows.
_FILE_MODE = 0o666 & ~_umask()
_DIR_MODE = 0o777 & ~_umask()


def temp_name(target: str) -> str:
    """A fresh temp name for ``target`` (a file name, not a path) owned by this process."""
    return f".{target}.memrl-{os.getpid()}-{secrets.token_hex(4)}.tmp"


def temp_target(name: str) -> str | None:
    """The target a temp name belongs to, or ``None`` if ``name`` is not an atomic-write temp."""
    m = _TEMP.match(name)
    return m.group("target") if m else None


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True  # another thread of ours may be writing it right now
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists but belongs to someone else
        return True
    return True


class _StaleTemps:
    """Leftover temps of dead writers, found by one scan per folder per process.

    Scanning the folder on every write would make writing N files into one folder
    (eval episodes) cost O(N^2); one scan suffices because a temp can only become
    stale when its writer dies, and writers that die later are cleaned up next run.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_dir: dict[str, dict[str, list[str]]] = {}

    def take(self, folder: Path, target: str) -> list[Path]:
        key = os.path.abspath(folder)
        with self._lock:
            found = self._by_dir.get(key)
            if found is None:
                found = {}
                with contextlib.suppress(OSError), os.scandir(folder) as entries:
                    for entry in entries:
                        m = _TEMP.match(entry.name)
                        if m and not _pid_alive(int(m.group("pid"))):
                            found.setdefault(m.group("target"), []).append(entry.name)
                self._by_dir[key] = found
            return [folder / name for name in found.pop(target, [])]


_stale = _StaleTemps()


def remove_stale_temps(path: str | Path) -> list[Path]:
    """Delete temps left next to ``path`` by dead writers of that same target; returns them."""
    path = Path(path)
    removed = _stale.take(path.parent, path.name)
    for tmp in removed:
        if tmp.is_dir() and not tmp.is_symlink():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
    return removed


def _create_temp(path: Path, directory: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(path)
    while True:
        tmp = path.parent / temp_name(path.name)
        try:
            if directory:
                tmp.mkdir(mode=0o700)
            else:
                os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            return tmp
        except FileExistsError:
            continue


@contextlib.contextmanager
def atomic_write(path: str | Path, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO[Any]]:
    """Write to a temp file in the target's folder, then ``os.replace`` it into place.

    The temp file lives next to the target so the final rename stays on one
    filesystem (and is therefore atomic). On any exception the temp file is
    removed and the previous target, if any, is left untouched.
    """
    binary = "b" in mode
    with atomic_path(path) as tmp, open(tmp, mode, encoding=None if binary else encoding) as fh:
        yield fh
        fh.flush()
        os.fsync(fh.fileno())


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Like :func:`atomic_write` for libraries that want a path (pyarrow, torch.save)."""
    path = Path(path)
    if path.is_dir():  # os.replace would fail at the end, naming the temp file
        raise IsADirectoryError(f"{path} is a folder; name a file to write, such as one inside it")
    tmp = _create_temp(path)
    try:
        yield tmp
        os.chmod(tmp, _FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def staging_dir(target: str | Path) -> Iterator[Path]:
    """A temp folder next to ``target``, named as its temp (so a killed run's folder is cleaned up by the
    next write of ``target``, and ``--restart`` knows it is memrl's), removed when the block ends."""
    tmp = _create_temp(Path(target), directory=True)
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _umask_modes(folder: Path) -> None:
    """Give a finished folder and everything in it the modes the umask allows (some writers, such as
    safetensors, create their files 0600 whatever the umask is)."""
    os.chmod(folder, _DIR_MODE)
    for root, dirs, files in os.walk(folder):
        for name in dirs:
            if not os.path.islink(os.path.join(root, name)):  # a link may point outside: never follow it
                os.chmod(os.path.join(root, name), _DIR_MODE)
        for name in files:
            file = os.path.join(root, name)
            if not os.path.islink(file):
                os.chmod(file, _FILE_MODE | (os.stat(file).st_mode & 0o111 & _DIR_MODE))


@contextlib.contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """Build a folder in a temp sibling and rename it into place when complete.

    Used for caches and checkpoints: a crash mid-write never leaves a folder
    that looks finished. If another process won the race, its folder is kept.
    """
    path = Path(path)
    tmp = _create_temp(path, directory=True)
    try:
        yield tmp
        _umask_modes(tmp)
        try:
            os.replace(tmp, path)
        except OSError:
            if not path.exists():
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
