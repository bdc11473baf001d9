"""Running an agent command for one episode: its own process group, bounded output, nothing left behind.

A command is any process (``workflow.options.command``): it gets the episode's endpoint in its
environment and the sample as JSON on stdin, and prints its result as JSON on its last stdout
line. What a careless or hostile command can do, and what this module does about it:

* it starts a background child that keeps stdout open: the episode ends when the command's own
  process exits, not when every holder of its pipes has closed them (that waited until
  ``timeout_s``, then failed with "Event loop is closed");
* it leaves children behind: every command runs in a process group of its own, killed when the
  episode ends (finished, failed, timed out or cancelled), when the process exits, and before a
  second SIGTERM/SIGINT ends the trainer at once (:func:`memrl.signal_watch.on_hard_exit`), and
  when the trainer dies by SIGKILL (a watcher process, :mod:`memrl.gateway.guardian`);
* it prints gigabytes: only the last stdout line (at most :data:`MAX_LINE_BYTES`) and the last
  :data:`STDERR_LINES` stderr lines are kept, as the output streams in.

The endpoint is given under the names each SDK reads by itself (:func:`sdk_environment`), so
a CLI agent built on the ``openai`` SDK, LangChain, LiteLLM or the ``anthropic`` SDK runs
unchanged, with no flag pointing it at the gateway.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import contextlib
import os
import shutil
import signal
import threading
from collections.abc import Sequence
from typing import Any

from memrl.gateway import guardian
from memrl.signal_watch import on_hard_exit

STDERR_LINES = 20
MAX_LINE_BYTES = 16 << 20  # the result line; a longer last line is refused rather than held
_STDERR_LINE_CHARS = 2000
_DRAIN_S = 1.0  # after the command exited: how long its pipes may still deliver what it wrote

_groups: set[int] = set()  # process groups of commands running now (any thread's loop)
_groups_lock = threading.Lock()


class CommandError(RuntimeError):
    """The command could not be run or did not give a result (the caller names the program)."""


def kill_running_commands() -> None:
    """SIGKILL every command's process group still running (end of the process, a second signal)."""
    with _groups_lock:
        groups = list(_groups)
    for pgid in groups:
        _kill_group(pgid)


atexit.register(kill_running_commands)
on_hard_exit(kill_running_commands)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


class _Tail:
    """The last line of one stream and the last ``keep`` lines, fed in pieces; memory bounded by the caps."""

    def __init__(self, keep: int, line_cap: int) -> None:
        self.lines: collections.deque[tuple[bytes, bool]] = collections.deque(maxlen=keep)  # (line, cut short)
        self.partial = bytearray()
        self.line_cap = line_cap
        self.overlong = False  # the line being read passed line_cap (only its start is kept)

    def feed(self, data: bytes) -> None:
        *done, rest = data.split(b"\n")
        for piece in done:
            self._end_line(piece)
        self._add(rest)

    def _add(self, piece: bytes) -> None:
        room = self.line_cap - len(self.partial)
        if len(piece) > room:
            self.overlong = True
        self.partial += piece[:max(room, 0)]

    def _end_line(self, piece: bytes) -> None:
        self._add(piece)
        if self.partial.strip():
            self.lines.append((bytes(self.partial), self.overlong))
        self.partial, self.overlong = bytearray(), False

    def close(self) -> list[tuple[bytes, bool]]:
        """The kept non-empty lines, the unterminated last one included, each with whether it passed the cap."""
        if self.partial.strip():
            self._end_line(b"")
        return list(self.lines)


class _Protocol(asyncio.SubprocessProtocol):
    """Collects the command's output tails and tells when the process exits and when its pipes close."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.out = _Tail(1, MAX_LINE_BYTES)
        self.err = _Tail(STDERR_LINES, _STDERR_LINE_CHARS)
        self.exited: asyncio.Future[None] = loop.create_future()
        self.closed: asyncio.Future[None] = loop.create_future()
        self._open = {1, 2}

    def pipe_data_received(self, fd: int, data: bytes | str) -> None:
        (self.out if fd == 1 else self.err).feed(data if isinstance(data, bytes) else data.encode())

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        self._open.discard(fd)
        if not self._open and not self.closed.done():
            self.closed.set_result(None)

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)


def cannot_run(executable: str) -> str | None:
    """Why ``executable`` (a command's first word) cannot be started from here, or None.

    Checked when the config is read: a misspelt name would otherwise show only after the model has
    loaded and every episode of the first steps has failed on it.
    """
    if shutil.which(executable):
        return None
    if os.sep not in executable:
        return f"{executable!r} is not a program on PATH (give its path, or install it)"
    if not os.path.exists(executable):
        return f"{executable!r} does not exist (relative paths start from {os.getcwd()})"
    if os.path.isdir(executable):
        return f"{executable!r} is a directory"
    return f"{executable!r} is not executable: chmod +x it, or start it with its interpreter ([python, {executable!r}])"


def sdk_environment(env: dict[str, str]) -> dict[str, str]:
    """``env`` with the episode's ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` also under the names other SDKs read.

    ``OPENAI_API_BASE``: the older name of the base URL (LiteLLM, LangChain's ``ChatOpenAI``, which
    prefers it to ``OPENAI_BASE_URL``). ``ANTHROPIC_BASE_URL``: the base URL without its ``/v1``, as the
    ``anthropic`` SDK (and Claude Code) append ``/v1/messages`` themselves; ``ANTHROPIC_API_KEY`` and
    ``ANTHROPIC_AUTH_TOKEN``: the episode's key. They replace values inherited from the trainer's
    environment: an SDK that kept a real provider's URL or token would bypass the gateway (nothing
    trained, the user's key spent) or send a token the gateway refuses.
    """
    base, key = env.get("OPENAI_BASE_URL"), env.get("OPENAI_API_KEY")
    if not base or key is None:
        return env
    root = base.rstrip("/")
    root = root[:-len("/v1")] if root.endswith("/v1") else root
    return {**env, "OPENAI_API_BASE": base, "ANTHROPIC_BASE_URL": root, "ANTHROPIC_API_KEY": key,
            "ANTHROPIC_AUTH_TOKEN": key}


async def run_command(command: Sequence[str], env: dict[str, str],
                      stdin: bytes) -> tuple[int, tuple[bytes, bool] | None, str]:
    """(exit status, (last stdout line, cut short) or None, last stderr lines) of one run of ``command``.

    The process group is killed when this returns or is cancelled (a timeout, a stopping run). ``env`` gets
    the endpoint under every SDK's names (:func:`sdk_environment`).
    """
    loop = asyncio.get_running_loop()
    try:
        transport, proto = await loop.subprocess_exec(lambda: _Protocol(loop), *command, stdin=asyncio.subprocess.PIPE,
                                                      stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                                                      env=sdk_environment(env), start_new_session=True)
    except OSError as exc:
        raise CommandError(f"cannot start it ({exc.strerror or exc})") from None
    pgid = transport.get_pid()  # start_new_session: the command leads a group of its own
    with _groups_lock:
        _groups.add(pgid)
    guardian.watch(pgid)  # killed even if the trainer dies by SIGKILL
    try:
        _send(transport, stdin)
        await asyncio.shield(proto.exited)  # a cancel must not cancel the future itself: finally still waits on it
        _kill_group(pgid)  # background children end with the episode, and their copies of the pipes close
        with contextlib.suppress(TimeoutError):  # what it wrote before exiting is in the pipes: read that
            async with asyncio.timeout(_DRAIN_S):
                await asyncio.shield(proto.closed)
    finally:
        _kill_group(pgid)  # cancelled (a timeout, a stopping run): never leave the command behind
        with _groups_lock:
            _groups.discard(pgid)
        guardian.unwatch(pgid)
        if not proto.exited.done():  # reap it while the loop lives: after the loop closes, asyncio's child
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):  # watcher logs "Loop ... is closed"
                async with asyncio.timeout(_DRAIN_S):
                    await asyncio.shield(proto.exited)
        transport.close()
    out = proto.out.close()
    tail = "\n".join(line.decode(errors="replace") for line, _ in proto.err.close())
    code = transport.get_returncode()
    return (-1 if code is None else code), (out[-1] if out else None), tail


def _send(transport: Any, data: bytes) -> None:
    """Write the sample to stdin and close it; a command that never reads it is not an error."""
    pipe = transport.get_pipe_transport(0)
    if pipe is None:
        return
    with contextlib.suppress(OSError, RuntimeError):
        pipe.write(data)
        pipe.write_eof()
