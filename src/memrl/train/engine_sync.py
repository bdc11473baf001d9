"""What the trainer sends to an engine of its own after an update: merged weights or only a LoRA adapter.

A vLLM engine started with ``engine.vllm.lora_sync=adapter`` keeps the base weights and
serves the trained adapter as a LoRA request, so each sync moves a few MB instead of the
whole model. Every other engine gets the merged weights (W + scaling * B @ A).

Each step reports how the last sync travelled: ``sync/path`` (a code of :data:`SYNC_PATH_CODES`:
metrics are numbers) and ``sync/gb_per_s`` (bytes moved over the engine-side seconds).
"""

from __future__ import annotations

import asyncio
from typing import Any

from memrl.config.schema import MemRLConfig


def syncs_adapter(cfg: MemRLConfig, engine: Any) -> bool:
    """Whether this run ships only the LoRA adapter to ``engine``: asked for (``engine.vllm.lora_sync``) and
    the engine can take one (it has ``update_adapter``, as the in-process vLLM engine does)."""
    return cfg.lora.enabled and cfg.engine.vllm.lora_sync == "adapter" and hasattr(engine, "update_adapter")


def adapter_payload(policy: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(adapter tensors under peft's saved names, adapter config) of a peft policy: what peft would save."""
    from peft import get_peft_model_state_dict

    tensors = {k: v.detach() for k, v in get_peft_model_state_dict(policy).items()}
    config = policy.peft_config["default"].to_dict()
    return tensors, config


# ``sync/path`` values: the in-process vLLM engine's paths (memrl.engines.vllm_sync), its LoRA adapter
# files, and the Ray replica pool's two ways (cluster.weight_sync)
SYNC_PATH_CODES = {"bytes": 1.0, "shm": 2.0, "ipc": 3.0, "nccl": 4.0, "adapter": 5.0, "object_store": 6.0,
                   "collective": 7.0}


def sync_stats(engine: Any) -> dict[str, float]:
    """Bytes moved, engine-side seconds, path and GB/s of the last sync, where the engine reports them."""
    stats = dict(getattr(engine, "last_sync", None) or {})
    path = getattr(engine, "last_sync_path", "")
    if path in SYNC_PATH_CODES:
        stats["sync/path"] = SYNC_PATH_CODES[path]
    return stats


def pool_sync_stats(pool: Any, weights: dict[str, Any] | None) -> dict[str, float]:
    """The replica pool's last sync: its path, and GB/s of ``weights`` over the pool's sync seconds."""
    seconds = float(getattr(pool, "last_sync_s", 0.0) or 0.0)
    if weights is None or seconds <= 0:
        return {}
    nbytes = sum(t.numel() * t.element_size() for t in weights.values())
    return {"sync/path": SYNC_PATH_CODES.get(pool.weight_sync, 0.0), "sync/gb_per_s": nbytes / 1e9 / seconds,
            "sync_mb": nbytes / 2**20}


def engine_weights(policy: Any, *, sharded: bool, main: bool) -> dict[str, Any] | None:
    """Merged weights for the engine (rank 0); under FSDP every rank must call this (collective gather)."""
    if not (sharded or main):
        return None
    from memrl.dist.fsdp import full_state_dict
    from memrl.train.policy import merged_state_dict

    state = full_state_dict(policy)  # collective when sharded
    return merged_state_dict(policy, state) if main else None


class WeightSync:
    """Around each update: free the accelerator where the engine can sleep, then wake it and push the new weights.

    ``push``: whether the engine holds weights of its own (every rank must agree: gathering
    FSDP shards is collective). The in-process HF engine sharing the policy module needs nothing.
    """

    def __init__(self, cfg: MemRLConfig, engine: Any, pool: Any, policy: Any, *, push: bool, sharded: bool,
                 main: bool) -> None:
        self.cfg = cfg
        self.engine = engine
        self.pool = pool
        self.policy = policy
        self.push = push
        self.sharded = sharded
        self.main = main
        self.colocated = pool is not None and cfg.cluster.placement == "colocate"
        # an in-process vLLM engine gives the accelerator back during the update
        self.engine_sleeps = pool is None and main and bool(getattr(engine, "sleep_enabled", False))
        self._pushed: dict[str, Any] | None = None  # the last weights pushed (their size makes the pool's GB/s)

    def before_update(self) -> None:
        if self.colocated:
            self.pool.sleep()
        if self.engine_sleeps:
            asyncio.run(self.engine.sleep(1))

    def wake(self) -> None:
        if self.colocated:
            self.pool.wake()
        if self.engine_sleeps:
            asyncio.run(self.engine.wake_up())

    async def push_weights(self, weights: dict[str, Any] | None) -> None:
        """Send the update to the engine (rank 0): only the adapter where the engine serves it as LoRA."""
        self._pushed = None
        if syncs_adapter(self.cfg, self.engine):  # only the adapter travels; the engine keeps the base
            await self.engine.update_adapter(*adapter_payload(self.policy))
        elif weights is not None:
            await self.engine.update_weights(weights)
            self._pushed = weights

    def gather(self) -> dict[str, Any] | None:
        """What :meth:`push_weights` sends (collective under FSDP; None where only the adapter travels)."""
        if syncs_adapter(self.cfg, self.engine):
            return None
        return engine_weights(self.policy, sharded=self.sharded, main=self.main)

    def after_update(self) -> dict[str, float]:
        """Wake the engine and push the new weights; the sync's metrics (rank 0)."""
        self.wake()
        metrics: dict[str, float] = {}
        if self.push:
            weights = self.gather()
            if self.main:
                asyncio.run(self.push_weights(weights))
        return {**metrics, **self.engine_stats()}

    def engine_stats(self) -> dict[str, float]:
        """The last sync's size and time (where the engine reports them) and the replica pool's counters."""
        metrics = sync_stats(self.engine) if self.push and self.main else {}
        if self.pool is not None:
            metrics.update(self.pool.stats())
            if self.push and self.main:
                metrics.update(pool_sync_stats(self.pool, self._pushed))
        self._pushed = None
        return metrics
