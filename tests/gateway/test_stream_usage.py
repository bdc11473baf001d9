"""Streamed answers through the gateway: vLLM's ``continuous_usage_stats``, and each delta with the tokens it decodes.

A character split over tokens (``é`` is two bytes, two tokens of the byte-level tokenizers) is one piece of
text: the Responses API's delta for it carries both tokens' log-probs, and the usage of a chat chunk counts
both; the pieces after it are not shifted by one token.
"""

from __future__ import annotations

import asyncio

import pytest

from memrl.gateway.sse import Usage, chat_events, completion_events, responses_events, stream_usage
from memrl.serve.errors import APIError
from memrl.serve.streaming import token_spans
from memrl.testing.scripted import ScriptedEngine
from tests.gateway.conftest import open_episode
from tests.gateway.test_completions_stream import _complete

TEXT = "é café ok"


def _ids(tok) -> list[int]:
    ids = tok.encode(TEXT, add_special_tokens=False)
    assert len(ids) > len(tok.encode("e cafe ok", add_special_tokens=False))  # é takes more than one token here
    return ids


def test_stream_options_read_as_vllm_reads_them():
    assert stream_usage(None, True) == Usage()
    assert stream_usage({"include_usage": True}, True) == Usage(final=True)
    assert stream_usage({"include_usage": True, "continuous_usage_stats": True}, True) == Usage(True, True)
    assert stream_usage({"continuous_usage_stats": True}, True) == Usage()  # vLLM: only with include_usage
    with pytest.raises(APIError, match="continuous_usage_stats: must be true or false"):
        stream_usage({"include_usage": True, "continuous_usage_stats": "yes"}, True)


def test_a_responses_delta_carries_the_log_probs_of_every_token_it_decodes(tools_tokenizer):
    tok = tools_tokenizer
    ids = _ids(tok) + [tok.eos_token_id]
    logprobs = [{"token": str(i), "logprob": -float(k), "bytes": [], "top_logprobs": []} for k, i in enumerate(ids)]
    part = {"type": "output_text", "text": TEXT, "annotations": [], "logprobs": logprobs}
    resp = {"id": "r", "status": "completed", "output": [{"type": "message", "id": "m", "role": "assistant",
                                                          "status": "completed", "content": [part]}]}
    events = responses_events(resp, token_spans(tok, ids))
    deltas = [e for e in events if e.startswith("event: response.output_text.delta")]
    import json

    got = [json.loads(e.split("data: ", 1)[1]) for e in deltas]
    assert "".join(d["delta"] for d in got) == TEXT
    assert [lp for d in got for lp in d["logprobs"]] == logprobs
    for d in got[:-1]:  # each delta is exactly the decoding of the tokens whose log-probs it carries
        assert tok.decode([int(lp["token"]) for lp in d["logprobs"]]) == d["delta"]
    assert got[-1]["logprobs"][-1]["token"] == str(tok.eos_token_id)  # the stop token rides on the last delta


def _answer(tok, ids, chat: bool) -> dict:
    choice = {"index": 0, "finish_reason": "stop"}
    choice.update({"message": {"role": "assistant", "content": TEXT}} if chat else {"text": TEXT})
    return {"id": "x", "created": 0, "model": "m", "choices": [choice],
            "usage": {"prompt_tokens": 5, "completion_tokens": len(ids), "total_tokens": 5 + len(ids)}}


@pytest.mark.parametrize("chat", [True, False])
def test_continuous_usage_counts_the_tokens_each_chunk_has_given(tools_tokenizer, chat):
    import json

    tok = tools_tokenizer
    ids = _ids(tok) + [tok.eos_token_id]
    spans = token_spans(tok, ids)
    answer = _answer(tok, ids, chat)
    make = chat_events if chat else completion_events
    chunks = [json.loads(e.removeprefix("data: ")) for e in make(answer, spans, Usage(True, True))[:-1]]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == answer["usage"]
    running = chunks[:-1]
    texts = [c["choices"][0]["delta"].get("content") if chat else c["choices"][0]["text"] for c in running]
    done = [c["usage"]["completion_tokens"] for c in running]
    assert done[-1] == len(ids) and all(c["usage"]["prompt_tokens"] == 5 for c in running)
    assert all(c["usage"]["total_tokens"] == 5 + n for c, n in zip(running, done))
    pieces = [(t, n) for t, n in zip(texts, done) if t]
    assert [n for _, n in pieces] == [end for _, end in spans]  # a piece counts the tokens it ends at
    for (text, n), (_, before) in zip(pieces, [("", 0), *pieces]):
        assert tok.decode(ids[before:n]) == text
    if chat:
        assert done[0] == 0 and texts[0] == ""  # the role chunk: nothing generated yet
    plain = [json.loads(e.removeprefix("data: ")) for e in make(answer, spans, Usage(final=True))[:-1]]
    assert all(c["usage"] is None for c in plain[:-1]) and plain[-1]["usage"] == answer["usage"]
    assert all("usage" not in json.loads(e.removeprefix("data: ")) for e in make(answer, spans, Usage())[:-1])


def test_the_gateway_streams_continuous_usage(gateway, tools_tokenizer):
    options = {"include_usage": True, "continuous_usage_stats": True}
    _, chunks = asyncio.run(_complete(gateway, tools_tokenizer, True, stream_options=options))
    done = [c.usage.completion_tokens for c in chunks if c.choices]
    assert chunks[-1].choices == [] and done[-1] == chunks[-1].usage.completion_tokens > 3
    assert done == sorted(done) and len(set(done)) > 3  # token by token, not the total on every chunk

    async def chat():
        tok = tools_tokenizer
        engine = ScriptedEngine(lambda prompt, params: tok.encode(TEXT, add_special_tokens=False) + [tok.eos_token_id])
        async with open_episode(gateway, engine, tok, merge=False) as (_, _, client):
            stream = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}],
                                                          stream=True, stream_options=options)
            return [c async for c in stream]

    got = asyncio.run(chat())
    assert "".join(c.choices[0].delta.content or "" for c in got if c.choices) == TEXT
    assert got[0].usage.completion_tokens == 0 and got[-2].usage.completion_tokens == got[-1].usage.completion_tokens
