"""The FastAPI app of ``memrl tinker``: the Tinker HTTP API as the ``tinker`` SDK (0.38) speaks it.

Every route is under ``/api/v1`` and needs the server's API key in ``X-API-Key`` (the SDK sends
``TINKER_API_KEY`` there), except ``/api/v1/healthz``; a wrong key is answered 401 before the body is
read. Errors use memrl serve's JSON shape (``{"error": {"message", "type", "param", "code"}}``); the
SDK puts that body in its exception's message. Operations that touch the model answer a request id
(``UntypedAPIFuture``) and run on the worker; ``/api/v1/retrieve_future`` hands back the result:
JSON, protobuf for fwd/bwd and sample results, ``{"error", "category"}`` for a failed request (the
SDK raises ``RequestFailedError``), or ``{"type": "try_again"}`` while it runs. Endpoints this server
does not serve (custom losses on the server, external weight exports, weight copies) answer one line.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse

from memrl.serve.errors import APIError, error_response, install_error_handlers
from memrl.serve.middleware import AccessLog, BodyLimit
from memrl.tinker import samplers
from memrl.tinker import schemas as s
from memrl.tinker.rest import add_rest_routes, refusal
from memrl.tinker.futures import timing_line
from memrl.tinker.service import TinkerService
from memrl.tinker.wire import PROTO, decompress, parse_forward_backward, parse_forward_backward_json

PUBLIC = ("/api/v1/healthz",)
NOT_SERVED = {
    "/api/v1/create_custom_loss": "server-side custom losses are not served; forward_backward_custom runs them "
                                  "on the client",
    "/api/v1/save_weights_external": "external (Hugging Face) exports are not served; load a checkpoint's "
                                     "adapter.safetensors with peft, or train with memrl and use memrl export",
    "/api/v1/copy_weights": "copying weights between projects is not served (one local state folder)",
    "/api/v1/auth/token": "JWT exchange is not served; send the API key (X-API-Key)",
    "/api/v1/unload_model": "unloading a single model is not served; ServiceClient.close() releases a session's",
}


class ApiKeyGate:
    """Plain ASGI: refuse a request without the right ``X-API-Key`` (compared in constant time) with 401."""

    def __init__(self, app: Any, key: str) -> None:
        self.app = app
        self.key = key.encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope.get("path") not in PUBLIC:
            given = dict(scope.get("headers") or []).get(b"x-api-key", b"")
            if not hmac.compare_digest(given, self.key):
                response = error_response(401, "missing or wrong API key (send the key memrl tinker printed or was "
                                               "given, as TINKER_API_KEY)", "invalid_api_key")
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def future(rid: str, model_id: str | None = None) -> dict[str, Any]:
    return {"request_id": rid, "model_id": model_id}


def create_app(svc: TinkerService, api_key: str, *, access_log: bool = False, grace_s: float = 30.0) -> Any:
    """The ASGI app: key gate, body cap, routes; the worker runs for the app's lifetime."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        svc.worker.start()
        yield
        await svc.worker.stop(grace_s)

    app = FastAPI(title="memrl tinker", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.draining = False
    if access_log:
        svc.futures.on_retrieved = lambda rid, entry: print(timing_line(rid, entry), file=sys.stderr, flush=True)
    install_error_handlers(app)
    _service_routes(app, svc)
    _training_routes(app, svc)
    _sampling_routes(app, svc)
    add_rest_routes(app, svc)
    for path, why in NOT_SERVED.items():
        app.add_api_route(path, refusal(why), methods=["POST"])
    wrapped: Any = BodyLimit(ApiKeyGate(app, api_key), svc.limits.max_body_bytes)
    outer: Any = AccessLog(wrapped) if access_log else wrapped
    outer.state = app.state  # the server marks it draining on Ctrl-C
    return outer


def _service_routes(app: FastAPI, svc: TinkerService) -> None:
    @app.get("/api/v1/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/api/v1/client/config")
    async def client_config() -> dict[str, Any]:
        return svc.limits.client_config()

    @app.post("/api/v1/client/dynamic_config")
    async def dynamic_config() -> dict[str, Any]:
        return {"refresh_interval_sec": 300, "sample_cancel_enabled": True}

    @app.post("/api/v1/telemetry")
    async def telemetry() -> dict[str, str]:
        return {"status": "accepted"}  # the SDK's own diagnostics: accepted and dropped

    @app.get("/api/v1/get_server_capabilities")
    async def capabilities() -> dict[str, Any]:
        return svc.capabilities()

    @app.post("/api/v1/create_session")
    async def create_session(body: s.CreateSession) -> dict[str, Any]:
        return {"type": "create_session", "session_id": svc.create_session(body)}

    @app.post("/api/v1/session_heartbeat")
    async def heartbeat(body: s.SessionRef) -> dict[str, Any]:
        svc.session(body.session_id)
        return {"type": "session_heartbeat"}

    @app.post("/api/v1/retrieve_future")
    async def retrieve(body: s.RetrieveFuture, request: Request) -> Any:
        try:
            entry = await svc.futures.wait(body.request_id, svc.poll_s, stop=lambda: bool(app.state.draining))
        except KeyError:
            raise APIError(404, f"unknown request_id {body.request_id!r} (results are kept in memory: a "
                                "restarted server has none from before)", param="request_id") from None
        if entry is None:
            return {"type": "try_again", "request_id": body.request_id, "queue_state": "active"}
        if entry.error is not None:
            return {"error": entry.error, "category": entry.category}
        if entry.proto is not None:
            return Response(entry.proto, media_type=PROTO)
        return JSONResponse(entry.json)

    @app.post("/api/v1/cancel_future")
    async def cancel(body: s.CancelFuture) -> None:
        svc.worker.cancel(body.request_id)


def _training_routes(app: FastAPI, svc: TinkerService) -> None:
    @app.post("/api/v1/create_model")
    async def create_model(body: s.CreateModel) -> dict[str, Any]:
        return future(svc.create_model(body))

    @app.post("/api/v1/get_info")
    async def get_info(body: s.ModelRef) -> dict[str, Any]:
        return svc.info(body.model_id)

    @app.post("/api/v1/forward_backward")
    async def forward_backward(request: Request) -> dict[str, Any]:
        body = await request.body()
        if PROTO in request.headers.get("content-type", ""):
            raw = decompress(body, request.headers.get("content-encoding"), svc.limits.max_body_bytes)
            req = await asyncio.to_thread(parse_forward_backward, raw)
        else:
            req = parse_forward_backward_json(_json(body), forward_only=False)
        return future(svc.forward_backward(req), req.model_id)

    @app.post("/api/v1/forward")
    async def forward(request: Request) -> dict[str, Any]:
        req = parse_forward_backward_json(_json(await request.body()), forward_only=True)
        return future(svc.forward_backward(req), req.model_id)

    @app.post("/api/v1/optim_step")
    async def optim_step(body: s.OptimStep) -> dict[str, Any]:
        return future(svc.optim_step(body), body.model_id)

    @app.post("/api/v1/save_weights")
    async def save_weights(body: s.SaveWeights) -> dict[str, Any]:
        return future(svc.save_weights(body), body.model_id)

    @app.post("/api/v1/save_weights_for_sampler")
    async def save_for_sampler(body: s.SaveWeights) -> dict[str, Any]:
        return future(svc.save_for_sampler(body), body.model_id)

    @app.post("/api/v1/load_weights")
    async def load_weights(body: s.LoadWeights) -> dict[str, Any]:
        return future(svc.load_weights(body), body.model_id)


def _sampling_routes(app: FastAPI, svc: TinkerService) -> None:
    @app.post("/api/v1/create_sampling_session")
    async def create_sampling_session(body: s.CreateSamplingSession) -> dict[str, Any]:
        sid = await samplers.create_sampling_session(svc, body)
        return {"type": "create_sampling_session", "sampling_session_id": sid}

    @app.post("/api/v1/join_sampling_session")
    async def join(body: s.SamplerRef) -> dict[str, Any]:
        return {"type": "join_sampling_session", "client_counter": samplers.join(svc, body.sampling_session_id)}

    @app.get("/api/v1/samplers/{sampler_id}")
    async def get_sampler(sampler_id: str) -> dict[str, Any]:
        return samplers.sampler_info(svc, sampler_id)

    @app.post("/api/v1/asample")
    async def asample(body: s.Sample) -> dict[str, Any]:
        return samplers.submit_sample(svc, body)


def _json(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):  # not JSON, or nested past the stack
        raise APIError(400, "request body is not valid JSON", param="body") from None
    if not isinstance(data, dict):
        raise APIError(400, "request body must be a JSON object", param="body")
    return data
