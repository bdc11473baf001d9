"""env.user.protocol=chat / env.judge.protocol=chat: the simulator and the judge as τ²-bench calls them."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from memrl.engines.base import SamplingParams
from memrl.engines.openai_chat import ChatReply
from memrl.envs.messages import USER_GAVE_UP, Message, ToolCall
from memrl.envs.nl_judge import LLMNLJudge, judge_chat
from memrl.envs.tasks import Task
from memrl.envs.user_chat import ChatUserSimulator, user_messages
from memrl.envs.user_sim import LLMUserSimulator
from memrl.models.tiny import build_hf_tokenizer

TASK = Task(id="t", ticket="I want a refund.")


class ChatEngine:
    """Answers ``chat`` from a list of replies; keeps (messages, tools, params, capped) of each request."""

    def __init__(self, replies: list[ChatReply]) -> None:
        self.replies, self.calls = replies, []

    async def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], params: SamplingParams, *,
                   omit: tuple[str, ...] = ()) -> ChatReply:
        assert "top_p" in omit  # a side model's request carries what tau2-bench's carries
        self.calls.append((json.loads(json.dumps(messages)), list(tools), params, "max_tokens" not in omit))
        return self.replies[min(len(self.calls), len(self.replies)) - 1]


def call(name: str, arguments: str, cid: str) -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": arguments}}


def conversation() -> list[Message]:
    lookup = ToolCall("get_customer", {"phone": "555"}, id="a1")
    toggle = ToolCall("toggle_data", {}, id="u1", requestor="user")
    return [Message("assistant", "Hi! How can I help you today?"),
            Message("user", "My data is off."),
            Message("assistant", "Let me look you up.", [lookup]),
            Message("tool", "John Smith", call_id="a1"),
            Message("assistant", "Please turn data on."),
            Message("user", None, [toggle]),
            Message("tool", "Mobile Data is now ON.", call_id="u1", requestor="user"),
            Message("user", "Done, it is on.")]


def test_the_user_reads_the_conversation_flipped_as_tau2_flips_it():
    assert user_messages("SYS", conversation()) == [
        {"role": "system", "content": "SYS"},
        {"role": "user", "content": "Hi! How can I help you today?"},
        {"role": "assistant", "content": "My data is off."},
        # the agent's tool-calling turn (its text included) and its result never reach the user
        {"role": "user", "content": "Please turn data on."},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "u1", "type": "function", "function": {"name": "toggle_data", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "u1", "content": "Mobile Data is now ON."},
        {"role": "assistant", "content": "Done, it is on."}]
    assert user_messages("SYS", [])[1] == {"role": "user", "content": "Hi! How can I help you today?"}


def test_the_token_simulator_does_not_show_the_text_beside_an_agents_tool_calls():
    sim = LLMUserSimulator(None, build_hf_tokenizer(["x"], vocab_size=300))
    text = "\n".join(c["content"] for c in sim.chat(TASK, conversation()))
    assert "Please turn data on." in text and "Let me look you up." not in text and "John Smith" not in text


def test_reply_sends_the_chat_without_tools_or_a_cap():
    engine = ChatEngine([ChatReply("  Sure, my order is #1.  ")])
    sim = ChatUserSimulator(engine, temperature=0.0)
    # verbatim: τ²-bench passes the reply on as sampled (user_simulator.py: user_response = ...content)
    assert asyncio.run(sim.reply(TASK, conversation()[:1], seed=7)) == "  Sure, my order is #1.  "
    messages, tools, params, capped = engine.calls[0]
    assert messages[0]["role"] == "system" and "I want a refund." in messages[0]["content"]
    assert messages[1:] == [{"role": "user", "content": "Hi! How can I help you today?"}]
    assert tools == [] and not capped and params.temperature == 0.0 and params.seed == 7
    capped_sim = ChatUserSimulator(ChatEngine([ChatReply("ok")]), max_tokens=64)
    asyncio.run(capped_sim.reply(TASK, []))
    assert capped_sim.engine.calls[0][3] and capped_sim.engine.calls[0][2].max_new_tokens == 64


def test_chat_protocol_needs_an_engine_that_chats():
    with pytest.raises(ValueError, match="env.user.protocol=chat needs an engine that speaks"):
        ChatUserSimulator(object())
    with pytest.raises(ValueError, match="env.judge.protocol=chat needs an engine that speaks"):
        LLMNLJudge(object(), None, chat=True)


def test_the_user_works_its_device_by_function_calling(telecom):
    engine = ChatEngine([ChatReply(None, [call("toggle_data", "{}", "srv_1")], "tool_calls"),
                         ChatReply("", [call("run_speed_test", "{not json", "srv_2")], "tool_calls"),
                         ChatReply("Data is on, but the speed test says no connection.")])
    task = next(t for t in telecom.tasks if t.id.startswith("[mobile_data_issue]data_mode_off|data_usage_exceeded"))
    env = telecom.new_env()
    env.set_state(task.initial_state)
    history = [Message("assistant", "Please turn mobile data on.")]
    new = asyncio.run(ChatUserSimulator(engine).act(task, history, env, seed=3))
    assert [m.role for m in new] == ["user", "tool", "user"]
    assert new[0].tool_calls == [ToolCall("toggle_data", {}, id="srv_1", requestor="user")]
    assert new[1].call_id == "srv_1" and new[1].requestor == "user"
    assert new[1].content.startswith("Mobile Data is now ON")
    assert new[2].content == "Data is on, but the speed test says no connection."
    first, second, third = engine.calls
    names = [t["function"]["name"] for t in first[1]]
    assert names == [t["function"]["name"] for t in env.user_tools.schemas()] and "toggle_data" in names
    assert "tool_call" not in first[0][0]["content"]  # function calling: no text format in the prompt
    assert second[0][-2:] == [
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "srv_1", "type": "function", "function": {"name": "toggle_data", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "srv_1", "content": new[1].content}]
    assert third[0] == second[0] and [c[2].seed for c in engine.calls] == [3, 4, 5]  # unreadable call: asked again


def test_tau2_seeding_sends_one_seed_on_every_round_of_a_users_turn(telecom):
    engine = ChatEngine([ChatReply(None, [call("toggle_data", "{}", "srv_1")], "tool_calls"),
                         ChatReply("Done.")])
    task = telecom.tasks[0]
    env = telecom.new_env()
    env.set_state(task.initial_state)
    asyncio.run(ChatUserSimulator(engine).act(task, [Message("assistant", "Turn data on.")], env, seed=3,
                                              step_seed=False))
    assert [c[2].seed for c in engine.calls] == [3, 3]


def test_a_user_that_only_calls_gives_up(telecom):
    engine = ChatEngine([ChatReply(None, [call("check_status_bar", "{}", "s")], "tool_calls")])
    env = telecom.new_env()
    env.set_state(telecom.tasks[0].initial_state)
    new = asyncio.run(ChatUserSimulator(engine).act(telecom.tasks[0], [], env, max_rounds=2))
    assert [m.role for m in new] == ["user", "tool", "user", "tool", "user"] and new[-1].content == USER_GAVE_UP


def test_the_judge_sends_tau2s_two_messages_to_a_chat_model():
    verdict = {"results": [{"expectedOutcome": "a", "reasoning": "seen", "metExpectation": True}]}
    engine = ChatEngine([ChatReply(json.dumps(verdict))])
    judge = LLMNLJudge(engine, None, max_tokens=None, seed=None, chat=True)
    log = conversation()
    checks = asyncio.run(judge.check(["a"], log))
    assert [c.met for c in checks] == [True]
    messages, tools, params, capped = engine.calls[0]
    assert messages == judge_chat(["a"], log) and tools == [] and not capped
    assert params.temperature == 0.0 and params.seed is None


def test_config_builds_chat_sides_that_talk_to_a_chat_server_without_a_tokenizer(telecom, tau2_dir):
    from memrl.config import load_config
    from memrl.envs.nl_judge import build_nl_judge
    from memrl.workflows.tool_agent import build_user_simulator
    from tests.engines.test_openai_chat import FakeChatServer, completion

    with FakeChatServer(lambda body: completion({"content": "It says no service."})) as server:
        side = [f"env.user.base_url={server.url}", "env.user.engine=openai", "env.user.protocol=chat",
                "env.user.model=gpt-4.1-2025-04-14", "env.user.temperature=0",  # no tokenizer by that name
                "env.judge.model=gpt-4.1-2025-04-14", "env.judge.engine=openai", "env.judge.protocol=chat",
                f"env.judge.base_url={server.url}"]
        cfg = load_config(None, side)
        user, judge = build_user_simulator(cfg), build_nl_judge(cfg)
        env = telecom.new_env()
        env.set_state(telecom.tasks[0].initial_state)
        said = asyncio.run(user.act(telecom.tasks[0], [Message("assistant", "What does your phone show?")], env))
        asyncio.run(judge.check(["a"], [Message("user", "hi")]))
    assert said[-1].content == "It says no service."
    sent, verdict = server.requests
    assert sent["_path"] == "/v1/chat/completions" and sent["model"] == "gpt-4.1-2025-04-14"
    assert sent["tool_choice"] == "auto" and "toggle_data" in {t["function"]["name"] for t in sent["tools"]}
    assert "max_tokens" not in sent and "top_p" not in sent and sent["temperature"] == 0.0
    assert "max_tokens" not in verdict and "seed" not in verdict and "tools" not in verdict
    assert verdict["messages"] == judge_chat(["a"], [Message("user", "hi")])
    capped = load_config(None, side + ["env.user.max_tokens=99"]).env.user
    assert capped.reply_tokens() == 99 and load_config(None, []).env.user.reply_tokens() == 256
    assert load_config(None, []).env.judge.reply_tokens() == 1024


TOOL_TEMPLATE = (  # a tool-aware ChatML template, as Qwen's renders calls: arguments through tojson
    "{% if tools %}<|im_start|>system\nTOOLS {% for t in tools %}{{ t.function.name }} {% endfor %}<|im_end|>\n"
    "{% endif %}{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content or '' }}"
    "{% for c in m.tool_calls or [] %}<tool_call>{{ c.function.arguments | tojson }}</tool_call>{% endfor %}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def test_a_local_engine_answers_chat_requests_as_vllm_serves_them():
    """TemplateChat: the model's template with tools=, earlier calls' arguments as objects, calls read back
    with the hermes parser into tool_calls; no cap sent means the local default."""
    from memrl.testing.scripted import ScriptedEngine
    from memrl.text.template_chat import TemplateChat, as_chat
    from memrl.workflows.common import encode_text

    tok = build_hf_tokenizer(["toggle_data tool_call arguments name TOOLS"], vocab_size=400)
    tok.chat_template = TOOL_TEMPLATE
    end = tok.convert_tokens_to_ids("<|im_end|>")
    answers = iter(['<tool_call>\n{"name": "toggle_data", "arguments": {}}\n</tool_call>', "Data is on."])
    engine = ScriptedEngine(lambda prompt, params: encode_text(tok, next(answers)) + [end])
    chat = as_chat(engine, tok)
    assert isinstance(chat, TemplateChat) and as_chat(ChatEngine([]), tok).__class__ is ChatEngine
    earlier = [{"role": "user", "content": "hi"},
               {"role": "assistant", "content": None, "tool_calls": [call("check", '{"a": 1}', "c0")]},
               {"role": "tool", "tool_call_id": "c0", "content": "ok"}]
    tools = [{"type": "function", "function": {"name": "toggle_data", "parameters": {"type": "object"}}}]
    first = asyncio.run(chat.chat(earlier, tools, SamplingParams(max_new_tokens=9, top_p=0.5),
                                  omit=("max_tokens", "top_p")))
    prompt = tok.decode(engine.calls[0][0])
    assert prompt.startswith("<|im_start|>system\nTOOLS toggle_data") and '<tool_call>{"a": 1}</tool_call>' in prompt
    assert engine.calls[0][1].max_new_tokens == 2048 and engine.calls[0][1].top_p == 1.0
    assert first.content is None and first.finish_reason == "tool_calls"
    assert [c["function"] for c in first.tool_calls] == [{"name": "toggle_data", "arguments": "{}"}]
    assert first.tool_calls[0]["id"].startswith("call_") and first.prompt_tokens == len(engine.calls[0][0])
    second = asyncio.run(chat.chat(earlier, tools, SamplingParams(max_new_tokens=9)))
    assert second.content == "Data is on." and not second.tool_calls and engine.calls[1][1].max_new_tokens == 9
    tok.chat_template = None
    with pytest.raises(ValueError, match="tokenizer's chat template, and this tokenizer has none"):
        TemplateChat(engine, tok)


def test_a_local_user_and_judge_take_the_chat_protocol():
    """env.user.engine=hf env.user.protocol=chat: the simulator's requests go through the local model."""
    from memrl.config import load_config
    from memrl.envs.nl_judge import build_nl_judge
    from memrl.text.template_chat import TemplateChat
    from memrl.workflows.tool_agent import build_user_simulator

    cfg = load_config(None, ["env.user.model=tiny", "env.user.protocol=chat", "env.user.max_tokens=4",
                             "env.judge.model=tiny", "env.judge.protocol=chat", "env.judge.max_tokens=4"])
    user, judge = build_user_simulator(cfg), build_nl_judge(cfg)
    assert isinstance(user, ChatUserSimulator) and isinstance(user.engine, TemplateChat)
    assert isinstance(judge.engine, TemplateChat) and judge.chat
    said = asyncio.run(user.reply(TASK, [Message("assistant", "Hi! How can I help you today?")]))
    assert isinstance(said, str)
    assert len(asyncio.run(judge.check(["a"], [Message("user", "hi")]))) == 1


def test_the_users_and_the_judges_chat_requests_are_counted_under_their_roles():
    from memrl.engines.usage import metering

    verdict = {"results": [{"expectedOutcome": "a", "reasoning": "seen", "metExpectation": True}]}
    user = ChatUserSimulator(ChatEngine([ChatReply("Sure.", prompt_tokens=40, completion_tokens=2)]))
    judge = LLMNLJudge(ChatEngine([ChatReply(json.dumps(verdict), prompt_tokens=90, completion_tokens=30)]), None,
                       max_tokens=None, seed=None, chat=True)

    async def episode() -> dict:
        with metering() as meter:
            await user.reply(TASK, conversation()[:1])
            await user.reply(TASK, conversation()[:3])
            await judge.check(["a"], conversation())
        return meter

    meter = asyncio.run(episode())
    assert (meter["user"].requests, meter["user"].prompt_tokens, meter["user"].completion_tokens) == (2, 80, 4)
    assert (meter["judge"].requests, meter["judge"].prompt_tokens, meter["judge"].completion_tokens) == (1, 90, 30)
    assert "agent" not in meter



def test_a_user_writing_only_unreadable_calls_gives_up_even_without_a_round_cap(telecom):
    """Under workflow.options.max_steps the rounds are not capped, but unreadable calls run nothing that a step
    limit would count: the simulator was asked 200,000 times in 8 s."""
    engine = ChatEngine([ChatReply(None, [call("toggle_data", "{not json", "u1")], "tool_calls")])
    env = telecom.new_env()
    env.set_state(telecom.tasks[0].initial_state)
    new = asyncio.run(ChatUserSimulator(engine).act(telecom.tasks[0], [], env, max_rounds=None))
    assert new[-1].content == USER_GAVE_UP and len(engine.calls) == 10
