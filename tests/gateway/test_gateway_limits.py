"""The gateway refuses what ``memrl serve`` refuses, with the same status: non-finite sampling values get a 400
naming the field (not a 503 that discards the episode), and an oversized body reaches the SDK as the documented
413 (not a connection error)."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tests.gateway.conftest import open_episode, openai
from tests.gateway.test_gateway_http import scripted


def test_non_finite_sampling_values_get_a_400_naming_the_field(gateway, tools_tokenizer):
    tok = tools_tokenizer
    user = '[{"role": "user", "content": "hi"}]'

    async def go():
        async with open_episode(gateway, scripted(tok, "fine"), tok, request_sampling=True) as (ep, endpoint, client):
            raw = httpx.AsyncClient(headers={"Authorization": f"Bearer {endpoint.api_key}",
                                             "Content-Type": "application/json"})
            answers = []
            for field, value in (("temperature", "NaN"), ("temperature", "Infinity"), ("temperature", "-1"),
                                 ("top_p", "NaN"), ("top_p", "0")):
                body = f'{{"messages": {user}, "max_tokens": 4, "{field}": {value}}}'
                answers.append((field, await raw.post(endpoint.base_url + "/chat/completions", content=body)))
            prompt = await raw.post(endpoint.base_url + "/completions",
                                    content='{"prompt": "hi", "max_tokens": 4, "temperature": NaN}')
            await raw.aclose()
            ok = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}],
                                                      max_tokens=8)
            return ep, answers, prompt, ok

    ep, answers, prompt, ok = asyncio.run(go())
    for field, r in answers:
        assert r.status_code == 400, (field, r.status_code, r.text)
        assert r.json()["error"]["param"] == field and field in r.json()["error"]["message"]
    assert prompt.status_code == 400 and prompt.json()["error"]["param"] == "temperature"
    assert ok.choices[0].message.content == "fine"  # the episode goes on
    assert len(ep.conversations) == 1


@pytest.mark.timeout(120)
def test_an_oversized_request_is_a_413_through_the_openai_sdk(gateway, tools_tokenizer):
    tok = tools_tokenizer
    huge = "a" * (24 * 2**20)  # far past the socket buffers, so the client is still sending when refused

    async def go():
        async with open_episode(gateway, scripted(tok, "fine"), tok) as (ep, endpoint, client):
            with pytest.raises(openai.APIStatusError) as err:
                await client.chat.completions.create(model="m", messages=[{"role": "user", "content": huge}])
            ok = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}],
                                                      max_tokens=8)
            return err.value, ok

    err, ok = asyncio.run(go())
    assert err.status_code == 413 and "larger than" in err.body["message"]
    assert ok.choices[0].message.content == "fine"
