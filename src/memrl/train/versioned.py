"""Policy versions on generated tokens, and the gate that lets a weight update take over between them.

Asynchronous training updates the weights while episodes are still generating. To know
which policy produced each token, and to swap weights only at points where no model call
is half done, every model call of an episode goes through a :class:`VersionedEngine`:

* it holds the :class:`WeightGate` *shared* for each piece of generation, and records
  ``(tokens, version)`` for it; a weight update holds the gate *exclusively*, so it waits
  for the pieces in flight and new pieces wait for it;
* ``chunk=None`` (``trainer.async.partial_rollouts=finish``): a piece is a whole model call, so
  a model turn always ends under the weights it started with;
* ``chunk=K`` (``interrupt``): a call is generated K tokens at a time, each piece a new
  request whose prompt is the original prompt plus the tokens so far. Token-in/token-out
  makes the continuation exact: after an update the new weights go on from the very
  tokens the old ones produced, and each piece records its own version.
  If the engine can cut its requests short (an ``interrupt()`` method, as AReaL pauses
  SGLang/vLLM with an abort), a waiting update calls it: the pieces in flight return at
  once with the tokens they have (finish reason ``"abort"``), so the update does not wait
  for them to finish, and each call goes on from those tokens under the new weights.

The gate lives on the rollout producer's event loop; the trainer thread reaches it
through ``asyncio.run_coroutine_threadsafe``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from memrl.engines.base import Engine, GenerationResult, SamplingParams


class WeightGate:
    """Many generation pieces at once, or one weight update; a waiting update goes before new pieces."""

    def __init__(self, interrupt: Callable[[], None] | None = None) -> None:
        self._cond = asyncio.Condition()
        self._pieces = 0
        self._updating = False
        self._update_waiting = 0
        self.interrupt = interrupt  # cuts the engine's requests in flight short (None: wait for them)
        self.interrupts = 0  # how many times it was called: a piece that saw it change was cut by it

    @contextlib.asynccontextmanager
    async def piece(self) -> AsyncIterator[None]:
        async with self._cond:
            await self._cond.wait_for(lambda: not self._updating and not self._update_waiting)
            self._pieces += 1
        try:
            yield
        finally:
            async with self._cond:
                self._pieces -= 1
                self._cond.notify_all()

    @contextlib.asynccontextmanager
    async def update(self) -> AsyncIterator[None]:
        async with self._cond:
            self._update_waiting += 1
            if self._pieces and self.interrupt is not None:
                self.interrupts += 1
                self.interrupt()
            try:
                await self._cond.wait_for(lambda: self._pieces == 0 and not self._updating)
            finally:
                self._update_waiting -= 1
            self._updating = True
        try:
            yield
        finally:
            async with self._cond:
                self._updating = False
                self._cond.notify_all()


class PolicyClock:
    """The version of the weights the engine holds: the number of trainer steps behind them."""

    def __init__(self, version: int = 0) -> None:
        self.version = version


def piece_seed(seed: int | None, done: int) -> int | None:
    """The seed of a continuation piece after ``done`` tokens (the first piece keeps the call's seed)."""
    if seed is None or done == 0:
        return seed
    return (seed * 1_000_003 + done * 7_919) % 2**31


class VersionedEngine:
    """One episode's view of the rollout engine: records the policy version of every generated piece."""

    def __init__(self, engine: Engine, gate: WeightGate, clock: PolicyClock, chunk: int | None) -> None:
        self.engine = engine
        self.gate = gate
        self.clock = clock
        self.chunk = chunk
        self.segments: list[list[int]] = []  # [tokens, version] per piece, in the order generated
        self.interrupted = 0  # pieces a weight update cut short

    def __getattr__(self, name: str) -> Any:  # anything else a workflow asks of its engine
        return getattr(self.engine, name)

    @property
    def oldest_version(self) -> int | None:
        return min((v for n, v in self.segments if n), default=None)

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> GenerationResult:
        if self.chunk is None:
            async with self.gate.piece():
                version = self.clock.version
                res = await self.engine.generate(prompt_ids, params)
            self.segments.append([len(res.token_ids), version])
            return res
        ids: list[int] = []
        logprobs: list[float] = []
        prompt = list(prompt_ids)
        while True:
            n = min(self.chunk, params.max_new_tokens - len(ids))
            async with self.gate.piece():
                version, cuts = self.clock.version, self.gate.interrupts
                res = await self.engine.generate(prompt + ids, params.with_(
                    max_new_tokens=n, seed=piece_seed(params.seed, len(ids))))
            self.segments.append([len(res.token_ids), version])
            ids += res.token_ids
            logprobs += res.logprobs
            if res.finish_reason == "abort" and self.gate.interrupts != cuts and len(ids) < params.max_new_tokens:
                self.interrupted += 1
                continue  # cut short by a weight update: the new weights go on from these tokens
            if res.finish_reason != "length" or len(res.token_ids) < n or len(ids) >= params.max_new_tokens:
                return GenerationResult(ids, logprobs, res.finish_reason, dict(res.meta))
