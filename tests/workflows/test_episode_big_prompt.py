"""A huge prompt is tokenized off the event loop every episode of a step shares, so the other episodes go on."""

from __future__ import annotations

import asyncio
import threading

from memrl.engines.base import SamplingParams
from memrl.testing.scripted import ScriptedEngine
from memrl.workflows.api import OFF_LOOP_CHARS, Episode


class SlowTokenizer:
    """Characters as ids; encoding a big text waits (in whatever thread runs it) until the small episode is done."""

    def __init__(self) -> None:
        self.small_done = threading.Event()
        self.saw_small_done: bool | None = None

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        if len(text) > OFF_LOOP_CHARS:
            self.saw_small_done = self.small_done.wait(timeout=5)  # on the loop itself this can only time out
            return [1, 2, 3]
        return [ord(c) % 50 for c in text]

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return "".join(chr(97 + i % 26) for i in ids)


def test_a_huge_prompt_does_not_stall_the_other_episodes():
    tok = SlowTokenizer()
    engine = ScriptedEngine(lambda prompt, params: [7, 8])

    def episode() -> Episode:
        return Episode({}, engine=engine, tokenizer=tok, sampling=SamplingParams(seed=0))

    async def big() -> None:
        await episode().generate("x" * (OFF_LOOP_CHARS + 1), max_new_tokens=4, stop_token_ids=[0])

    async def small() -> None:
        for _ in range(3):
            await episode().generate("hi", max_new_tokens=4, stop_token_ids=[0])
        tok.small_done.set()

    async def step() -> None:
        await asyncio.gather(big(), small())

    asyncio.run(step())
    assert tok.saw_small_done is True  # the small episode finished while the big prompt was being tokenized
