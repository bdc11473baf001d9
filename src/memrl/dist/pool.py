"""Rollout replicas as Ray actors behind the ordinary ``Engine`` protocol.

Workflows do not know they talk to a pool: ``generate`` sends each request to the
replica with the fewest outstanding requests. A replica that dies is replaced by
a new actor loaded with the latest weights, and the request is sent again; since
generation is token-in/token-out and stateless, retrying the request resumes the
episode exactly where it was. Weight sync puts the state dict in the Ray object
store once and every replica loads it from there, or (``weight_sync="collective"``)
broadcasts it over a gloo/NCCL group of the trainer and the replicas
(``memrl.dist.weight_sync``); a replica replaced since the last sync makes the
pool form the group anew.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from memrl.dist.ray_support import require_ray
from memrl.dist.replicas import ReplicaHealth, Slots, warn_stderr
from memrl.engines.base import EngineDeadError, GenerationResult, SamplingParams

FIT_WAIT_S = 10.0  # how long a replacement waits for the cluster to have room for it before the slot is dropped


async def _awaitable(ref: Any) -> Any:
    """An ObjectRef as a coroutine (``asyncio.wait_for`` wants one)."""
    return await ref


class _Hung(Exception):
    """A replica that did not answer a weight-sync call in time (a stopped process, a wedged device)."""


class _Replica:
    """One engine in its own process, built by its kind's ``replica`` builder (``memrl.engines.hosted``): an HF
    engine, or vLLM (tensor-parallel over the actor's GPUs)."""

    def __init__(self, model_path: str, dtype: str, device: str | None, weights: Any, max_batch_size: int,
                 seed: int, kind: str = "hf", options: Mapping[str, Any] | None = None) -> None:
        from memrl.engines.factory import replica_builder

        self.host = replica_builder(kind)(model_path, dtype, device, weights, max_batch_size, seed, options)
        self.engine: Any = self.host.engine
        self.device = self.host.device
        self.sync: Any = None  # the broadcast group, under weight_sync=collective

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> GenerationResult:
        await self.host.ready()
        return await self.engine.generate(prompt_ids, params)

    async def load_weights(self, weights: Mapping[str, Any]) -> int:
        self.host.pending = None  # newer than any pending start-up weights
        await self.engine.update_weights(weights)
        return len(weights)

    def join_sync(self, host: str, port: int, rank: int, world: int, backend: str, timeout_s: float = 300.0) -> None:
        from memrl.dist.weight_sync import SyncGroup

        self.leave_sync()
        self.sync = SyncGroup(host, port, rank, world, backend, device=self.device, timeout_s=timeout_s)

    async def receive_weights(self, layout: list[Any], bucket_mb: float) -> int:
        weights = self.sync.receive(layout, bucket_mb)  # blocks this actor until rank 0 has sent everything
        self.host.pending = None
        await self.engine.update_weights(weights)
        return len(weights)

    def leave_sync(self) -> None:
        if self.sync is not None:
            self.sync.close()
        self.sync = None

    async def sleep(self) -> None:
        """Colocated placement: give the accelerator back to the trainer during the update."""
        await self.host.sleep()

    async def wake(self) -> None:
        await self.host.wake()

    def where(self) -> tuple[str, list[str]]:
        """(node IP, GPU ids Ray gave this replica): checked against the trainer's under placement=split."""
        import ray

        return ray.util.get_node_ip_address(), [str(g) for g in ray.get_gpu_ids()]

    def pid(self) -> int:
        import os

        return os.getpid()


class RayEnginePool:
    """R engine replicas as Ray actors; least-outstanding-requests routing; restart and retry on death.

    Every call to a replica is bounded (``call_timeout_s`` + ``timeout_per_token_s`` per requested token; a
    weight load, sleep, wake or group join by ``call_timeout_s``: a replica that misses it is replaced like
    a dead one, or stops the run when the call has no replacement path), and so is the wait for a
    replacement: one that the cluster has no room for (a node was lost and no other has
    spare resources) is given up with one warning and the run goes on with the other replicas, so a step and
    the first SIGTERM's "finishing the current step" always end. Replica health: see :mod:`memrl.dist.replicas`.
    """

    def __init__(self, model_path: str, replicas: int, *, dtype: str = "auto", device: str | None = None,
                 weights: Mapping[str, Any] | None = None, num_cpus: float = 1, num_gpus: float = 0,
                 max_batch_size: int = 32, seed: int = 0, retries: int = 3, weight_sync: str = "object_store",
                 sync_backend: str = "gloo", bucket_mb: float = 256, kind: str = "hf",
                 engine_options: Mapping[str, Any] | None = None, call_timeout_s: float = 600.0,
                 timeout_per_token_s: float = 0.0, replace_timeout_s: float = 600.0,
                 health: ReplicaHealth | None = None, warn: Callable[[str], None] = warn_stderr) -> None:
        ray = require_ray()
        if weight_sync not in ("object_store", "collective"):
            raise ValueError(f"weight_sync must be object_store or collective, not {weight_sync!r}")
        self.weight_sync, self.sync_backend, self.bucket_mb = weight_sync, sync_backend, bucket_mb
        self.kind, self.engine_options = kind, dict(engine_options or {})
        self._group: Any = None
        self._group_members: list[Any] = []
        self._latest: Mapping[str, Any] | None = None
        self._ray = ray
        self._actor_cls = ray.remote(_Replica)
        self.model_path, self.dtype, self.device = model_path, dtype, device
        self.num_cpus, self.num_gpus = num_cpus, num_gpus
        self.max_batch_size, self.seed, self.retries = max_batch_size, seed, retries
        self.call_timeout_s, self.timeout_per_token_s = call_timeout_s, timeout_per_token_s
        self.replace_timeout_s, self.warn = replace_timeout_s, warn
        self.slots = Slots(replicas, health or ReplicaHealth())
        self._version = 0  # weight updates so far; a replacement started from older weights catches up
        self._put_version = 0
        self._spawned_at = [0] * replicas
        self._weights = ray.put({k: v.detach().cpu() for k, v in weights.items()}) if weights else None
        self.actors: list[Any] = [self._spawn(i) for i in range(replicas)]
        self.outstanding = [0] * replicas
        self.served = [0] * replicas
        self.restarts = 0
        self.last_sync_s = 0.0
        ray.get([a.pid.remote() for a in self.actors])  # fail here, not mid-rollout, if a replica cannot start

    def _weights_ref(self) -> Any:
        """The latest weights in the object store (collective mode puts them there only when a replica needs
        them: a replacement)."""
        if self._latest is not None and self._put_version != self._version:
            self._weights = self._ray.put({k: v.detach().cpu() for k, v in self._latest.items()})
            self._put_version = self._version
        return self._weights

    def _spawn(self, i: int) -> Any:
        self._spawned_at[i] = self._version
        return self._actor_cls.options(num_cpus=self.num_cpus, num_gpus=self.num_gpus, max_concurrency=1000).remote(
            self.model_path, self.dtype, self.device, self._weights_ref(), self.max_batch_size, self.seed + i,
            self.kind, self.engine_options)

    def _errors(self) -> tuple[type[BaseException], ...]:
        exc = self._ray.exceptions
        return tuple(getattr(exc, n) for n in ("RayActorError", "ActorDiedError", "ActorUnavailableError")
                     if hasattr(exc, n))

    def live_actors(self) -> list[Any]:
        return [self.actors[i] for i in self.slots.live()]

    async def _fits(self) -> bool:
        """Whether the cluster has room for one more replica now (polled briefly: a dead actor's resources
        come back a moment after its death is reported)."""
        deadline = time.monotonic() + FIT_WAIT_S
        while True:
            free = self._ray.available_resources()
            if free.get("CPU", 0) + 1e-6 >= self.num_cpus and free.get("GPU", 0) + 1e-6 >= self.num_gpus:
                return True
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.25)

    def _drop(self, i: int, why: str) -> None:
        self.slots.set_state(i, "dropped")
        left = len(self.slots.live()) + len(self.slots.pending())
        self.warn(f"rollout replica {i} could not be replaced ({why}); "
                  + (f"going on with {left} replica(s)" if left else "no replica is left, stopping the run"))

    async def _replace(self, i: int, old: Any, why: str = "it died") -> None:
        """A new actor in slot ``i`` with the latest weights, or the slot dropped when the cluster has no room."""
        if self.actors[i] is not old or self.slots.state[i] != "live":
            return  # several requests saw the same death: it is being (or was) replaced once
        self.slots.set_state(i, "pending")
        self.restarts += 1
        self._kill(old)
        if not await self._fits():
            gpus = f", {self.num_gpus:g} GPU" if self.num_gpus else ""
            self._drop(i, f"{why}; the cluster has no free {self.num_cpus:g} CPU{gpus} for a new one")
            return
        actor = self.actors[i] = self._spawn(i)
        try:
            await asyncio.wait_for(_awaitable(actor.pid.remote()), self.replace_timeout_s)
            if self._spawned_at[i] != self._version:  # weights were updated while it started
                await actor.load_weights.remote(self._weights_ref())
        except asyncio.TimeoutError:
            self._kill(actor)
            self._drop(i, f"{why}; its replacement was not running after {self.replace_timeout_s:g} s")
            return
        except self._errors():
            self._drop(i, f"{why}; its replacement died while starting")
            return
        self.slots.set_state(i, "live")

    def _kill(self, actor: Any) -> None:
        try:
            self._ray.kill(actor)
        except Exception:  # noqa: BLE001 - already gone
            pass

    async def _call(self, i: int, prompt_ids: list[int], params: SamplingParams) -> GenerationResult:
        timeout = self.call_timeout_s + self.timeout_per_token_s * params.max_new_tokens
        ref = self.actors[i].generate.remote(prompt_ids, params)
        try:
            return await asyncio.wait_for(_awaitable(ref), timeout)
        except asyncio.TimeoutError:
            with contextlib.suppress(Exception):
                self._ray.cancel(ref)
            raise TimeoutError(f"rollout replica {i} did not answer within {timeout:g} s "
                               "(engine.timeout_s + engine.timeout_per_token_s per token)") from None

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> GenerationResult:
        """Least-outstanding routing. A dead replica is replaced and the request sent again; a request that fails
        on one replica is tried once more on another, and counts against the first only if that one answers."""
        failed: dict[int, tuple[Any, BaseException]] = {}  # slot: (the actor that failed, its error)
        deaths = 0
        while True:
            i = await self.slots.pick(lambda k: self.outstanding[k], set(failed))
            if i is None or len(failed) >= 2:  # it fails wherever it goes: the request's own fault
                raise next(reversed(failed.values()))[1]
            actor = self.actors[i]
            self.outstanding[i] += 1
            try:
                out = await self._call(i, list(prompt_ids), params)
            except self._errors() as err:
                deaths += 1
                if deaths > self.retries:
                    raise RuntimeError(f"rollout replica failed {deaths} times in a row") from err
                await self._replace(i, actor)
                continue
            except Exception as err:  # noqa: BLE001 - the replica's error (or timeout): try another replica
                failed[i] = (actor, err)
                continue
            finally:
                self.outstanding[i] -= 1
            self.served[i] += 1
            self.slots.succeeded(i)
            for j, (bad, err) in failed.items():
                if self.actors[j] is not bad or self.slots.state[j] != "live":
                    continue  # that replica was replaced meanwhile: the new one is not to blame
                if self.slots.blame(j, err):
                    self.warn(f"rollout replica {j} failed {self.slots.failures[j]} of its last "
                              f"{self.slots.requests[j]} requests ({type(err).__name__}); restarting it")
                    await self._replace(j, self.actors[j], "it kept failing")
            return out

    async def update_weights(self, state_dict: Mapping[str, Any]) -> None:
        """Every replica gets ``state_dict``; dead replicas are replaced and the sync retried."""
        t0 = time.perf_counter()
        collective = self.weight_sync == "collective"
        self._version += 1
        if collective:
            self._latest = state_dict
            from memrl.dist.weight_sync import layout_of

            layout = layout_of(state_dict)
        else:
            self._weights = self._ray.put({k: v.detach().cpu() for k, v in state_dict.items()})
        for _ in range(self.retries + 1):
            live = self.slots.live()
            actors = [self.actors[i] for i in live]
            if collective and self._group_members != actors:
                self._open_group(actors)
            sent: BaseException | None = None
            if collective:
                refs = [a.receive_weights.remote(layout, self.bucket_mb) for a in actors]
                try:
                    self._group.send(state_dict, self.bucket_mb)
                except Exception as err:  # a member died mid-broadcast: find it below, re-form the group
                    sent = err
            else:
                refs = [a.load_weights.remote(self._weights) for a in actors]
            results = await asyncio.gather(*(self._bounded(r) for r in refs), return_exceptions=True)
            gone = (*self._errors(), _Hung)  # a replica stuck in the load is replaced as a dead one is
            dead = [i for i, r in enumerate(results) if isinstance(r, gone)]
            other = [r for r in results if isinstance(r, BaseException) and not isinstance(r, gone)]
            if other and not (sent is not None or dead):
                raise other[0]
            for k in dead:  # a replacement starts from the latest weights
                why = (f"it did not take the weights within {self.call_timeout_s:g} s (engine.timeout_s)"
                       if isinstance(results[k], _Hung) else "it died")
                await self._replace(live[k], actors[k], why)
            if sent is not None or other:
                self._group_members = []  # re-form the group on the next attempt
                continue
            if not dead:
                break
        else:
            raise RuntimeError(f"weight sync failed {self.retries + 1} times in a row")
        self.last_sync_s = time.perf_counter() - t0

    async def _bounded(self, ref: Any) -> Any:
        """``ref``'s value, or :class:`_Hung` (raised) after ``call_timeout_s``."""
        try:
            return await asyncio.wait_for(_awaitable(ref), self.call_timeout_s)
        except asyncio.TimeoutError:
            with contextlib.suppress(Exception):
                self._ray.cancel(ref)
            raise _Hung() from None

    def _get_all(self, refs: list[Any], what: str) -> Any:
        """``ray.get(refs)`` within ``call_timeout_s``; a replica that hangs there stops the run in one line."""
        try:
            return self._ray.get(refs, timeout=self.call_timeout_s)
        except self._ray.exceptions.GetTimeoutError:
            raise EngineDeadError(f"a rollout replica did not {what} within {self.call_timeout_s:g} s "
                                  "(engine.timeout_s); stopping the run") from None

    def _open_group(self, actors: list[Any]) -> None:
        """(Re-)form the broadcast group: trainer rank 0, replica i rank i+1."""
        from memrl.dist.ddp import free_port
        from memrl.dist.weight_sync import SyncGroup

        if self._group is not None:
            self._group.close()
        host = self._ray.util.get_node_ip_address()
        port = free_port()
        world = len(actors) + 1
        t = self.call_timeout_s
        refs = [a.join_sync.remote(host, port, i + 1, world, self.sync_backend, t) for i, a in enumerate(actors)]
        device = "cuda" if self.sync_backend == "nccl" else "cpu"
        try:
            self._group = SyncGroup(host, port, 0, world, self.sync_backend, device=device, timeout_s=t)
        except Exception as err:  # noqa: BLE001 - a member that never joined (hung, or gone while joining)
            raise EngineDeadError(f"the weight-sync group of {len(actors)} rollout replica(s) did not form within "
                                  f"{t:g} s (engine.timeout_s; {type(err).__name__}); stopping the run") from None
        self._get_all(refs, "join the weight-sync group")
        self._group_members = list(actors)

    def sleep(self) -> None:
        self._get_all([a.sleep.remote() for a in self.live_actors()], "release its accelerator memory")

    def wake(self) -> None:
        self._get_all([a.wake.remote() for a in self.live_actors()], "take its accelerator memory back")

    def stats(self) -> dict[str, float]:
        return {"replicas": float(len(self.slots.live())), "replica_restarts": float(self.restarts),
                **{f"replica{i}_requests": float(n) for i, n in enumerate(self.served)}}

    async def close(self) -> None:
        if self._group is not None:
            self._group.close()
        for a in self.actors:
            self._kill(a)
