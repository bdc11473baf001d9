"""``subprocess.run(argv, capture_output=True, text=True, timeout=...)`` with a cap on what is kept.

Why: the ``shell`` tool runs commands an agent wrote, and τ³ keeps all of their output in memory. ``yes`` or
``cat /dev/zero`` writes gigabytes a second: within τ³'s 30-second timeout that is tens of GB, and the
training process holding every episode is killed for memory. Here each stream keeps at most
:data:`OUTPUT_LIMIT` bytes; past that the command's process group is killed and the output is cut there,
with a last line saying so. Below the cap the result is ``subprocess.run``'s: the same return code, the same
text (locale encoding, strict, universal newlines), the same ``TimeoutExpired``.
"""

from __future__ import annotations

import locale
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import IO

OUTPUT_LIMIT = 4 * 2**20  # bytes per stream: far more than a model can read in one observation
CUT_NOTE = "\n[output cut at {limit} bytes: the command was stopped]\n"


def capped_run(argv: list[str], *, timeout: float, cwd: Path,
               limit: int = OUTPUT_LIMIT) -> subprocess.CompletedProcess[str]:
    """Run ``argv``; its exit code and text output, each stream cut after ``limit`` bytes."""
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd,
                          start_new_session=True) as proc:
        over = threading.Event()
        kept = {"out": bytearray(), "err": bytearray()}
        pumps = [threading.Thread(target=_pump, args=(stream, kept[name], limit, over, proc), daemon=True)
                 for name, stream in (("out", proc.stdout), ("err", proc.stderr))]
        for pump in pumps:
            pump.start()
        deadline = time.monotonic() + timeout
        try:
            code = proc.wait(timeout=timeout)
            for pump in pumps:  # as subprocess.run, the output ends when the pipes close, within the timeout
                pump.join(timeout=max(deadline - time.monotonic(), 0))
            if any(pump.is_alive() for pump in pumps):  # a child left running in the background holds them
                raise subprocess.TimeoutExpired(argv, timeout)
        except BaseException:  # the timeout, or Ctrl-C: the command and what it started stop too
            _kill(proc)
            raise
        finally:
            for pump in pumps:
                pump.join(timeout=5)
    out, err = (_text(bytes(kept[k]), limit) for k in ("out", "err"))
    return subprocess.CompletedProcess(argv, code, out, err)


def _pump(stream: IO[bytes] | None, buf: bytearray, limit: int, over: threading.Event,
          proc: subprocess.Popen[bytes]) -> None:
    """Read ``stream`` to its end, keeping its first ``limit + 1`` bytes; past them stop the command."""
    if stream is None:
        return
    try:
        while chunk := stream.read1(1 << 16):  # type: ignore[attr-defined]
            room = limit + 1 - len(buf)
            if room > 0:
                buf += chunk[:room]
            if len(buf) > limit and not over.is_set():
                over.set()
                _kill(proc)
    except (OSError, ValueError):  # the pipe was closed under us (the run ended on a timeout or Ctrl-C)
        return


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """Stop the command and what it started (a pipeline's processes share its session)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def _text(data: bytes, limit: int) -> str:
    """Bytes as ``subprocess.run(text=True)`` decodes them; a stream past ``limit`` keeps its first ``limit``."""
    cut = len(data) > limit
    encoding = locale.getpreferredencoding(False)
    text = data[:limit].decode(encoding, errors="ignore" if cut else "strict")  # a cut may split a character
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text + CUT_NOTE.format(limit=limit) if cut else text
