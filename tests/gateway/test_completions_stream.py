"""``/v1/completions`` with ``stream: true`` through the openai SDK: OpenAI's text_completion chunks, made
from the recorded tokens, and a recorded conversation identical to the same call unstreamed."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from memrl.testing.scripted import ScriptedEngine
from tests.gateway.conftest import open_episode, openai

TEXT = " one two three. four"


def scripted(tok) -> ScriptedEngine:
    return ScriptedEngine(lambda prompt, params: tok.encode(TEXT, add_special_tokens=False) + [tok.eos_token_id])


async def _complete(gateway, tok, stream: bool, **kwargs):
    async with open_episode(gateway, scripted(tok), tok, merge=False) as (ep, _, client):
        r = await client.completions.create(model="m", prompt="Count:", max_tokens=32, stream=stream, **kwargs)
        return ep, [c async for c in r] if stream else r


def test_streamed_completion_records_what_the_unstreamed_call_records(gateway, tools_tokenizer):
    tok = tools_tokenizer
    extra = {"logprobs": 0, "extra_body": {"return_token_ids": True}}
    plain_ep, plain = asyncio.run(_complete(gateway, tok, False, **extra))
    ep, chunks = asyncio.run(_complete(gateway, tok, True, stream_options={"include_usage": True}, **extra))
    assert [c.token_ids for c in ep.conversations] == [c.token_ids for c in plain_ep.conversations]
    assert [c.logprobs for c in ep.conversations] == [c.logprobs for c in plain_ep.conversations]
    assert len({c.id for c in chunks}) == 1 and chunks[0].id.startswith("cmpl-")
    assert all(c.object == "text_completion" for c in chunks)
    texts = [c.choices[0].text for c in chunks if c.choices]
    assert "".join(texts) == plain.choices[0].text == TEXT and len(texts) > 3  # token by token
    finish = chunks[-2].choices[0]
    assert finish.finish_reason == plain.choices[0].finish_reason == "stop" and finish.text == ""
    assert finish.logprobs.tokens == plain.choices[0].logprobs.tokens
    assert finish.logprobs.token_logprobs == plain.choices[0].logprobs.token_logprobs
    assert finish.model_extra["token_ids"] == plain.choices[0].model_extra["token_ids"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == plain.usage.completion_tokens


def test_stop_strings_cut_the_stream_as_the_answer(gateway, tools_tokenizer):
    ep, chunks = asyncio.run(_complete(gateway, tools_tokenizer, True, stop=["."]))
    assert "".join(c.choices[0].text for c in chunks) == " one two three"
    assert chunks[-1].usage is None and chunks[-1].choices[0].finish_reason == "stop"
    assert len(ep.conversations) == 1
    conv = ep.conversations[0]  # trained: what the program saw, up to the token that completed the stop string
    said = [t for t, m in zip(conv.token_ids, conv.loss_mask) if m]
    assert tools_tokenizer.decode(said) == " one two three." and len(conv.logprobs) == conv.num_tokens
    assert " four" not in tools_tokenizer.decode(conv.token_ids)


def test_stream_options_without_stream_is_refused(gateway, tools_tokenizer):
    async def go():
        async with open_episode(gateway, scripted(tools_tokenizer), tools_tokenizer) as (ep, endpoint, client):
            with pytest.raises(openai.BadRequestError, match="stream_options: only with stream: true"):
                await client.completions.create(model="m", prompt="x", stream_options={"include_usage": True})
            async with httpx.AsyncClient(headers={"authorization": f"Bearer {endpoint.api_key}"}) as raw:
                r = await raw.post(endpoint.base_url + "/completions",
                                   json={"prompt": "x", "stream": True, "stream_options": {"usage": 1}})
            return ep, r

    ep, r = asyncio.run(go())
    assert r.status_code == 400 and r.json()["error"]["param"] == "stream_options" and not ep.conversations


@pytest.mark.parametrize("stream", [False, True])
def test_an_answer_ended_by_a_stop_string_is_recorded_as_stopped(gateway, tools_tokenizer, stream):
    """The engine runs on to its budget (no EOS), past the stop string the program asked for: the program is told
    "stop", and so is the recorded conversation (algorithm.mask_truncated_completions reads it: it masked every
    such answer); without the stop string both say "length"."""
    tok = tools_tokenizer
    ids = tok.encode(TEXT, add_special_tokens=False)

    async def go(**kwargs):
        engine = ScriptedEngine(lambda prompt, params: ids)  # no EOS: cut at max_tokens
        async with open_episode(gateway, engine, tok, merge=False) as (ep, _, client):
            r = await client.completions.create(model="m", prompt="Count:", max_tokens=len(ids), stream=stream,
                                                **kwargs)
            chunks = [c async for c in r] if stream else [r]
            return ep, [c.choices[0].finish_reason for c in chunks if c.choices][-1]

    ep, told = asyncio.run(go(stop=["."]))
    assert told == "stop" and ep.conversations[0].meta["finish"] == "stop"
    ep, told = asyncio.run(go())
    assert told == "length" and ep.conversations[0].meta["finish"] == "length"
