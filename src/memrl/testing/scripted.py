"""A deterministic engine whose replies come from a Python function.

Lets workflow logic (prompt splicing, turn counts, truncation handling) be
tested exactly, without a model: ``reply(prompt_ids, params)`` returns the
token ids to "generate"; they are cut at ``max_new_tokens`` and at the first
stop token just as a real engine would.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from memrl.engines.base import GenerationResult, SamplingParams


class ScriptedEngine:
    def __init__(self, reply: Callable[[list[int], SamplingParams], Sequence[int]], logprob: float = -0.5) -> None:
        self.reply = reply
        self.logprob = logprob
        self.calls: list[tuple[list[int], SamplingParams]] = []

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> GenerationResult:
        prompt = list(prompt_ids)
        self.calls.append((prompt, params))
        out: list[int] = []
        reason = "length"
        for tok in self.reply(prompt, params):
            if len(out) >= params.max_new_tokens:
                break
            out.append(int(tok))
            if tok in params.stop_token_ids:
                reason = "stop"
                break
        else:
            if len(out) < params.max_new_tokens:
                reason = "stop"  # the script ended: treat as a natural end without a stop token
        return GenerationResult(out, [self.logprob] * len(out), reason)  # type: ignore[arg-type]

    async def update_weights(self, state_dict: Mapping[str, Any]) -> None:
        return None

    async def close(self) -> None:
        return None
