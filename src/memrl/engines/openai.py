"""Client engine for OpenAI-compatible ``/v1/completions`` servers (vLLM, SGLang, ``memrl serve``).

``chat`` talks ``/v1/chat/completions`` with tool calling instead (``openai_chat``): no token ids,
for evaluating a tool agent against any OpenAI-compatible server.

Prompts are sent as token ids; generated ids come back either as
``choices[i].token_ids`` (vLLM ``return_token_ids``, ``memrl serve``) or as
``"token_id:N"`` logprob tokens (``return_tokens_as_token_ids``). One pooled
HTTP/1.1 connection set per event loop is shared by that loop's requests; at most
``concurrency`` are in flight. Transport errors, 429 and 5xx are retried with exponential backoff.
The API key is read from an environment variable and never printed.
"""

from __future__ import annotations

import asyncio
import os
import random
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

from memrl.engines.base import EngineError, GenerationResult, SamplingParams
from memrl.engines.openai_chat import ChatReply, chat_payload, parse_chat_reply

_RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}


class OpenAIEngine:
    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key_env: str | None = "OPENAI_API_KEY",
        concurrency: int = 64,
        timeout_s: float = 600.0,
        retries: int = 3,
        backoff_s: float = 0.5,
    ) -> None:
        import httpx

        self.base_url = base_url.rstrip("/")
        self.model = model
        self.retries = retries
        self.backoff_s = backoff_s
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(api_key_env) if api_key_env else None
        if key:
            headers["Authorization"] = f"Bearer {key}"
        self._concurrency = concurrency
        self._client_args: dict[str, Any] = dict(
            base_url=self.base_url,
            headers=headers,
            timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 30.0)),
            limits=httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency),
        )
        # One client and one semaphore per event loop: pooled connections and asyncio primitives
        # belong to the loop that made them, and the trainer runs a loop per phase.
        self._per_loop: weakref.WeakKeyDictionary[Any, tuple[Any, asyncio.Semaphore]] = weakref.WeakKeyDictionary()

    def _session(self) -> tuple[Any, asyncio.Semaphore]:
        import httpx

        loop = asyncio.get_running_loop()
        found = self._per_loop.get(loop)
        if found is None:
            found = (httpx.AsyncClient(**self._client_args), asyncio.Semaphore(self._concurrency))
            self._per_loop[loop] = found
        return found

    def __repr__(self) -> str:  # never show headers (the key)
        return f"OpenAIEngine(base_url={self.base_url!r}, model={self.model!r})"

    def _payload(self, prompt_ids: Sequence[int], params: SamplingParams) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": [int(t) for t in prompt_ids],
            "max_tokens": params.max_new_tokens,
            "temperature": 0.0 if params.is_greedy else params.temperature,
            "top_p": 1.0 if params.is_greedy else params.top_p,
            "logprobs": 1,
            "return_tokens_as_token_ids": True,
            "return_token_ids": True,
            "skip_special_tokens": False,
        }
        if params.top_k > 0 and not params.is_greedy:
            body["top_k"] = params.top_k
        if params.stop_token_ids:
            body["stop_token_ids"] = list(params.stop_token_ids)
        if params.seed is not None:
            body["seed"] = params.seed
        return body

    @staticmethod
    def _parse(choice: Mapping[str, Any]) -> GenerationResult:
        lp = choice.get("logprobs") or {}
        logprobs = [float(x) if x is not None else 0.0 for x in (lp.get("token_logprobs") or [])]
        ids = choice.get("token_ids")
        if ids is None:
            tokens = lp.get("tokens") or []
            if not all(isinstance(t, str) and t.startswith("token_id:") for t in tokens):
                raise EngineError("server returned neither token_ids nor 'token_id:N' logprob tokens; "
                                  "use a vLLM/SGLang version that supports return_tokens_as_token_ids")
            ids = [int(t.split(":", 1)[1]) for t in tokens]
        ids = [int(t) for t in ids]
        if len(logprobs) != len(ids):
            logprobs = (logprobs + [0.0] * len(ids))[: len(ids)]
        reason = choice.get("finish_reason")
        return GenerationResult(ids, logprobs, reason if reason in ("stop", "length") else "abort")

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> GenerationResult:
        return self._parse((await self.post("/completions", self._payload(prompt_ids, params)))["choices"][0])

    async def chat(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]],
                   params: SamplingParams) -> ChatReply:
        """One ``/chat/completions`` turn with OpenAI tool calling (see ``memrl.engines.openai_chat``)."""
        body = await self.post("/chat/completions", chat_payload(self.model, messages, tools, params))
        return parse_chat_reply(body)

    async def post(self, path: str, payload: Mapping[str, Any]) -> dict[str, Any]:
        """POST ``payload`` to ``base_url + path``; retries transport errors, 429 and 5xx with backoff."""
        import httpx

        last: Exception | None = None
        client, sem = self._session()
        async with sem:
            for attempt in range(self.retries + 1):
                try:
                    resp = await client.post(path, json=payload)
                    if resp.status_code in _RETRY_STATUS:
                        last = EngineError(f"HTTP {resp.status_code} from {self.base_url}: {resp.text[:200]}")
                    elif resp.status_code >= 400:
                        raise EngineError(f"HTTP {resp.status_code} from {self.base_url}{path}: "
                                          f"{resp.text[:500]}")
                    else:
                        return resp.json()
                except (httpx.TransportError, httpx.TimeoutException) as exc:
                    last = exc
                if attempt < self.retries:
                    await asyncio.sleep(self.backoff_s * (2 ** attempt) * (1 + random.random() * 0.1))
        raise EngineError(f"request to {self.base_url} failed after {self.retries + 1} attempts: {last}")

    async def update_weights(self, state_dict: Mapping[str, Any]) -> None:
        raise NotImplementedError("weight updates over HTTP are not supported; use the hf or vllm engine "
                                  "for training, or restart the server with the exported model")

    async def close(self) -> None:
        """Close this loop's client; clients of loops that have ended went with them."""
        found = self._per_loop.pop(asyncio.get_running_loop(), None)
        if found is not None:
            await found[0].aclose()
