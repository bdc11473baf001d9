"""What the trainer sends to an engine of its own after an update: merged weights or only a LoRA adapter.

A vLLM engine started with ``engine.vllm.lora_sync=adapter`` keeps the base weights and
serves the trained adapter as a LoRA request, so each sync moves a few MB instead of the
whole model. Every other engine gets the merged weights (W + scaling * B @ A).
"""

from __future__ import annotations

import asyncio
from typing import Any

from memrl.config.schema import MemRLConfig


def syncs_adapter(cfg: MemRLConfig, engine: Any) -> bool:
    """Whether this run ships only the LoRA adapter to ``engine``."""
    return (cfg.lora.enabled and cfg.engine.kind == "vllm" and cfg.engine.vllm.lora_sync == "adapter"
            and hasattr(engine, "update_adapter"))


def adapter_payload(policy: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(adapter tensors under peft's saved names, adapter config) of a peft policy: what peft would save."""
    from peft import get_peft_model_state_dict

    tensors = {k: v.detach() for k, v in get_peft_model_state_dict(policy).items()}
    config = policy.peft_config["default"].to_dict()
    return tensors, config


def sync_stats(engine: Any) -> dict[str, float]:
    """Bytes moved and engine-side seconds of the last sync, where the engine reports them."""
    return dict(getattr(engine, "last_sync", None) or {})


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
        if syncs_adapter(self.cfg, self.engine):  # only the adapter travels; the engine keeps the base
            await self.engine.update_adapter(*adapter_payload(self.policy))
        elif weights is not None:
            await self.engine.update_weights(weights)

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
        return metrics
