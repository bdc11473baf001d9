"""What a run builds before its first step: seeds, the optimizer and its schedule, the rollout engine.

Kept apart from the loop so the loop reads as the algorithm. The rollout engine is
one of three things: the policy module itself (the in-process HF engine, weight
sync free), a pool of Ray replicas, or an engine of its own (vLLM, an
OpenAI-compatible server, the caller's) that receives the policy's weights.
"""

from __future__ import annotations

import asyncio
import math
import random
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from memrl.config import ConfigError, MemRLConfig
from memrl.engines.base import Engine
from memrl.engines.factory import build_engine as build_configured
from memrl.engines.factory import engine_kind, replica_builder
from memrl.train.engine_sync import adapter_payload, syncs_adapter
from memrl.train.policy import merged_state_dict


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def lr_lambda(step: int, warmup: int, total: int, schedule: str) -> float:
    """The learning-rate factor of optimizer step ``step`` (0-based), as verl's (and Megatron's) schedulers give it:
    linear warmup from 0, so the first step runs at lr 0 and only warms Adam's moments (memrl started at
    1/warmup, a step ahead of verl all through the warmup); then constant, or cosine to 0 at ``total``."""
    if warmup and step < warmup:
        return step / warmup
    if schedule == "cosine" and total > warmup:
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        return 0.5 * (1 + math.cos(math.pi * progress))
    return 1.0


def build_optimizer(cfg: MemRLConfig, policy: Any) -> tuple[torch.optim.Optimizer, Any]:
    """AdamW over the trainable parameters and the configured warmup/cosine schedule."""
    params = [p for p in policy.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.trainer.lr, weight_decay=cfg.trainer.weight_decay)
    t = cfg.trainer
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: lr_lambda(s, t.warmup_steps, t.total_steps, t.lr_schedule))
    return optimizer, scheduler


@dataclass
class RolloutEngine:
    """The engine episodes run on, and how the trainer must treat it."""

    engine: Engine
    shared: bool  # the engine generates with the policy module itself: nothing to sync
    pool: Any = None  # a RayEnginePool (it is also ``engine``)
    status_line: str = ""


def build_engine(cfg: MemRLConfig, policy: Any, given: Engine | None, *, resumed: bool, device: torch.device,
                 pad_id: int, sharded: bool, trainer_ranks: int, own_copy: bool = False) -> RolloutEngine:
    """The rollout engine; an engine of its own starts from the policy's weights.

    ``given``: the caller's engine, used as it is apart from that first weight push.
    ``own_copy``: the in-process HF engine gets a model of its own instead of the policy module
    (asynchronous training generates while the policy updates).
    """
    c = cfg.cluster
    kind = engine_kind(cfg.engine.kind) if given is None else None
    if kind is not None and c.rollout_replicas > 0:
        from memrl.dist.pool import RayEnginePool
        from memrl.dist.ray_support import init_ray, require_ray

        e = cfg.engine
        try:
            replica_builder(e.kind)
        except ValueError as err:
            raise ConfigError(f"cluster.rollout_replicas: {err}") from None
        status = init_ray(c.address)
        engine_gpus = kind.replica_gpus(cfg) if kind.replica_gpus else 0
        from memrl.dist.placement import check_no_shared_gpu, hold_trainer_gpus

        held, trainer_gpus = hold_trainer_gpus(require_ray(), c.placement, c.replica_gpus or engine_gpus,
                                               device.type == "cuda", trainer_ranks)
        pool = RayEnginePool(cfg.model.path, c.rollout_replicas, dtype=cfg.model.dtype,
                             device=cfg.engine.device, weights=merged_state_dict(policy),
                             num_cpus=c.replica_cpus,
                             num_gpus=c.replica_gpus or engine_gpus,
                             kind=e.kind, engine_options={"config": cfg.model_dump(mode="json")},
                             max_batch_size=cfg.engine.max_batch_size, seed=cfg.trainer.seed,
                             retries=cfg.engine.retries, weight_sync=c.weight_sync,
                             sync_backend="nccl" if c.replica_gpus > 0 and device.type == "cuda" else "gloo",
                             call_timeout_s=e.timeout_s, timeout_per_token_s=e.timeout_per_token_s,
                             replace_timeout_s=e.timeout_s)
        check_no_shared_gpu(require_ray(), pool.actors, trainer_gpus)
        pool.held = held  # the trainer's GPUs stay reserved as long as the pool lives
        status += f"; {c.rollout_replicas} rollout replica(s), {trainer_ranks} trainer rank(s)"
        return RolloutEngine(pool, False, pool, status)
    if kind is not None and kind.wraps_policy:
        return _embedded(cfg, kind, policy, device=device, pad_id=pad_id, own=sharded or own_copy)

    built = given if given is not None else build_configured(cfg)
    if resumed:  # it holds model.path's weights (or the caller's): the checkpoint's are newer
        if syncs_adapter(cfg, built):
            asyncio.run(built.update_adapter(*adapter_payload(policy)))
        else:
            asyncio.run(built.update_weights(merged_state_dict(policy)))
    return RolloutEngine(built, False)


def _embedded(cfg: MemRLConfig, kind: Any, policy: Any, *, device: torch.device, pad_id: int,
              own: bool) -> RolloutEngine:
    """An engine in this process on the policy module itself, or (``own``) on a full copy of its weights; on a
    GPU its start line says which decode path it takes."""
    model, shared = policy, True
    if own:
        # a sharded policy cannot generate on rank 0 alone, and an asynchronous run updates the policy while
        # episodes generate: the engine gets its own full copy
        from memrl.models.resolve import load_model

        model = load_model(cfg.model.path, dtype=cfg.model.dtype, device=str(device))
        shared = False
        model.load_state_dict(merged_state_dict(policy), strict=False)
        model.eval()
    eng = kind.build(cfg, model, pad_token_id=pad_id)
    describe = getattr(eng, "describe", None) if device.type == "cuda" else None
    return RolloutEngine(eng, shared, status_line=describe() if describe else "")
