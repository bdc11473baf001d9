"""The gateway's HTTP side with the real openai SDK: isolation, 404/401, tool calls, and each bad input."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from memrl.testing.scripted import ScriptedEngine
from tests.gateway.conftest import open_episode, openai

TOOLS = [{"type": "function", "function": {"name": "add", "description": "a + b", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}}]


def scripted(tok, text: str) -> ScriptedEngine:
    """An engine that always answers ``text`` then the end-of-turn token."""
    return ScriptedEngine(lambda prompt, params: tok.encode(text, add_special_tokens=False) + [tok.eos_token_id])


def run(coro):
    return asyncio.run(coro)


def test_concurrent_episodes_are_isolated(gateway, tools_tokenizer):
    tok = tools_tokenizer

    async def episode(word: str, calls: int):
        async with open_episode(gateway, scripted(tok, f"said {word}"), tok) as (ep, endpoint, client):
            for i in range(calls):
                await asyncio.sleep(0)  # interleave the two episodes' calls
                r = await client.chat.completions.create(model="any", messages=[
                    {"role": "user", "content": f"{word} {i}"}], max_tokens=16)
                assert r.choices[0].message.content == f"said {word}"
            return ep

    async def both():
        return await asyncio.gather(episode("alpha", 3), episode("omega", 2))

    a, b = run(both())
    assert len(a.conversations) == 3 and len(b.conversations) == 2
    for ep, word in ((a, "alpha"), (b, "omega")):
        for conv in ep.conversations:
            text = tok.decode(conv.token_ids)
            assert word in text and ({"alpha", "omega"} - {word}).pop() not in text
            assert conv.meta["messages"][0]["content"].startswith(word)


def test_unknown_finished_and_wrong_key(gateway, tools_tokenizer):
    tok = tools_tokenizer

    async def go():
        async with open_episode(gateway, scripted(tok, "x"), tok) as (_, first, c1):
            async with open_episode(gateway, scripted(tok, "y"), tok) as (_, second, c2):
                wrong = openai.AsyncOpenAI(base_url=first.base_url, api_key=second.api_key, max_retries=0)
                with pytest.raises(openai.AuthenticationError):  # another episode's key
                    await wrong.models.list()
                await wrong.close()
                assert (await c1.models.list()).data[0].id == "tiny-policy"
                assert (await c1.models.retrieve("tiny-policy")).id == "tiny-policy"
                with pytest.raises(openai.NotFoundError, match="does not exist here"):
                    await c1.models.retrieve("gpt-4o")
        return first

    first = run(go())
    headers = {"Authorization": f"Bearer {first.api_key}"}
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    finished = httpx.post(first.base_url + "/chat/completions", json=body, headers=headers)
    unknown = httpx.post(gateway.url + "/episodes/nope/v1/chat/completions", json=body, headers=headers)
    for r in (finished, unknown):
        assert r.status_code == 404 and r.json()["error"]["code"] == "episode_not_found"


def test_a_wrong_base_url_is_told_where_the_api_is(gateway):
    """A program with a hard-coded base URL (no /episodes/<id>) hears what the gateway serves, not 'Not Found'."""
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=0)
    with pytest.raises(openai.NotFoundError) as err:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert "no route POST /v1/chat/completions on memrl's gateway" in str(err.value)
    assert "$OPENAI_BASE_URL" in str(err.value) and err.value.body["code"] == "route_not_found"
    r = httpx.get(gateway.url + "/episodes/e1/v1/chat/completions")  # a real route, the wrong method: as before
    assert r.status_code == 405 and r.json()["error"]["message"] == "Method Not Allowed"


def test_bad_requests_get_400_and_the_episode_goes_on(gateway, tools_tokenizer):
    tok = tools_tokenizer
    user = [{"role": "user", "content": "hi"}]

    async def go():
        async with open_episode(gateway, scripted(tok, "fine"), tok) as (ep, endpoint, client):
            bad = [
                dict(n=2),                                              # n > 1
                dict(logit_bias={"5": 3}),                              # unsupported parameter
                dict(seed=3),                                           # seeding is the episode's
                dict(tools=TOOLS, tool_choice="required"),              # needs constrained decoding
                dict(max_tokens=10**6),                                 # does not fit the window
                dict(top_logprobs=3, logprobs=True),                    # only the sampled token is recorded
                dict(messages=[{"role": "robot", "content": "hi"}]),    # unknown role
                dict(messages=[]),
                dict(messages=[{"role": "assistant", "content": None, "tool_calls": [  # arguments not JSON
                    {"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{a: 1"}}]}]),
                dict(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]),
                dict(messages=[{"role": "user", "content": "word " * 20000}]),  # an enormous prompt
            ]
            messages = []
            for kwargs in bad:
                kwargs.setdefault("messages", user)
                with pytest.raises(openai.BadRequestError) as err:
                    await client.chat.completions.create(model="m", **kwargs)
                messages.append(err.value.body["message"])
            with pytest.raises(openai.BadRequestError, match="stream_options: only with stream: true"):
                await client.chat.completions.create(model="m", messages=user, stream_options={"include_usage": True})
            with pytest.raises(openai.BadRequestError):
                await client.completions.create(model="m", prompt=["one", "two"])
            raw = httpx.AsyncClient(headers={"Authorization": f"Bearer {endpoint.api_key}",
                                             "Content-Type": "application/json"})
            r = await raw.post(endpoint.base_url + "/chat/completions", content=b"{not json")
            too_big = await raw.post(endpoint.base_url + "/chat/completions",
                                     content=json.dumps({"messages": [{"role": "user", "content": "a" * 300_000}]}))
            await raw.aclose()
            ok = await client.chat.completions.create(model="m", messages=user, max_tokens=8)
            return ep, messages, r, too_big, ok

    ep, messages, r, too_big, ok = run(go())
    assert "n: one completion per call" in messages[0] and "logit_bias" in messages[1] and "seed" in messages[2]
    assert "tool_choice" in messages[3] and "maximum context length" in messages[4]
    assert "messages[0].role" in messages[6] and "must not be empty" in messages[7]
    assert "arguments: not valid JSON" in messages[8] and "text parts" in messages[9]
    assert "maximum context length" in messages[10]
    assert r.status_code == 400 and r.json()["error"]["message"] == "request body is not valid JSON"
    assert too_big.status_code == 413
    assert ok.choices[0].message.content == "fine"
    assert len(ep.conversations) == 1  # refused requests record nothing


def test_tool_calls_parsed_and_invalid_ones_returned_as_text(gateway, tools_tokenizer):
    tok = tools_tokenizer
    good = '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>'
    broken = '<tool_call>\n{"name": add, "arguments": }\n</tool_call>'

    async def go(text: str, tool_choice: str = "auto"):
        async with open_episode(gateway, scripted(tok, text), tok) as (ep, _, client):
            r = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "1+2?"}],
                                                     tools=TOOLS, tool_choice=tool_choice, max_tokens=64)
            return r.choices[0], ep, _.session

    choice, ep, session = run(go(good))
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    call = choice.message.tool_calls[0]
    assert call.type == "function" and call.function.name == "add" and json.loads(call.function.arguments) == \
        {"a": 1, "b": 2}
    assert "# Tools" in tok.decode(ep.conversations[0].token_ids)  # the tools were rendered into the prompt
    assert ep.conversations[0].meta["tools"] == TOOLS
    choice, ep, session = run(go(broken))
    assert choice.finish_reason == "stop" and choice.message.tool_calls is None
    assert choice.message.content == broken and session.invalid_tool_calls == 1
    choice, ep, session = run(go(good, "none"))  # the tools stay in the prompt (vLLM's default), nothing parsed
    assert choice.message.tool_calls is None and choice.message.content == good
    assert "# Tools" in tok.decode(ep.conversations[0].token_ids)


def test_call_cap_refuses_further_calls(gateway, tools_tokenizer):
    tok = tools_tokenizer

    async def go():
        async with open_episode(gateway, scripted(tok, "ok"), tok, max_calls=2) as (ep, endpoint, client):
            for _ in range(3):  # refused before generating (a 400): not model calls, not counted
                with pytest.raises(openai.BadRequestError):
                    await client.completions.create(model="m", prompt="a", max_tokens=10**9)
            async with httpx.AsyncClient() as http:  # a lone surrogate: JSON allows it, Python's SDK cannot send it
                raw = await http.post(f"{client.base_url}completions", headers={
                    "Authorization": f"Bearer {client.api_key}", "Content-Type": "application/json"},
                    content=b'{"model": "m", "prompt": "a \\ud800", "max_tokens": 4}')
            assert raw.status_code == 400 and "cannot be tokenized" in raw.text  # the request's fault, not the episode's
            for _ in range(2):
                await client.completions.create(model="m", prompt="a", max_tokens=4)
            with pytest.raises(openai.PermissionDeniedError) as err:
                await client.completions.create(model="m", prompt="a", max_tokens=4)
            with pytest.raises(openai.APIStatusError) as gone:  # a failed episode serves nothing more
                await client.completions.create(model="m", prompt="a", max_tokens=4)
            return ep, endpoint.session, err.value, gone.value

    ep, session, err, gone = run(go())
    assert "has made its 2 model calls" in err.body["message"] and "more than 2" in str(session.failure)
    assert gone.status_code == 410 and gone.body["code"] == "episode_failed"
    assert len(ep.conversations) == 2 and session.calls == 3


def test_a_call_whose_client_left_is_cancelled_and_not_recorded(gateway, tools_tokenizer):
    """A program that timed out never saw the answer: training on it would credit tokens it did not act on."""
    tok = tools_tokenizer

    class Slow(ScriptedEngine):
        async def generate(self, prompt_ids, params):
            if not self.calls:
                self.calls.append(prompt_ids)
                await asyncio.sleep(3)  # longer than the client waits, shorter than the test
            return await super().generate(prompt_ids, params)

    eng = Slow(lambda prompt, params: tok.encode("late", add_special_tokens=False) + [tok.eos_token_id])

    async def main():
        async with open_episode(gateway, eng, tok) as (ep, endpoint, client):
            with pytest.raises(openai.APITimeoutError):
                await client.with_options(timeout=0.5).chat.completions.create(
                    model="any", messages=[{"role": "user", "content": "hi"}], max_tokens=8)
            await asyncio.sleep(4)  # past the slow call's end: had it run on, it would be recorded by now
            r = await client.chat.completions.create(model="any", messages=[{"role": "user", "content": "again"}],
                                                     max_tokens=8)
            return ep, r

    ep, r = run(main())
    assert r.choices[0].message.content == "late"
    assert len(ep.conversations) == 1 and ep.conversations[0].meta["messages"][0]["content"] == "again"
