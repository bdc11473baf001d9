"""The gateway gives each recorded call an anchor state: the hash of what the program sent."""

from __future__ import annotations

import asyncio

from memrl.testing.scripted import ScriptedEngine
from memrl.workflows import anchor
from tests.gateway.conftest import open_episode


def test_each_call_is_anchored_by_its_messages(gateway, tools_tokenizer) -> None:
    tok = tools_tokenizer
    messages = [{"role": "user", "content": "Which key?"}]

    async def go():
        engine = ScriptedEngine(lambda prompt, params: tok.encode(" ok", add_special_tokens=False) + [tok.eos_token_id])
        async with open_episode(gateway, engine, tok) as (ep, _, client):
            await client.chat.completions.create(model="m", messages=messages, max_tokens=4)
            await client.chat.completions.create(model="m", messages=messages + [
                {"role": "assistant", "content": "ok"}, {"role": "user", "content": "Sure?"}], max_tokens=4)
            await client.chat.completions.create(model="m", messages=messages, max_tokens=4)
            return ep

    ep = asyncio.run(go())
    states = [c.state for c in ep.conversations]
    assert len(states) == 3 and states[0] == states[2] != states[1]
    assert states[0] == anchor(ep.conversations[0].meta["messages"])
