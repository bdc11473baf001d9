"""The engines of ``bench/async_modelled.py``: a modelled decode time around a real engine, and where it runs.

:class:`ModelledLatencyEngine` wraps an engine: every token still comes from it (so learning is
real), and each request then sleeps in the caller's event loop until ``a + b * new_tokens``
seconds have passed since it started. Sleeping costs no core.

Where the real engine runs (``--engine``), and the cores (:class:`RolloutHost`):

* ``process`` (the default): memrl's HF engine in a child process of its own, reached over a pipe
  (:mod:`engine_process`), pinned to the engine core. Its compute shares neither a core nor an
  interpreter lock with the update: the disaggregated layout of AReaL or verl's async mode, with a
  device per role. What stays in the trainer's process is what stays there on real hardware: the
  workflow's Python (prompts, memory, rewards), the client side of each request, the sleep, and
  the weight push (the full state dict, every step).
* ``replica``: the same with a memrl Ray rollout replica (:class:`memrl.dist.pool.RayEnginePool`).
  Ray's per-request overhead (~1 ms on the actor, ~0.4 ms on the caller) is larger than the tiny
  model's compute, so on a 2-core machine the engine's core saturates on it.
* ``thread``: the engine in the trainer's process (its decode thread pinned to the engine core).
  The update and the tiny model's decode share Python's interpreter lock, which a model this small
  holds for much of each decode step (many small ops, each dispatched from Python).

In every mode the update runs alone on the trainer core (its accelerator): during it the trainer's
other threads move to the engine core; outside it they run on either core.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from typing import Any


class ModelledLatencyEngine:
    """An engine whose requests take ``a + b * new_tokens`` seconds: the tokens come from ``inner``, the time
    from the latency model (the inner engine's own compute counts toward it).

    ``a`` (queueing and prefill) is not charged for a request that continues an earlier request's prompt and
    output under the same weights (an interrupted rollout's next piece): an engine with prefix caching finds that
    prefix in its cache. A weight update empties the cache, as vLLM and SGLang reset theirs on one.
    """

    def __init__(self, inner: Any, a: float, b: float) -> None:
        self.inner = inner
        self.a = a
        self.b = b
        self.busy_s = 0.0  # modelled seconds of requests (summed over requests)
        self.overrun_s = 0.0  # seconds the real engine took beyond the model (the model was too fast for it)
        self.cached: set[tuple[int, ...]] = set()  # prompt + output of requests since the last weight update
        self.inflight: set[asyncio.Event] = set()  # one per request in flight, set to cut it short

    def __getattr__(self, name: str) -> Any:  # close, stats, ...
        return getattr(self.inner, name)

    async def update_weights(self, state_dict: Any) -> None:
        self.cached.clear()
        await self.inner.update_weights(state_dict)

    def latency(self, prompt_ids: Any, new_ids: Any) -> float:
        """Modelled seconds of one request (and remember its prefix for a continuation)."""
        prompt = tuple(prompt_ids)
        hit = prompt in self.cached
        self.cached.discard(prompt)
        self.cached.add(prompt + tuple(new_ids))
        return (0.0 if hit else self.a) + self.b * len(new_ids)

    def interrupt(self) -> None:
        """A weight update is waiting: every request in flight returns the tokens its modelled decode has
        produced by now (AReaL pauses SGLang/vLLM with an abort; memrl's gate calls this)."""
        for cut in self.inflight:
            cut.set()

    async def generate(self, prompt_ids: Any, params: Any) -> Any:
        from memrl.engines.base import GenerationResult

        t0 = time.perf_counter()
        cut = asyncio.Event()
        self.inflight.add(cut)
        try:
            res = await self.inner.generate(prompt_ids, params)
            target = self.latency(prompt_ids, res.token_ids)
            left = target - (time.perf_counter() - t0)
            if left <= 0:
                self.overrun_s -= left
            elif not cut.is_set():
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(cut.wait(), left)
        finally:
            self.inflight.discard(cut)
        elapsed = time.perf_counter() - t0
        if not cut.is_set() or elapsed >= target:
            self.busy_s += target
            return res
        # cut short: the tokens decoded by now (the first comes after the prefill part of the latency)
        self.busy_s += elapsed
        prefill = target - self.b * len(res.token_ids)
        k = max(0, min(len(res.token_ids), int((elapsed - prefill) / self.b))) if self.b > 0 else 0
        return GenerationResult(res.token_ids[:k], res.logprobs[:k], "abort", dict(res.meta))


def pin_cores() -> tuple[int, int] | None:
    """(engine core, trainer core): two cores of this process's set, or None when it has fewer (or no affinity)."""
    try:
        cores = sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return None
    return (cores[0], cores[1]) if len(cores) >= 2 else None


def pin_process(pid: int, cores: set[int], skip: int | None = None) -> int:
    """Every thread of process ``pid`` (but ``skip``) onto ``cores`` (threads they start inherit them)."""
    tasks = [int(t) for t in os.listdir(f"/proc/{pid}/task") if int(t) != skip]
    for tid in tasks:
        try:
            os.sched_setaffinity(tid, cores)
        except ProcessLookupError:  # the thread ended meanwhile
            pass
    return len(tasks)


def _pinned(fn: Any, core: int) -> Any:
    """``fn`` run on ``core`` (the decode thread pins itself on entry: the engine's own core)."""
    def run(*args: Any, **kwargs: Any) -> Any:
        os.sched_setaffinity(0, {core})
        return fn(*args, **kwargs)
    return run


class RolloutHost:
    """The real engine of a run, where it runs (see the module docstring), and the cores; ``close`` releases it.

    With ``pin`` = (engine core, trainer core): the engine's compute runs on the engine core; the update
    (log-prob recompute, forward, backward, optimizer step) runs alone on the trainer core, the other
    threads of the trainer's process moving to the engine core meanwhile; outside the update they run on
    either core. So the update has a device of its own, the engine has one for its compute, and the trainer's
    host Python (workflows, request client, weight push) takes what CPU is free, as on a host with cores of its own.
    """

    def __init__(self, cfg: Any, where: str, pin: tuple[int, int] | None) -> None:
        self.where, self.pin, self.close_fn = where, pin, None
        both = set(pin) if pin else None
        if both:
            pin_process(os.getpid(), both)
        if where == "process":
            from engine_process import ProcessEngine

            self.engine: Any = ProcessEngine(cfg.model.path, max_batch_size=cfg.engine.max_batch_size,
                                             seed=cfg.trainer.seed, core=pin[0] if pin else None)
            self.close_fn = self.engine.close
        elif where == "replica":
            from memrl.dist.pool import RayEnginePool
            from memrl.dist.ray_support import init_ray

            init_ray(None)
            self.engine = RayEnginePool(cfg.model.path, 1, device="cpu", num_cpus=1, weights=None,
                                        max_batch_size=cfg.engine.max_batch_size, seed=cfg.trainer.seed)
            self.close_fn = self.engine.close
            if pin:
                pin_process(self.engine._ray.get(self.engine.actors[0].pid.remote()), {pin[0]})
        else:
            from memrl.engines.hf import HFEngine
            from memrl.models.resolve import load_model

            model = load_model(cfg.model.path, device="cpu")
            model.eval()
            self.engine = HFEngine(model, pad_token_id=0, max_batch_size=cfg.engine.max_batch_size,
                                   seed=cfg.trainer.seed)
            if pin:
                self.engine._generate_batch = _pinned(self.engine._generate_batch, pin[0])

    def attach(self, trainer: Any) -> None:
        """``trainer``'s update runs alone on the trainer core (its accelerator); see the class docstring."""
        if not self.pin:
            return
        update, (engine_core, trainer_core) = trainer.update, self.pin
        me, both = threading.get_native_id(), set(self.pin)

        def on_device(rows: Any) -> Any:
            pin_process(os.getpid(), {engine_core}, skip=me)
            os.sched_setaffinity(0, {trainer_core})
            try:
                return update(rows)
            finally:
                pin_process(os.getpid(), both)
        trainer.update = on_device

    def close(self) -> None:
        if self.close_fn is not None:
            asyncio.run(self.close_fn())
