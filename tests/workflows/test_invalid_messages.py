"""``workflow.options.invalid_messages=tau2``: the messages τ²-bench raises on fail the episode, as there.

τ²-bench (a2c0247) raises on an empty agent or user message (``Message.validate`` in the orchestrator's
step), on a tool call whose arguments are not JSON (``json.loads`` in its ``generate``) and on a solo agent's
text turn (``LLMSoloAgent``); its batch runner then tries the run again and at last records it as
``infrastructure_error``. memrl's default goes on instead (what training needs).
"""

from __future__ import annotations

import asyncio

import pytest

from memrl.envs.messages import InvalidMessageError, Message, ToolCall
from memrl.envs.user_sim import ScriptedUser
from memrl.workflows.tool_agent import tool_agent
from memrl.workflows.tool_steps import check_agent_message, check_user_messages
from tests.workflows.test_tool_agent import Script, cfg, sample, tok  # noqa: F401  (tok: a fixture)
from tests.workflows.test_tool_agent_chat import openai_call, run_chat


def test_which_agent_and_user_messages_tau2_refuses():
    check_agent_message("Hello", False, (), False)
    check_agent_message("", True, (), False)  # a tool call alone is a message
    with pytest.raises(InvalidMessageError, match="empty message"):
        check_agent_message("  \n", False, (), False)
    with pytest.raises(InvalidMessageError, match="could not be read"):
        check_agent_message("Let me look.", True, ["could not parse the arguments"], False)
    with pytest.raises(InvalidMessageError, match="solo agent"):
        check_agent_message("###STOP###", False, (), True)  # τ²'s solo agent raises on any text, a stop too
    check_user_messages([Message("user", "Hi"), Message("user", None, [ToolCall("check_status_bar", {})])])
    with pytest.raises(InvalidMessageError, match="user sent an empty message"):
        check_user_messages([Message("user", " ")])


def episode(tok, agent_says: str, user_says: list[str], **options):
    """One return_ episode with a scripted agent and user."""
    s = sample("return_")
    said = iter(user_says)
    s.solo, s.user = False, ScriptedUser(lambda task, messages: next(said))
    return asyncio.run(tool_agent(s, Script(tok, [agent_says]).engine, tok, cfg(**options).workflow))


def test_an_empty_agent_message_fails_the_episode_only_in_tau2_mode(tok):
    with pytest.raises(InvalidMessageError, match="agent sent an empty message"):
        episode(tok, "", ["I want to return a book.", "###STOP###"], invalid_messages="tau2")
    traj = episode(tok, "", ["I want to return a book.", "###STOP###"])
    assert traj.info["ending"] == "user_stop"  # memrl's default: the user answers the empty message


def test_an_empty_user_reply_fails_the_episode_in_tau2_mode(tok):
    with pytest.raises(InvalidMessageError, match="user sent an empty message"):
        episode(tok, "Which loan?", ["I want to return a book.", ""], invalid_messages="tau2")


def test_unreadable_arguments_from_a_chat_server_fail_the_episode_in_tau2_mode():
    s = sample("return_1")
    turns = [{"content": None, "tool_calls": [openai_call("bad", "return_book", '{"loan_id": "L0')]},
             {"content": "Returned."}]
    with pytest.raises(InvalidMessageError, match="could not parse the arguments of tool call 'return_book'"):
        run_chat(s, turns, invalid_messages="tau2")
    traj, _ = run_chat(s, turns)
    assert traj.metrics["invalid_tool_calls"] == 1  # memrl's default: shown to the model as an error
