"""examples/online: the bash (curl + jq) and Node.js agents of docs/guides/online.md run a tiny ``memrl train``.

Both agents run side by side against one run, two episodes each: the run's 2 steps of one GRPO group
of 2, with no failed episode. The guide shows each file as it is.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "online"


def test_the_bash_and_node_agents_train_two_steps(tmp_path: Path) -> None:
    if shutil.which("curl") is None or shutil.which("jq") is None:
        pytest.skip("the bash agent needs curl and jq")
    node = shutil.which("node")
    env = {**os.environ, "MEMRL_SESSION_KEY": "sk-rl-examples-test"}
    run = tmp_path / "run"
    trainer = subprocess.Popen([sys.executable, "-m", "memrl.cli.main", "train", str(EXAMPLE / "online.yaml"),
                                f"trainer.output_dir={run}", "workflow.options.port=0", "workflow.options.max_tokens=4",
                                f"data.train_file={REPO / 'examples' / 'agent_program' / 'arithmetic.jsonl'}"],
                               cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 300
        while not (run / "online.json").exists() and trainer.poll() is None and time.time() < deadline:
            time.sleep(0.2)
        url = json.loads((run / "online.json").read_text())["url"]
        commands = [["bash", str(EXAMPLE / "agent.sh"), "2" if node else "4", url]]
        if node:
            commands.append([node, str(EXAMPLE / "agent.mjs"), "2", url])
        agents = [subprocess.Popen(c, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                  for c in commands]
        outputs = [a.communicate(timeout=300) for a in agents]
        out, err = trainer.communicate(timeout=300)
    finally:
        trainer.kill()
    for agent, (stdout, stderr) in zip(agents, outputs):
        assert agent.returncode == 0, stderr[-2000:] + err[-2000:]
        assert stdout.count(": reward ") == (2 if node else 4)
    assert trainer.returncode == 0, err[-3000:]
    steps = [m for m in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "reward" in m]
    assert [m["step"] for m in steps] == [1, 2] and all(m["failed_episodes"] == 0 for m in steps)
    assert all("reply_chars" in m or "online_agent_s" in m for m in steps)


def test_the_guide_shows_each_file_as_it_is() -> None:
    guide = (REPO / "docs" / "guides" / "online.md").read_text()
    for name in ("online.yaml", "agent.sh", "agent.mjs"):
        assert (EXAMPLE / name).read_text().rstrip() in guide, f"docs/guides/online.md: examples/online/{name} differs"
