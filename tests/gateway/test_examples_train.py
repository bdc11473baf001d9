"""examples/agent_program: plain openai-SDK programs trained 3 GRPO steps on the tiny model by ``memrl train``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "agent_program"


def train(tmp_path: Path, config: str, data: str) -> tuple[list[dict], list[dict]]:
    env = {**os.environ, "PYTHONPATH": str(EXAMPLE)}
    r = subprocess.run([sys.executable, "-m", "memrl.cli.main", "train", str(EXAMPLE / config),
                        f"trainer.output_dir={tmp_path / 'run'}", f"data.train_file={EXAMPLE / data}",
                        "trainer.prompts_per_step=1", "algorithm.n=2", "workflow.options.max_tokens=4"],
                       capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    run = tmp_path / "run"
    metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    rollouts = [json.loads(x) for f in sorted((run / "rollouts").glob("step_*.jsonl"))
                for x in f.read_text().splitlines()]
    return metrics, rollouts


def test_memagent_program_trains(tmp_path):
    metrics, rollouts = train(tmp_path, "memagent.yaml", "needles.jsonl")
    steps = [m for m in metrics if "reward" in m]
    assert [m["step"] for m in steps] == [1, 2, 3]
    assert all(m["failed_episodes"] == 0 and m["logprob_mismatch"] < 1e-4 for m in steps)
    assert rollouts and all(len(r["conversations"]) == 4 for r in rollouts)  # 3 memory updates + the answer
    first = rollouts[0]["conversations"]
    assert first[0]["meta"]["messages"][0]["content"].startswith("You are reading a document piece by piece")
    assert first[3]["meta"]["messages"][0]["content"].startswith("Question: What is the secret password?")


def test_two_tool_program_trains(tmp_path):
    metrics, rollouts = train(tmp_path, "calculator.yaml", "arithmetic.jsonl")
    assert [m["step"] for m in metrics if "reward" in m] == [1, 2, 3]
    conv = rollouts[0]["conversations"][0]
    assert conv["meta"]["tools"][0]["function"]["name"] == "add"
    assert [m["role"] for m in conv["meta"]["messages"]] == ["system", "user"]


def test_memagent_example_is_about_forty_lines():
    code = [x for x in (EXAMPLE / "memagent.py").read_text().splitlines() if x.strip()]
    assert len(code) <= 40 and not any("memrl" in x for x in code if x.startswith(("import", "from")))


@pytest.mark.parametrize("config", ["memagent.yaml", "calculator.yaml"])
def test_example_configs_load(config, monkeypatch):
    from memrl.config import load_config

    monkeypatch.syspath_prepend(str(EXAMPLE))
    cfg = load_config(EXAMPLE / config, [])
    assert cfg.workflow.name == "agent" and cfg.workflow.opts.program.endswith(config.split(".")[0])
