"""A stand-in for the few Ray calls RayEnginePool makes, so its timeouts, replacements and health rules are
tested in milliseconds, deterministically: each replica's behaviour is chosen by the test per incarnation."""

from __future__ import annotations

import asyncio
import types
from collections.abc import Callable
from typing import Any

from memrl.engines.base import GenerationResult


class ActorDied(Exception):
    """Ray's RayActorError."""


class GetTimeout(Exception):
    """Ray's GetTimeoutError."""


class Ref:
    def __init__(self, make: Callable[[], Any]) -> None:
        self.make = make

    def __await__(self):
        return self.make().__await__()

    def result(self) -> Any:
        return asyncio.run(self.make())


class Method:
    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    def remote(self, *args: Any) -> Ref:
        return Ref(lambda: self.fn(*args))


async def _forever() -> None:
    await asyncio.Event().wait()


class FakeActor:
    """One incarnation of a replica: ``mode`` is ok, broken (raises), hung (in generate), stuck (in every call but
    its start: a stopped process), dead, or unscheduled (never starts)."""

    def __init__(self, slot: int, incarnation: int, mode: str) -> None:
        self.slot, self.incarnation, self.mode = slot, incarnation, mode
        self.generate = Method(self._generate)
        self.pid = Method(self._pid)
        self.load_weights = Method(self._load)
        self.sleep = self.wake = Method(self._memory)
        self.loaded: list[Any] = []

    async def _memory(self) -> None:
        if self.mode == "stuck":
            await _forever()

    async def _pid(self) -> int:
        if self.mode == "unscheduled":
            await _forever()
        return 1000 + self.slot

    async def _load(self, weights: Any) -> int:
        if self.mode == "stuck":
            await _forever()
        if self.mode == "dead":
            raise ActorDied(f"replica {self.slot} died")
        self.loaded.append(weights)
        return 0

    async def _generate(self, prompt_ids: list[int], params: Any) -> GenerationResult:
        await asyncio.sleep(0)
        if self.mode == "dead":
            raise ActorDied(f"replica {self.slot} died")
        if self.mode in ("hung", "stuck"):
            await _forever()
        if self.mode == "broken" or prompt_ids == [666]:
            raise RuntimeError(f"replica {self.slot}: CUDA error: an illegal memory access")
        return GenerationResult([self.slot], [-0.1], "stop")  # type: ignore[arg-type]


class FakeRay:
    """``modes(slot, incarnation) -> mode`` decides every actor; ``free`` is what available_resources reports."""

    def __init__(self, modes: Callable[[int, int], str], free: dict[str, float] | None = None) -> None:
        self.modes = modes
        self.free = free if free is not None else {"CPU": 8.0}
        self.incarnations: dict[int, int] = {}
        self.spawned: list[FakeActor] = []
        self.killed: list[FakeActor] = []
        self.exceptions = types.SimpleNamespace(RayActorError=ActorDied, GetTimeoutError=GetTimeout)

    def remote(self, *args: Any) -> Any:
        """``ray.remote(cls)`` gives the actor class (this object); ``cls.options(...).remote(...)`` an actor."""
        if len(args) == 1 and isinstance(args[0], type):
            return self
        actor = self.spawn(args[5])  # (model, dtype, device, weights, max_batch_size, seed + i, ...)
        actor.loaded.append(args[3])  # the weights it starts from
        return actor

    def options(self, **kwargs: Any) -> FakeRay:
        return self

    def put(self, value: Any) -> Any:
        return value

    def get(self, refs: Any, timeout: float | None = None) -> Any:
        many = isinstance(refs, list)

        async def values() -> Any:
            out = [await r for r in (refs if many else [refs])]
            return out if many else out[0]

        try:
            return asyncio.run(asyncio.wait_for(values(), timeout))
        except asyncio.TimeoutError:
            raise GetTimeout() from None

    def kill(self, actor: FakeActor) -> None:
        self.killed.append(actor)

    def cancel(self, ref: Ref) -> None:
        pass

    def available_resources(self) -> dict[str, float]:
        return dict(self.free)

    def spawn(self, seed: int) -> FakeActor:
        n = self.incarnations[seed] = self.incarnations.get(seed, -1) + 1
        actor = FakeActor(seed, n, self.modes(seed, n))
        self.spawned.append(actor)
        return actor


def fake_pool(monkeypatch: Any, fake: FakeRay, replicas: int, **kwargs: Any) -> Any:
    """A RayEnginePool of ``replicas`` fake actors (slot i is seeded i, so ``modes`` sees the slot)."""
    import memrl.dist.pool as pool_mod

    monkeypatch.setattr(pool_mod, "require_ray", lambda: fake)
    monkeypatch.setattr(pool_mod, "FIT_WAIT_S", 0.2)
    return pool_mod.RayEnginePool("tiny", replicas, seed=0, **kwargs)
