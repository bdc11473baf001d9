"""/v1/responses, /v1/messages and stream=true through the real SDKs (openai, anthropic, openai-agents).

Each call's recorded prompt ids are the chat template's ids of the chat messages the request
means (the same as the equivalent chat completion), and a streamed call records what the
same call unstreamed records.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from memrl.testing.scripted import ScriptedEngine
from memrl.workflows.api import chat_ids
from tests.gateway.conftest import open_episode, openai

anthropic = pytest.importorskip("anthropic", reason="pip install 'memrl[dev]'")

CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>'
FINAL = "The sum is 3. END of it"
SCHEMA = {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}
CHAT_TOOLS = [{"type": "function", "function": {"name": "add", "description": "a + b", "parameters": SCHEMA}}]


def tool_then_text(tok) -> ScriptedEngine:
    """Calls ``add`` until a tool result is in the prompt, then answers FINAL."""
    def answer(prompt, params):
        text = FINAL if "<|im_start|>tool" in tok.decode(prompt) else CALL
        return tok.encode(text, add_special_tokens=False) + [tok.eos_token_id]
    return ScriptedEngine(answer)


def prompt_ids(conv) -> list[int]:
    return list(conv.token_ids[:conv.prompt_length])


def chat_call(call_id: str) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": "add", "arguments": {"a": 1, "b": 2}}}


def run(coro):
    return asyncio.run(coro)


def test_responses_tools_chaining_and_stream(gateway, tools_tokenizer):
    tok = tools_tokenizer
    tools = [{"type": "function", "name": "add", "description": "a + b", "parameters": SCHEMA}]

    async def go():
        async with open_episode(gateway, tool_then_text(tok), tok, merge=False) as (ep, _, client):
            first = await client.responses.create(model="m", instructions="Use add.", input="1 + 2?", tools=tools)
            out = [{"type": "function_call_output", "call_id": first.output[0].call_id, "output": "3"}]
            second = await client.responses.create(model="m", previous_response_id=first.id, input=out, tools=tools,
                                                   max_output_tokens=64)
            stream = await client.responses.create(model="m", previous_response_id=first.id, input=out,
                                                   tools=tools, max_output_tokens=64, stream=True)
            events = [e async for e in stream]
            cut = await client.responses.create(model="m", input="1 + 2?", max_output_tokens=2)
            return ep, first, second, events, cut

    ep, first, second, events, cut = run(go())
    # a cut answer is the policy's answer (the Agents SDK would raise on "incomplete" and discard the episode)
    assert cut.status == "completed" and cut.incomplete_details.reason == "max_output_tokens"
    assert cut.usage.output_tokens == 2 and second.incomplete_details is None
    call = first.output[0]
    assert [o.type for o in first.output] == ["function_call"] and call.name == "add"
    assert json.loads(call.arguments) == {"a": 1, "b": 2} and first.output_text == ""
    assert second.output_text == FINAL and second.status == "completed" and second.usage.output_tokens > 0
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == FINAL
    assert events[-1].type == "response.completed" and events[-1].response.output_text == FINAL
    history = [{"role": "user", "content": "1 + 2?"},
               {"role": "assistant", "content": "", "tool_calls": [chat_call(call.call_id)]},
               {"role": "tool", "tool_call_id": call.call_id, "content": "3"}]
    one, two, three, _ = ep.conversations
    assert prompt_ids(one) == chat_ids(tok, [{"role": "system", "content": "Use add."}, history[0]], CHAT_TOOLS)
    assert prompt_ids(two) == chat_ids(tok, history, CHAT_TOOLS)  # instructions are not carried over
    assert list(three.token_ids) == list(two.token_ids) and list(three.logprobs) == list(two.logprobs)


def test_openai_agents_runner_with_a_function_tool(gateway, tools_tokenizer):
    agents = pytest.importorskip("agents", reason="pip install 'memrl[dev]'")
    tok = tools_tokenizer

    @agents.function_tool
    def add(a: float, b: float) -> float:
        """a + b"""
        return a + b

    async def go():
        async with open_episode(gateway, tool_then_text(tok), tok, merge=False) as (ep, _, client):
            agent = agents.Agent(name="calc", instructions="Use add.", tools=[add],
                                 model=agents.OpenAIResponsesModel("m", openai_client=client))
            result = await agents.Runner.run(agent, "1 + 2?", run_config=agents.RunConfig(tracing_disabled=True))
            return ep, result

    ep, result = run(go())
    assert result.final_output == FINAL and len(ep.conversations) == 2
    messages = ep.conversations[1].meta["messages"]
    assert messages[0] == {"role": "system", "content": "Use add."} and messages[-1]["role"] == "tool"
    assert messages[-1]["content"] == "3.0" and messages[-2]["tool_calls"][0]["function"]["name"] == "add"
    assert prompt_ids(ep.conversations[1]) == chat_ids(tok, messages, ep.conversations[1].meta["tools"])


def test_anthropic_messages_tool_use_then_result(gateway, tools_tokenizer):
    tok = tools_tokenizer
    tools = [{"name": "add", "description": "a + b", "input_schema": SCHEMA}]

    async def go():
        async with open_episode(gateway, tool_then_text(tok), tok, merge=False) as (ep, endpoint, _):
            claude = anthropic.AsyncAnthropic(base_url=endpoint.base_url, api_key=endpoint.api_key, max_retries=0)
            user = {"role": "user", "content": "1 + 2?"}
            first = await claude.messages.create(model="m", max_tokens=128, system="Use add.", messages=[user],
                                                 tools=tools)
            use = first.content[0]
            turns = [user, {"role": "assistant", "content": [use.model_dump(exclude_none=True)]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "3"}]}]
            second = await claude.messages.create(model="m", max_tokens=128, system=[{"type": "text", "text": "Use add."}],
                                                  messages=turns, tools=tools, stop_sequences=["END", "XYZ"])
            async with claude.messages.stream(model="m", max_tokens=128, messages=turns, tools=tools) as stream:
                texts = [t async for t in stream.text_stream]
                final = await stream.get_final_message()
            return ep, first, second, texts, final

    ep, first, second, texts, final = run(go())
    use = first.content[0]
    assert first.stop_reason == "tool_use" and use.type == "tool_use" and use.input == {"a": 1, "b": 2}
    assert use.id.startswith("toolu_")  # Anthropic's id prefix
    assert second.stop_reason == "stop_sequence" and second.stop_sequence == "END"
    assert second.content[0].text == "The sum is 3. "
    assert "".join(texts) == FINAL and len(texts) > 3 and final.stop_reason == "end_turn"
    system = {"role": "system", "content": "Use add."}
    history = [{"role": "user", "content": "1 + 2?"},
               {"role": "assistant", "content": "", "tool_calls": [chat_call(use.id)]},
               {"role": "tool", "tool_call_id": use.id, "content": "3"}]
    one, two, three = ep.conversations
    assert prompt_ids(one) == chat_ids(tok, [system, history[0]], CHAT_TOOLS)
    assert prompt_ids(two) == chat_ids(tok, [system, *history], CHAT_TOOLS)
    assert prompt_ids(three) == chat_ids(tok, history, CHAT_TOOLS)


def test_chat_stream_records_what_the_unstreamed_call_records(gateway, tools_tokenizer):
    tok = tools_tokenizer
    messages = [{"role": "user", "content": "1 + 2?"}]

    async def go(stream: bool):
        async with open_episode(gateway, tool_then_text(tok), tok, merge=False) as (ep, _, client):
            r = await client.chat.completions.create(model="m", messages=messages, tools=CHAT_TOOLS, stream=stream,
                                                     **({"stream_options": {"include_usage": True}} if stream else {}))
            return ep, [c async for c in r] if stream else r

    plain_ep, plain = run(go(False))
    ep, chunks = run(go(True))
    assert [list(c.token_ids) for c in ep.conversations] == [list(c.token_ids) for c in plain_ep.conversations]
    assert prompt_ids(ep.conversations[0]) == chat_ids(tok, messages, CHAT_TOOLS)
    calls = [t for c in chunks if c.choices for t in c.choices[0].delta.tool_calls or []]
    assert [(t.function.name, json.loads(t.function.arguments)) for t in calls] == [("add", {"a": 1, "b": 2})]
    assert chunks[0].choices[0].delta.role == "assistant" and chunks[-2].choices[0].finish_reason == "tool_calls"
    assert chunks[-1].usage.completion_tokens == plain.usage.completion_tokens
    assert plain.choices[0].message.tool_calls[0].function.name == "add"


def test_refused_fields_are_named_and_record_nothing(gateway, tools_tokenizer):
    tok = tools_tokenizer

    async def go():
        async with open_episode(gateway, tool_then_text(tok), tok) as (ep, endpoint, client):
            raw = httpx.AsyncClient(headers={"x-api-key": endpoint.api_key, "anthropic-version": "2023-06-01"})
            answers = []
            for path, body in BAD:
                r = await raw.post(endpoint.base_url + path, json=body)
                error = r.json()["error"]
                if path == "/messages":  # Anthropic's shape: the field is named in the message
                    assert r.json()["type"] == "error" and error["type"] == "invalid_request_error", r.text
                    answers.append((r.status_code, error["message"].split(":")[0]))
                else:
                    answers.append((r.status_code, error["param"]))
            wrong = await raw.post(endpoint.base_url + "/messages", headers={"x-api-key": "sk-ep-wrong"},
                                   json={"max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]})
            shapes = [(await raw.post(endpoint.base_url + "/messages", content=body,
                                      headers={**h, "content-type": "application/json"})).json()
                      for h, body in (({"x-api-key": "sk-ep-wrong"}, b"{not json"), ({}, b"{not json"),
                                      ({}, b'{"messages": []}'))]
            await raw.aclose()
            async with open_episode(gateway, tool_then_text(tok), tok) as (other, _, other_client):
                theirs = await other_client.responses.create(model="m", input="hi", max_output_tokens=2)
            with pytest.raises(openai.BadRequestError, match="previous_response_id: no stored response"):
                await client.responses.create(model="m", input="hi", previous_response_id=theirs.id)
            return ep, answers, wrong, shapes

    ep, answers, wrong, shapes = run(go())
    assert answers == [(400, param) for param in EXPECTED]
    assert wrong.status_code == 401 and not ep.conversations  # another episode's response is not this one's
    assert wrong.json()["error"]["type"] == "authentication_error" and wrong.json()["type"] == "error"
    # the key is checked before the body is parsed: a wrong key with broken JSON is a 401, not a 400
    assert [(a["type"], a["error"]["type"]) for a in shapes] == [
        ("error", "authentication_error"), ("error", "invalid_request_error"), ("error", "invalid_request_error")]
    assert "not valid JSON" in shapes[1]["error"]["message"] and "max_tokens" in shapes[2]["error"]["message"]


def test_anthropic_prefill_is_continued_not_closed(gateway, tools_tokenizer):
    """A final assistant message is the start of the answer (Anthropic's prefill): the prompt leaves it open."""
    tok = tools_tokenizer
    user = {"role": "user", "content": "Give JSON."}

    async def go():
        async with open_episode(gateway, tool_then_text(tok), tok, merge=False) as (ep, endpoint, _):
            claude = anthropic.AsyncAnthropic(base_url=endpoint.base_url, api_key=endpoint.api_key, max_retries=0)
            made = await claude.messages.create(model="m", max_tokens=128, messages=[
                user, {"role": "assistant", "content": [{"type": "text", "text": '{"sum":'}]}])
            empty = await claude.messages.create(model="m", max_tokens=16, messages=[
                user, {"role": "assistant", "content": ""}])
            with pytest.raises(anthropic.BadRequestError, match="trailing whitespace"):
                await claude.messages.create(model="m", max_tokens=16, messages=[
                    user, {"role": "assistant", "content": "hello "}])
            return ep, made, empty

    ep, made, empty = run(go())
    open_turn = prompt_ids(ep.conversations[0])
    assert tok.decode(open_turn).endswith('<|im_start|>assistant\n{"sum":')  # left open, no new turn after it
    assert made.content[0].text == CALL  # the answer is what was generated, without the prefill
    assert prompt_ids(ep.conversations[1]) == chat_ids(tok, [user], None)  # an empty prefill is none
    assert len(ep.conversations) == 2 and empty.stop_reason in ("end_turn", "max_tokens")


USER = [{"role": "user", "content": "hi"}]
BAD = [
    ("/responses", {"input": "hi", "conversation": "conv_1"}),
    ("/responses", {"input": "hi", "tools": [{"type": "web_search"}]}),
    ("/responses", {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}),
    ("/responses", {"input": "hi", "tool_choice": "required"}),
    ("/responses", {"input": "hi", "previous_response_id": "resp_nope"}),
    ("/responses", {"input": [{"type": "reasoning", "summary": []}]}),
    ("/responses", {"input": "hi", "max_output_tokens": 0}),
    ("/responses", {"input": "hi", "temperature": -1}),
    ("/responses", {"input": "hi", "top_logprobs": 2}),
    ("/responses", {"input": "hi", "include": ["reasoning.encrypted_content"]}),
    ("/responses", {"input": "hi", "text": {"format": {"type": "json_object"}}}),
    ("/messages", {"max_tokens": 4, "messages": USER, "top_k": 5}),
    ("/messages", {"max_tokens": 4, "messages": USER, "thinking": {"type": "enabled", "budget_tokens": 9}}),
    ("/messages", {"max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}),
    ("/messages", {"max_tokens": 4, "messages": USER, "tool_choice": {"type": "any"}}),
    ("/messages", {"messages": USER}),
    ("/messages", {"max_tokens": 4, "messages": USER, "stop_sequences": [""]}),
    ("/chat/completions", {"messages": USER, "stream_options": {"include_usage": True}}),
    ("/messages", {"max_tokens": 4, "messages": USER, "thread": {"type": "create"}}),  # tool_runner's default
    ("/messages", {"max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}),
    ("/messages", {"max_tokens": True, "messages": USER}),  # lax pydantic read true as 1
    ("/responses", {"input": "hi", "temperature": "0.5"}),
    ("/chat/completions", {"messages": USER, "n": "1"}),
    ("/chat/completions", {"messages": USER, "stream": True, "stream_options": {"include_usage": "false"}}),
    ("/chat/completions", {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]}),
    ("/responses", {"input": [{"type": "message", "role": ["user"], "content": "x"}]}),  # was a retried 503
]
EXPECTED = ["conversation", "tools[0].type", "input[0].content[0]", "tool_choice", "previous_response_id",
            "input[0].type", "max_output_tokens", "temperature", "top_logprobs", "include", "text", "top_k", "thinking", "messages[0].content[0].type",
            "tool_choice", "max_tokens", "stop_sequences[0]", "stream_options", "thread",
            "messages[0].content[0].text", "max_tokens", "temperature", "n", "stream_options.include_usage",
            "messages[0].content[0]", "input[0].role"]


def test_anthropic_count_tokens_is_the_prompt_the_call_would_render(gateway, tools_tokenizer):
    """What Claude Code asks before a call: the count equals the recorded prompt, and it is not a model call."""
    tok = tools_tokenizer
    tools = [{"name": "add", "description": "a + b", "input_schema": SCHEMA}]
    messages = [{"role": "user", "content": "1 + 2?"}]

    async def go():
        async with open_episode(gateway, tool_then_text(tok), tok, merge=False, max_calls=1) as (ep, endpoint, _):
            claude = anthropic.AsyncAnthropic(base_url=endpoint.base_url, api_key=endpoint.api_key, max_retries=0)
            counted = await claude.messages.count_tokens(model="m", system="Use add.", messages=messages,
                                                         tools=tools)
            again = await claude.messages.count_tokens(model="m", messages=messages)
            await claude.messages.create(model="m", max_tokens=64, system="Use add.", messages=messages, tools=tools)
            with pytest.raises(anthropic.BadRequestError, match="frobnicate"):
                await claude.messages.count_tokens(model="m", messages=messages, extra_body={"frobnicate": 3})
            return ep, endpoint.session, counted, again

    ep, session, counted, again = run(go())
    assert counted.input_tokens == len(prompt_ids(ep.conversations[0]))
    assert again.input_tokens == len(chat_ids(tok, messages, None)) < counted.input_tokens
    assert session.calls == 1 and session.failure is None  # counting used none of max_calls=1


def test_an_unexpected_failure_of_a_messages_route_has_anthropics_shape(gateway, tools_tokenizer, monkeypatch):
    """Starlette's last-resort 503 sits outside every middleware; the Messages routes still answer as Anthropic."""
    from memrl.gateway import messages as anthropic_messages

    def broken(body):
        raise RuntimeError("secret detail")

    async def go():
        async with open_episode(gateway, tool_then_text(tools_tokenizer), tools_tokenizer) as (ep, endpoint, client):
            monkeypatch.setattr(anthropic_messages, "chat_messages", broken)
            async with httpx.AsyncClient(headers={"x-api-key": endpoint.api_key}) as raw:
                body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
                return await raw.post(endpoint.base_url + "/messages/count_tokens", json=body)

    r = run(go())
    assert r.status_code == 503 and r.json() == {"type": "error", "error": {
        "type": "api_error", "message": "the gateway could not answer (RuntimeError)"}}
    assert r.headers["x-should-retry"] == "false"  # the SDK would send the same request twice more


def test_anthropic_models_answer_at_the_path_the_sdk_asks_in_anthropics_shape(gateway, tools_tokenizer):
    """The documented ``AsyncAnthropic(base_url=<episode's .../v1>)``: the SDK asks ``.../v1/v1/models``."""

    async def go():
        async with open_episode(gateway, tool_then_text(tools_tokenizer), tools_tokenizer) as (_, endpoint, _c):
            claude = anthropic.AsyncAnthropic(base_url=endpoint.base_url, api_key=endpoint.api_key, max_retries=0)
            listed = [m async for m in claude.models.list()]
            one = await claude.models.retrieve(listed[0].id)
            with pytest.raises(anthropic.NotFoundError):
                await claude.models.retrieve("claude-nope")
            return listed, one

    listed, one = run(go())
    assert len(listed) == 1 and listed[0] == one
    assert (one.type, one.display_name, one.created_at.year) == ("model", one.id, 1970)


def test_fields_the_sdks_send_are_accepted_and_answers_match_their_types(gateway, tools_tokenizer):
    """openai 3.x's ``stream_options.include_obfuscation``, Anthropic's top-level ``cache_control`` (neither
    changes a token) are accepted; a Response validates against the SDK's own model (usage details included)."""
    from openai.types.responses import Response

    tok = tools_tokenizer
    user = [{"role": "user", "content": "1 + 2?"}]

    async def go():
        async with open_episode(gateway, tool_then_text(tok), tok, merge=False) as (ep, endpoint, client):
            stream = await client.chat.completions.create(model="m", messages=user, stream=True, stream_options={
                "include_usage": True, "include_obfuscation": False})
            chunks = [c async for c in stream]
            claude = anthropic.AsyncAnthropic(base_url=endpoint.base_url, api_key=endpoint.api_key, max_retries=0)
            message = await claude.messages.create(model="m", max_tokens=64, messages=user,
                                                   extra_body={"cache_control": {"type": "ephemeral"}})
            raw = await client.responses.with_raw_response.create(model="m", input="1 + 2?", max_output_tokens=64)
            return ep, chunks, message, raw.http_response.json()

    ep, chunks, message, body = run(go())
    assert chunks[-1].usage is not None and message.usage.input_tokens > 0 and len(ep.conversations) == 3
    response = Response.model_validate(body)  # strict: every required field present
    assert response.usage.input_tokens_details.cache_write_tokens == 0


def test_a_stored_response_is_retrieved_and_deleted_through_the_sdk(gateway, tools_tokenizer):
    tok = tools_tokenizer

    async def go():
        async with open_episode(gateway, tool_then_text(tok), tok, merge=False) as (ep, _, client):
            first = await client.responses.create(model="m", input="1 + 2?", max_output_tokens=8)
            again = await client.responses.retrieve(first.id)
            unstored = await client.responses.create(model="m", input="1 + 2?", max_output_tokens=8, store=False)
            with pytest.raises(openai.NotFoundError, match="not found"):
                await client.responses.retrieve(unstored.id)
            await client.responses.delete(first.id)
            with pytest.raises(openai.NotFoundError):
                await client.responses.retrieve(first.id)
            with pytest.raises(openai.BadRequestError, match="previous_response_id"):
                await client.responses.create(model="m", input="and?", previous_response_id=first.id)
            with pytest.raises(openai.NotFoundError):
                await client.responses.delete(first.id)
            return ep, first, again

    ep, first, again = run(go())
    assert again.model_dump() == first.model_dump()
    assert len(ep.conversations) == 2  # retrieve and delete are not model calls


def test_a_streamed_tool_call_only_answer_has_null_content_as_unstreamed():
    from memrl.gateway.sse import Usage, chat_events, messages_events

    call = {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": "é"}'}}
    answer = {"id": "x", "created": 0, "model": "m", "choices": [{"index": 0, "finish_reason": "tool_calls",
              "message": {"role": "assistant", "content": None, "tool_calls": [call]}}], "usage": {}}
    first = json.loads(chat_events(answer, [], Usage())[0].removeprefix("data: "))
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": None}
    message = {"id": "m", "type": "message", "role": "assistant", "model": "m", "stop_reason": "tool_use",
               "stop_sequence": None, "usage": {"input_tokens": 1, "output_tokens": 1},
               "content": [{"type": "tool_use", "id": "t", "name": "add", "input": {"a": "é"}}]}
    events = "".join(messages_events(message, []))
    assert '\\"a\\": \\"é\\"' in events  # the input as the rest of the gateway writes it, not ASCII-escaped


def test_an_unexpected_failure_of_the_chat_route_is_a_503_the_sdk_does_not_retry(gateway, tools_tokenizer,
                                                                                 monkeypatch):
    """The openai SDK retries every 5xx twice unless told not to: a failure of the gateway's own would repeat."""
    from memrl.gateway import app as gateway_app

    tries = []

    def broken(messages):
        tries.append(1)
        raise RuntimeError("secret detail")

    async def go():
        async with open_episode(gateway, tool_then_text(tools_tokenizer), tools_tokenizer) as (_, endpoint, _c):
            monkeypatch.setattr(gateway_app, "chat_messages", broken)
            client = openai.AsyncOpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key)  # the SDK's 2 retries
            with pytest.raises(openai.InternalServerError) as err:
                await client.chat.completions.create(model="m", messages=USER, max_tokens=4)
            return err.value

    err = run(go())
    assert err.status_code == 503 and err.body["code"] == "gateway_error" and "secret" not in str(err.body)
    assert len(tries) == 1
