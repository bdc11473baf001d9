"""Turn expected user errors into one-line messages and exit code 2 (no traceback)."""

from __future__ import annotations

import contextlib
import errno
import functools
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import typer

from memrl import interrupts
from memrl.config import ConfigError
from memrl.data.errors import DataError
from memrl.engines.base import EngineError
from memrl.models.resolve import ModelNotFoundError

F = TypeVar("F", bound=Callable[..., Any])

# OSErrors a user causes by pointing a flag at the wrong kind of path (a folder for a file, a
# file for a folder, a read-only place). A full disk gets a line of its own; other OSErrors (I/O errors)
# keep their traceback: they are not a typo, and the trace is what a bug report needs.
PATH_ERRORS: tuple[type[OSError], ...] = (
    FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError, FileExistsError,
)

DISK_FULL = (errno.ENOSPC, errno.EDQUOT)  # one line too: the trace of a full disk helps nobody

# EngineError: a server that cannot serve training (raw log-probs, unreachable, refusing): its message says why
USER_ERRORS: tuple[type[BaseException], ...] = (ConfigError, DataError, ModelNotFoundError, EngineError, ValueError,
                                                *PATH_ERRORS)


def describe(exc: BaseException) -> str:
    """The one line printed after ``error:``.

    ``PermissionError(13, 'Permission denied', '/x')`` prints as ``/x: permission denied``
    rather than ``[Errno 13] ...``; a bare :class:`UnicodeDecodeError` (which does not know its
    file) at least says what it is; readers wrap it with the file name where they can.
    """
    if isinstance(exc, OSError) and exc.strerror:
        where = exc.filename if exc.filename2 is None else f"{exc.filename} -> {exc.filename2}"
        what = {IsADirectoryError: "is a folder, expected a file",
                NotADirectoryError: "is not a folder"}.get(type(exc), exc.strerror[:1].lower() + exc.strerror[1:])
        return f"{where}: {what}" if where is not None else what
    if isinstance(exc, UnicodeDecodeError):
        return f"input is not UTF-8 text ({exc})"
    if type(exc).__name__ == "ValidationError" and callable(getattr(exc, "errors", None)):  # pydantic's, unwrapped
        parts = [f"{'.'.join(map(str, e.get('loc', ())))}: {str(e.get('msg', '')).removeprefix('Value error, ')}"
                 for e in exc.errors()]
        return f"invalid {getattr(exc, 'title', 'input')}: {'; '.join(parts)}"
    return str(exc)


TERMINATED = "terminated (SIGTERM): nothing half-written (files are written whole or not at all)"


class Terminated(BaseException):
    """SIGTERM, where the command has no handler of its own: raised like Ctrl-C's KeyboardInterrupt, so atomic
    writes remove their temp files and the command ends with one line (it died silently, exit -15, leaving them)."""


def _raise_terminated(signum: int, frame: Any) -> None:
    interrupts.record(signum)
    raise Terminated()


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    """Install :func:`_raise_terminated` for SIGTERM while the command runs, unless someone handles it already
    (train, eval, demo and the servers install their own, which take over inside)."""
    own = threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    previous = signal.signal(signal.SIGTERM, _raise_terminated) if own else None
    try:
        yield
    finally:
        if own:
            signal.signal(signal.SIGTERM, previous)


def _stopped_on_the_way() -> None:
    """An error raised while a signal was being acted on (an import cut half-way by SIGTERM fails later with a
    RecursionError or ModuleNotFoundError) is the signal's doing: one line and 128 + signal, not a traceback."""
    signum = interrupts.take()
    if signum == signal.SIGTERM:
        print(TERMINATED, file=sys.stderr)
    elif signum is not None:
        print("interrupted (Ctrl-C)", file=sys.stderr)
    if signum is not None:
        raise typer.Exit(128 + signum) from None


def user_errors(fn: F) -> F:
    """Decorator for CLI commands: a bad flag, file or row ends with ``error: ...``."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            with _sigterm_raises(), interrupts.remembered():  # a Ctrl-C swallowed while starting is kept
                return fn(*args, **kwargs)
        except (typer.Exit, typer.Abort, SystemExit):  # how the command chose to end: as it is
            raise
        except Terminated:
            print(TERMINATED, file=sys.stderr)
            raise typer.Exit(143) from None
        except USER_ERRORS as exc:
            _stopped_on_the_way()
            print(f"error: {describe(exc)}", file=sys.stderr)
            raise typer.Exit(2) from None
        except OSError as exc:
            if exc.errno == errno.EROFS:  # a read-only mount is a place the user pointed at, like a missing one
                _stopped_on_the_way()
                print(f"error: {describe(exc)}; write somewhere else", file=sys.stderr)
                raise typer.Exit(2) from None
            if exc.errno not in DISK_FULL:
                _stopped_on_the_way()
                raise
            where = f"{exc.filename}: " if exc.filename else ""
            print(f"error: {where}no space left on device; free some space and re-run the same command (training "
                  "resumes from its last complete checkpoint, an eval from its finished episodes)", file=sys.stderr)
            raise typer.Exit(2) from None
        except KeyboardInterrupt:  # a Ctrl-C no command handled itself (while a model loads, say): say so
            print("interrupted (Ctrl-C)", file=sys.stderr)
            raise typer.Exit(130) from None
        except Exception:
            _stopped_on_the_way()
            raise

    return wrapper  # type: ignore[return-value]
