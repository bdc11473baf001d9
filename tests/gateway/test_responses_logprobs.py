"""The Responses API's ``include: ["message.output_text.logprobs"]``: the sampled tokens' log-probs, as the
chat endpoint's ``logprobs: true`` gives them, unstreamed and spread over the streamed deltas."""

from __future__ import annotations

import asyncio

import pytest

from tests.gateway.conftest import open_episode, openai
from tests.gateway.test_protocols import FINAL, tool_then_text

LOGPROBS = ["message.output_text.logprobs"]


def test_responses_logprobs_are_the_recorded_ones_streamed_or_not(gateway, tools_tokenizer):
    tok = tools_tokenizer
    out = [{"type": "function_call_output", "call_id": "call_1", "output": "3"}]
    given = [{"type": "function_call", "call_id": "call_1", "name": "add", "arguments": "{}"}, *out]

    async def go():
        async with open_episode(gateway, tool_then_text(tok), tok, merge=False) as (ep, _, client):
            plain = await client.responses.create(model="m", input=given, max_output_tokens=64)
            asked = await client.responses.create(model="m", input=given, max_output_tokens=64, include=LOGPROBS)
            stream = await client.responses.create(model="m", input=given, max_output_tokens=64, include=LOGPROBS,
                                                   stream=True)
            events = [e async for e in stream]
            with pytest.raises(openai.BadRequestError, match="top_logprobs: only the sampled token's log-prob"):
                await client.responses.create(model="m", input="hi", include=LOGPROBS, top_logprobs=2)
            return ep, plain, asked, events

    ep, plain, asked, events = asyncio.run(go())
    assert plain.output[0].content[0].logprobs == []  # not asked: none, as OpenAI leaves them out
    part = asked.output[0].content[0]
    assert part.text == FINAL
    conv = ep.conversations[1]
    recorded = list(conv.logprobs[conv.prompt_length:])
    assert [e.logprob for e in part.logprobs] == pytest.approx(recorded) and len(recorded) > 3
    assert "".join(e.token for e in part.logprobs).startswith(FINAL)  # then the end-of-turn token
    deltas = [e for e in events if e.type == "response.output_text.delta"]
    assert "".join(d.delta for d in deltas) == FINAL and len(deltas) > 1
    assert [lp.logprob for d in deltas for lp in d.logprobs] == [e.logprob for e in part.logprobs]
    assert all(d.delta == "".join(lp.token for lp in d.logprobs) for d in deltas[:-1])  # one token a delta
    done = next(e for e in events if e.type == "response.output_text.done")
    assert [lp.logprob for lp in done.logprobs] == [e.logprob for e in part.logprobs]
