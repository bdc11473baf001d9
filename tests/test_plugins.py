"""Plug-ins by import path: workflows and rewards of your own, checked when the config loads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memrl.config import ConfigError, load_config
from memrl.plugins import REWARDS, WORKFLOWS, load_object
from memrl.workflows import get_workflow

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "custom_workflow"


def test_builtins_come_from_the_same_registry():
    assert set(WORKFLOWS.names) == {"memagent", "rememr1", "full_context", "tool_agent"}
    from memrl.workflows.memagent import memagent

    assert get_workflow("memagent") is memagent
    assert REWARDS.get("em")("\\boxed{Paris}", ["paris"], "Paris") == 1.0


def test_bad_names_fail_when_the_config_loads():
    with pytest.raises(ConfigError, match="workflow.name: unknown workflow 'memagnet': choose memagent"):
        load_config(None, ["workflow.name=memagnet"])
    with pytest.raises(ConfigError, match="cannot import no_such_pkg"):
        load_config(None, ["workflow.name=no_such_pkg.mod:fn"])
    with pytest.raises(ConfigError, match="has no attribute nope"):
        load_config(None, ["workflow.reward=memrl.rewards.builtin:nope"])
    with pytest.raises(ConfigError, match="a workflow must be an async function"):
        load_config(None, ["workflow.name=memrl.rewards.builtin:em"])
    with pytest.raises(ValueError, match="import path"):
        load_object("just_a_name", "workflow")


def test_example_plugins_load_and_score(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLE))
    cfg = load_config(EXAMPLE / "config.yaml", [])
    assert cfg.workflow.name == "say_word:say_word"
    reward = REWARDS.get(cfg.workflow.reward)
    assert reward("I say APPLE.", ["apple"], None) == 1.0 and reward("no", ["apple"], None) == 0.0


def test_example_trains_from_outside_the_source_tree(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(EXAMPLE)}
    r = subprocess.run([sys.executable, "-m", "memrl.cli.main", "train", EXAMPLE / "config.yaml",
                        "trainer.total_steps=2", f"trainer.output_dir={tmp_path / 'run'}",
                        f"data.train_file={EXAMPLE / 'words.jsonl'}"],
                       capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in rows if "reward" in m] == [1, 2]
    assert (tmp_path / "run" / "rollouts" / "step_000002.jsonl").is_file()
