"""Client engine for OpenAI-compatible ``/v1/completions`` servers (vLLM, SGLang, ``memrl serve``).

``chat`` talks ``/v1/chat/completions`` with tool calling instead (``openai_chat``): no token ids,
for evaluating a tool agent against any OpenAI-compatible server.

Prompts are sent as token ids; generated ids come back either as
``choices[i].token_ids`` (vLLM ``return_token_ids``, ``memrl serve``) or as
``"token_id:N"`` logprob tokens (``return_tokens_as_token_ids``). One pooled
HTTP/1.1 connection set per event loop is shared by that loop's requests; at most
``concurrency`` are in flight. The API key is read from an environment variable and never printed.

Slow servers: a CPU server or a loaded vLLM queues requests for many minutes, and a
client that gives up re-queues the same prompt (a disconnect also throws away the
work done so far). So a request has no read timeout of its own. After its patience,
``timeout_s + timeout_per_token_s * max_tokens``, the client asks the server
whether it is alive (``GET /models``, a short timeout): if it answers, the request
is merely slow and is awaited for another patience window, up to ``max_wait_s`` in
all (MemAgent's client waits a day); if not, the attempt has failed. Failed
attempts (no answer, transport errors, 408/409/429/5xx) are retried ``retries``
times with exponential backoff and jitter, capped at ``backoff_max_s``; a
``Retry-After`` header is honoured.
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
from memrl.io.urls import shown_url

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
        timeout_per_token_s: float = 1.0,
        max_wait_s: float = 86_400.0,
        backoff_max_s: float = 60.0,
        probe_timeout_s: float = 30.0,
    ) -> None:
        import httpx

        self.base_url = base_url.rstrip("/")
        self.model = model
        self.retries = retries
        self.backoff_s = backoff_s
        self.backoff_max_s = backoff_max_s
        self.timeout_s = timeout_s
        self.timeout_per_token_s = timeout_per_token_s
        self.max_wait_s = max_wait_s
        self.probe_timeout_s = probe_timeout_s
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(api_key_env) if api_key_env else None
        if key:
            headers["Authorization"] = f"Bearer {key}"
        self._concurrency = concurrency
        self.logprob_definition = "unchecked"  # check_logprobs() records what the server returns
        self._client_args: dict[str, Any] = dict(
            base_url=self.base_url,
            headers=headers,
            # no read/pool timeout: waiting is judged by patience() and a liveness probe, see post()
            timeout=httpx.Timeout(None, connect=min(timeout_s, probe_timeout_s)),
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

    def check_logprobs(self, temperature: float) -> str:
        """Probe the server's log-prob definition; raw ones at ``temperature != 1`` are refused (EngineError)."""
        import sys

        from memrl.engines.logprob_probe import RAW, UNKNOWN, probe_server, refusal

        found = probe_server(self.base_url, self.model, self._client_args["headers"], self.probe_timeout_s)
        self.logprob_definition = found
        if found == RAW:
            raise EngineError(refusal(shown_url(self.base_url), temperature))
        if found == UNKNOWN:
            print(f"note: could not tell whether {shown_url(self.base_url)} returns temperature-scaled log-probs "
                  "(no top log-probs at two temperatures); vLLM needs --logprobs-mode processed_logprobs",
                  file=sys.stderr)
        return found

    def __repr__(self) -> str:  # never show headers (the key)
        return f"OpenAIEngine(base_url={shown_url(self.base_url)!r}, model={self.model!r})"

    def _payload(self, prompt_ids: Sequence[int], params: SamplingParams) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": [int(t) for t in prompt_ids],
            "max_tokens": params.max_new_tokens,
            "temperature": 0.0 if params.is_greedy else params.temperature,
            "top_p": 1.0 if params.is_greedy else params.top_p,
            "logprobs": 0,  # the sampled token's log-prob only (no alternatives to compute)
            "return_tokens_as_token_ids": True,
            "return_token_ids": True,
            "skip_special_tokens": False,
            # every sampling field a server could fill from the model's generation_config.json (vLLM: "user ->
            # server default -> OpenAI default"; Qwen2.5 ships top_k=20, repetition_penalty=1.05) is sent, so
            # the distribution sampled is the one the trainer scores; the stops are the request's own, as the
            # hf engine's (a server would otherwise stop at EOS too)
            "top_k": params.top_k if (params.top_k > 0 and not params.is_greedy) else -1,
            "min_p": 0.0,
            "repetition_penalty": 1.0,
            "presence_penalty": 0.0,
            "frequency_penalty": 0.0,
            "ignore_eos": True,
        }
        if params.stop_token_ids:
            body["stop_token_ids"] = list(params.stop_token_ids)
        if params.stop:  # the server ends at the token completing one (kept in token_ids); the caller trims
            body["stop"] = list(params.stop)
            body["skip_special_tokens"] = params.skip_special_tokens
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
                   params: SamplingParams, *, omit: tuple[str, ...] = (), tool_choice: str = "auto") -> ChatReply:
        """One ``/chat/completions`` turn with OpenAI tool calling (see ``memrl.engines.openai_chat``)."""
        payload = chat_payload(self.model, messages, tools, params, omit=omit, tool_choice=tool_choice)
        body = await self.post("/chat/completions", payload)
        return parse_chat_reply(body)

    def patience(self, payload: Mapping[str, Any]) -> float:
        """Seconds to wait for one request before asking whether the server is alive."""
        max_tokens = payload.get("max_tokens") or payload.get("max_completion_tokens") or 0
        return self.timeout_s + self.timeout_per_token_s * float(max_tokens)

    def backoff(self, attempt: int, retry_after: str | None = None) -> float:
        """Seconds before retry ``attempt + 1``: the server's ``Retry-After``, else exponential with jitter."""
        if retry_after is not None:
            try:
                return min(max(float(retry_after), 0.0), self.backoff_max_s)
            except ValueError:  # an HTTP date: fall back to our own schedule
                pass
        return min(self.backoff_s * (2 ** attempt) * (1 + random.random() * 0.1), self.backoff_max_s)

    async def alive(self) -> bool:
        """Whether the server answers ``GET /models`` within ``probe_timeout_s`` (any non-5xx status)."""
        import httpx

        client, _ = self._session()
        try:
            resp = await client.get("/models", timeout=self.probe_timeout_s)
        except (httpx.TransportError, httpx.TimeoutException):
            return False
        return resp.status_code < 500

    async def _await_slow(self, request: asyncio.Task[Any], patience: float) -> bool:
        """Wait for ``request`` while the server stays alive; False (request cancelled) when it is not."""
        waited = 0.0
        while True:
            window = min(patience, self.max_wait_s - waited)
            done, _ = await asyncio.wait({request}, timeout=max(window, 0.0))
            if done:
                return True
            waited += window
            if waited >= self.max_wait_s or not await self.alive():
                request.cancel()
                # asyncio.wait, not ``await request``: the request's own CancelledError must not be mistaken
                # for ours (suppressing it swallowed a Ctrl-C that arrived in this window: eval kept waiting)
                await asyncio.wait({request})
                return False

    async def post(self, path: str, payload: Mapping[str, Any]) -> dict[str, Any]:
        """POST ``payload`` to ``base_url + path``: a slow answer is awaited, failures retried with backoff."""
        import httpx

        last: str = "no attempt"
        client, sem = self._session()
        async with sem:
            for attempt in range(self.retries + 1):
                retry_after = None
                request = asyncio.ensure_future(client.post(path, json=payload))
                try:
                    if not await self._await_slow(request, self.patience(payload)):
                        last = f"no answer, and the server stopped answering {shown_url(self.base_url)}/models"
                    else:
                        resp = request.result()
                        if resp.status_code in _RETRY_STATUS:
                            last = f"HTTP {resp.status_code} from {shown_url(self.base_url)}: {resp.text[:200]}"
                            retry_after = resp.headers.get("retry-after")
                        elif resp.status_code >= 400:
                            raise EngineError(f"HTTP {resp.status_code} from {shown_url(self.base_url)}{path}: "
                                              f"{resp.text[:500]}")
                        else:
                            return resp.json()
                except (httpx.TransportError, httpx.TimeoutException) as exc:
                    last = f"{type(exc).__name__}: {exc}"
                finally:
                    request.cancel()  # only if we leave early (our caller was cancelled)
                if attempt < self.retries:
                    await asyncio.sleep(self.backoff(attempt, retry_after))
        raise EngineError(f"request to {shown_url(self.base_url)} failed after {self.retries + 1} attempts: {last}")

    async def update_weights(self, state_dict: Mapping[str, Any]) -> None:
        raise NotImplementedError("weight updates over HTTP are not supported; use the hf or vllm engine "
                                  "for training, or restart the server with the exported model")

    async def close(self) -> None:
        """Close this loop's client; clients of loops that have ended went with them."""
        found = self._per_loop.pop(asyncio.get_running_loop(), None)
        if found is not None:
            await found[0].aclose()
