"""τ²-bench's step and error limits (workflow.options.max_steps / max_errors), counted as its orchestrator
counts them: a step per message and per batch of tool results, checked except when calls await results."""

from __future__ import annotations

import asyncio

import pytest

from memrl.envs.messages import Message, ToolCall
from memrl.envs.user_sim import ScriptedUser
from memrl.text.tool_calls import render_call
from memrl.workflows.tool_agent import tool_agent
from memrl.workflows.tool_steps import StepLimits
from tests.workflows.test_tool_agent import Script, cfg, sample, tok  # noqa: F401  (tok: a fixture)


def user_turn_with_a_call() -> list[Message]:
    call = ToolCall("toggle_data", {}, id="u", requestor="user")
    return [Message("user", None, [call]), Message("tool", "bad", call_id="u", requestor="user", error=True),
            Message("user", "Done.")]


def test_a_users_turn_is_three_steps_and_is_cut_where_tau2_checks():
    limits = StepLimits(max_steps=10)
    assert limits.user_turn(user_turn_with_a_call()) == (user_turn_with_a_call(), None)
    assert (limits.steps, limits.errors) == (3, 1)
    # at the limit after the call's results: the turn stops there (no check after the call itself)
    kept, hit = StepLimits(max_steps=2).user_turn(user_turn_with_a_call())
    assert hit == "max_steps" and [m.role for m in kept] == ["user", "tool"]
    kept, hit = StepLimits(max_steps=1).user_turn(user_turn_with_a_call())
    assert hit == "max_steps" and len(kept) == 2  # a limit reached on the call message is seen after its results
    kept, hit = StepLimits(max_steps=2, max_errors=1).user_turn(user_turn_with_a_call())
    assert hit == "too_many_errors" and len(kept) == 2  # both reached: τ² records the error limit
    assert StepLimits().user_turn(user_turn_with_a_call())[1] is None  # no limits: never cut


def test_tool_errors_end_the_episode_at_max_errors(tok):
    s = sample("return_")
    bad = render_call(ToolCall("get_member_details", {"member_id": "M999"}))  # an unknown member: an error
    script = Script(tok, [bad])
    traj = asyncio.run(tool_agent(s, script.engine, tok, cfg(max_errors=3).workflow))
    assert traj.info["ending"] == "too_many_errors" and traj.reward == 0.0
    assert len(script.outputs) == 3 and traj.metrics["tool_errors"] == 3
    traj = asyncio.run(tool_agent(s, Script(tok, [bad]).engine, tok, cfg(max_turns=5).workflow))
    assert traj.info["ending"] == "max_turns"  # no error limit by default


@pytest.mark.parametrize("max_steps, ending, agent_turns", [(1, "max_steps", 0), (2, "max_steps", 1),
                                                             (3, "max_steps", 1), (4, "max_steps", 2),
                                                             (5, "max_steps", 2), (6, "max_steps", 3),
                                                             (7, "max_steps", 3), (8, "user_stop", 3)])
def test_steps_count_every_message_and_batch_of_results_after_the_greeting(tok, max_steps, ending, agent_turns):
    """Greeting (not a step); user 1, agent text 2, user 3, agent call 4 (not checked: it awaits results),
    results 5, agent text 6, the user's stop 7. At a limit of 7 the limit wins over the stop, as in τ²."""
    s = sample("return_")
    loan = s.task.evaluation_criteria.actions[0].arguments["loan_id"]
    said = iter(["I want to return a book.", "The loan is mine.", "Thanks ###STOP###"])
    s.solo, s.user = False, ScriptedUser(lambda task, messages: next(said))
    script = Script(tok, ["Which loan?", render_call(ToolCall("return_book", {"loan_id": loan})), "Returned."])
    traj = asyncio.run(tool_agent(s, script.engine, tok, cfg(max_steps=max_steps).workflow))
    assert (traj.info["ending"], len(script.outputs)) == (ending, agent_turns)


def test_the_solo_agents_first_message_is_not_a_step(tok):
    """τ²'s orchestrator generates the solo agent's first message while it initialises: call (free), results 1,
    call 2 (awaits results), results 3: a limit of 2 is seen after the second batch of results."""
    s = sample("return_")
    script = Script(tok, [render_call(ToolCall("search_books", {"query": "x"}))])
    traj = asyncio.run(tool_agent(s, script.engine, tok, cfg(max_steps=2).workflow))
    assert traj.info["ending"] == "max_steps" and len(script.outputs) == 2


def test_a_limit_reached_inside_the_users_turn_ends_it_without_another_request(tau2_dir):
    """User 1, agent 2, the user's toggle_data call 3, its result 4: at max_steps=4 τ²-bench stops after the
    result; the user is not asked for the text that would have followed."""
    from tests.workflows.test_tool_agent_dual import _dual_episode

    traj, aengine, uengine, _ = _dual_episode(tau2_dir, {"max_steps": 4})
    assert traj.info["ending"] == "max_steps" and traj.reward == 0.0
    assert len(aengine.calls) == 1 and len(uengine.calls) == 2
    assert [m["role"] for m in traj.info["messages"]][-2:] == ["user", "tool"]
    traj, _, uengine, _ = _dual_episode(tau2_dir, {"max_steps": 5})  # the text reply is step 5
    assert traj.info["ending"] == "max_steps" and len(uengine.calls) == 3


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_the_timeout_is_read_between_steps_and_gives_way_to_a_stop_or_another_limit():
    clock = Clock()
    limits = StepLimits(timeout_s=10, clock=clock)
    assert limits.active and limits.reached() is None
    clock.t = 109.9
    assert limits.reached() is None
    clock.t = 110.0  # τ²-bench: elapsed >= timeout
    assert limits.reached() == "timeout"
    assert limits.reached(stopped=True) is None  # the step stopped the run: the stop is recorded
    assert limits.reached(timed=False) is None
    assert StepLimits(max_steps=1, timeout_s=10, clock=clock, started=0, steps=1).reached() == "max_steps"
    assert StepLimits(max_errors=1, timeout_s=10, clock=clock, started=0, errors=1).reached() == "too_many_errors"
    assert StepLimits(max_steps=5, clock=clock, started=0).reached() is None  # no timeout set: never


def test_a_users_turn_reads_the_clock_at_its_end_only():
    """A simulator that acts in rounds asks would_stop (a live reading) after each round; the turn as a whole
    is then counted with the clock read once, at its end, where a stop wins over the timeout."""
    clock = Clock()
    limits = StepLimits(timeout_s=10, clock=clock)
    clock.t = 200.0
    kept, hit = limits.user_turn(user_turn_with_a_call())
    assert hit == "timeout" and len(kept) == 3  # not cut after the call's results: that was read live
    assert StepLimits(timeout_s=10, clock=clock, started=100).user_turn(user_turn_with_a_call(), stops=True)[1] is None
    assert StepLimits(timeout_s=10, clock=clock, started=100).would_stop(user_turn_with_a_call()[:2])
    assert not StepLimits(timeout_s=10, clock=clock, started=195).would_stop(user_turn_with_a_call()[:2])


@pytest.mark.parametrize("said, ending, agent_turns", [
    (["I want to return a book.", "The loan is mine.", "Thanks ###STOP###"], "timeout", 1),
    (["I want to return a book.", "Thanks ###STOP###"], "user_stop", 1)])
def test_an_episode_past_its_timeout_ends_at_the_next_check(tok, monkeypatch, said, ending, agent_turns):
    """Each user reply takes 6 s of a 10 s budget: the first (6 s) passes the check after it, the second
    (12 s) ends the run there as timeout, reward 0, unless it is the user's stop (τ²'s stop is recorded)."""
    import memrl.workflows.tool_steps as tool_steps

    clock = Clock()
    monkeypatch.setattr(tool_steps, "CLOCK", clock)
    lines = iter(said)

    def reply(task, messages):
        clock.t += 6
        return next(lines)

    s = sample("return_")
    s.solo, s.user = False, ScriptedUser(reply)
    script = Script(tok, ["Which loan?", "Sure."])
    traj = asyncio.run(tool_agent(s, script.engine, tok, cfg(timeout_s=10).workflow))
    assert (traj.info["ending"], len(script.outputs)) == (ending, agent_turns)
    if ending == "timeout":
        assert traj.reward == 0.0 and "timeout" in traj.info["note"]


def test_a_timeout_inside_the_users_device_round_ends_it_without_another_request(tau2_dir, monkeypatch):
    """Each user model call takes 6 s of 10: the opening line (6 s) passes; the toggle_data call (12 s) and its
    result end the run there (read live, between the user's rounds), the user is not asked for its text."""
    import memrl.workflows.tool_steps as tool_steps
    from memrl.envs.user_sim import LLMUserSimulator
    from tests.workflows.test_tool_agent_dual import _dual_episode

    clock, slow = Clock(), LLMUserSimulator._generate

    async def generate(self, chat, seed):
        clock.t += 6
        return await slow(self, chat, seed)

    monkeypatch.setattr(tool_steps, "CLOCK", clock)
    monkeypatch.setattr(LLMUserSimulator, "_generate", generate)
    traj, aengine, uengine, _ = _dual_episode(tau2_dir, {"timeout_s": 10})
    assert traj.info["ending"] == "timeout" and traj.reward == 0.0
    assert len(aengine.calls) == 1 and len(uengine.calls) == 2
    assert [m["role"] for m in traj.info["messages"]][-2:] == ["user", "tool"]
    traj, _, uengine, _ = _dual_episode(tau2_dir, {"timeout_s": 1000})
    assert traj.info["ending"] == "user_stop" and len(uengine.calls) == 4


def test_the_communication_rule_ends_a_mixed_or_empty_message_when_enforced(tok):
    """τ²-bench's --enforce-communication-protocol: text and a tool call in one agent message is agent_error
    (the call is not run); an empty user reply is user_error. Off by default, as in τ²-bench."""
    from memrl.workflows.tool_steps import breaks_protocol

    assert breaks_protocol("Let me look.", True) and breaks_protocol("  ", False)
    assert not breaks_protocol("Hello", False) and not breaks_protocol(None, True)
    s = sample("return_")
    loan = s.task.evaluation_criteria.actions[0].arguments["loan_id"]
    mixed = "Let me return it. " + render_call(ToolCall("return_book", {"loan_id": loan}))
    said = iter(["I want to return a book.", "   "])
    s.solo, s.user = False, ScriptedUser(lambda task, messages: next(said))
    script = Script(tok, [mixed])
    traj = asyncio.run(tool_agent(s, script.engine, tok, cfg(enforce_protocol=True).workflow))
    assert traj.info["ending"] == "agent_error" and traj.reward == 0.0 and traj.metrics["tool_calls"] == 1
    assert traj.info["messages"][-1]["role"] == "assistant"  # recorded, not run: no tool result follows
    said = iter(["I want to return a book.", "   "])
    traj = asyncio.run(tool_agent(s, Script(tok, ["Which loan?"]).engine, tok, cfg(enforce_protocol=True).workflow))
    assert traj.info["ending"] == "user_error" and traj.reward == 0.0
    said = iter(["I want to return a book.", "   ", "###STOP###"])
    traj = asyncio.run(tool_agent(s, Script(tok, ["Which loan?"]).engine, tok, cfg().workflow))
    assert traj.info["ending"] == "user_stop"  # not enforced: the empty reply is just a reply


def test_a_step_limit_reached_on_a_message_that_breaks_the_rule_is_recorded_instead(tok):
    """User 1, agent's mixed message 2: at max_steps=2 τ²-bench records max_steps (its limits overwrite the
    error); at 3 the rule's agent_error stands."""
    s = sample("return_")
    mixed = "Checking. " + render_call(ToolCall("search_books", {"query": "x"}))
    for limit, ending in ((2, "max_steps"), (3, "agent_error")):
        said = iter(["I want to return a book."])
        s.solo, s.user = False, ScriptedUser(lambda task, messages: next(said))
        traj = asyncio.run(tool_agent(s, Script(tok, [mixed]).engine, tok,
                                      cfg(enforce_protocol=True, max_steps=limit).workflow))
        assert traj.info["ending"] == ending
