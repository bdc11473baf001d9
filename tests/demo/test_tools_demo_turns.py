"""``memrl demo --task tools --record turns``: the RL stage records each model call as its own conversation
(``workflow.options.record=turns``), in its own folder beside the episode-recorded runs.

The run continues a copy of the session's shared seed-0 warm start (``small_tools_demo``,
tests/demo/conftest.py): only the RL stage and the held-out evaluations run here."""

from __future__ import annotations

import json
import re

import yaml
from typer.testing import CliRunner

from memrl_demo.run import rl_stage
from memrl_demo.tools_run import run_tools_demo
from tests.demo.conftest import tools_warm_start_of
from tests.demo.test_tools_demo import SMALL


def test_tools_demo_records_turns_in_its_own_folder(tmp_path, small_tools_demo):
    out = tmp_path / "demo"
    tools_warm_start_of(small_tools_demo, out)  # data, model_init, sft_model; no rl*/ nor summary*.json
    summary = run_tools_demo(out, rl_steps=1, seed=0, scale=SMALL, estimator="gigpo", record="turns")
    assert rl_stage("gigpo", record="turns") == ("rl_gigpo_turns", "summary_gigpo_turns.json")
    assert rl_stage("grpo", record="turns") == ("rl_turns", "summary_turns.json")
    assert json.loads((out / "summary_gigpo_turns.json").read_text()) == json.loads(json.dumps(summary))
    assert summary["record"] == "turns" and not (out / "summary.json").exists() and not (out / "rl_gigpo").exists()
    cfg = yaml.safe_load((out / "rl_gigpo_turns" / "config.yaml").read_text())
    assert cfg["workflow"]["options"]["record"] == "turns" and cfg["algorithm"]["adv_estimator"] == "gigpo"
    recs = [json.loads(x) for f in (out / "rl_gigpo_turns" / "rollouts").glob("*.jsonl")
            for x in f.read_text().splitlines()]
    # one conversation per model call (this barely warm-started model mostly answers in one turn)
    assert recs and all(len(r["conversations"]) == r["metrics"]["turns"] for r in recs if r["metrics"]["turns"])
    assert all(c["meta"].get("state") for r in recs for c in r["conversations"])


def test_record_is_a_tools_flag_with_two_values(tmp_path):
    from memrl.cli.main import app

    for args, said in ((["--record", "turns"], "--record applies to --task tools only"),
                       (["--task", "tools", "--record", "turn"], "--record must be episode or turns, not 'turn'")):
        r = CliRunner().invoke(app, ["demo", *args, "--out", str(tmp_path / "d")])
        assert r.exit_code == 2 and said in " ".join(re.sub("[│╭╮╰╯─]", " ", r.output).split())
        assert not (tmp_path / "d").exists()
