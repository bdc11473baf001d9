"""FastAPI app exposing an engine through ``/v1/completions``, ``/v1/chat/completions``, ``/v1/models``.

Prompts may be text or token ids (as vLLM accepts). Responses carry the
generated token ids (``choices[i].token_ids``, as vLLM's ``return_token_ids``)
and per-token log-probs; with ``return_tokens_as_token_ids`` the logprob
``tokens`` are ``"token_id:N"`` strings, again as vLLM does. A generated stop
token is included in ids/log-probs and left out of the text.

Every request is checked (types, id ranges, window, ``n``, body size; see
``limits.py``) before it reaches the engine, so a bad request gets its own 400
and never shares a batch. Every field is honoured or refused with a 400 (see
``fields.py``): nothing is accepted and ignored. Text is tokenized in a worker
thread, so a multi-megabyte prompt does not stall other requests or ``/health``;
text too long to fit the window whatever its tokens is refused before tokenizing.
While a generation runs, the handler polls for the client's disconnect and for
server shutdown and cancels the engine requests in either case. With an API
key, ``/v1/*`` needs ``Authorization: Bearer KEY`` and the OpenAPI pages
(``/docs``, ``/redoc``, ``/openapi.json``) are off; ``/health`` is always public
and says only ``{"status": "ok"}``. ``stream: true`` sends the same answer as
OpenAI's server-sent events once it is generated (``streaming.py``).
"""

# No ``from __future__ import annotations`` here: FastAPI reads these annotations at run time.
import asyncio
import contextlib
import hmac
import sys
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any, Optional, TextIO, Union

from memrl.engines.base import REQUEST_OWNER, Engine, GenerationResult, SamplingParams
from memrl.io.json_strings import json_strings
from memrl.workflows.common import stop_token_ids

try:
    import fastapi
    from fastapi import Depends, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, StreamingResponse
except ImportError:  # pragma: no cover - exercised only without the extra
    raise ImportError("memrl serve needs FastAPI and uvicorn: pip install 'memrl[serve]'") from None

from memrl.serve.chat_messages import chat_messages
from memrl.serve.errors import APIError, error_response, install_error_handlers, validation_message
from memrl.serve.answers import Answers
from memrl.serve.fields import (ChatBody, CompletionBody, RequestBody, chat_logprobs, completion_logprobs,
                                reject_unsupported, stop_strings)
from memrl.serve.limits import (GREEDY_BELOW, ServeLimits, check_sampling, check_token_ids, check_window,
                                parse_prompts)
from memrl.serve.middleware import AccessLog, BodyLimit, LocalHostOnly
from memrl.serve.streaming import aligned_spans, continuous_usage, events, stream_usage, token_spans


def _limits_for(engine: Engine, tokenizer: Any) -> ServeLimits:
    model = getattr(engine, "model", None)
    if model is not None:
        return ServeLimits.for_model(model)
    window = getattr(tokenizer, "model_max_length", None)
    if not isinstance(window, int) or window > 10**8:
        raise ValueError("cannot tell the model's window from this engine: pass limits=ServeLimits(...)")
    return ServeLimits(max_model_len=window)


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    return error_response(500, f"internal error ({type(exc).__name__})")


async def health() -> dict[str, str]:
    """Liveness for load balancers: public even with an API key, and says nothing else."""
    return {"status": "ok"}


def _usage(prompt_tokens: int, results: list[GenerationResult]) -> dict[str, int]:
    gen = sum(len(r.token_ids) for r in results)
    return {"prompt_tokens": prompt_tokens, "completion_tokens": gen, "total_tokens": prompt_tokens + gen}


class _Routes:
    """The handlers of one app, sharing its engine, limits and the generations in flight."""

    def __init__(self, engine: Engine, tokenizer: Any, model_name: str, api_key: Optional[str],
                 limits: ServeLimits, poll_s: float, also_named: Sequence[str] = ()) -> None:
        self.engine, self.tokenizer, self.model_name, self.api_key = engine, tokenizer, model_name, api_key
        self.names = {model_name, *also_named}
        self.limits, self.poll_s = limits, poll_s
        self.default_stops = stop_token_ids(tokenizer)
        self.top_logprobs_ok = bool(getattr(engine, "returns_top_logprobs", False))
        self.answers = Answers(tokenizer)
        # No token spells more than this many UTF-8 bytes (4 per character of its vocabulary entry, at most).
        self.max_token_bytes = 4 * max(map(len, tokenizer.get_vocab()), default=1)
        self.inflight: set[asyncio.Future[Any]] = set()
        self.created = int(time.time())  # /v1/models: OpenAI's Model object has it, as vLLM's ModelCard

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Any) -> AsyncIterator[None]:
        yield
        app.state.draining = True
        for task in list(self.inflight):
            task.cancel()
        await self.engine.close()

    async def require_key(self, request: Request) -> None:
        if self.api_key is None:
            return
        given = request.headers.get("authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {self.api_key}".encode()):
            raise APIError(401, "invalid or missing API key (send 'Authorization: Bearer KEY')",
                           code="invalid_api_key")

    async def invalid_body(self, request: Request, exc: RequestValidationError) -> Any:
        """A body that is not valid JSON or not the right shape: a 400, once the key was checked (FastAPI parses
        the body before the route's key check runs, so a keyless client was told to fix its JSON, not its key)."""
        try:
            await self.require_key(request)
        except APIError as err:
            return error_response(err.status, err.message, err.code, err.param)
        message, name = validation_message(exc)
        return error_response(400, message, "invalid_value", name)

    def check_request(self, body: RequestBody, max_tokens: Optional[int], top: Optional[int]) -> SamplingParams:
        """Model name, unsupported options and value ranges; the engine's sampling parameters."""
        reject_unsupported(body)
        if body.model is not None and body.model not in self.names:
            raise APIError(404, f"The model `{body.model[:200]}` does not exist; this server has "
                           f"`{self.model_name}`.", code="model_not_found", param="model")
        temperature = 1.0 if body.temperature is None else body.temperature
        top_p = 1.0 if body.top_p is None else body.top_p
        top_k = -1 if body.top_k is None else body.top_k
        n = 1 if body.n is None else body.n
        max_new = 16 if max_tokens is None else max_tokens
        check_sampling(max_tokens=max_new, temperature=temperature, top_p=top_p, top_k=top_k, n=n,
                       seed=body.seed, limits=self.limits)
        if top and not self.top_logprobs_ok:
            raise APIError(400, "logprobs: this engine returns only the sampled token's log-prob (ask for 0)",
                           code="unsupported", param="logprobs")
        stops = check_token_ids(body.stop_token_ids or [], "stop_token_ids", self.limits.vocab_size)
        stops += [] if body.ignore_eos else list(self.default_stops)
        return SamplingParams(max_new_tokens=max_new, temperature=0.0 if temperature < GREEDY_BELOW else temperature,
                              top_p=top_p, top_k=max(top_k, 0), seed=body.seed,
                              stop_token_ids=tuple(sorted(set(stops))), top_logprobs=top or 0,
                              stop=tuple(stop_strings(body)), skip_special_tokens=body.skip_special_tokens)

    def check_text_size(self, texts: Sequence[Any], field: str) -> None:
        """Refuse text that cannot fit the window whatever its tokens, before spending time tokenizing it
        (every string in ``texts``, nested parts too), and text no tokenizer can read (a lone surrogate)."""
        strings = list(json_strings(texts, keys=True, max_depth=32))
        size = sum(len(t.encode("utf-8", "surrogatepass")) for t in strings)
        if any(_has_surrogate(t) for t in strings):
            raise APIError(400, f"{field}: text with a lone surrogate (\\ud800-\\udfff) is not valid Unicode",
                           code="invalid_value", param=field)
        window = self.limits.max_model_len
        if size > window * self.max_token_bytes:
            raise APIError(400, f"{field}: {size} bytes of text are more than {window} tokens "
                           f"(this model's maximum context length)", code="context_length_exceeded", param=field)

    async def generate_all(self, request: Request,
                           jobs: Sequence[tuple[list[int], SamplingParams]]) -> list[GenerationResult]:
        """Run ``jobs`` on the engine; cancel them all if the client leaves or the server stops."""
        owner = REQUEST_OWNER.set(object())  # this HTTP request's sequences take turns with other requests'
        try:
            tasks = [asyncio.ensure_future(self.engine.generate(p, sp)) for p, sp in jobs]  # each copies the owner
        finally:
            REQUEST_OWNER.reset(owner)
        self.inflight.update(tasks)
        together = asyncio.gather(*tasks)
        together.add_done_callback(lambda f: f.cancelled() or f.exception())  # retrieved even when we leave early
        try:
            while True:
                done, _ = await asyncio.wait({together}, timeout=self.poll_s)
                if done:
                    break
                if request.app.state.draining:
                    raise APIError(503, "the server is shutting down; retry on another server",
                                   code="shutting_down")
                if await request.is_disconnected():
                    raise APIError(499, "client disconnected", code="client_closed_request")
            if together.cancelled():
                raise APIError(503, "generation cancelled: the server is shutting down", code="shutting_down")
            return together.result()
        except ValueError as exc:  # the engine refused this request's input
            raise APIError(400, str(exc), code="invalid_value") from None
        except (APIError, asyncio.CancelledError):
            raise
        except Exception as exc:
            print(f"memrl serve: generation failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            raise APIError(500, f"generation failed ({type(exc).__name__})", code="generation_failed") from None
        finally:
            for task in tasks:
                task.cancel()
            self.inflight.difference_update(tasks)

    async def models(self) -> dict[str, Any]:
        return {"object": "list", "data": [{"id": self.model_name, "object": "model", "created": self.created,
                                            "owned_by": "memrl", "max_model_len": self.limits.max_model_len}]}

    def answered(self, answer: dict[str, Any], done: Sequence[tuple[GenerationResult, str]], body: RequestBody,
                 include_usage: bool, prompt_lengths: Optional[Sequence[int]] = None) -> Any:
        """``answer`` as JSON, or with ``stream: true`` as server-sent events (its text split token by token).

        Called in a worker thread: the text, log-probs and spans of many long answers take seconds to decode."""
        if not body.stream:
            return answer
        spans = [aligned_spans(token_spans(self.tokenizer, res.token_ids, body.skip_special_tokens), text)
                 for res, text in done]
        running = None if prompt_lengths is None else [(p, len(res.token_ids)) for p, (res, _) in
                                                         zip(prompt_lengths, done)]  # continuous_usage_stats
        return StreamingResponse(events(answer, spans, include_usage, running), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})

    async def completions(self, body: CompletionBody, request: Request) -> Any:
        options = (body.model_extra or {}).pop("stream_options", None)
        include_usage = stream_usage(options, bool(body.stream))
        k = completion_logprobs(body)
        sp = self.check_request(body, body.max_tokens, k)
        n = body.n or 1
        self.check_text_size([body.prompt] if isinstance(body.prompt, str) else body.prompt, "prompt")

        def encode(text: str) -> list[int]:
            return self.tokenizer.encode(text, add_special_tokens=body.add_special_tokens)

        prompts = await asyncio.to_thread(parse_prompts, body.prompt, encode, self.limits)
        if len(prompts) * n > self.limits.max_sequences:
            raise APIError(400, f"{len(prompts)} prompts x n={n} is {len(prompts) * n} sequences in one request, at "
                           f"most {self.limits.max_sequences}: split it", code="invalid_value", param="n")
        for prompt in prompts:
            check_window(len(prompt), sp.max_new_tokens, self.limits)
        jobs = [(p, sp if n == 1 else sp.with_(seed=None if sp.seed is None else sp.seed + k))
                for p in prompts for k in range(n)]
        results = await self.generate_all(request, jobs)

        def build() -> Any:
            done = [self.answers.finished(r, body.skip_special_tokens, sp.stop, sp.stop_token_ids) for r in results]
            choices = []
            for i, (res, text) in enumerate(done):
                choice: dict[str, Any] = {"index": i, "text": text, "finish_reason": res.finish_reason,
                                          "stop_reason": res.meta.get("stop_reason"), "token_ids": res.token_ids}
                choice["logprobs"] = (self.answers.completion_logprobs(res, k, body.return_tokens_as_token_ids)
                                      if k is not None else None)
                if body.return_token_ids:
                    choice["prompt_token_ids"] = prompts[i // n]
                choices.append(choice)
            answer = {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
                      "model": self.model_name, "choices": choices,
                      "usage": _usage(sum(map(len, prompts)), [r for r, _ in done])}
            every = [len(prompts[i // n]) for i in range(len(done))] if continuous_usage(options) else None
            return self.answered(answer, done, body, include_usage, every)

        return await asyncio.to_thread(build)  # decoding thousands of answers must not stall other requests

    async def chat(self, body: ChatBody, request: Request) -> Any:
        options = (body.model_extra or {}).pop("stream_options", None)
        include_usage = stream_usage(options, bool(body.stream))
        max_tokens = body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
        k = chat_logprobs(body)
        sp = self.check_request(body, 1 if max_tokens is None else max_tokens, k)
        self.check_text_size(body.messages, "messages")  # every string: list-of-parts content, names, calls
        messages = chat_messages(body.messages)  # text parts joined; a bad role, part or content is a 400

        def template() -> list[int]:
            ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
            return list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)

        try:
            prompt = await asyncio.to_thread(template)
        except Exception as exc:
            raise APIError(400, f"messages: cannot apply the chat template: {str(exc)[:200]}",
                           code="invalid_value", param="messages") from None
        prompt = check_token_ids(prompt, "messages", self.limits.vocab_size)
        if max_tokens is None:  # unset: the rest of the window, as vLLM's chat endpoint
            sp = sp.with_(max_new_tokens=max(self.limits.max_model_len - len(prompt), 1))
        check_window(len(prompt), sp.max_new_tokens, self.limits)
        n = body.n or 1
        results = await self.generate_all(
            request, [(prompt, sp if n == 1 or sp.seed is None else sp.with_(seed=sp.seed + k)) for k in range(n)])

        def build() -> Any:
            done = [self.answers.finished(r, body.skip_special_tokens, sp.stop, sp.stop_token_ids) for r in results]
            choices = []
            for i, (res, text) in enumerate(done):
                choice: dict[str, Any] = {"index": i, "message": {"role": "assistant", "content": text},
                                          "finish_reason": res.finish_reason, "token_ids": res.token_ids,
                                          "stop_reason": res.meta.get("stop_reason"), "logprobs": None}
                if k is not None:
                    choice["logprobs"] = self.answers.chat_logprobs(res, k, body.return_tokens_as_token_ids)
                if body.return_token_ids:
                    choice["prompt_token_ids"] = prompt
                choices.append(choice)
            answer = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion",
                      "created": int(time.time()), "model": self.model_name, "choices": choices,
                      "usage": _usage(len(prompt), [r for r, _ in done])}
            every = [len(prompt)] * len(done) if continuous_usage(options) else None
            return self.answered(answer, done, body, include_usage, every)

        return await asyncio.to_thread(build)  # as completions: off the loop


def create_app(engine: Engine, tokenizer: Any, model_name: str, api_key: Optional[str] = None, *,
               limits: Optional[ServeLimits] = None, access_log: Union[bool, TextIO] = False,
               poll_s: float = 0.1, local_hosts: Optional[list[str]] = None, also_named: Sequence[str] = ()) -> Any:
    """The ASGI app. It owns ``engine`` while it runs: shutting the app down closes the engine.

    ``access_log``: ``True`` for one line per request on stderr, or a stream. ``poll_s``: how
    often a waiting handler checks for a client disconnect or a shutdown. ``local_hosts``: the only Host
    names answered (a keyless server on loopback: a web page that rebinds its own name to 127.0.0.1 would
    otherwise use the model from the browser). ``also_named``: other names a request may give for the model
    (the folder's path, where it is served under the folder's name).
    """
    limits = limits or _limits_for(engine, tokenizer)
    routes = _Routes(engine, tokenizer, model_name, api_key, limits, poll_s, also_named)
    docs = api_key is None  # a browser cannot send the bearer key, so with one the OpenAPI pages are off
    app = fastapi.FastAPI(title="memrl", version="1", lifespan=routes.lifespan, docs_url="/docs" if docs else None,
                          redoc_url="/redoc" if docs else None, openapi_url="/openapi.json" if docs else None)
    app.state.draining = False
    app.state.limits = limits
    install_error_handlers(app)
    app.add_middleware(BodyLimit, max_bytes=limits.max_body_bytes)
    if local_hosts:
        app.add_middleware(LocalHostOnly, names=local_hosts)
    if access_log:
        app.add_middleware(AccessLog, stream=None if access_log is True else access_log)
    app.add_exception_handler(Exception, _unexpected)
    app.add_exception_handler(RequestValidationError, routes.invalid_body)
    keyed = [Depends(routes.require_key)]
    app.get("/health")(health)
    app.get("/v1/models", dependencies=keyed)(routes.models)
    app.post("/v1/completions", dependencies=keyed)(routes.completions)
    app.post("/v1/chat/completions", dependencies=keyed)(routes.chat)
    return app


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False
