"""τ²-bench's telecom domain through memrl's loader, environment and grader.

Gold replays of every base task (tasks.json, 114) and every task of the
``small`` split (tasks_small.json, 20) score 1.0 with their env assertions
evaluated; leaving out a gold action or changing one scores 0; solo mode gives
the agent the user's device tools and the solo policy.
"""

from __future__ import annotations

import pytest

from memrl.envs.domain import Domain
from memrl.envs.evaluate import evaluate, replay_gold
from memrl.envs.messages import Message, ToolCall
from memrl.envs.tasks import Task


def _episode(domain: Domain, task: Task, calls: list[ToolCall], solo: bool = False) -> list[Message]:
    """An episode log made of ``calls``: each call and its result, run live as an agent would see them."""
    env = domain.new_env(solo=solo)
    env.set_state(task.initial_state)
    msgs = []
    for i, call in enumerate(calls):
        call = ToolCall(call.name, dict(call.arguments), id=f"call_{i}", requestor=call.requestor)
        msgs += [Message("user" if call.requestor == "user" else "assistant", None, [call]), env.step(call)]
    return msgs


def _gold_calls(task: Task, solo: bool = False) -> list[ToolCall]:
    """The gold actions as calls; in solo mode the agent makes the user's calls itself."""
    return [ToolCall(a.name, dict(a.arguments), requestor="assistant" if solo else a.requestor)
            for a in task.evaluation_criteria.actions or []]


def test_loads_tasks_splits_and_policies(telecom, tau2_dir):
    assert len(telecom.tasks) == 114
    assert {k: len(telecom.get_tasks(k)) for k in ("base", "train", "test", "small")} == {
        "base": 114, "train": 74, "test": 40, "small": 20}
    assert all(t.ticket for t in telecom.get_tasks("small"))
    assert telecom.policy.startswith("<main_policy>") and "<tech_support_policy>" in telecom.policy
    assert (tau2_dir / "telecom" / "main_policy_solo.md").read_text() in telecom.solo_policy


def test_every_base_and_small_gold_replay_scores_one(telecom):
    for task in telecom.get_tasks("base") + telecom.get_tasks("small"):
        info = replay_gold(telecom, task)
        assert info.reward == 1.0, (task.id, info.breakdown, info.env_assertion_checks)
        assert info.env_assertion_checks and all(info.env_assertion_checks), task.id


def test_missing_or_wrong_action_scores_zero(telecom):
    for task in telecom.get_tasks("small"):
        calls = _gold_calls(task)
        assert evaluate(telecom, task, _episode(telecom, task, calls)).reward == 1.0, task.id
        assert evaluate(telecom, task, []).reward == 0.0, task.id
        assert evaluate(telecom, task, _episode(telecom, task, calls[:-1])).reward == 0.0, task.id
    refuel = next(t for t in telecom.tasks if any(a.name == "refuel_data" for a in t.evaluation_criteria.actions))
    wrong = [ToolCall(c.name, {**c.arguments, "gb_amount": 1.0}, requestor=c.requestor) if c.name == "refuel_data"
             else c for c in _gold_calls(refuel)]
    assert evaluate(telecom, refuel, _episode(telecom, refuel, _gold_calls(refuel))).reward == 1.0
    info = evaluate(telecom, refuel, _episode(telecom, refuel, wrong))
    assert info.reward == 0.0 and not all(info.env_assertion_checks)


def test_device_state_follows_the_line(telecom):
    """After each call the line's state reaches the phone (τ²-bench's sync): refuelling lifts the data cap."""
    task = next(t for t in telecom.tasks if t.id.startswith("[mobile_data_issue]data_mode_off|data_usage_exceeded"))
    env = telecom.new_env()
    env.set_state(task.initial_state)
    world = env.user_tools.db["surroundings"]
    assert world["phone_number"] == "555-123-2002" and world["mobile_data_usage_exceeded"]
    env.step(ToolCall("toggle_data", {}, requestor="user"))
    assert env.step(ToolCall("run_speed_test", {}, requestor="user")).content == "Speed test failed: No Connection."
    obs = env.step(ToolCall("refuel_data", {"customer_id": "C1001", "line_id": "L1002", "gb_amount": 2.0}))
    assert not obs.error and not world["mobile_data_usage_exceeded"]
    assert env.step(ToolCall("run_speed_test", {}, requestor="user")).content.startswith(
        "Speed Test Result: 275.00 Mbps (Excellent).")


def test_solo_mode_agent_works_the_device(telecom):
    env = telecom.new_env(solo=True)
    names = {s["function"]["name"] for s in env.tool_schemas()}
    assert {"refuel_data", "toggle_data", "run_speed_test"} <= names and len(names) == 13 + 30
    assert env.policy == telecom.solo_policy
    for task in telecom.get_tasks("small"):
        episode = _episode(telecom, task, _gold_calls(task, solo=True), solo=True)
        assert not any(m.error for m in episode), task.id
        assert evaluate(telecom, task, episode, solo=True).reward == 1.0, task.id
    task = telecom.get_tasks("small")[0]
    refused = env.step(ToolCall("toggle_data", {}, requestor="user"))
    assert refused.error and "not allowed in solo mode" in refused.content
    assert evaluate(telecom, task, _episode(telecom, task, _gold_calls(task), solo=True), solo=True).reward == 0.0


def test_full_split_names_the_missing_file(telecom):
    with pytest.raises(ValueError, match="tasks_full.json"):
        telecom.get_tasks("full")


def test_solo_episode_through_the_tool_agent_workflow(telecom):
    """A scripted agent that makes a small task's gold calls itself (phone included) and then answers:
    the workflow runs the calls on the solo environment and grades the episode 1.0."""
    import asyncio

    from memrl.config.schema import MemRLConfig
    from memrl.models.tiny import build_hf_tokenizer
    from memrl.testing.scripted import ScriptedEngine
    from memrl.workflows.common import encode_text
    from memrl.workflows.tool_agent import TaskSample, tool_agent
    from memrl.text.tool_calls import render_call

    tok = build_hf_tokenizer(["tool_call name arguments customer_id line_id refuel_data toggle_data"], vocab_size=400)
    task = next(t for t in telecom.get_tasks("small") if len(t.evaluation_criteria.actions or []) >= 3)
    texts = [render_call(c) for c in _gold_calls(task, solo=True)] + ["The issue is fixed."]
    end = tok.convert_tokens_to_ids("<|im_end|>")
    engine = ScriptedEngine(lambda prompt, params: encode_text(tok, texts[min(len(engine.calls) - 1,
                                                                               len(texts) - 1)]) + [end])
    cfg = MemRLConfig.model_validate({"workflow": {"name": "tool_agent", "max_total_tokens": 400_000,
                                                   "turn_tokens": 2048}})
    traj = asyncio.run(tool_agent(TaskSample(telecom, task, solo=True), engine, tok, cfg.workflow))
    assert traj.info["ending"] == "agent_stop" and traj.metrics["tool_errors"] == 0
    assert traj.metrics["tool_calls"] == len(texts) - 1 and traj.reward == 1.0
    first_prompt = tok.decode(engine.calls[0][0])
    assert task.ticket in first_prompt and '"name": "run_speed_test"' in first_prompt
