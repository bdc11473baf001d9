"""``memrl demo --estimator``: the RL stage with another advantage estimator, from the same warm start, in its
own folder; names are checked against the estimator registry before anything runs."""

from __future__ import annotations

import json
import re

import yaml
from typer.testing import CliRunner

from memrl_demo.run import rl_stage, run_demo
from tests.demo.conftest import copy_of
from tests.demo.test_determinism import SMALL


def test_another_estimator_trains_from_the_same_warm_start_in_its_own_folder(tmp_path, small_demo):
    grpo = copy_of(small_demo, tmp_path)  # run_demo(tmp_path, rl_steps=2, seed=3, scale=SMALL), shared
    sft = (tmp_path / "sft_model" / "model.safetensors").read_bytes()
    gigpo = run_demo(tmp_path, rl_steps=2, seed=3, scale=SMALL, estimator="gigpo")
    assert (tmp_path / "sft_model" / "model.safetensors").read_bytes() == sft  # reused, not retrained
    assert grpo["estimator"] == "grpo" and gigpo["estimator"] == "gigpo"
    assert gigpo["heldout_before"] == grpo["heldout_before"]
    assert json.loads((tmp_path / "summary_gigpo.json").read_text()) == gigpo
    assert json.loads((tmp_path / "summary.json").read_text()) == grpo  # the default's run is kept
    cfg = yaml.safe_load((tmp_path / "rl_gigpo" / "config.yaml").read_text())
    assert cfg["algorithm"]["adv_estimator"] == "gigpo"
    rows = [json.loads(x) for x in (tmp_path / "rl_gigpo" / "metrics.jsonl").read_text().splitlines()]
    assert sum("train_rows" in r for r in rows) == 2
    # MemAgent's anchors (question, chunk, memory) reach the gigpo run's records
    recs = [json.loads(x) for f in (tmp_path / "rl_gigpo" / "rollouts").glob("*.jsonl") for x in f.read_text().splitlines()]
    assert recs and all(c["meta"].get("state") for r in recs for c in r["conversations"])


def test_stage_names():
    assert rl_stage("grpo") == ("rl", "summary.json")
    assert rl_stage("gigpo") == ("rl_gigpo", "summary_gigpo.json")
    assert rl_stage("gigpo", asynchronous=True) == ("rl_async_gigpo", "summary_async_gigpo.json")
    assert rl_stage("my_pkg.est:fn") == ("rl_my_pkg.est_fn", "summary_my_pkg.est_fn.json")


def test_an_unknown_estimator_is_refused_with_the_registered_names(tmp_path):
    from memrl.cli.main import app

    r = CliRunner().invoke(app, ["demo", "--estimator", "gipgo", "--out", str(tmp_path / "d")])
    assert r.exit_code == 2
    said = " ".join(re.sub("[│╭╮╰╯─]", " ", r.output).split())  # rich's error box wraps the line
    assert "did you mean 'gigpo'?" in said and "step_reinforce" in said
    assert not (tmp_path / "d").exists()  # refused before anything was written
