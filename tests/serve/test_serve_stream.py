"""``stream: true`` on memrl serve, read with the openai SDK: the chunks spell the answer ``stream: false`` gives.

The engine decodes greedily (or with a seed), so a streamed request and the same request unstreamed
generate the same tokens; the stream's text, log-probs, finish reasons, token ids and usage must be those.
"""

import asyncio

import httpx
import pytest

from memrl.engines.hf import HFEngine
from memrl.serve.app import create_app
from memrl.serve.limits import ServeLimits
from memrl.serve.streaming import aligned_spans, token_spans

openai = pytest.importorskip("openai")


@pytest.fixture
def app(tiny_model):
    model, tok = tiny_model
    return create_app(HFEngine(model), tok, "tiny", limits=ServeLimits.for_model(model))


def call(app, fn):
    """``fn(client)`` with an AsyncOpenAI client talking to the app in process."""
    async def go():
        http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t/v1", timeout=300)
        async with openai.AsyncOpenAI(base_url="http://t/v1", api_key="x", http_client=http) as client:
            return await fn(client)

    return asyncio.run(go())


def test_streamed_chat_is_the_unstreamed_answer_in_chunks(app):
    kw = dict(model="tiny", messages=[{"role": "user", "content": "tell me a story"}], max_tokens=12,
              temperature=0, logprobs=True, top_logprobs=2)

    async def both(client):
        whole = await client.chat.completions.create(**kw)
        chunks = [c async for c in await client.chat.completions.create(
            **kw, stream=True, stream_options={"include_usage": True})]
        return whole, chunks

    whole, chunks = call(app, both)
    assert chunks[0].choices[0].delta.role == "assistant" and chunks[-1].choices == []
    assert chunks[-1].usage.model_dump() == whole.usage.model_dump()
    body = [c for c in chunks if c.choices]
    assert {c.id for c in chunks} == {chunks[0].id} and all(c.usage is None for c in body)
    text = "".join(c.choices[0].delta.content or "" for c in body)
    assert text == whole.choices[0].message.content and len(body) > 3  # token by token, not one piece
    streamed = [e.model_dump() for c in body if c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert streamed == [e.model_dump() for e in whole.choices[0].logprobs.content]
    assert [c.choices[0].finish_reason for c in body] == [None] * (len(body) - 1) + [whole.choices[0].finish_reason]
    assert body[-1].choices[0].model_extra["token_ids"] == whole.choices[0].model_extra["token_ids"]


def test_streamed_completions_with_several_choices_and_a_stop_string(app):
    kw = dict(model="tiny", prompt="the key is", max_tokens=10, temperature=1.0, seed=7, n=2, logprobs=1)

    async def both(client):
        whole = await client.completions.create(**kw)
        cut = (whole.choices[0].text or "x")[2:4] or "e"
        whole_cut = await client.completions.create(**kw, stop=[cut])
        chunks = [c async for c in await client.completions.create(**kw, stream=True)]
        cut_chunks = [c async for c in await client.completions.create(**kw, stop=[cut], stream=True)]
        return (whole, chunks), (whole_cut, cut_chunks)

    for whole, chunks in call(app, both):
        for choice in whole.choices:
            mine = [c.choices[0] for c in chunks if c.choices[0].index == choice.index]
            assert "".join(m.text for m in mine) == choice.text
            assert [m.finish_reason for m in mine][-1] == choice.finish_reason
            tokens = [lp for m in mine if m.logprobs for lp in m.logprobs.token_logprobs]
            assert tokens == choice.logprobs.token_logprobs
            offsets = [o for m in mine if m.logprobs for o in m.logprobs.text_offset]
            assert offsets == choice.logprobs.text_offset


def test_continuous_usage_gives_every_chunk_the_usage_so_far(app):
    """vLLM's ``continuous_usage_stats``: each chunk says its choice's completion tokens up to it; the last chunk
    of a choice has them all, and the prompt is counted per prompt (two prompts of different lengths here)."""
    kw = dict(model="tiny", prompt=["the key is", "a"], max_tokens=6, temperature=0, extra_body={"ignore_eos": True})

    async def both(client):
        whole = await client.completions.create(**kw)
        chunks = [c async for c in await client.completions.create(
            **kw, stream=True, stream_options={"include_usage": True, "continuous_usage_stats": True})]
        return whole, chunks

    whole, chunks = call(app, both)
    assert chunks[-1].choices == [] and chunks[-1].usage.model_dump() == whole.usage.model_dump()
    for choice in whole.choices:
        mine = [c for c in chunks if c.choices and c.choices[0].index == choice.index]
        done = [c.usage.completion_tokens for c in mine]
        assert done == sorted(done) and done[-1] == 6 and all(c.usage.total_tokens == c.usage.prompt_tokens
                                                              + c.usage.completion_tokens for c in mine)
        assert len({c.usage.prompt_tokens for c in mine}) == 1
    first = {c.choices[0].index: c.usage.prompt_tokens for c in chunks if c.choices}
    assert first[0] > first[1] and first[0] + first[1] == whole.usage.prompt_tokens


def test_token_spans_cover_the_text_and_its_tokens(tiny_model):
    tok = tiny_model[1]
    ids = tok.encode("héllo wörld, naïve café", add_special_tokens=False)
    spans = token_spans(tok, ids)
    assert "".join(p for p, _ in spans) == tok.decode(ids) and spans[-1][1] == len(ids)
    assert [end for _, end in spans] == sorted(end for _, end in spans)
    assert aligned_spans([("ab", 1), ("cd", 2), ("ef", 3)], "abcx") == [("ab", 1), ("cx", 1)]
    assert aligned_spans([("ab", 1), ("cd", 2)], "abcd") == [("ab", 1), ("cd", 2)]
    assert aligned_spans([], "xy") == [("xy", 0)]


def test_token_spans_stay_linear_over_tokens_that_print_nothing(tiny_model):
    """A long run of skipped special tokens or of bytes that never make a character once made every step decode
    the whole run (quadratic: 24 s of a shared event loop for 16K tokens); the window now stays short."""
    tok = tiny_model[1]
    decoded: list[int] = []
    real = tok.decode

    class Counting:
        all_special_ids = tok.all_special_ids

        def decode(self, ids, **kw):
            decoded.append(len(ids))
            return real(ids, **kw)

    text_ids = tok.encode("hello world", add_special_tokens=False)
    specials = [tok.eos_token_id] * 2000
    ids = text_ids + specials + text_ids
    spans = token_spans(Counting(), ids)
    assert "".join(p for p, _ in spans) == tok.decode(ids, skip_special_tokens=True)
    assert max(decoded[:-1]) < 20 and sum(decoded[:-1]) < 40 * len(text_ids)  # the last decode is the whole check
