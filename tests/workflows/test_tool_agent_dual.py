"""Dual control through the tool_agent workflow: the simulated user runs its own phone tools."""

from __future__ import annotations

import asyncio

import pytest

from memrl.config.schema import MemRLConfig
from memrl.engines.base import SamplingParams
from memrl.envs.domain import load_domain
from memrl.envs.user_sim import LLMUserSimulator
from memrl.models.tiny import build_hf_tokenizer
from memrl.testing.scripted import ScriptedEngine
from memrl.workflows.common import encode_text
from memrl.workflows.tool_agent import TaskSample, tool_agent
from memrl.text.tool_calls import render_call
from memrl.envs.messages import ToolCall


def _dual_episode(tau2_dir, options=None, sampling=None):
    """The telecom dual-control episode: the user turns data on with its phone, the agent refuels."""
    telecom = load_domain("telecom", tau2_dir)
    tok = build_hf_tokenizer(["tool_call name arguments toggle_data refuel_data"], vocab_size=400)
    end = tok.convert_tokens_to_ids("<|im_end|>")
    task = next(t for t in telecom.tasks if t.id.startswith("[mobile_data_issue]data_mode_off|data_usage_exceeded"))
    user_texts = ["My mobile data does not work.", render_call(ToolCall("toggle_data", {})),
                  "Done, data is on.", "###STOP###"]
    uengine = ScriptedEngine(lambda p, k: encode_text(tok, user_texts[len(uengine.calls) - 1]) + [end])
    agent_texts = ["Please turn on mobile data.",
                   render_call(ToolCall("refuel_data", {"customer_id": "C1001", "line_id": "L1002", "gb_amount": 2.0})),
                   "I added 2 GB. Anything else?"]
    aengine = ScriptedEngine(lambda p, k: encode_text(tok, agent_texts[len(aengine.calls) - 1]) + [end])
    cfg = MemRLConfig.model_validate({"workflow": {"name": "tool_agent", "options": {
        "max_total_tokens": 400_000, "turn_tokens": 2048, **(options or {})}}})
    s = TaskSample(telecom, task, solo=False, user=LLMUserSimulator(uengine, tok))
    traj = asyncio.run(tool_agent(s, aengine, tok, cfg.workflow, sampling=sampling))
    return traj, aengine, uengine, tok


def test_dual_control_episode(tau2_dir):
    traj, aengine, _, tok = _dual_episode(tau2_dir)
    assert traj.info["ending"] == "user_stop", traj.info
    assert traj.metrics["user_tool_calls"] == 1 and traj.reward == 1.0
    agent_view = tok.decode(aengine.calls[-1][0])
    assert "Mobile Data is now ON" not in agent_view and "Done, data is on." in agent_view


def test_tau2_seeds_put_the_episodes_seed_on_every_agent_and_user_call(tau2_dir):
    """τ²-bench's orchestrator sets the trial's seed in the agent's and the user's model arguments: every call
    sends it, the user's device-tool rounds included. memrl's own seeding gives each call its own."""
    sampling = SamplingParams(temperature=1.0, seed=11)
    traj, aengine, uengine, _ = _dual_episode(tau2_dir, {"seeds": "tau2"}, sampling)
    assert traj.reward == 1.0 and len(aengine.calls) == 3 and len(uengine.calls) == 4
    assert {c[1].seed for c in aengine.calls + uengine.calls} == {11}
    traj, aengine, uengine, _ = _dual_episode(tau2_dir, None, sampling)
    seeds = [c[1].seed for c in aengine.calls + uengine.calls]
    assert traj.reward == 1.0 and len(set(seeds)) == len(seeds) == 7


def test_a_history_ending_with_the_agent_is_answered_by_the_user_first(tau2_dir):
    """τ²'s orchestrator: a task whose message history ends with the agent's words gives the user the next turn
    (mock's update_task_with_message_history); memrl crashed on such a task outside solo mode."""
    from memrl.envs.user_sim import ScriptedUser

    mock = load_domain("mock", tau2_dir)
    task = next(t for t in mock.tasks if t.id == "update_task_with_message_history")
    seen = []

    def user(task, messages):
        seen.append([m.role for m in messages])
        return "###STOP###"

    s = TaskSample(mock, task, solo=False, user=ScriptedUser(user))
    agent = ScriptedEngine(lambda p, k: [0])
    cfg = MemRLConfig.model_validate({"workflow": {"name": "tool_agent"}})
    traj = asyncio.run(tool_agent(s, agent, build_hf_tokenizer(["x"], vocab_size=300), cfg.workflow))
    assert seen == [["user", "assistant", "tool", "assistant"]] and not agent.calls
    assert traj.info["ending"] == "user_stop" and traj.info["messages"][-1]["content"] == "###STOP###"


def _looping_user(tau2_dir, **options):
    """A telecom episode whose user toggles its data over and over: (trajectory, user engine, agent engine)."""
    telecom = load_domain("telecom", tau2_dir)
    tok = build_hf_tokenizer(["tool_call name arguments toggle_data refuel_data"], vocab_size=400)
    end = tok.convert_tokens_to_ids("<|im_end|>")
    task = next(t for t in telecom.tasks if t.id.startswith("[mobile_data_issue]data_mode_off|data_usage_exceeded"))
    uengine = ScriptedEngine(lambda p, k: encode_text(tok, render_call(ToolCall("toggle_data", {}))) + [end])
    aengine = ScriptedEngine(lambda p, k: encode_text(tok, "How can I help?") + [end])
    cfg = MemRLConfig.model_validate({"workflow": {"name": "tool_agent",
                                                   "options": {"max_total_tokens": 400_000, **options}}})
    s = TaskSample(telecom, task, solo=False, user=LLMUserSimulator(uengine, tok))
    return asyncio.run(tool_agent(s, aengine, tok, cfg.workflow)), uengine, aengine


def test_a_user_whose_tool_rounds_run_out_ends_the_episode_ungraded(tau2_dir):
    """τ²-bench's user simulator has no cap on its tool rounds: one that keeps working the phone runs on to the
    orchestrator's step limit (MAX_STEPS, reward 0). memrl's cap (act's max_rounds, 10) once ended such a turn
    with an invented ###STOP###, which was graded as the user's stop."""
    traj, uengine, _ = _looping_user(tau2_dir)
    assert traj.info["ending"] == "max_steps" and traj.reward == 0.0 and len(uengine.calls) == 10
    assert all("###" not in (m.get("content") or "") for m in traj.info["messages"])


def test_under_a_step_limit_a_looping_user_runs_until_that_limit(tau2_dir):
    """With workflow.options.max_steps set, memrl's 10-round cap is lifted: τ²-bench's step limit is what ends a
    user working the phone for 14 rounds (τ²-bench runs it on; memrl cut it at 10 as max_steps)."""
    traj, uengine, aengine = _looping_user(tau2_dir, max_steps=31)
    # the user's opening turn: 15 rounds of call + result = 30 steps, then the 31st is the next call
    assert traj.info["ending"] == "max_steps" and len(uengine.calls) == 16 and not aengine.calls
