"""The τ² tool agent with SmolLM2 as the agent (its own chat template, ``tool_format=template``) and as the
user simulator, on τ²-bench's mock and retail domains (two and one task: a split written for the test)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.real.helpers import memrl, report

pytestmark = pytest.mark.slow


def small_split(tau2_dir: Path, domain: str, tmp_path: Path, count: int) -> Path:
    """A data dir whose ``domain`` has one more split, ``few``, of its first ``count`` tasks."""
    src, dst = tau2_dir / domain, tmp_path / "tau2" / domain
    dst.mkdir(parents=True)
    for f in src.iterdir():
        if f.name != "split_tasks.json":
            (dst / f.name).symlink_to(f)
    splits = json.loads((src / "split_tasks.json").read_text()) if (src / "split_tasks.json").is_file() else {}
    splits["few"] = [t["id"] for t in json.loads((src / "tasks.json").read_text())[:count]]
    (dst / "split_tasks.json").write_text(json.dumps(splits))
    return dst.parent


@pytest.mark.parametrize("domain,count", [("mock", 2), ("retail", 1)])
def test_tool_agent_with_real_agent_and_user_simulator(smol, tau2_dir, tmp_path, domain, count):
    data_dir, out = small_split(tau2_dir, domain, tmp_path, count), tmp_path / "ev"
    _, wall = memrl("eval", "--workflow", "tool_agent", "--model", smol, "--domain", domain, "--split", "few",
                    "--data-dir", data_dir, "--out", out, "--temperature", "0", "workflow.tool_format=template",
                    "env.solo=false", f"env.user_model={smol}", "env.user_max_tokens=32", "env.user_temperature=0",
                    "workflow.max_turns=3", "workflow.turn_tokens=48")
    res = json.loads((out / "results.json").read_text())
    assert res["failed_trials"] == 0, res
    episodes = [json.loads(p.read_text()) for p in (out / "episodes").rglob("*.json")]
    assert len(episodes) == count
    for e in episodes:
        assert e["metrics"].get("turns", 0) >= 1, e["metrics"]  # the real model acted; the prompt fit
    from memrl.eval.records import read_rollouts
    from memrl.models.resolve import load_tokenizer

    first = load_tokenizer(smol).decode(list(read_rollouts(out)[0].conversations[0].token_ids))
    assert first.startswith("<|im_start|>system\n")  # SmolLM2's own chat template (which has no tools section)
    turns = sum(e["metrics"].get("turns", 0) for e in episodes)
    report(f"eval tool_agent {domain} (template, SmolLM2 agent + user simulator, {count} task(s), <= 3 turns)",
           **{"reward": round(sum(e.get("reward", 0.0) for e in episodes) / count, 3), "agent turns": int(turns),
              "s/episode": round(wall / count, 1)})
