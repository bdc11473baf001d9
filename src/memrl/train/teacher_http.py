"""A teacher behind an OpenAI-compatible server that returns prompt log-probs (vLLM's ``/v1/completions``).

Each row's token ids are sent as the prompt with ``prompt_logprobs: 0`` and ``max_tokens: 1``; vLLM
answers, per prompt position after the first, the log-prob of the token that is there
(``choices[0].prompt_logprobs``: ``[None, {"<id>": {"logprob": ...}}, ...]``). That is exactly the
teacher's log-prob of each target token, in that row's own context. A teacher too large for the
trainer's GPU runs on its own GPUs this way.

vLLM computes prompt log-probs from the unscaled logits, so this teacher serves
``sampling.temperature`` 1 (or 0, read as 1 by the trainer) only; :func:`memrl.train.teacher.openai_teacher`
refuses other temperatures in one line instead of mixing two distributions.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

from memrl.io.urls import shown_url
from memrl.train.batch import Row


class TeacherServerError(RuntimeError):
    """The teacher server's answer cannot be used (an HTTP error after retries, or no prompt log-probs)."""


class OpenAITeacher:
    """Prompt log-probs of each row from ``{base_url}/completions``, ``workers`` requests in flight."""

    def __init__(self, base_url: str, model: str, api_key: str | None = None, *, workers: int = 16,
                 retries: int = 3, timeout_s: float = 600.0, transport: Any = None) -> None:
        import httpx

        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.shown = shown_url(base_url)  # messages never show credentials a URL holds
        self.client = httpx.Client(base_url=base_url.rstrip("/") + "/", headers=headers, timeout=timeout_s,
                                   transport=transport)
        self.model = model
        self.workers = workers
        self.retries = retries

    @classmethod
    def from_env(cls, base_url: str, model: str, api_key_env: str, **kw: Any) -> "OpenAITeacher":
        return cls(base_url, model, os.environ.get(api_key_env), **kw)

    def logprobs(self, rows: Sequence[Row], temperature: float) -> list[torch.Tensor]:
        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            return list(pool.map(lambda r: self._one(list(r.token_ids)), rows))

    def _one(self, ids: list[int]) -> torch.Tensor:
        body = {"model": self.model, "prompt": ids, "max_tokens": 1, "temperature": 1.0, "prompt_logprobs": 0}
        data = self._post(body)
        try:
            got = data["choices"][0]["prompt_logprobs"]
            values = [float(got[t][str(tok)]["logprob"]) for t, tok in enumerate(ids) if t > 0]
        except (KeyError, IndexError, TypeError) as exc:
            raise TeacherServerError(f"teacher server at {self.shown}: no prompt log-probs in its answer "
                                     f"({type(exc).__name__}: {exc}); it must be vLLM's /v1/completions (or "
                                     "another server that honours prompt_logprobs)") from None
        return torch.tensor(values, dtype=torch.float32)

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        import httpx

        last = ""
        for attempt in range(self.retries + 1):
            try:
                resp = self.client.post("completions", json=body)
                if resp.status_code < 500 and resp.status_code != 429:
                    if resp.status_code >= 400:
                        raise TeacherServerError(f"teacher server at {self.shown}: HTTP "
                                                 f"{resp.status_code}: {resp.text[:300]}")
                    return resp.json()
                last = f"HTTP {resp.status_code}"
            except (httpx.TransportError, httpx.TimeoutException) as exc:
                last = f"{type(exc).__name__}: {exc}"
            time.sleep(min(60.0, 0.5 * 2**attempt))
        raise TeacherServerError(f"teacher server at {self.shown}: {last} after {self.retries} retries")
