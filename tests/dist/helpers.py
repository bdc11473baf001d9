"""Spawn targets for the multi-process tests (must be importable by the child processes)."""

from __future__ import annotations

import os
from typing import Any


def rank_main(rank: int, raw: dict[str, Any], world: int, port: int, scripted: bool) -> None:
    os.environ.update({"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world),
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    import torch

    torch.set_num_threads(1)
    from memrl.config import MemRLConfig
    from memrl.models.resolve import load_tokenizer
    from memrl.train.trainer import Trainer
    from tests.train.helpers import coin_engine

    engine = coin_engine(load_tokenizer("tiny"), seed=5) if scripted else None
    trainer = Trainer(MemRLConfig.model_validate(raw), engine=engine)
    try:
        trainer.run()
    finally:
        trainer.dist.close()
    from memrl.dist.ddp import exit_rank_cleanly

    exit_rank_cleanly()  # as memrl's own launcher does
