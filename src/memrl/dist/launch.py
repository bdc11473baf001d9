"""``memrl train`` with ``cluster.trainers > 1``: one process per rank on this machine.

Under ``torchrun`` (WORLD_SIZE set) each process is already a rank and this
just runs the trainer. Otherwise it spawns the ranks itself, gloo on CPU, NCCL
with CUDA, rank 0 driving rollouts and writing metrics and checkpoints.
"""

from __future__ import annotations

import os
from typing import Any

from memrl.config import MemRLConfig


def _rank_main(rank: int, raw: dict[str, Any], world: int, port: int, result: Any) -> None:
    os.environ.update({"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world),
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    import torch

    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    from memrl.train.trainer import Trainer

    trainer = Trainer(MemRLConfig.model_validate(raw))
    try:
        last = trainer.run()
        if rank == 0:
            result.update(last)
    finally:
        trainer.dist.close()


def train(cfg: MemRLConfig) -> tuple[int, dict[str, float]]:
    """Train with ``cfg``; returns (last step, last metrics)."""
    world = cfg.cluster.trainers
    if world <= 1 or "WORLD_SIZE" in os.environ:
        from memrl.train.trainer import Trainer

        trainer = Trainer(cfg)
        try:
            last = trainer.run()
            return trainer.step, last
        finally:
            trainer.dist.close()
    import torch.multiprocessing as mp

    from memrl.dist.ddp import free_port

    with mp.Manager() as manager:
        result = manager.dict()
        mp.start_processes(_rank_main, args=(cfg.model_dump(mode="json"), world, free_port(), result),
                           nprocs=world, start_method="spawn")
        last = dict(result)
    return cfg.trainer.total_steps, last
