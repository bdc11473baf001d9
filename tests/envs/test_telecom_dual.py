"""Dual control on telecom: the user simulator works the phone's tools; the grader replays its calls."""

from __future__ import annotations

import asyncio

from memrl.envs.evaluate import evaluate
from memrl.envs.messages import USER_GAVE_UP, Message, ToolCall
from memrl.envs.user_sim import LLMUserSimulator
from memrl.models.tiny import build_hf_tokenizer
from memrl.testing.scripted import ScriptedEngine
from memrl.workflows.common import encode_text


def test_user_simulator_calls_device_tools_until_it_answers(telecom):
    tok = build_hf_tokenizer(["tool_call name arguments toggle_data run_speed_test"], vocab_size=400)
    end = tok.convert_tokens_to_ids("<|im_end|>")
    replies = ['<tool_call>\n{"name": "toggle_data", "arguments": {}}\n</tool_call>',
               'Let me test.\n<tool_call>\n{"name": "run_speed_test", "arguments": {}}\n</tool_call>',
               "Data is on now but the speed test says no connection."]
    engine = ScriptedEngine(lambda prompt, params: encode_text(tok, replies[len(engine.calls) - 1]) + [end])
    user = LLMUserSimulator(engine, tok)
    task = next(t for t in telecom.tasks if t.id.startswith("[mobile_data_issue]data_mode_off|data_usage_exceeded"))
    env = telecom.new_env()
    env.set_state(task.initial_state)
    history = [Message("assistant", "Please turn mobile data on and run a speed test.")]
    new = asyncio.run(user.act(task, history, env, seed=1))
    assert [m.role for m in new] == ["user", "tool", "user", "tool", "user"]
    assert all(c.requestor == "user" for m in new for c in m.tool_calls)
    assert new[1].content.startswith("Mobile Data is now ON.") and new[3].content == "Speed test failed: No Connection."
    assert new[-1].content == replies[-1] and not new[-1].tool_calls
    # the simulator saw its own calls and their results, and the tools it may use
    last_prompt = tok.decode(engine.calls[-1][0])
    assert "Speed test failed: No Connection." in last_prompt and '"name": "reboot_device"' in last_prompt
    assert all(m.requestor == "user" for m in new if m.role == "tool")
    # grading replays the user's device call: with the agent's refuel the task passes
    refuel = ToolCall("refuel_data", {"customer_id": "C1001", "line_id": "L1002", "gb_amount": 2.0}, id="a1")
    log = history + new + [Message("assistant", None, [refuel]), env.step(refuel)]
    assert evaluate(telecom, task, log).reward == 1.0
    assert evaluate(telecom, task, history + [Message("assistant", None, [refuel]), env.step(refuel)]).reward == 0.0


def test_user_sees_only_its_own_calls_and_a_looping_user_gives_up(telecom):
    tok = build_hf_tokenizer(["tool_call name arguments check_status_bar"], vocab_size=400)
    end = tok.convert_tokens_to_ids("<|im_end|>")
    call = '<tool_call>\n{"name": "check_status_bar", "arguments": {}}\n</tool_call>'
    engine = ScriptedEngine(lambda prompt, params: encode_text(tok, call) + [end])
    user = LLMUserSimulator(engine, tok)
    task = telecom.tasks[0]
    env = telecom.new_env()
    env.set_state(task.initial_state)
    lookup = ToolCall("get_customer_by_phone", {"phone_number": "555-123-2002"}, id="a1")
    history = [Message("assistant", None, [lookup]), env.step(lookup), Message("assistant", "What do you see?")]
    new = asyncio.run(user.act(task, history, env, max_rounds=3))
    assert [m.role for m in new] == ["user", "tool"] * 3 + ["user"] and new[-1].content == USER_GAVE_UP
    chat = user.chat(task, history + new[:2], env.user_tools.schemas())
    text = "\n".join(c["content"] for c in chat)
    assert "John Smith" not in text.split("Your tools:")[-1]  # the agent's lookup result is not shown
    assert chat[-1]["content"].startswith("<tool_response>\nStatus Bar:") and chat[-2]["role"] == "assistant"
    # without tools (a domain with no user toolkit) the prompt and turns are as before
    plain = user.chat(task, history)
    assert "Your tools:" not in plain[0]["content"] and [c["role"] for c in plain] == ["system", "user"]
