"""Dual control through the tool_agent workflow: the simulated user runs its own phone tools."""

from __future__ import annotations

import asyncio

import pytest

from memrl.config.schema import MemRLConfig
from memrl.envs.domain import load_domain
from memrl.envs.user_sim import LLMUserSimulator
from memrl.models.tiny import build_hf_tokenizer
from memrl.testing.scripted import ScriptedEngine
from memrl.workflows.common import encode_text
from memrl.workflows.tool_agent import TaskSample, tool_agent
from memrl.text.tool_calls import render_call
from memrl.envs.messages import ToolCall


def test_dual_control_episode(tau2_dir):
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
    cfg = MemRLConfig.model_validate({"workflow": {"name": "tool_agent", "max_total_tokens": 400_000,
                                                   "turn_tokens": 2048}})
    s = TaskSample(telecom, task, solo=False, user=LLMUserSimulator(uengine, tok))
    traj = asyncio.run(tool_agent(s, aengine, tok, cfg.workflow))
    assert traj.info["ending"] == "user_stop", traj.info
    assert traj.metrics["user_tool_calls"] == 1 and traj.reward == 1.0
    agent_view = tok.decode(aengine.calls[-1][0])
    assert "Mobile Data is now ON" not in agent_view and "Done, data is on." in agent_view


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
