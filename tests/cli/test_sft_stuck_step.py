"""A signal that arrives while fine-tuning is inside one long torch call still ends the run.

Python runs a signal's handler only between bytecodes, so a step's backward that takes an hour
kept SIGTERM waiting for that hour. The test stands in for such a call with libc's ``sleep`` in a
main thread that blocks SIGTERM: the kernel hands the signal to another thread and the sleep
goes on, as a compute-bound torch kernel would.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

PROGRAM = textwrap.dedent("""
    import ctypes, signal, sys, threading, time
    from pathlib import Path
    from memrl.cli.sft import _stops_say_nothing_kept

    SLEEPS = {"35", "230", "101", "115"}  # nanosleep, clock_nanosleep on x86-64 and arm64

    def announce(tid):
        # "in the step" only once the main thread is inside sleep(): a signal that trips while it still runs
        # bytecode is handled by Python at once, which is not the stuck call this test is about
        for _ in range(3000):
            try:
                with open(f"/proc/self/task/{tid}/syscall") as f:
                    if f.read().split()[0] in SLEEPS:
                        break
            except OSError:  # no /proc: give it time instead
                time.sleep(1)
                break
            time.sleep(0.01)
        print("in the step", flush=True)

    with _stops_say_nothing_kept(Path(sys.argv[1]), grace_s=0.5):
        threading.Thread(target=announce, args=(threading.get_native_id(),), daemon=True).start()
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        ctypes.CDLL(None).sleep(600)
""")


@pytest.mark.skipif(not hasattr(signal, "pthread_sigmask"), reason="POSIX signal masks")
def test_sigterm_during_one_long_call_ends_the_run_after_the_grace(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", PROGRAM, str(tmp_path / "model")], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "in the step\n"
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)  # without the watcher: the 600 s sleep, then this times out
    finally:
        proc.kill()
    assert proc.returncode == 143
    assert time.monotonic() - started < 30
    assert err.strip().startswith("interrupted (the step under way did not stop within 0.5 s): fine-tuning "
                                  f"stopped before its end, so nothing was written to {tmp_path / 'model'}")


def test_a_handled_signal_or_a_normal_end_leaves_no_watcher_and_the_wakeup_fd_as_it_was(tmp_path):
    import typer

    from memrl.cli.sft import _stops_say_nothing_kept

    before = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(before)
    with _stops_say_nothing_kept(tmp_path / "model", grace_s=0.2):
        pass
    with pytest.raises(typer.Exit) as ended:
        with _stops_say_nothing_kept(tmp_path / "model", grace_s=0.2):
            signal.raise_signal(signal.SIGTERM)  # answered at once by the handler: the watcher must not exit
    time.sleep(0.5)  # past the grace: a watcher that fired would have ended this process
    assert ended.value.exit_code == 143
    assert not [t for t in threading.enumerate() if t.name == "memrl-stop-watch"]
    assert signal.set_wakeup_fd(before) == before
