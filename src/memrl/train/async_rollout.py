"""Asynchronous rollouts (``trainer.mode=async``): episodes generate continuously while the policy updates.

A producer thread runs its own event loop. It keeps submitting *groups* (``algorithm.n``
episodes of one prompt) as long as AReaL's bound allows::

    groups accepted (waiting or trained on) + groups running  <  (η + v + 1) · B

with η = ``trainer.async.max_staleness``, v the version of the weights (trainer steps done) and
B = ``trainer.prompts_per_step``. So with η = 0 the producer generates exactly one batch per
version and then waits for the update: the batches, seeds and losses are the synchronous
trainer's. With η ≥ 1 it generates the next batches while the trainer updates.

The trainer :meth:`takes <AsyncRollout.take>` the B oldest complete groups (waiting only
until that many exist) and trains them whatever their lag, as AReaL does (a group held up by a
slow tool can be more than η versions behind: ``async/staleness_over``); with
``trainer.async.drop_stale`` it drops a whole group when any of its episodes' oldest token is more
than η versions behind the weights it would update. GRPO groups stay whole: a group is only ever taken
complete, and DAPO's dynamic sampling drops uniform groups as they finish (which frees
their slot, up to ``algorithm.max_gen_batches`` · B submissions per version). After the
update the new weights are pushed through the :class:`~memrl.train.versioned.WeightGate`,
which pauses generation only for the push itself.

Samples drawn from the data order but not yet trained on are ``pending``: a checkpoint
saves them and a resumed run generates them again first, so none is lost or repeated.
"""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

from memrl.config import MemRLConfig
from memrl.engines.base import Engine
from memrl.train.greedy_baseline import greedy_baseline, with_baseline
from memrl.train.rollout import RolloutRunner, dynamic_sampling_keeps, rollout_metrics, short_step
from memrl.train.versioned import PolicyClock, VersionedEngine, WeightGate
from memrl.types import Trajectory

T = TypeVar("T")
WAIT_REPORT_S = 5.0  # while the trainer waits for groups, how often it tells the progress line


def async_step_metrics(trained: list[Trajectory], finished: list[Trajectory], span_s: float) -> dict[str, float]:
    """A step's episode metrics, the same in both modes.

    ``reward`` and the episode metrics are over the episodes *trained* in the step (as AReaL
    logs them, and verl's DAPO its kept batch): in a synchronous run without dynamic sampling those
    are the episodes generated in it, and the learning curve must compare like with like. The episodes that *finished* since the last step were
    generated under newer weights and may be trained later; their mean reward is
    ``reward_finished`` and their tokens make ``tokens_per_s`` (generation throughput over the
    span between two steps). A step can finish nothing new (its groups were all complete
    before the previous step ended) and still train: it has a ``reward`` all the same.
    """
    metrics = rollout_metrics(trained or finished, span_s)
    metrics.pop("tokens_per_s", None)
    if finished:
        metrics["reward_finished"] = statistics.fmean(t.reward for t in finished)
    metrics["tokens_per_s"] = sum(t.num_generated_tokens for t in finished) / max(span_s, 1e-9)
    return metrics


@dataclass
class Group:
    """The episodes of one prompt, submitted ``slot``-th since the producer started."""

    slot: int
    idx: int
    step: int
    episodes: list[Trajectory] = field(default_factory=list)
    oldest: int = 0  # oldest policy version of any token of the group
    occurrence: int = 0  # earlier groups of the same sample in the same step (a step crossing an epoch)


class AsyncRollout:
    """The producer thread, its buffer of complete groups, and the weight gate."""

    def __init__(self, cfg: MemRLConfig, runner: RolloutRunner, engine: Engine, *, version: int,
                 pending: list[int], restore: dict[str, Any] | None = None) -> None:
        self.cfg = cfg
        self.runner = runner
        self.engine = engine
        self.batch = cfg.trainer.prompts_per_step
        self.eta = cfg.trainer.async_.max_staleness
        self.drop_stale = cfg.trainer.async_.drop_stale
        t = cfg.trainer
        a = t.async_
        self.chunk = a.partial_chunk_tokens if a.partial_rollouts == "interrupt" and self.eta > 0 else None
        self.rounds = cfg.algorithm.max_gen_batches if cfg.algorithm.dynamic_sampling else 1
        self.clock = PolicyClock(version)
        self.start_version = version
        self.lock = threading.Condition()
        self.pending = list(pending)  # drawn earlier (a resumed run's), generated first
        self.slots = 0  # groups submitted by this producer
        self.running: dict[int, Group] = {}
        self.ready: list[Group] = []
        self.accepted = 0  # groups accepted into the buffer since start (waiting or trained on)
        self._draws: Counter[tuple[int, int]] = Counter()  # (step, sample) -> groups submitted so far
        self.empty = 0  # groups none of whose episodes finished (max_gen_batches 0 bounds these alone)
        self.resubmit: list[Group] = []  # a resumed run's groups in flight at its checkpoint, under their labels
        self._saved: dict[str, Any] | None = None  # producer_state() of the last snapshot()
        if restore is not None and restore.get("batch") == self.batch and \
                [g[0] for g in restore.get("groups", [])] == self.pending[:len(restore["groups"])]:
            self._restore(restore)
        self.done_since_take: list[Trajectory] = []
        self.dropped_since_take = 0
        self.error: BaseException | None = None
        self.stopped = False
        self._idle_since: float | None = None
        self.idle_s = 0.0
        self._last_take = time.perf_counter()
        self.loop = asyncio.new_event_loop()
        self.gate: WeightGate | None = None
        self._wake: asyncio.Event | None = None
        started = threading.Event()
        self.thread = threading.Thread(target=self._thread, args=(started,), name="memrl-rollout", daemon=True)
        self.thread.start()
        started.wait()

    # -- producer side (its own thread and loop) ------------------------------------------------------
    def _thread(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        # partial_rollouts=interrupt: an engine that can cut its requests short does so for each update
        self.gate = WeightGate(getattr(self.engine, "interrupt", None) if self.chunk is not None else None)
        self._wake = asyncio.Event()
        started.set()
        task = self.loop.create_task(self._produce())
        try:
            self.loop.run_until_complete(task)
        except BaseException as err:  # noqa: BLE001 (handed to the trainer thread)
            with self.lock:
                self.error = self.error or err
                self.lock.notify_all()
        finally:
            self.loop.run_until_complete(self._cancel_rest())
            self.loop.close()

    async def _cancel_rest(self) -> None:
        rest = [t for t in asyncio.all_tasks(self.loop) if t is not asyncio.current_task()]
        for t in rest:
            t.cancel()
        await asyncio.gather(*rest, return_exceptions=True)

    def _can_submit(self) -> bool:
        """AReaL's staleness bound, plus dynamic sampling's cap on submissions per version (lock held)."""
        limit = (self.eta + self.clock.version - self.start_version + 1) * self.batch
        if self.rounds == 0:  # no limit on groups the filter drops; groups that failed whole still count
            return self.accepted + len(self.running) < limit and self.empty < limit
        return self.accepted + len(self.running) < limit and self.slots < limit * self.rounds

    async def _produce(self) -> None:
        assert self._wake is not None
        sem = asyncio.Semaphore(self.cfg.engine.concurrency)
        tasks: set[asyncio.Task[None]] = set()
        while not self.stopped:
            with self.lock:
                while self.resubmit or self._can_submit():
                    if self._idle_since is not None:  # the producer was waiting: that time was idle
                        self.idle_s += time.perf_counter() - self._idle_since
                        self._idle_since = None
                    group = self.resubmit.pop(0) if self.resubmit else self._next_group()
                    self.running[group.slot] = group
                    task = asyncio.ensure_future(self._run_group(group, sem))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
                if not self.running and self._idle_since is None:
                    self._idle_since = time.perf_counter()
            self._wake.clear()
            await self._wake.wait()

    def _next_group(self) -> Group:
        """The next group to submit: a pending sample (drawn before a resume) first, else the data order's next."""
        idx = self.pending.pop(0) if self.pending else self.runner.sampler.take(1)[0]
        slot = self.slots
        self.slots += 1
        step = self.start_version + slot // self.batch + 1
        group = Group(slot, idx, step=step, occurrence=self._draws[(step, idx)])
        self._draws[(step, idx)] += 1
        return group

    def _restore(self, saved: dict[str, Any]) -> None:
        """Continue the checkpointed producer: its counters, and its unfinished groups under their own slots,
        steps and occurrences (so their seeds and the submission budget are those of the run never stopped)."""
        self.start_version, self.slots, self.accepted = saved["start_version"], saved["slots"], saved["accepted"]
        self.empty = saved.get("empty", 0)
        self.resubmit = [Group(slot, idx, step=step, occurrence=occ) for idx, slot, step, occ in saved["groups"]]
        self.pending = self.pending[len(self.resubmit):]
        self._draws.update({(step, idx): n for step, idx, n in saved.get("draws", [])})

    async def _run_group(self, group: Group, sem: asyncio.Semaphore) -> None:
        n = self.cfg.algorithm.n
        baseline = greedy_baseline(self.cfg)  # ReMax: the group's greedy episode, in the same version window
        views = [VersionedEngine(self.engine, self.gate, self.clock, self.chunk)  # type: ignore[arg-type]
                 for _ in range(n + int(baseline))]

        async def one(k: int) -> Trajectory | None:
            async with sem:
                traj = await self.runner.episode(group.idx, k, step=group.step, round_=0, engine=views[k],
                                                 occurrence=group.occurrence, greedy=k == n)
            if traj is not None:
                traj.info["policy_versions"] = views[k].segments
                traj.info["interrupted_pieces"] = views[k].interrupted
            return traj

        try:
            results = await asyncio.gather(*(one(k) for k in range(len(views))))
        except BaseException as err:  # a dead engine: the trainer thread raises it
            with self.lock:
                self.error = self.error or err
                self.lock.notify_all()
            raise
        group.episodes = with_baseline(results, self.runner.baseline_failed(group.idx)) if baseline else \
            [t for t in results if t is not None]
        if not group.episodes:
            with self.lock:
                self.empty += 1
        versions = [v.oldest_version for v in views if v.oldest_version is not None]
        group.oldest = min(versions, default=self.clock.version)
        keep = bool(group.episodes)
        if keep and self.cfg.algorithm.dynamic_sampling:
            keep = all(dynamic_sampling_keeps(self.cfg, group.episodes))
        with self.lock:
            del self.running[group.slot]
            self.done_since_take += group.episodes
            if keep:
                self.ready.append(group)
                self.accepted += 1
            else:
                self.dropped_since_take += 1
            if not self.running:
                self._idle_since = time.perf_counter()
            self.lock.notify_all()
        self._poke()

    def _poke(self) -> None:
        if self._wake is not None:
            self._wake.set()

    # -- trainer side --------------------------------------------------------------------------------
    def take(self) -> tuple[list[Trajectory], list[Trajectory], dict[str, float]]:
        """Wait for B complete groups (or for all the producer may generate now); return (episodes to train
        on, every episode finished since the last take, stats), like :meth:`RolloutRunner.rollout`."""
        t0 = time.perf_counter()
        with self.lock:
            while not self.lock.wait_for(lambda: self.error is not None or len(self.ready) >= self.batch
                                         or (not self.running and not self.resubmit and not self._can_submit()),
                                         timeout=WAIT_REPORT_S):
                self.runner.progress(f"waiting for rollouts: {len(self.ready)}/{self.batch} groups complete")
            if self.error is not None:
                raise self.error
            self.ready.sort(key=lambda g: g.slot)
            taken, self.ready = self.ready[: self.batch], self.ready[self.batch:]
            finished, self.done_since_take = self.done_since_take, []
            dropped, self.dropped_since_take = self.dropped_since_take, 0
            depth = len(self.ready)
            now = time.perf_counter()
            idle = self.idle_s + (now - self._idle_since if self._idle_since is not None else 0.0)
            span = max(now - self._last_take, 1e-9)
            self.idle_s, self._last_take = 0.0, now
            if self._idle_since is not None:
                self._idle_since = now
        version = self.clock.version
        kept: list[Trajectory] = []
        staleness: Counter[int] = Counter()
        stale = 0
        for g in taken:  # a group is kept or dropped whole: GRPO compares its episodes with each other
            lags = [version - min((v for n, v in t.info.get("policy_versions", []) if n), default=version)
                    for t in g.episodes]
            for t, lag in zip(g.episodes, lags):
                t.metrics["staleness"] = float(lag)
            if self.drop_stale and max(lags) > self.eta:
                stale += len(g.episodes)
                continue
            staleness.update(lags)
            kept += g.episodes
        stats = {"dropped_groups": float(dropped), "gen_rounds": 1.0, "rollout_episodes": float(len(finished)),
                 "async/buffer_groups": float(depth), "async/dropped_stale": float(stale),
                 "async/producer_idle": min(1.0, idle / span),
                 "async/interrupted_pieces": float(sum(t.info.get("interrupted_pieces", 0) for t in finished)),
                 "async/span_s": span, "async/trainer_wait_s": time.perf_counter() - t0,
                 "async/staleness_mean": (sum(k * c for k, c in staleness.items()) / max(1, sum(staleness.values())))}
        for lag in range(self.eta + 1):
            stats[f"async/staleness_{lag}"] = float(staleness.get(lag, 0))
        stats["async/staleness_over"] = float(sum(c for k, c in staleness.items() if k > self.eta))
        if self.cfg.algorithm.dynamic_sampling:
            stats["kept_groups"] = float(len(taken))
            if 0 < len(taken) < self.batch:
                self.runner.warn(short_step(version + 1, len(taken), self.batch))
        self._poke_threadsafe()
        return kept, finished, stats

    def publish(self, version: int, push: Callable[[], Awaitable[None]]) -> float:
        """Push new weights (``push``) with generation paused only for the push; then they are ``version``.
        Returns the seconds generation was held."""
        async def swap() -> float:
            assert self.gate is not None
            async with self.gate.update():
                t0 = time.perf_counter()
                await push()
                self.clock.version = version
                return time.perf_counter() - t0

        held = self.run(swap())
        with self.lock:
            self.lock.notify_all()
        self._poke_threadsafe()
        return held

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the producer's loop (where the engine lives) and wait for it."""
        if self.error is not None:
            raise self.error
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def snapshot(self) -> tuple[int, list[int]]:
        """(data position, samples drawn but not trained on): what a checkpoint must keep. The producer's own
        state (:meth:`producer_state`) is taken under the same lock, so the two always agree."""
        with self.lock:
            waiting = sorted(list(self.running.values()) + self.ready + self.resubmit, key=lambda g: g.slot)
            version = self.clock.version
            self._saved = {"batch": self.batch, "start_version": self.start_version, "slots": self.slots,
                           "accepted": self.accepted - len(self.ready),  # the ready ones are accepted again
                           "empty": self.empty, "groups": [[g.idx, g.slot, g.step, g.occurrence] for g in waiting],
                           "draws": [[step, idx, n] for (step, idx), n in sorted(self._draws.items())
                                     if step > version]}
            return self.runner.sampler.position, [g.idx for g in waiting] + list(self.pending)

    def producer_state(self) -> dict[str, Any]:
        """The counters and unfinished groups a resumed producer continues from (:meth:`_restore`), as the last
        :meth:`snapshot` saw them (taken then when there was none)."""
        if self._saved is None:
            self.snapshot()
        assert self._saved is not None
        return self._saved

    def _poke_threadsafe(self) -> None:
        if not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self._poke)

    def close(self) -> None:
        """Stop generating; episodes in flight are abandoned (their samples stay pending)."""
        self.stopped = True
        if not self.loop.is_closed():
            with_loop = self.loop
            try:
                with_loop.call_soon_threadsafe(self._stop_tasks)
            except RuntimeError:  # the loop closed meanwhile
                pass
        self.thread.join(timeout=30)

    def _stop_tasks(self) -> None:
        for t in asyncio.all_tasks(self.loop):
            t.cancel()
