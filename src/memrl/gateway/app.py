"""The gateway's HTTP routes: ``/episodes/<id>/v1/{chat/completions,completions,models}`` (either streamed).

Each episode has its own base URL and key. The episode is looked up before the body is
read, so an unknown or finished episode gets a 404 and a wrong key a 401 whatever the body;
a malformed body gets a 400 naming the field (serve's error shape and body checks). A
request that fails for any other reason gets a 503 that the SDKs do not retry: nothing answers
500, and nothing one episode sends can reach another's conversations.
"""

# No ``from __future__ import annotations`` here: FastAPI reads these annotations at run time.
import asyncio
import concurrent.futures
import contextvars
import functools
from typing import Any

import fastapi
from fastapi import Depends, Request
from fastapi.exceptions import RequestValidationError

from memrl.gateway.anthropic_errors import AnthropicErrors, unexpected_message
from memrl.gateway.calls import CallRequest, model_call
from memrl.gateway.online_routes import add_reward_routes
from memrl.gateway.requests import (GatewayChatBody, GatewayCompletionBody, chat_messages, check_common, check_tools,
                                    requested_max_tokens, sampling_overrides)
from memrl.gateway.routes import add_protocol_routes, authorization, event_stream, pieces, recorded, stream_chat
from memrl.gateway.sessions import Session, Sessions
from memrl.gateway.sse import completion_events, stream_usage
from memrl.serve.errors import APIError, error_response, install_error_handlers, validation_message
from memrl.serve.fields import chat_logprobs, completion_logprobs, stop_strings
from memrl.serve.limits import check_token_ids
from memrl.serve.middleware import BodyLimit


async def _unexpected(request: Request, exc: Exception) -> Any:
    """A failure of the gateway's own: a 503 the SDKs do not retry (they retry any 5xx unless told not to,
    and the same request would fail the same way three times over)."""
    answer = error_response(503, unexpected_message(exc), code="gateway_error")
    answer.headers["x-should-retry"] = "false"
    return answer


def _no_route(request: Request) -> str:
    """What a path that matches no route is told. A program pointed at the wrong base URL (a hard-coded
    ``http://localhost:8000/v1``, a path without its ``/v1``) otherwise got a bare "Not Found"."""
    return (f"no route {request.method} {request.url.path[:200]} on memrl's gateway: an episode's API lives under "
            "its own base URL http://HOST:PORT/episodes/<id>/v1, given to the program as $OPENAI_BASE_URL (and "
            "ANTHROPIC_BASE_URL without the /v1); the SDK adds /chat/completions, /completions, /responses, "
            "/messages or /models")


async def _invalid_body(sessions: Sessions, request: Request, exc: RequestValidationError) -> Any:
    """A body that is not valid JSON or not the right shape: a 400, once the episode and its key were checked.

    FastAPI parses JSON before it runs the route's dependencies, so without this an unknown episode or a
    wrong key sent with a malformed body got the 400 and not the 404/401 the same request gets otherwise.
    """
    episode_id = request.path_params.get("episode_id")
    if isinstance(episode_id, str):
        try:
            sessions.get(episode_id, authorization(request.headers))
        except APIError as err:
            return error_response(err.status, err.message, err.code, err.param)
    message, name = validation_message(exc)
    return error_response(400, message, "invalid_value", name)


async def health() -> dict[str, str]:
    return {"status": "ok"}


async def _call(sessions: Sessions, session: Session, req: CallRequest) -> dict[str, Any]:
    """Run ``req`` on the episode's own loop; a call that fails for a reason of its own fails the episode."""
    sessions.start_call(session)
    future = session.run_live(model_call(session, req))
    try:
        return await _unless_client_left(future)
    except asyncio.CancelledError:
        if future.cancelled():  # the episode ended (timeout, program returned) while this call ran
            raise APIError(404, f"episode {session.id!r} finished during this call",
                           code="episode_not_found") from None
        raise
    except APIError:
        raise
    except Exception as exc:  # noqa: BLE001 - e.g. a tool-parser plug-in that raised: the episode fails
        session.fail(exc)
        raise APIError(503, f"the call failed ({type(exc).__name__}); this episode will be discarded",
                       code="call_failed") from None


_REQUEST: contextvars.ContextVar[Request | None] = contextvars.ContextVar("memrl_gateway_request", default=None)
DISCONNECT_POLL_S = 0.5


async def _unless_client_left(future: concurrent.futures.Future[Any]) -> Any:
    """The call's answer; if its HTTP client has gone meanwhile (a timeout, a killed program), the call is
    cancelled: nothing the program never saw is recorded and trained on (as ``memrl serve`` answers 499)."""
    waiting = asyncio.wrap_future(future)
    request = _REQUEST.get()
    while True:
        done, _ = await asyncio.wait({waiting}, timeout=DISCONNECT_POLL_S)
        if done:
            return waiting.result()
        if request is not None and await request.is_disconnected():
            future.cancel()
            raise APIError(499, "client disconnected: this call is not recorded", code="client_closed_request")


def _request_of(kind: str, body: Any, k: Any, param: str, prompt: Any, *, model: str, **extra: Any) -> CallRequest:
    """The fields both endpoints share, as the call the episode runs."""
    if k:
        raise APIError(400, f"{param}: only the sampled token's log-prob is recorded (ask for 0)",
                       code="unsupported", param=param)
    return CallRequest(kind, prompt, max_tokens=requested_max_tokens(body), overrides=sampling_overrides(body),
                       stops=stop_strings(body), ignore_eos=body.ignore_eos,
                       stop_token_ids=check_token_ids(body.stop_token_ids or [], "stop_token_ids", None),
                       skip_special=body.skip_special_tokens, logprobs=k, as_ids=body.return_tokens_as_token_ids,
                       return_token_ids=body.return_token_ids, model=model, **extra)


def create_gateway_app(sessions: Sessions, model_name: str, max_body_bytes: int = 8 * 2**20, online: Any = None) -> Any:
    """The ASGI app serving the open episodes of ``sessions`` (and, given ``online``, an online session's
    ``/rl/*`` routes: :mod:`memrl.gateway.online_routes`)."""
    app = fastapi.FastAPI(title="memrl gateway", docs_url=None, redoc_url=None, openapi_url=None)
    install_error_handlers(app, no_route=_no_route)
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    app.add_middleware(AnthropicErrors)  # added last: the outermost, it sees the body limit's 413 too
    app.add_exception_handler(Exception, _unexpected)
    app.add_exception_handler(RequestValidationError, functools.partial(_invalid_body, sessions))
    app.get("/health")(health)

    async def session_of(episode_id: str, request: Request) -> Session:
        _REQUEST.set(request)  # this request's task: _call watches whether its client is still there
        return sessions.get(episode_id, authorization(request.headers))

    served = {"id": model_name, "object": "model", "created": 0, "owned_by": "memrl"}

    @app.get("/episodes/{episode_id}/v1/models")
    async def models(session: Session = Depends(session_of)) -> dict[str, Any]:
        return {"object": "list", "data": [served]}

    @app.get("/episodes/{episode_id}/v1/models/{model_id:path}")
    async def model(model_id: str, session: Session = Depends(session_of)) -> dict[str, Any]:
        """``client.models.retrieve(name)``: the served model under its name (a program checking it exists)."""
        if model_id != model_name:
            raise APIError(404, f"the model {model_id[:80]!r} does not exist here (this episode serves "
                           f"{model_name!r})", code="model_not_found", param="model")
        return served

    @app.post("/episodes/{episode_id}/v1/chat/completions")
    async def chat(body: GatewayChatBody, session: Session = Depends(session_of)) -> Any:
        check_common(body, streams=True)
        usage = stream_usage(body.stream_options, bool(body.stream))
        req = _request_of("chat", body, chat_logprobs(body), "top_logprobs", chat_messages(body.messages),
                          model=model_name, tools=check_tools(body), parse_tools=body.tool_choice != "none",
                          parallel_tool_calls=body.parallel_tool_calls is not False)
        if body.stream:
            return await stream_chat(session, functools.partial(_call, sessions), req, usage)
        return await _call(sessions, session, req)

    @app.post("/episodes/{episode_id}/v1/completions")
    async def completions(body: GatewayCompletionBody, session: Session = Depends(session_of)) -> Any:
        options = (body.model_extra or {}).pop("stream_options", None)  # a field of streamed calls only
        check_common(body, streams=True)
        usage = stream_usage(options, bool(body.stream))
        req = _request_of("completion", body, completion_logprobs(body), "logprobs", body.prompt,
                          model=model_name, add_special_tokens=body.add_special_tokens)
        if body.stream:  # generated and recorded whole, as unstreamed; then sent as text_completion chunks
            answer, ids = await recorded(session, functools.partial(_call, sessions), req)
            return event_stream(completion_events(answer, await pieces(session, ids), usage))
        return await _call(sessions, session, req)

    add_protocol_routes(app, session_of, functools.partial(_call, sessions), model_name)
    add_reward_routes(app, sessions, online, model_name)
    return app
