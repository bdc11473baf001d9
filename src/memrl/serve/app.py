"""FastAPI app exposing an engine through ``/v1/completions``, ``/v1/chat/completions``, ``/v1/models``.

Prompts may be text or token ids (as vLLM accepts). Responses carry the
generated token ids (``choices[i].token_ids``, as vLLM's ``return_token_ids``)
and per-token log-probs; with ``return_tokens_as_token_ids`` the logprob
``tokens`` are ``"token_id:N"`` strings, again as vLLM does. A generated stop
token is included in ids/log-probs and left out of the text.
"""

# No ``from __future__ import annotations`` here: FastAPI reads these annotations at run time.
import asyncio
import os
import time
import uuid
from typing import Any, Optional, Union

from pydantic import BaseModel, ConfigDict

from memrl.engines.base import Engine, GenerationResult, SamplingParams
from memrl.workflows.common import stop_token_ids

try:
    import fastapi
    from fastapi import Request
except ImportError:  # pragma: no cover - exercised only without the extra
    raise ImportError("memrl serve needs FastAPI and uvicorn: pip install 'memrl[serve]'") from None


class _Body(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: Optional[str] = None
    max_tokens: Optional[int] = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    seed: Optional[int] = None
    n: int = 1
    stop_token_ids: Optional[list[int]] = None
    ignore_eos: bool = False
    logprobs: Any = None
    return_tokens_as_token_ids: bool = False
    return_token_ids: bool = False


class CompletionBody(_Body):
    prompt: Union[str, list[int], list[str], list[list[int]]]


class ChatBody(_Body):
    messages: list[dict[str, Any]]
    max_completion_tokens: Optional[int] = None


def create_app(engine: Engine, tokenizer: Any, model_name: str, api_key: Optional[str] = None) -> Any:
    app = fastapi.FastAPI(title="memrl", version="1")
    default_stops = stop_token_ids(tokenizer)

    def check_auth(request: Any) -> None:
        if api_key and request.headers.get("authorization") != f"Bearer {api_key}":
            raise fastapi.HTTPException(status_code=401, detail="invalid or missing API key")

    def params(body: _Body, max_tokens: Optional[int]) -> SamplingParams:
        stops = tuple(body.stop_token_ids or ()) + (() if body.ignore_eos else default_stops)
        try:
            return SamplingParams(max_new_tokens=max_tokens if max_tokens is not None else 16,
                                  temperature=body.temperature, top_p=body.top_p, top_k=max(body.top_k, 0),
                                  seed=body.seed, stop_token_ids=tuple(sorted(set(stops))))
        except ValueError as exc:
            raise fastapi.HTTPException(status_code=400, detail=str(exc)) from None

    def text_of(res: GenerationResult) -> str:
        ids = res.token_ids[:-1] if res.finish_reason == "stop" and res.token_ids else res.token_ids
        return tokenizer.decode(ids, skip_special_tokens=True)

    def logprobs_block(res: GenerationResult, as_ids: bool) -> dict[str, Any]:
        tokens = [f"token_id:{t}" if as_ids else tokenizer.decode([t]) for t in res.token_ids]
        return {"tokens": tokens, "token_logprobs": res.logprobs, "top_logprobs": None, "text_offset": None}

    def usage(prompt_tokens: int, results: list[GenerationResult]) -> dict[str, int]:
        gen = sum(len(r.token_ids) for r in results)
        return {"prompt_tokens": prompt_tokens, "completion_tokens": gen, "total_tokens": prompt_tokens + gen}

    @app.get("/v1/models")
    async def models(request: Request) -> dict[str, Any]:
        check_auth(request)
        return {"object": "list", "data": [{"id": model_name, "object": "model", "owned_by": "memrl"}]}

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/v1/completions")
    async def completions(body: CompletionBody, request: Request) -> dict[str, Any]:
        check_auth(request)
        raw = body.prompt
        if isinstance(raw, str) or (raw and isinstance(raw[0], int)):
            raw = [raw]  # type: ignore[list-item]
        prompts = [tokenizer.encode(p, add_special_tokens=False) if isinstance(p, str) else list(p) for p in raw]
        if not prompts or any(not p for p in prompts):
            raise fastapi.HTTPException(status_code=400, detail="prompt must not be empty")
        sp = params(body, body.max_tokens)
        jobs = [engine.generate(p, sp if body.n == 1 else sp.with_(seed=None if sp.seed is None else sp.seed + k))
                for p in prompts for k in range(body.n)]
        results = await asyncio.gather(*jobs)
        choices = []
        for i, res in enumerate(results):
            choice: dict[str, Any] = {"index": i, "text": text_of(res), "finish_reason": res.finish_reason,
                                      "token_ids": res.token_ids}
            choice["logprobs"] = (logprobs_block(res, body.return_tokens_as_token_ids)
                                  if body.logprobs is not None else None)
            if body.return_token_ids:
                choice["prompt_token_ids"] = prompts[i // body.n]
            choices.append(choice)
        return {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
                "model": model_name, "choices": choices, "usage": usage(sum(map(len, prompts)) * body.n, results)}

    @app.post("/v1/chat/completions")
    async def chat(body: ChatBody, request: Request) -> dict[str, Any]:
        check_auth(request)
        try:
            prompt = tokenizer.apply_chat_template(body.messages, add_generation_prompt=True, tokenize=True)
        except Exception as exc:
            raise fastapi.HTTPException(status_code=400, detail=f"cannot apply chat template: {exc}") from None
        if isinstance(prompt, dict) or hasattr(prompt, "keys"):
            prompt = prompt["input_ids"]
        res = await engine.generate(list(prompt), params(body, body.max_completion_tokens or body.max_tokens))
        choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text_of(res)},
                                  "finish_reason": res.finish_reason, "token_ids": res.token_ids}
        if body.logprobs:
            choice["logprobs"] = {"content": [{"token": tokenizer.decode([t]), "logprob": lp}
                                              for t, lp in zip(res.token_ids, res.logprobs)]}
        return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
                "model": model_name, "choices": [choice], "usage": usage(len(prompt), [res])}

    return app


def serve(model: str, host: str = "127.0.0.1", port: int = 8000, dtype: str = "auto",
          served_name: Optional[str] = None, api_key_env: Optional[str] = None, max_batch_size: int = 32) -> None:
    """Load ``model`` into a batching HF engine and serve it (blocking)."""
    import uvicorn

    from memrl.engines.hf import HFEngine
    from memrl.models.resolve import load_model, load_tokenizer

    key = os.environ.get(api_key_env) if api_key_env else None
    if api_key_env and not key:
        raise ValueError(f"--api-key-env {api_key_env}: that environment variable is not set")
    engine = HFEngine(load_model(model, dtype=dtype), max_batch_size=max_batch_size)
    app = create_app(engine, load_tokenizer(model), served_name or model, api_key=key)
    uvicorn.run(app, host=host, port=port, log_level="warning")
