"""The spawning launcher when a rank fails: one line naming the rank, the second signal's hard stop, and nothing
left behind that holds the run folder's lock (a SIGKILLed parent's Manager server did, so the run never resumed)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import time

import pytest
from torch.multiprocessing import ProcessExitedException

from memrl.dist import launch
from memrl.engines.base import EngineDeadError


def test_a_dead_rank_is_one_line_and_a_second_signal_exits_with_its_code():
    died = ProcessExitedException("process 1 terminated with signal SIGKILL", error_index=1, error_pid=42,
                                  exit_code=-9, signal_name="SIGKILL")
    err = launch._failure(died, {}, [])
    assert isinstance(err, launch.RankDiedError) and "\n" not in str(err)
    assert str(err).startswith("trainer rank 1 was killed by SIGKILL; the other ranks were stopped")
    crashed = ProcessExitedException("process 0 terminated with exit code 3", 0, 43, 3)
    assert "trainer rank 0 exited with code 3" in str(launch._failure(crashed, {}, []))
    quit_now = launch._failure(died, {}, [signal.SIGINT, signal.SIGINT])
    assert isinstance(quit_now, SystemExit) and quit_now.code == 130
    relayed = launch._failure(died, {"error": ["EngineDeadError", "no rollout replica is left"]}, [])
    assert isinstance(relayed, EngineDeadError) and str(relayed) == "no rollout replica is left"


def _deaf(ready) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a rank stuck inside a collective: its handler never runs
    ready.set()
    time.sleep(120)


@pytest.mark.timeout(60)
def test_ranks_still_alive_after_a_second_signal_are_killed(monkeypatch):
    monkeypatch.setattr(launch, "HARD_STOP_S", 0.3)
    spawn = multiprocessing.get_context("spawn")
    ready = [spawn.Event() for _ in range(2)]
    procs = [spawn.Process(target=_deaf, args=(r,)) for r in ready]
    for p in procs:
        p.start()
    ctx = type("Ctx", (), {"processes": procs})()
    forward = launch._forwarder(ctx, [])
    try:
        assert all(r.wait(30) for r in ready)
        forward(signal.SIGINT, None)
        time.sleep(0.8)
        assert all(p.is_alive() for p in procs)  # one signal: the ranks finish their step
        forward(signal.SIGINT, None)
        for p in procs:
            p.join(timeout=10)
        assert [p.exitcode for p in procs] == [-signal.SIGKILL] * 2
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_killed_parent_leaves_nothing_that_blocks_the_resume(tmp_path):
    from tests.train.test_signals import steps, train, write_config

    cfg = write_config(tmp_path, total_steps=50)
    run = tmp_path / "run"
    proc = subprocess.Popen(train(cfg, "cluster.trainers=2"), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    deadline = time.time() + 300
    while not steps(run) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert steps(run), proc.stderr.read().decode() if proc.poll() is not None else "no step in 300 s"
    proc.kill()
    proc.wait(timeout=30)
    time.sleep(20)  # the ranks notice their parent is gone, finish and save their step
    saved = [int(p.name.split("_")[1]) for p in (run / "checkpoints").glob("step_*")]
    assert saved, proc.stderr.read().decode()[-3000:]
    done = max(saved)
    r = subprocess.run(train(cfg, "cluster.trainers=2", f"trainer.total_steps={done + 1}"), capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "in use by" not in r.stderr and steps(run)[-1] == done + 1
    os.killpg(proc.pid, signal.SIGKILL) if _group_alive(proc.pid) else None


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
