"""The Responses and Messages routes, and streaming for them and for chat completions.

Each request is checked whole (a 400 naming the field) before it is handed to the episode;
it then runs as one chat call of that episode (``call``: the chat endpoint's own path, with
its call cap and failure handling), so what is recorded is the same whatever API or
``stream`` setting the program used. The Messages API is served at ``.../v1/messages`` and
at ``.../v1/v1/messages``: the ``anthropic`` SDK adds ``/v1`` to its base URL itself, so a
program may give it the episode's base URL as it is, or without its ``/v1`` (``.../v1/v1/models`` answers
the SDK's ``models.list()`` in Anthropic's shape for the same reason).
"""

# No ``from __future__ import annotations`` here: FastAPI reads these annotations at run time.
import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from fastapi import Depends
from fastapi.responses import StreamingResponse

from memrl.gateway import messages as anthropic_messages
from memrl.gateway import responses as openai_responses
from memrl.gateway.adapters import on_episode
from memrl.serve.streaming import Span, token_spans
from memrl.gateway.calls import CallRequest, limits_for, render
from memrl.serve.errors import APIError
from memrl.gateway.requests import sampling_overrides
from memrl.gateway.sessions import Session
from memrl.gateway.sse import Usage, chat_events, messages_events, responses_events

Call = Callable[[Session, CallRequest], Awaitable[dict[str, Any]]]


def authorization(headers: Mapping[str, str]) -> str:
    """The key to check, as ``Bearer KEY``: the Authorization header, else Anthropic's ``x-api-key``."""
    auth = headers.get("authorization", "")
    key = headers.get("x-api-key")
    return f"Bearer {key}" if key and not auth else auth


async def recorded(session: Session, call: Call, req: CallRequest) -> tuple[dict[str, Any], list[int]]:
    """The chat answer of ``req`` and its generated ids (asked for here, shown only if the program asked)."""
    answer = await call(session, dataclasses.replace(req, return_token_ids=True))
    choice = answer["choices"][0]
    ids = list(choice.get("token_ids") or [])
    if not req.return_token_ids:
        choice.pop("token_ids", None)
        choice.pop("prompt_token_ids", None)
    return answer, ids


async def pieces(session: Session, ids: Sequence[int]) -> list[Span]:
    """The decoding of ``ids`` token by token, each piece with the count of tokens it ends at; done on the
    episode's loop (which owns its tokenizer)."""
    return await on_episode(session, lambda: token_spans(session.episode.tokenizer, ids), [])  # type: ignore


def event_stream(events: list[str]) -> StreamingResponse:
    return StreamingResponse(iter(events), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


async def stream_chat(session: Session, call: Call, req: CallRequest, usage: Usage) -> StreamingResponse:
    """A chat completion with ``stream: true``: generated and recorded whole, then sent as chunks."""
    answer, ids = await recorded(session, call, req)
    return event_stream(chat_events(answer, await pieces(session, ids), usage))


async def answer_responses(body: openai_responses.ResponsesBody, session: Session, call: Call, model: str) -> Any:
    """``POST /v1/responses``: the Response object, or its events."""
    max_tokens, logprobs = openai_responses.check(body)
    tools = openai_responses.tools_of(body)
    overrides = sampling_overrides(body)  # type: ignore[arg-type]
    prompt, history = openai_responses.chat_request(session, body)
    req = CallRequest("chat", prompt, tools=tools, max_tokens=max_tokens, overrides=overrides, model=model,
                      parallel_tool_calls=body.parallel_tool_calls is not False, parse_tools=body.tool_choice != "none",
                      logprobs=0 if logprobs else None)
    answer, ids = await recorded(session, call, req)
    resp = openai_responses.response_object(answer, body, session, history)
    if not body.stream:
        return resp
    return event_stream(responses_events(resp, await pieces(session, ids)))


async def answer_messages(body: anthropic_messages.MessagesBody, session: Session, call: Call, model: str) -> Any:
    """``POST /v1/messages``: the Message object, or its events."""
    stops = anthropic_messages.check(body)
    tools = anthropic_messages.tools_of(body)
    overrides = sampling_overrides(body)  # type: ignore[arg-type]
    prompt = anthropic_messages.chat_messages(body)
    req = CallRequest("chat", prompt, tools=tools, max_tokens=body.max_tokens, overrides=overrides, stops=stops,
                      model=model, parallel_tool_calls=not anthropic_messages.one_tool_use(body),
                      parse_tools=anthropic_messages.parses_tools(body),
                      continue_final=anthropic_messages.prefilled(prompt))
    answer, ids = await recorded(session, call, req)
    met = answer["choices"][0].get("stop_reason")  # the stop string the answer was cut at, or a stop token's id
    text = await pieces(session, ids) if body.stream else []
    message = anthropic_messages.message_object(answer, met if isinstance(met, str) else None)
    if not body.stream:
        return message
    return event_stream(messages_events(message, text))


async def count_message_tokens(body: anthropic_messages.CountTokensBody, session: Session) -> dict[str, int]:
    """``POST /v1/messages/count_tokens``: the prompt's length as the next call would render it; not a model call."""
    anthropic_messages.refuse_unknown(body, anthropic_messages.NO_OPS, "Messages API")
    prompt = anthropic_messages.chat_messages(body)
    req = CallRequest("chat", prompt, tools=anthropic_messages.tools_of(body),
                      continue_final=anthropic_messages.prefilled(prompt))
    ep = session.episode

    async def count() -> int:
        return len(await render(session, req, limits_for(ep.engine, ep.tokenizer)))

    return {"input_tokens": await asyncio.wrap_future(session.run_live(count()))}


def add_protocol_routes(app: Any, session_of: Callable[..., Session], call: Call, model: str) -> None:
    """Register ``/v1/responses`` (create, retrieve, delete) and ``/v1/messages`` on the gateway ``app``."""
    async def responses(body: openai_responses.ResponsesBody, session: Session = Depends(session_of)) -> Any:
        return await answer_responses(body, session, call, model)

    async def messages(body: anthropic_messages.MessagesBody, session: Session = Depends(session_of)) -> Any:
        return await answer_messages(body, session, call, model)

    async def count_tokens(body: anthropic_messages.CountTokensBody, session: Session = Depends(session_of)) -> Any:
        return await count_message_tokens(body, session)

    described = {"type": "model", "id": model, "display_name": model, "created_at": "1970-01-01T00:00:00Z"}

    async def anthropic_models(session: Session = Depends(session_of)) -> Any:
        """``Anthropic(base_url=<the episode's .../v1>).models.list()``: the SDK asks ``.../v1/v1/models``."""
        return {"data": [described], "has_more": False, "first_id": model, "last_id": model}

    async def anthropic_model(model_id: str, session: Session = Depends(session_of)) -> Any:
        if model_id != model:
            raise APIError(404, f"the model {model_id[:80]!r} does not exist here (this episode serves {model!r})",
                           code="model_not_found", param="model")
        return described

    app.get("/episodes/{episode_id}/v1/v1/models")(anthropic_models)
    app.get("/episodes/{episode_id}/v1/v1/models/{model_id:path}")(anthropic_model)
    app.post("/episodes/{episode_id}/v1/messages/count_tokens")(count_tokens)
    app.post("/episodes/{episode_id}/v1/v1/messages/count_tokens")(count_tokens)
    async def retrieve(response_id: str, stream: bool = False, session: Session = Depends(session_of)) -> Any:
        if stream:
            raise APIError(400, "stream: a stored response is sent whole (its events are not kept)",
                           code="unsupported", param="stream")
        return openai_responses.stored(session, response_id)

    async def delete(response_id: str, session: Session = Depends(session_of)) -> Any:
        return openai_responses.delete(session, response_id)

    app.post("/episodes/{episode_id}/v1/responses")(responses)
    app.get("/episodes/{episode_id}/v1/responses/{response_id}")(retrieve)
    app.delete("/episodes/{episode_id}/v1/responses/{response_id}")(delete)
    app.post("/episodes/{episode_id}/v1/messages")(messages)
    app.post("/episodes/{episode_id}/v1/v1/messages")(messages)
