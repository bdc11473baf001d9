"""The tools demo end to end at a tiny scale: every stage runs through the real workflow, evaluator and
Trainer, writes its files, reports numbers in range, and resumes instead of redoing finished stages."""

from __future__ import annotations

import json

import pytest

from memrl_demo.tools_run import ToolsScale, run_tools_demo
from tests.demo.conftest import tools_warm_start_of

SMALL = ToolsScale(test_per_kind=1, train_per_kind=2, teacher_repeats=1, sft_epochs=1, prompts_per_step=2,
                   episodes_per_prompt=2, vocab_size=800)


@pytest.mark.parametrize("reward", ["tau2", "progress"])
def test_tools_demo_small(tmp_path, reward, small_tools_demo):
    if reward == "tau2":  # this fresh run is the session's: summary = run_tools_demo(out, ..., reward="tau2", ...)
        out, summary, _ = small_tools_demo
    else:
        out = tmp_path / "demo"
        tools_warm_start_of(small_tools_demo, out)
        summary = run_tools_demo(out, rl_steps=2, seed=0, reward=reward, scale=SMALL)
    for name in ("data/library/tasks.json", "data/library/split_tasks.json", "model_init/config.json",
                 "sft_model/config.json", "rl/metrics.jsonl", "rl/curves.png", "summary.json"):
        assert (out / name).is_file(), name
    assert json.loads((out / "summary.json").read_text()) == json.loads(json.dumps(summary))
    splits = json.loads((out / "data/library/split_tasks.json").read_text())
    assert not set(splits["train"]) & set(splits["test"])
    assert summary["heldout_tickets"] == len(splits["test"]) == 6  # one per kind
    assert summary["reward"] == reward and summary["rl_steps"] == 2
    for stage in ("before", "after"):
        s = summary[stage]
        assert 0.0 <= s["success"] <= 100.0
        assert s["tool_call_validity"] is None or 0.0 <= s["tool_call_validity"] <= 100.0  # None: no call made
        assert 1.0 <= s["turns"] <= 5.0 and s["episodes"] == 6
    assert summary["lift"] == pytest.approx(summary["heldout_after"] - summary["heldout_before"])
    episodes = [json.loads(line) for f in sorted((out / "rl/rollouts").glob("*.jsonl"))
                for line in f.read_text().splitlines() if line.strip()]
    assert episodes and all("tau2_reward" in e["metrics"] for e in episodes)  # the trained-on reward may differ
    # a finished demo re-run shows its stored result; with the summary gone (as after a Ctrl-C before it was
    # written) the RL stage resumes, rebuilds nothing before RL, and its time adds to the earlier run's
    stamp = (out / "sft_model/config.json").stat().st_mtime_ns
    assert run_tools_demo(out, rl_steps=2, seed=0, reward=reward, scale=SMALL) == summary
    (out / "summary.json").unlink()
    resumed = run_tools_demo(out, rl_steps=2, seed=0, reward=reward, scale=SMALL)
    assert (out / "sft_model/config.json").stat().st_mtime_ns == stamp
    assert resumed["resumed"] and resumed["seconds"] > summary["seconds"] and resumed["lift"] == summary["lift"]


def test_a_held_out_eval_without_a_tool_call_has_no_validity():
    """No call made on any ticket: validity is undefined (None), and the printed line says so instead of 0%."""
    from memrl.types import Trajectory
    from memrl_demo.tools_eval import summarize
    from memrl_demo.tools_run import _line

    def episode(task: str, calls: float, bad: float) -> Trajectory:
        return Trajectory(conversations=[], reward=0.0, sample_id=task, group_id=task,
                          metrics={"tool_calls": calls, "invalid_tool_calls": bad, "tool_errors": 0.0, "turns": 1.0})

    none = summarize([episode("lost_1", 0.0, 0.0), episode("renew_2", 0.0, 0.0)])
    assert none["tool_call_validity"] is None and "no tool call made" in _line("after RL", none)
    some = summarize([episode("lost_1", 4.0, 1.0), episode("renew_2", 0.0, 0.0)])
    assert some["tool_call_validity"] == 75.0 and "tool-call validity 75.0%" in _line("after RL", some)
