"""The gateway refuses what ``memrl serve`` refuses, with the same status: non-finite sampling values get a 400
naming the field (not a 503 that discards the episode), and an oversized body reaches the SDK as the documented
413 (not a connection error)."""

from __future__ import annotations

import asyncio
import json
import threading

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
            for ids in ("[1180591620717411303424]", f"[{len(tok)}]"):  # beyond the vocabulary, as memrl serve
                body = f'{{"messages": {user}, "max_tokens": 4, "stop_token_ids": {ids}}}'
                answers.append(("stop_token_ids", await raw.post(endpoint.base_url + "/chat/completions",
                                                                 content=body)))
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


class _SlowTemplate:
    """The real tokenizer, except that rendering a huge chat waits until the other episode has been answered."""

    def __init__(self, tok, big: int) -> None:
        self._tok, self._big = tok, big
        self.other_done = threading.Event()
        self.saw_other_done: bool | None = None

    def __getattr__(self, name):
        return getattr(self._tok, name)

    def __len__(self) -> int:
        return len(self._tok)

    def is_big(self, messages, tools) -> bool:  # every string: contents, tool-call arguments, tool schemas
        return len(json.dumps([messages, tools])) > self._big

    def apply_chat_template(self, messages, **kwargs):
        if self.is_big(messages, kwargs.get("tools")):
            self.saw_other_done = self.other_done.wait(timeout=5)  # on the shared loop this can only time out
            messages, kwargs = [{"role": "user", "content": "short"}], {**kwargs, "tools": None}
        return self._tok.apply_chat_template(messages, **kwargs)


class _SlowManyMessages(_SlowTemplate):
    def is_big(self, messages, tools) -> bool:
        return len(messages) > self._big


def _huge(kind: str, count: int) -> dict:
    """A request past OFF_LOOP_CHARS whose size is in ``kind``."""
    from memrl.workflows.api import OFF_LOOP_CHARS

    text, hi = "word " * (OFF_LOOP_CHARS // 4), [{"role": "user", "content": "hi"}]
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": json.dumps({"t": text})}}
    return {"long text": {"messages": [{"role": "user", "content": text}]},
            "many empty messages": {"messages": [{"role": "user", "content": ""}] * count},
            "tool-call arguments": {"messages": [*hi, {"role": "assistant", "content": None, "tool_calls": [call]},
                                                 {"role": "tool", "tool_call_id": "c1", "content": "done"}]},
            "a tool schema": {"messages": hi, "tools": [{"type": "function", "function": {
                "name": "f", "description": text, "parameters": {"type": "object", "properties": {}}}}]},
            }[kind]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["long text", "many empty messages", "tool-call arguments", "a tool schema",
                                  "count_tokens"])
def test_a_huge_prompt_is_tokenized_off_the_shared_loop(gateway, tools_tokenizer, kind):
    """Text past OFF_LOOP_CHARS, or as many empty messages (an audit's 250,000 of them stalled every other
    episode for 6 s: only the messages' text was counted), or as much in tool-call arguments or a tool's
    schema (5 MB of them stalled the loop for 17-19 s), or counted by the Messages API's count_tokens."""
    from memrl.workflows.api import MESSAGE_CHARS, OFF_LOOP_CHARS

    count = OFF_LOOP_CHARS // MESSAGE_CHARS + 1
    many = kind == "many empty messages"
    slow = (_SlowManyMessages(tools_tokenizer, count - 1) if many else _SlowTemplate(tools_tokenizer, OFF_LOOP_CHARS))
    engine = scripted(tools_tokenizer, "ok")

    async def big():
        async with open_episode(gateway, engine, slow) as (_, endpoint, client):
            if kind == "count_tokens":
                import anthropic

                counter = anthropic.AsyncAnthropic(base_url=endpoint.base_url, api_key=endpoint.api_key)
                counted = await counter.messages.count_tokens(model="m", messages=[
                    {"role": "user", "content": "word " * (OFF_LOOP_CHARS // 4)}])
                return counted.input_tokens
            answer = await client.chat.completions.create(model="m", max_tokens=4, **_huge(kind, count))
            return answer.choices[0].message.content

    async def small():
        async with open_episode(gateway, engine, slow) as (_, _endpoint, client):
            for i in range(3):
                await client.chat.completions.create(model="m", messages=[{"role": "user", "content": f"hi {i}"}],
                                                     max_tokens=4)
            slow.other_done.set()

    async def step():  # both episodes on one loop, as a training step runs them
        return await asyncio.gather(big(), small())

    answer, _ = asyncio.run(step())
    assert answer == "ok" or (kind == "count_tokens" and answer > 0)
    assert slow.saw_other_done is True  # the other episode was answered while the big prompt was tokenized


class _Window(_SlowTemplate):
    """The real tokenizer with a 1,000-token window."""

    model_max_length = 1000


def test_more_messages_or_tools_than_the_window_has_tokens_are_a_400_before_rendering(gateway, tools_tokenizer):
    tok = _Window(tools_tokenizer, 10**9)
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}

    async def go():
        async with open_episode(gateway, scripted(tools_tokenizer, "fine"), tok) as (ep, endpoint, client):
            errors = []
            for kwargs in ({"messages": [{"role": "user", "content": ""}] * 1001},
                           {"messages": [{"role": "user", "content": "hi"}], "tools": [tool] * 1001}):
                with pytest.raises(openai.BadRequestError) as err:
                    await client.chat.completions.create(model="m", max_tokens=4, **kwargs)
                errors.append(err.value.body)
            ok = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}],
                                                      max_tokens=8)
            return errors, ok

    errors, ok = asyncio.run(go())
    assert [e["param"] for e in errors] == ["messages", "tools"]
    assert all("cannot fit" in e["message"] and e["code"] == "context_length_exceeded" for e in errors)
    assert ok.choices[0].message.content == "fine"


def test_a_temperature_below_vllms_epsilon_is_greedy_not_a_failed_episode(gateway, tiny_model):
    """``temperature: 1e-300`` is a valid request (0 <= T <= 2); dividing float32 logits by it overflows, so the
    engine refused the call and the episode was discarded. As memrl serve and vLLM (T < 1e-5), it is greedy."""
    from memrl.engines.hf import HFEngine

    model, tok = tiny_model
    engine = HFEngine(model)

    async def go():
        async with open_episode(gateway, engine, tok, request_sampling=True) as (ep, endpoint, client):
            answers = [await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=6, temperature=t,
                extra_body={"ignore_eos": True}) for t in (1e-300, 0.0)]
            return ep, answers

    try:
        ep, answers = asyncio.run(go())
    finally:
        asyncio.run(engine.close())
    first, second = ep.conversations  # both recorded: the episode went on
    assert sum(first.loss_mask) == 6 and first.token_ids == second.token_ids
    assert first.logprobs == second.logprobs  # greedy's log-probs, at temperature 1
    assert answers[0].choices[0].message.content == answers[1].choices[0].message.content
