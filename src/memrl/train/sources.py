"""Where a step's episodes come from, and how new weights reach the engine: one interface, two modes.

The trainer's loop asks a :class:`RolloutSource` for the step's episodes, updates the policy,
then hands the source the new weights. :class:`SyncRollout` generates the step's episodes
with the current weights and syncs after the update (verl). :class:`AsyncRollout` keeps
generating on its own thread while the policy updates and swaps the weights in between
generation pieces, bounded by ``trainer.async.max_staleness`` (AReaL; :mod:`memrl.train.async_rollout`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, Protocol, TypeVar

from memrl.config import MemRLConfig
from memrl.engines.base import Engine
from memrl.train import async_rollout
from memrl.train.engine_sync import WeightSync
from memrl.train.rollout import RolloutRunner
from memrl.types import Trajectory

T = TypeVar("T")
Collected = tuple[list[Trajectory], list[Trajectory], dict[str, float]]


class RolloutSource(Protocol):
    """What the loop needs from a rollout mode."""

    # a step whose episodes a stop cut short is not trained and is redone on resume (its samples drawn again);
    # the asynchronous mode trains on what finished, as it always does with failed episodes
    redoes_cut_steps: bool

    def collect(self, step: int) -> Collected:
        """(episodes to train on, every episode generated, rollout stats)."""
        ...

    def metrics(self, trained: list[Trajectory], generated: list[Trajectory], stats: dict[str, float],
                seconds: float) -> dict[str, float]:
        """The step's reward and episode metrics, meaning the same in both modes."""
        ...

    def before_update(self) -> None: ...

    def after_update(self, step: int) -> dict[str, float]:
        """Push the updated weights; returns the sync's metrics."""
        ...

    def skip(self, step: int) -> None:
        """A step that trained nothing still moves the policy version on."""
        ...

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` where the engine lives (an eval between steps)."""
        ...

    def snapshot(self, position: int, pending: list[int]) -> tuple[int, list[int]]:
        """(data position, drawn-but-untrained sample indices) to checkpoint."""
        ...

    def producer_state(self) -> dict[str, Any] | None:
        """What a resumed asynchronous producer continues from (None: nothing)."""
        ...

    def close(self) -> None: ...


class SyncRollout:
    """Generate with the current weights, update, then sync the engine (nothing overlaps)."""

    redoes_cut_steps = True

    def __init__(self, runner: RolloutRunner, weight_sync: WeightSync, policy: Any) -> None:
        self.runner, self.weight_sync, self.policy = runner, weight_sync, policy

    def collect(self, step: int) -> Collected:
        self.policy.eval()
        return self.runner.rollout(step)

    def metrics(self, trained: list[Trajectory], generated: list[Trajectory], stats: dict[str, float],
                seconds: float) -> dict[str, float]:
        # reward over the episodes trained (dynamic sampling drops some: verl's score/mean is over its kept batch),
        # reward_finished over all the step generated, as an asynchronous step logs them
        return async_rollout.async_step_metrics(trained, generated, seconds)

    def before_update(self) -> None:
        self.weight_sync.before_update()

    def after_update(self, step: int) -> dict[str, float]:
        return self.weight_sync.after_update()

    def skip(self, step: int) -> None:
        return None

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run(coro)

    def snapshot(self, position: int, pending: list[int]) -> tuple[int, list[int]]:
        return position, pending

    def producer_state(self) -> dict[str, Any] | None:
        return None

    def close(self) -> None:
        return None


class AsyncRollout:
    """Episodes generate continuously on the producer's thread; weights swap between generation pieces.

    The producer starts at the first step (it needs the run's version and the samples a
    resumed run drew but did not train on).
    """

    redoes_cut_steps = False  # its steps train on the groups that finished, cut ones like failed ones

    def __init__(self, cfg: MemRLConfig, runner: RolloutRunner, engine: Engine, weight_sync: WeightSync) -> None:
        self.cfg, self.runner, self.engine, self.weight_sync = cfg, runner, engine, weight_sync
        self.producer: async_rollout.AsyncRollout | None = None

    def collect(self, step: int) -> Collected:
        if self.producer is None:
            self.producer = async_rollout.AsyncRollout(self.cfg, self.runner, self.engine, version=step - 1,
                                                       pending=self.runner.pending, restore=self.runner.producer)
            self.runner.pending, self.runner.producer = [], None
        return self.producer.take()

    def metrics(self, trained: list[Trajectory], generated: list[Trajectory], stats: dict[str, float],
                seconds: float) -> dict[str, float]:
        # reward of the episodes trained (AReaL); reward_finished of those generated
        return async_rollout.async_step_metrics(trained, generated, stats["async/span_s"])

    def before_update(self) -> None:
        return None  # generation goes on during the update

    def after_update(self, step: int) -> dict[str, float]:
        weights = self.weight_sync.gather()  # collective under FSDP: every rank takes part
        if self.producer is None:  # a rank other than 0: rank 0 runs the producer and pushes
            return {}
        # generation pauses only while the weights are pushed
        hold = self.producer.publish(step, lambda: self.weight_sync.push_weights(weights))
        return {"async/sync_hold_s": hold, **self.weight_sync.engine_stats()}

    def skip(self, step: int) -> None:
        if self.producer is not None:  # the version moves on even so: the producer's bound opens
            self.producer.publish(step, _nothing)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run(coro) if self.producer is None else self.producer.run(coro)

    def snapshot(self, position: int, pending: list[int]) -> tuple[int, list[int]]:
        return (position, pending) if self.producer is None else self.producer.snapshot()

    def producer_state(self) -> dict[str, Any] | None:
        return self.runner.producer if self.producer is None else self.producer.producer_state()

    def close(self) -> None:
        if self.producer is not None:
            self.producer.close()
            self.producer = None


def rollout_source(cfg: MemRLConfig, runner: RolloutRunner, engine: Engine, weight_sync: WeightSync,
                   policy: Any) -> RolloutSource:
    """The source ``trainer.mode`` asks for."""
    if cfg.trainer.mode == "async":
        return AsyncRollout(cfg, runner, engine, weight_sync)
    return SyncRollout(runner, weight_sync, policy)


async def _nothing() -> None:
    return None
