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
import time
from collections.abc import Mapping, Sequence
from typing import Any

from memrl.dist.ray_support import require_ray
from memrl.engines.base import GenerationResult, SamplingParams


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

    def join_sync(self, host: str, port: int, rank: int, world: int, backend: str) -> None:
        from memrl.dist.weight_sync import SyncGroup

        self.leave_sync()
        self.sync = SyncGroup(host, port, rank, world, backend, device=self.device)

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

    def pid(self) -> int:
        import os

        return os.getpid()


class RayEnginePool:
    """R engine replicas as Ray actors; least-outstanding-requests routing; restart and retry on death."""

    def __init__(self, model_path: str, replicas: int, *, dtype: str = "auto", device: str | None = None,
                 weights: Mapping[str, Any] | None = None, num_cpus: float = 1, num_gpus: float = 0,
                 max_batch_size: int = 32, seed: int = 0, retries: int = 3, weight_sync: str = "object_store",
                 sync_backend: str = "gloo", bucket_mb: float = 256, kind: str = "hf",
                 engine_options: Mapping[str, Any] | None = None) -> None:
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
        self._weights = ray.put({k: v.detach().cpu() for k, v in weights.items()}) if weights else None
        self.actors = [self._spawn(i) for i in range(replicas)]
        self.outstanding = [0] * replicas
        self.served = [0] * replicas
        self.restarts = 0
        self.last_sync_s = 0.0
        ray.get([a.pid.remote() for a in self.actors])  # fail here, not mid-rollout, if a replica cannot start

    def _spawn(self, i: int) -> Any:
        if self._latest is not None:  # collective mode: a replacement starts from the last synced weights
            self._weights = self._ray.put({k: v.detach().cpu() for k, v in self._latest.items()})
            self._latest = None
        return self._actor_cls.options(num_cpus=self.num_cpus, num_gpus=self.num_gpus, max_concurrency=1000).remote(
            self.model_path, self.dtype, self.device, self._weights, self.max_batch_size, self.seed + i, self.kind,
            self.engine_options)

    def _errors(self) -> tuple[type[BaseException], ...]:
        exc = self._ray.exceptions
        return tuple(getattr(exc, n) for n in ("RayActorError", "ActorDiedError", "ActorUnavailableError")
                     if hasattr(exc, n))

    def _replace(self, i: int, dead: Any) -> None:
        if self.actors[i] is dead:  # several requests can see the same death: replace it once
            self.restarts += 1
            self.actors[i] = self._spawn(i)

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> GenerationResult:
        last: BaseException | None = None
        for _ in range(self.retries + 1):
            i = min(range(len(self.actors)), key=lambda k: self.outstanding[k])
            actor = self.actors[i]
            self.outstanding[i] += 1
            try:
                out = await actor.generate.remote(list(prompt_ids), params)
                self.served[i] += 1
                return out
            except self._errors() as err:
                last = err
                self._replace(i, actor)
            finally:
                self.outstanding[i] -= 1
        raise RuntimeError(f"rollout replica failed {self.retries + 1} times in a row") from last

    async def update_weights(self, state_dict: Mapping[str, Any]) -> None:
        """Every replica gets ``state_dict``; dead replicas are replaced and the sync retried."""
        t0 = time.perf_counter()
        collective = self.weight_sync == "collective"
        if collective:
            self._latest = state_dict
            from memrl.dist.weight_sync import layout_of

            layout = layout_of(state_dict)
        else:
            self._weights = self._ray.put({k: v.detach().cpu() for k, v in state_dict.items()})
        for _ in range(self.retries + 1):
            if collective and self._group_members != self.actors:
                self._open_group()
            actors = list(self.actors)
            sent: BaseException | None = None
            if collective:
                refs = [a.receive_weights.remote(layout, self.bucket_mb) for a in actors]
                try:
                    self._group.send(state_dict, self.bucket_mb)
                except Exception as err:  # a member died mid-broadcast: find it below, re-form the group
                    sent = err
            else:
                refs = [a.load_weights.remote(self._weights) for a in actors]
            results = await asyncio.gather(*refs, return_exceptions=True)
            dead = [i for i, r in enumerate(results) if isinstance(r, self._errors())]
            other = [r for r in results if isinstance(r, BaseException) and not isinstance(r, self._errors())]
            if other and not (sent is not None or dead):
                raise other[0]
            for i in dead:  # a replacement starts from the latest weights
                self._replace(i, actors[i])
            if sent is not None or other:
                self._group_members = []  # re-form the group on the next attempt
                continue
            if not dead:
                break
        else:
            raise RuntimeError(f"weight sync failed {self.retries + 1} times in a row")
        self.last_sync_s = time.perf_counter() - t0

    def _open_group(self) -> None:
        """(Re-)form the broadcast group: trainer rank 0, replica i rank i+1."""
        from memrl.dist.ddp import free_port
        from memrl.dist.weight_sync import SyncGroup

        if self._group is not None:
            self._group.close()
        host = self._ray.util.get_node_ip_address()
        port = free_port()
        world = len(self.actors) + 1
        refs = [a.join_sync.remote(host, port, i + 1, world, self.sync_backend) for i, a in enumerate(self.actors)]
        device = "cuda" if self.sync_backend == "nccl" else "cpu"
        self._group = SyncGroup(host, port, 0, world, self.sync_backend, device=device)
        self._ray.get(refs)
        self._group_members = list(self.actors)

    def sleep(self) -> None:
        self._ray.get([a.sleep.remote() for a in self.actors])

    def wake(self) -> None:
        self._ray.get([a.wake.remote() for a in self.actors])

    def stats(self) -> dict[str, float]:
        return {"replicas": float(len(self.actors)), "replica_restarts": float(self.restarts),
                **{f"replica{i}_requests": float(n) for i, n in enumerate(self.served)}}

    async def close(self) -> None:
        if self._group is not None:
            self._group.close()
        for a in self.actors:
            self._ray.kill(a)
