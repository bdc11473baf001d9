"""Ctrl-C (SIGINT) or SIGTERM during ``memrl train``: the last finished step is saved and the run resumes."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import yaml

from tests.train.helpers import write_task


def write_config(tmp, total_steps):
    cfg = {
        "model": {"path": "tiny"},
        "data": {"train_file": str(write_task(tmp / "train.jsonl"))},
        "workflow": {"chunk_tokens": 32, "memory_tokens": 3, "final_tokens": 4, "reward": "em"},
        "algorithm": {"n": 2, "entropy_coef": 0.05},
        "trainer": {"lr": 1e-2, "total_steps": total_steps, "prompts_per_step": 2, "save_every": 100, "seed": 5,
                    "output_dir": str(tmp / "run")},
        "engine": {"device": "cpu"},
    }
    path = tmp / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def train(cfg_path, *overrides):
    return [sys.executable, "-m", "memrl.cli.main", "train", str(cfg_path), *overrides]


def steps(run):
    path = run / "metrics.jsonl"
    return [json.loads(x)["step"] for x in path.read_text().splitlines() if x.endswith("}")] if path.is_file() else []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_saves_the_step_and_the_same_command_resumes(tmp_path, sig):
    cfg = write_config(tmp_path, total_steps=50)  # far more than will run: it must stop on the signal
    run = tmp_path / "run"
    log = tmp_path / "stderr.txt"
    with open(log, "w") as fh:  # a file, not a pipe nobody reads while we wait
        proc = subprocess.Popen(train(cfg), stdout=subprocess.DEVNULL, stderr=fh)
        deadline = time.time() + 300
        while not steps(run) and time.time() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert steps(run), log.read_text()
        proc.send_signal(sig)
        proc.wait(timeout=300)
    err = log.read_text()
    assert proc.returncode == 128 + sig, err
    m = re.search(r"interrupted at step (\d+) — re-run the same command to resume", err)
    assert m, err
    stopped = int(m.group(1))
    assert stopped >= 1 and steps(run) == list(range(1, stopped + 1))  # the step in flight was finished
    assert (run / "checkpoints" / f"step_{stopped:06d}" / "manifest.json").is_file()  # save_every=100: saved on stop
    assert "Traceback" not in err
    if sig != signal.SIGINT:
        return
    r = subprocess.run(train(cfg, f"trainer.total_steps={stopped + 1}"), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert f"resumed from step {stopped}" in r.stderr
    assert steps(run) == list(range(1, stopped + 2))


def test_second_signal_exits_at_once(tmp_path):
    """The first signal only sets a flag; a second one ends the process on the spot with 128 + signal."""
    script = textwrap.dedent("""
        import os, signal, sys, time
        from memrl.train.signals import StopRequest

        with StopRequest() as stop:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.2)
            assert stop.signum == signal.SIGINT  # still running after the first one
            print("first handled", flush=True)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(30)
        print("not reached", flush=True)
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert r.returncode == 130
    assert "first handled" in r.stdout and "not reached" not in r.stdout
    assert "SIGINT again: exiting now" in r.stderr


def test_second_signal_exits_while_the_main_thread_is_inside_one_long_call():
    """A CPU backward is one torch call: Python's handler waits for it. libc's sleep in a main thread that
    blocks the signals stands in for it (the kernel hands them to another thread; the sleep goes on)."""
    script = textwrap.dedent("""
        import ctypes, signal
        from memrl.train.signals import StopRequest

        with StopRequest():
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
            print("in the step", flush=True)
            ctypes.CDLL(None).sleep(600)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "in the step\n"
        proc.send_signal(signal.SIGTERM)
        time.sleep(3)  # past the second-signal grace: one signal alone must not end the step
        assert proc.poll() is None
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)  # without the watcher: the 600 s sleep, and this times out
    finally:
        proc.kill()
    assert proc.returncode == 143 and time.monotonic() - started < 30
    assert "SIGTERM again: exiting now without a checkpoint" in err


def test_handlers_are_restored_after_the_run():
    import threading

    from memrl.train.signals import StopRequest

    before = signal.getsignal(signal.SIGINT)
    wakeup = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(wakeup)
    with StopRequest():
        assert signal.getsignal(signal.SIGINT) is not before
    assert signal.getsignal(signal.SIGINT) is before
    assert signal.set_wakeup_fd(wakeup) == wakeup  # the watcher's socket is gone, and its thread
    assert not [t for t in threading.enumerate() if t.name == "memrl-stop-watch"]


@pytest.mark.slow
def test_ctrl_c_with_spawned_ranks_saves_and_resumes(tmp_path):
    """Two spawned ranks: the parent forwards the signal once, the ranks agree on the step and save it."""
    cfg = write_config(tmp_path, total_steps=50)
    run = tmp_path / "run"
    log = tmp_path / "stderr.txt"
    with open(log, "w") as fh:
        proc = subprocess.Popen(train(cfg, "cluster.trainers=2"), stdout=subprocess.DEVNULL, stderr=fh)
        deadline = time.time() + 300
        while not steps(run) and time.time() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert steps(run), log.read_text()
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=300)
    err = log.read_text()
    m = re.search(r"interrupted at step (\d+) — re-run the same command to resume", err)
    assert proc.returncode == 130 and m, err
    stopped = int(m.group(1))
    assert (run / "checkpoints" / f"step_{stopped:06d}" / "manifest.json").is_file()
    r = subprocess.run(train(cfg, "cluster.trainers=2", f"trainer.total_steps={stopped + 1}"),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert steps(run) == list(range(1, stopped + 2))


def test_a_second_signal_leaves_no_run_lock(tmp_path):
    """``os._exit`` skips every ``finally``: the folder's lock would stay, and the next run would report this one
    as killed by the kernel ("did not end cleanly")."""
    script = textwrap.dedent("""
        import os, signal, sys, time
        from pathlib import Path
        from memrl.data.runlock import hold_folder
        from memrl.train.signals import StopRequest

        with hold_folder(Path(sys.argv[1]), "memrl train", "trainer.output_dir", print), StopRequest():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.2)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(30)
    """)
    run = tmp_path / "run"
    r = subprocess.run([sys.executable, "-c", script, str(run)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 130 and "SIGINT again: exiting now" in r.stderr
    assert run.is_dir() and not (run / ".memrl-lock").exists()
