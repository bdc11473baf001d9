"""The single worker: every request that touches the model runs here, one after another, in arrival order.

One base model serves every tenant, and which LoRA adapter is active is global state of that model,
so requests must not interleave on it; one FIFO worker makes that true by construction and keeps each
training client's requests in the order it sent them (the SDK sends a request only after the previous
one was accepted, so arrival order is its ``seq_id`` order). Sampling requests queued back to back for
the same weights leave the queue together and decode as one batch. Heavy work runs in a thread
(``asyncio.to_thread``), so the event loop keeps answering polls and heartbeats meanwhile.

A job's exception becomes its future's error: a ``ValueError`` (bad input, a missing checkpoint,
an unsupported loss) is the client's, with category ``user``; anything else is the server's, logged
with its traceback and reported in one line.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Any

from memrl.serve.errors import APIError
from memrl.tinker.futures import FutureStore

log = logging.getLogger("memrl.tinker")


@dataclass
class Result:
    """What a finished job answers: JSON, or protobuf bytes (fwd/bwd and sample results)."""

    json: Any = None
    proto: bytes | None = None


@dataclass
class Job:
    """A queued request: ``run`` does the work; jobs with the same ``group`` (samples) may run together."""

    rid: str
    run: Callable[[], Awaitable[Result]] | None = None
    group: Hashable | None = None
    payload: Any = None


GroupRunner = Callable[[Hashable, list[Job]], Awaitable[list[Any]]]


class Worker:
    """FIFO execution of jobs against the model; results and failures go to the future store."""

    def __init__(self, futures: FutureStore, run_group: GroupRunner) -> None:
        self.futures = futures
        self.run_group = run_group
        self.queue: deque[Job] = deque()
        self.running: dict[str, tuple[Job, asyncio.Task[Any]]] = {}  # sample jobs decoding now, by request id
        self.stopping = False
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._wake = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._loop())

    def submit(self, job: Job) -> None:
        if self.stopping:
            raise APIError(503, "the server is stopping", code="stopping")
        self.queue.append(job)
        if self._wake is not None:
            self._wake.set()

    def track(self, job: Job, task: asyncio.Task[Any]) -> None:
        """``job`` runs as ``task`` (a sample decoding in a batch): :meth:`cancel` can stop it midway."""
        self.running[job.rid] = (job, task)

    def cancel(self, rid: str) -> bool:
        """Drop a queued job, or stop a sample that is decoding (its rows leave the batch at the next step: the
        SDK's ``sample_cancel_enabled`` promise); its future fails as cancelled."""
        return bool(self.cancel_where(lambda job: job.rid == rid))

    def cancel_where(self, chosen: Callable[[Job], bool]) -> int:
        """Cancel every queued or decoding job ``chosen`` picks (a finished session's); how many."""
        count = 0
        for job in [j for j in self.queue if chosen(j)]:
            self.queue.remove(job)
            self.futures.fail(job.rid, "cancelled by the client", "user")
            count += 1
        for job, task in [r for r in self.running.values() if chosen(r[0])]:
            task.cancel()  # the group's gather hands back a CancelledError: _finish fails the future
            count += 1
        return count

    async def stop(self, grace_s: float) -> None:
        """Refuse new jobs, fail the queued ones, and give the running one ``grace_s`` to finish."""
        self.stopping = True
        while self.queue:
            self.futures.fail(self.queue.popleft().rid, "the server stopped before running this request", "server")
        if self._task is not None:
            if self._wake is not None:
                self._wake.set()
            try:
                await asyncio.wait_for(asyncio.shield(self._task), grace_s)
            except (asyncio.TimeoutError, asyncio.CancelledError):
                self._task.cancel()

    def _take(self) -> list[Job]:
        first = self.queue.popleft()
        jobs = [first]
        while first.group is not None and self.queue and self.queue[0].group == first.group:
            jobs.append(self.queue.popleft())
        return jobs

    async def _loop(self) -> None:
        assert self._wake is not None
        while not self.stopping:
            if not self.queue:
                self._wake.clear()
                await self._wake.wait()
                continue
            jobs = self._take()
            for job in jobs:
                self.futures.started(job.rid)
            try:
                if jobs[0].group is None:
                    assert jobs[0].run is not None
                    outcomes: list[Any] = [await _settle(jobs[0].run())]
                else:
                    outcomes = await self.run_group(jobs[0].group, jobs)
            except Exception as exc:  # a group that failed as a whole
                outcomes = [exc] * len(jobs)
            for job, outcome in zip(jobs, outcomes, strict=True):
                self.running.pop(job.rid, None)
                self._finish(job.rid, outcome)

    def _finish(self, rid: str, outcome: Any) -> None:
        if isinstance(outcome, Result):
            self.futures.resolve(rid, json=outcome.json, proto=outcome.proto)
        elif isinstance(outcome, asyncio.CancelledError):
            self.futures.fail(rid, "cancelled by the client", "user")
        elif isinstance(outcome, (ValueError, APIError)):
            self.futures.fail(rid, str(getattr(outcome, "message", outcome)), "user")
        elif isinstance(outcome, BaseException):
            log.error("request %s failed", rid, exc_info=(type(outcome), outcome, outcome.__traceback__))
            print(f"memrl tinker: request {rid} failed: {type(outcome).__name__}: {outcome}", file=sys.stderr,
                  flush=True)
            self.futures.fail(rid, f"internal error: {type(outcome).__name__}: {outcome}", "server")
        else:
            self.futures.fail(rid, "internal error: the request produced no result", "server")


async def _settle(coro: Awaitable[Result]) -> Any:
    try:
        return await coro
    except Exception as exc:
        return exc
