"""LangChain ``ChatOpenAI`` with bound tools and LangGraph's prebuilt agent, through the gateway.

Each call's recorded prompt ids are the chat template's ids of exactly what the SDK sent
(captured on the wire), read as vLLM reads a chat request: null fields dropped, tool-call
arguments (a JSON string) as objects. The fields LangChain sends with its usual options are
answered; those that cannot be honoured while training get a 400 naming the field.
"""

from __future__ import annotations

import asyncio
import json
import warnings
from typing import Any

import httpx
import pytest

from memrl.workflows.api import chat_ids
from tests.gateway.conftest import open_episode, openai
from tests.gateway.test_protocols import FINAL, prompt_ids, tool_then_text

pytest.importorskip("langchain_openai", reason="pip install 'memrl[dev]'")
from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langchain_openai import ChatOpenAI  # noqa: E402


@tool
def add(a: float, b: float) -> float:
    """a + b"""
    return a + b


class Wire:
    """The JSON bodies an SDK posts, captured by its httpx client's request hook."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.http = httpx.AsyncClient(event_hooks={"request": [self._record]})

    async def _record(self, request: httpx.Request) -> None:
        if request.method == "POST":
            self.bodies.append(json.loads(request.content))


def template_input(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The sent messages as vLLM hands them to the chat template (nulls dropped, arguments as objects)."""
    out = []
    for m in messages:
        m = {k: v for k, v in m.items() if v is not None}
        if "tool_calls" in m:
            m["tool_calls"] = [{**c, "function": {**c["function"], "arguments": json.loads(c["function"]["arguments"])}}
                               for c in m["tool_calls"]]
        out.append(m)
    return out


def assert_recorded_as_sent(ep, bodies, tok) -> None:
    assert len(ep.conversations) == len(bodies)
    for conv, body in zip(ep.conversations, bodies):
        assert prompt_ids(conv) == chat_ids(tok, template_input(body["messages"]), body.get("tools"))


def chat_model(endpoint, wire: Wire, **kw: Any) -> ChatOpenAI:
    return ChatOpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key, model="m", max_retries=0,
                      http_async_client=wire.http, **kw)


def test_chat_openai_with_bound_tools(gateway, tools_tokenizer):
    tok = tools_tokenizer

    async def go(stream: bool):
        wire = Wire()
        async with open_episode(gateway, tool_then_text(tok), tok, merge=False) as (ep, endpoint, _):
            llm = chat_model(endpoint, wire, max_tokens=64, temperature=0.7, streaming=stream,
                             stream_usage=stream).bind_tools([add])
            messages = [SystemMessage("Use add."), HumanMessage("1 + 2?")]
            first = await llm.ainvoke(messages)
            messages += [first, *[add.invoke(call) for call in first.tool_calls]]
            second = await llm.ainvoke(messages)
        await wire.http.aclose()
        return ep, wire.bodies, first, second

    for stream in (False, True):
        ep, bodies, first, second = asyncio.run(go(stream))
        assert [(c["name"], c["args"]) for c in first.tool_calls] == [("add", {"a": 1, "b": 2})]
        assert second.content == FINAL and not second.tool_calls
        assert bodies[0]["max_completion_tokens"] == 64 and bodies[0]["stream"] is stream
        tool_message = {"content": "3.0", "role": "tool", "tool_call_id": first.tool_calls[0]["id"]}
        assert bodies[1]["messages"][-1] == tool_message
        assert_recorded_as_sent(ep, bodies, tok)
        if stream:
            assert second.usage_metadata["output_tokens"] == len(tok.encode(FINAL, add_special_tokens=False)) + 1


def test_langgraph_prebuilt_agent(gateway, tools_tokenizer):
    prebuilt = pytest.importorskip("langgraph.prebuilt", reason="pip install 'memrl[dev]'")
    tok = tools_tokenizer

    async def go():
        wire = Wire()
        async with open_episode(gateway, tool_then_text(tok), tok, merge=False) as (ep, endpoint, _):
            with warnings.catch_warnings():  # moved to langchain.agents.create_agent in LangGraph 1.0, still here
                warnings.simplefilter("ignore")
                agent = prebuilt.create_react_agent(chat_model(endpoint, wire), [add], prompt="Use add.")
            state = await agent.ainvoke({"messages": [("user", "1 + 2?")]}, {"recursion_limit": 8})
        await wire.http.aclose()
        return ep, wire.bodies, state

    ep, bodies, state = asyncio.run(go())
    kinds = [type(m).__name__ for m in state["messages"]]
    assert kinds == ["HumanMessage", "AIMessage", "ToolMessage", "AIMessage"] and state["messages"][-1].content == FINAL
    assert bodies[1]["messages"][0] == {"content": "Use add.", "role": "system"}
    assert bodies[1]["messages"][2]["content"] is None and bodies[1]["messages"][3]["content"] == "3.0"
    assert_recorded_as_sent(ep, bodies, tok)


# LangChain options whose fields the gateway answers, and what they send.
ACCEPTED = [({"model_kwargs": {"parallel_tool_calls": False}}, "parallel_tool_calls"),
            ({"logprobs": True}, "logprobs"),
            ({"stop": ["END"]}, "stop"),
            ({"frequency_penalty": 0.0, "presence_penalty": 0.0}, "presence_penalty"),
            ({"service_tier": "auto"}, "service_tier"),
            ({"store": True, "extra_body": {"metadata": {"run": "x"}}}, "metadata"),
            ({"model_kwargs": {"prompt_cache_key": "k", "safety_identifier": "u", "user": "u"}}, "prompt_cache_key"),
            ({"model_kwargs": {"modalities": ["text"]}}, "modalities")]
# Options it refuses, and the field the 400 names.
REFUSED = [({"n": 2}, "n"), ({"seed": 1}, "seed"), ({"top_logprobs": 2, "logprobs": True}, "top_logprobs"),
           ({"reasoning_effort": "low"}, "reasoning_effort"), ({"frequency_penalty": 0.5}, "frequency_penalty"),
           ({"model_kwargs": {"response_format": {"type": "json_object"}}}, "response_format"),
           ({"model_kwargs": {"modalities": ["text", "audio"]}}, "modalities"),
           ({"logit_bias": {1: 5}}, "logit_bias"),
           ({"model_kwargs": {"prediction": {"type": "content", "content": "x"}}}, "prediction")]


def test_chat_fields_langchain_sends(gateway, tools_tokenizer):
    tok = tools_tokenizer

    async def go():
        wire = Wire()
        answers = []
        async with open_episode(gateway, tool_then_text(tok), tok) as (ep, endpoint, _):
            for kw, field in ACCEPTED:
                reply = await chat_model(endpoint, wire, **kw).bind_tools([add]).ainvoke("1 + 2?")
                answers.append((field in wire.bodies[-1], bool(reply.tool_calls)))
            for kw, field in REFUSED + [({}, "tool_choice")]:
                llm = chat_model(endpoint, wire, **kw)
                bound = llm.bind_tools([add], tool_choice="any") if field == "tool_choice" else llm
                with pytest.raises(openai.BadRequestError) as err:
                    await bound.ainvoke("1 + 2?")
                answers.append((field in wire.bodies[-1], err.value.body["param"]))
        await wire.http.aclose()
        return ep, answers

    ep, answers = asyncio.run(go())
    assert answers[:len(ACCEPTED)] == [(True, True)] * len(ACCEPTED)
    assert answers[len(ACCEPTED):] == [(True, field) for _, field in REFUSED + [({}, "tool_choice")]]
    assert len(ep.conversations) == len(ACCEPTED)  # a refused call records nothing
