"""Progress when output is not a terminal: plain lines at the start, every few seconds and at the end."""

from __future__ import annotations

import io
import time

from rich.console import Console

from memrl.cli.progress import LineProgress, busy, progress


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_line_progress_is_throttled_and_ends_with_a_line():
    lines: list[str] = []
    clock = Clock()
    bar = LineProgress(lines.append, "eval", noun="episodes", every_s=10, clock=clock)
    bar.update(total=40, completed=10)  # resumed: 10 already done
    assert lines == ["eval: 10/40 episodes (25%), 0s elapsed"]
    clock.t = 5
    bar.advance(5)  # too soon for another line
    assert len(lines) == 1
    clock.t = 12
    bar.advance(1)  # 6 done this session in 12 s: 2 s each, 24 left
    assert lines[-1] == "eval: 16/40 episodes (40%), 12s elapsed, ~48s left"
    clock.t = 95
    bar.advance(24)
    assert lines[-1] == "eval: 40/40 episodes (100%), 1m35s elapsed"
    bar.close()
    assert len(lines) == 3  # the last state was already said


def test_progress_prints_plain_lines_to_a_log():
    out = io.StringIO()
    console = Console(file=out, force_terminal=False)
    with progress(console, "synth", total=3, noun="samples", every_s=3600) as bar:
        for _ in range(3):
            bar.advance()
    assert out.getvalue().splitlines() == ["synth: 1/3 samples (33%), 0s elapsed, ~0s left",
                                           "synth: 3/3 samples (100%), 0s elapsed"]


def test_busy_says_it_is_still_running():
    out = io.StringIO()
    console = Console(file=out, force_terminal=False)
    with busy(console, "quick", every_s=0.05, quiet_s=5):
        pass
    assert out.getvalue() == ""  # short work says nothing (a one-line error stays one line)
    with busy(console, "loading the model", every_s=0.05, quiet_s=0.01):
        time.sleep(0.2)
    lines = out.getvalue().splitlines()
    assert lines[0] == "loading the model ..." and lines[-1].startswith("loading the model: done in ")
    assert any(line.startswith("loading the model: still running (") for line in lines[1:-1])


def test_memrl_eval_shows_progress_lines_when_not_a_terminal(tmp_path):
    from typer.testing import CliRunner

    from memrl.cli.main import app
    from tests.eval.helpers import needle_eval_dir

    data = needle_eval_dir(tmp_path / "data", count=2)
    r = CliRunner().invoke(app, ["eval", "--model", "tiny", "--workflow", "memagent", "--data", str(data),
                                 "--docs", "3", "--out", str(tmp_path / "out"), "workflow.chunk_tokens=200",
                                 "workflow.memory_tokens=3", "workflow.final_tokens=3"])
    assert r.exit_code == 0, r.output
    assert "eval: 0/2 episodes (0%)" in r.output and "eval: 2/2 episodes (100%)" in r.output


def test_line_progress_beats_when_nothing_advances():
    lines: list[str] = []
    clock = Clock()
    bar = LineProgress(lines.append, "eval", noun="episodes", clock=clock, heartbeat_s=60)
    bar.beat()  # nothing said yet: nothing to repeat
    bar.update(total=6, completed=0)
    clock.t = 30
    bar.beat()
    assert lines == ["eval: 0/6 episodes (0%), 0s elapsed"]
    clock.t = 61
    bar.beat()  # a minute with no episode finished: the line again, with the time
    assert lines[-1] == "eval: 0/6 episodes (0%), 1m01s elapsed"
    clock.t = 100
    bar.beat()
    assert len(lines) == 2


def test_progress_heartbeat_in_a_log():
    out = io.StringIO()
    console = Console(file=out, force_terminal=False)
    with progress(console, "eval", total=6, noun="episodes", heartbeat_s=0.05) as bar:
        bar.update(total=6, completed=0)
        time.sleep(0.3)  # an episode that takes a while
    lines = out.getvalue().splitlines()
    assert len(lines) >= 3 and set(lines) == {"eval: 0/6 episodes (0%), 0s elapsed"}, lines
