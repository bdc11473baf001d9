"""``parallel_tool_calls: false`` (chat, Responses) and ``disable_parallel_tool_use`` (Messages).

The policy writes two tool calls in one answer. With the flag off every protocol returns both;
with it on, only the first, as vLLM's ``maybe_filter_parallel_tool_calls`` does, while the
recorded tokens stay everything that was sampled (both calls).
"""

from __future__ import annotations

import asyncio
import json

import pytest

from memrl.testing.scripted import ScriptedEngine
from tests.gateway.conftest import open_episode
from tests.gateway.test_protocols import CHAT_TOOLS, SCHEMA

anthropic = pytest.importorskip("anthropic", reason="pip install 'memrl[dev]'")

TWO = ('<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>'
       '<tool_call>\n{"name": "add", "arguments": {"a": 3, "b": 4}}\n</tool_call>')
USER = [{"role": "user", "content": "1 + 2 and 3 + 4?"}]


def two_calls(tok) -> ScriptedEngine:
    return ScriptedEngine(lambda prompt, params: tok.encode(TWO, add_special_tokens=False) + [tok.eos_token_id])


async def _chat(client, flag):
    extra = {} if flag is None else {"parallel_tool_calls": flag}
    r = await client.chat.completions.create(model="m", messages=USER, tools=CHAT_TOOLS, **extra)
    return [c.function.arguments for c in r.choices[0].message.tool_calls]


async def _stream(client, flag):
    extra = {} if flag is None else {"parallel_tool_calls": flag}
    stream = await client.chat.completions.create(model="m", messages=USER, tools=CHAT_TOOLS, stream=True, **extra)
    return [t.function.arguments for c in [c async for c in stream] if c.choices
            for t in c.choices[0].delta.tool_calls or []]


async def _responses(client, flag):
    extra = {} if flag is None else {"parallel_tool_calls": flag}
    tools = [{"type": "function", "name": "add", "description": "a + b", "parameters": SCHEMA}]
    r = await client.responses.create(model="m", input=USER[0]["content"], tools=tools, **extra)
    return [item.arguments for item in r.output if item.type == "function_call"]


async def _messages(endpoint, flag):
    claude = anthropic.AsyncAnthropic(base_url=endpoint.base_url, api_key=endpoint.api_key, max_retries=0)
    choice = {"type": "auto"} if flag is None else {"type": "auto", "disable_parallel_tool_use": not flag}
    tools = [{"name": "add", "description": "a + b", "input_schema": SCHEMA}]
    m = await claude.messages.create(model="m", max_tokens=512, messages=USER, tools=tools, tool_choice=choice)
    return [b.input for b in m.content if b.type == "tool_use"]


@pytest.mark.parametrize("flag", [None, True, False])
def test_parallel_tool_calls_flag_on_every_protocol(gateway, tools_tokenizer, flag):
    tok = tools_tokenizer

    async def go():
        async with open_episode(gateway, two_calls(tok), tok, merge=False) as (ep, endpoint, client):
            got = [await _chat(client, flag), await _stream(client, flag), await _responses(client, flag),
                   await _messages(endpoint, flag)]
            return ep, got

    ep, (chat, streamed, responses, messages) = asyncio.run(go())
    want = 1 if flag is False else 2
    assert [len(chat), len(streamed), len(responses), len(messages)] == [want] * 4
    assert messages[0] == {"a": 1, "b": 2}  # the first call is the one kept
    assert json.loads(chat[0]) == {"a": 1, "b": 2} and chat == streamed
    generated = tok.encode(TWO, add_special_tokens=False) + [tok.eos_token_id]
    assert len(ep.conversations) == 4  # each call recorded whole: both calls' tokens, whatever was returned
    assert all(list(c.token_ids[c.prompt_length:]) == generated for c in ep.conversations)
