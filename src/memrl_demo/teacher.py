"""A scripted teacher for the warm start: right about the needle, sloppy about memory.

On a chunk that contains the needle it writes the code as its memory. On a
chunk without it, it keeps the code it remembered only with probability
``1 - forget_p`` and otherwise writes "none". Its final answer boxes whatever
its memory holds. A model imitating it reads needles fine but forgets them
over long documents; reinforcement learning has to fix exactly that.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from memrl.engines.base import GenerationResult, SamplingParams


class TeacherEngine:
    def __init__(self, tokenizer: Any, code: str, final_tokens: int, forget_p: float, rng: random.Random) -> None:
        enc = lambda t: tokenizer.encode(t, add_special_tokens=False)  # noqa: E731
        self.code_ids = enc(" " + code)
        self.needle_ids = enc(" is " + code)
        self.none_ids = enc(" none")
        self.box_code = enc("\\boxed{ " + code + "}")
        self.box_none = enc("\\boxed{ none}")
        self.eos = tokenizer.eos_token_id
        self.final_tokens = final_tokens
        self.forget_p = forget_p
        self.rng = rng

    @staticmethod
    def _contains(seq: Sequence[int], sub: Sequence[int]) -> bool:
        n = len(sub)
        return any(list(seq[i:i + n]) == list(sub) for i in range(len(seq) - n + 1))

    def sees_needle(self, prompt_ids: Sequence[int]) -> bool:
        """Whether the prompt holds the needle ("... is <code>"), which the teacher always writes down."""
        return self._contains(prompt_ids, self.needle_ids)

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> GenerationResult:
        prompt = list(prompt_ids)
        if params.max_new_tokens == self.final_tokens:
            out = self.box_code if self._contains(prompt, self.code_ids) else self.box_none
        elif self.sees_needle(prompt):
            out = self.code_ids
        elif self._contains(prompt, self.code_ids) and self.rng.random() >= self.forget_p:
            out = self.code_ids
        else:
            out = self.none_ids
        ids = list(out) + [self.eos]
        return GenerationResult(ids, [0.0] * len(ids), "stop")

    async def update_weights(self, state_dict: Mapping[str, Any]) -> None:
        return None

    async def close(self) -> None:
        return None
