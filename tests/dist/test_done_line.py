"""``memrl train``'s last line reports failed episodes: a run that trained on 1 of 4 episodes a step must not
look like a clean one."""

from __future__ import annotations

import yaml
from typer.testing import CliRunner

from memrl.cli.main import app
from tests.train.helpers import config


def _done_line(tmp_path, monkeypatch, last: dict) -> str:
    import memrl.dist.launch as launch

    monkeypatch.setattr(launch, "train", lambda cfg: (3, last))
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(config(tmp_path).model_dump(mode="json")))
    r = CliRunner().invoke(app, ["train", str(path)])
    assert r.exit_code == 0, r.output
    return next(x for x in r.output.splitlines() if x.startswith("done:"))


def test_done_reports_failed_episodes(tmp_path, monkeypatch):
    line = _done_line(tmp_path, monkeypatch, {"reward": 0.25, "failed_episodes": 9.0})
    assert line.startswith("done: step 3, reward 0.250, 9 failed episode(s) (tracebacks in ")
    assert "/failures)" in line


def test_done_of_a_clean_run_is_unchanged(tmp_path, monkeypatch):
    line = _done_line(tmp_path, monkeypatch, {"reward": 0.5, "failed_episodes": 0.0})
    assert line.startswith("done: step 3, reward 0.500; checkpoints in ") and "failed" not in line


def test_only_rank_0_reports_done_under_torchrun(tmp_path, monkeypatch):
    """torchrun starts the command on every rank: the done line was printed once per rank."""
    import memrl.dist.launch as launch

    monkeypatch.setattr(launch, "train", lambda cfg: (3, {"reward": 0.5}))
    monkeypatch.setenv("RANK", "1")
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(config(tmp_path).model_dump(mode="json")))
    r = CliRunner().invoke(app, ["train", str(path)])
    assert r.exit_code == 0 and "done:" not in r.output
