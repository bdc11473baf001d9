"""A demo's reported cost is every invocation's: an interrupted run and its resume add up, and re-running a
finished demo shows the stored result instead of replacing its time with a re-evaluation's."""

from __future__ import annotations

import json
import time

import pytest

from memrl_demo.spent import TIMES, StageClock, finished
from tests.demo.conftest import copy_of


def _busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_stage_times_add_up_over_invocations_and_count_an_interrupted_one(tmp_path):
    clock = StageClock(tmp_path)
    with pytest.raises(KeyboardInterrupt), clock.stage("rl"):
        _busy(0.2)
        raise KeyboardInterrupt  # Ctrl-C mid-stage: its seconds are still written
    first = json.loads((tmp_path / TIMES).read_text())["rl"]
    assert first["runs"] == 1 and first["seconds"] >= 0.2
    again = StageClock(tmp_path)  # the resume, a new process
    assert again.resumed("rl") and not again.resumed("warm_start")
    with again.stage("rl"):
        _busy(0.2)
    wall, cpu = again.total("warm_start", "rl")
    assert wall >= 0.4 and wall == pytest.approx(first["seconds"] + 0.2, abs=0.15) and cpu > 0
    assert json.loads((tmp_path / TIMES).read_text())["rl"]["runs"] == 2


def test_a_damaged_ledger_costs_its_seconds_not_the_demo(tmp_path):
    (tmp_path / TIMES).write_text('{"rl": {"seconds": 3')
    clock = StageClock(tmp_path)
    assert clock.total("rl") == (0.0, 0.0) and not clock.resumed("rl")


def test_finished_needs_the_same_request_and_the_run_folder(tmp_path):
    (tmp_path / "summary.json").write_text(json.dumps({"seed": 3, "requested_rl_steps": 2, "seconds": 9.0}))
    assert finished(tmp_path / "summary.json", tmp_path / "rl", seed=3) is None  # no run folder
    (tmp_path / "rl").mkdir()
    assert finished(tmp_path / "summary.json", tmp_path / "rl", seed=3, requested_rl_steps=2)["seconds"] == 9.0
    assert finished(tmp_path / "summary.json", tmp_path / "rl", seed=3, requested_rl_steps=4) is None  # more steps
    assert finished(tmp_path / "nothing.json", tmp_path / "rl", seed=3) is None


def test_rerunning_a_finished_demo_shows_its_result_and_keeps_its_time(tmp_path, small_demo, capsys):
    from memrl_demo.run import run_demo

    stored = copy_of(small_demo, tmp_path)
    assert stored["seconds"] > 0 and stored["resumed"] is False
    times = json.loads((tmp_path / TIMES).read_text())
    assert stored["seconds"] == pytest.approx(times["warm_start"]["seconds"] + times["rl"]["seconds"], abs=0.11)
    metrics = (tmp_path / "rl" / "metrics.jsonl").stat().st_mtime_ns
    again = run_demo(tmp_path, rl_steps=2, seed=3, scale=_small())
    assert again == stored and json.loads((tmp_path / "summary.json").read_text()) == stored
    assert (tmp_path / "rl" / "metrics.jsonl").stat().st_mtime_ns == metrics  # nothing re-run
    assert "already finished" in capsys.readouterr().err


def _small():
    from tests.demo.test_determinism import SMALL

    return SMALL
