"""Bookkeeping of a replica pool's slots: which replicas may take requests, and how healthy each one is.

Kept out of the pool so its rules read on their own. A slot is *live* (routable),
*pending* (a replacement actor is starting; requests wait for it only when no slot is
live) or *dropped* (no replacement could be placed: the run goes on with fewer replicas).
Health counts requests per replica since it (re)started; a request that failed on one
replica and then succeeded on another counts against the first, while one that fails on
every replica is the request's own fault and counts against none. A replica that fails
more than ``max_failure_rate`` of at least ``min_requests`` requests is restarted; one
that still does so after ``max_restarts`` restarts stops the run, in one line.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from memrl.engines.base import EngineDeadError


def warn_stderr(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


@dataclass
class ReplicaHealth:
    """Thresholds of the health rule (see the module docstring)."""

    max_failure_rate: float = 0.5
    min_requests: int = 4
    max_restarts: int = 2


@dataclass
class Slots:
    """Per-slot state of R replicas."""

    count: int
    health: ReplicaHealth = field(default_factory=ReplicaHealth)
    state: list[str] = field(init=False)  # "live" | "pending" | "dropped"
    requests: list[int] = field(init=False)
    failures: list[int] = field(init=False)
    health_restarts: list[int] = field(init=False)
    waiters: list[asyncio.Event] = field(default_factory=list)  # woken whenever a slot turns live or is dropped

    def __post_init__(self) -> None:
        self.state = ["live"] * self.count
        self.requests = [0] * self.count
        self.failures = [0] * self.count
        self.health_restarts = [0] * self.count

    def live(self) -> list[int]:
        return [i for i, s in enumerate(self.state) if s == "live"]

    def pending(self) -> list[int]:
        return [i for i, s in enumerate(self.state) if s == "pending"]

    def set_state(self, i: int, state: str) -> None:
        self.state[i] = state
        if state == "live":
            self.requests[i] = self.failures[i] = 0
        if state != "pending":
            for event in self.waiters:
                event.set()
            self.waiters.clear()

    async def pick(self, key: Callable[[int], float], exclude: set[int]) -> int | None:
        """The live slot (not in ``exclude``) with the lowest ``key``; waits while only replacements are starting.
        None: every live slot is excluded. EngineDeadError: no replica is left at all."""
        while True:
            live = self.live()
            if live:
                choices = [i for i in live if i not in exclude]
                return min(choices, key=key) if choices else None
            if not self.pending():
                raise EngineDeadError(f"no rollout replica is left (all {self.count} died and none could be "
                                      "replaced: the cluster has no free resources for one)")
            event = asyncio.Event()  # a new one each wait: every step runs on an event loop of its own
            self.waiters.append(event)
            await event.wait()

    def succeeded(self, i: int) -> None:
        self.requests[i] += 1

    def blame(self, i: int, error: BaseException) -> bool:
        """Count a failed request against replica ``i``; True when it is now unhealthy and should be restarted.
        EngineDeadError when it already was restarted ``max_restarts`` times."""
        self.requests[i] += 1
        self.failures[i] += 1
        h = self.health
        if self.requests[i] < h.min_requests or self.failures[i] <= h.max_failure_rate * self.requests[i]:
            return False
        if self.health_restarts[i] >= h.max_restarts:
            first = (str(error).strip().splitlines() or [type(error).__name__])[-1][:200]
            raise EngineDeadError(f"rollout replica {i} failed {self.failures[i]} of its last {self.requests[i]} "
                                  f"requests after {self.health_restarts[i]} restart(s) (last error: {first})")
        self.health_restarts[i] += 1
        return True
