"""``memrl train`` with ``cluster.trainers > 1``: one process per rank on this machine.

Under ``torchrun`` (WORLD_SIZE set) each process is already a rank and this
just runs the trainer. Otherwise it spawns the ranks itself, gloo on CPU, NCCL
with CUDA, rank 0 driving rollouts and writing metrics and checkpoints.

Spawned ranks leave the terminal's process group, so Ctrl-C reaches only this
parent, which forwards each SIGINT/SIGTERM once to every rank: the ranks agree
on the step to stop at, save it, and the parent reports the interruption as a
single process would. Errors that end a run for a known reason (a bad
checkpoint, an engine that died, steps with nothing to train) travel back from
rank 0 as themselves rather than as a child's traceback.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from memrl.config import MemRLConfig


def _relayed() -> dict[str, type[Exception]]:
    """Exceptions rank 0 reports to the parent by name and message (their constructors take one message)."""
    from memrl.config import ConfigError
    from memrl.engines.base import EngineDeadError
    from memrl.train.checkpoint import CheckpointError
    from memrl.train.guards import NothingTrainableError
    from memrl.train.trainer import NonFiniteLossError

    return {c.__name__: c for c in (ConfigError, CheckpointError, EngineDeadError, NothingTrainableError,
                                    NonFiniteLossError)}


def _rank_main(rank: int, raw: dict[str, Any], world: int, port: int, result: Any) -> None:
    os.setpgrp()  # out of the terminal's group: signals come once, forwarded by the parent
    os.environ.update({"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world),
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    import torch

    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    from memrl.train.signals import TrainingInterrupted
    from memrl.train.trainer import Trainer

    try:
        trainer = Trainer(MemRLConfig.model_validate(raw))
        try:
            last = trainer.run()
            if rank == 0:
                result.update(last)
        finally:
            trainer.dist.close()
    except TrainingInterrupted as stop:
        if rank == 0:
            result["__interrupted__"] = (stop.step, stop.signum)
    except tuple(_relayed().values()) as err:
        if rank == 0:
            result["__error__"] = (type(err).__name__, str(err))
        raise
    from memrl.dist.ddp import exit_rank_cleanly

    exit_rank_cleanly()  # finished or interrupted and saved: nothing is left to tear down that can fail


def train(cfg: MemRLConfig) -> tuple[int, dict[str, float]]:
    """Train with ``cfg``; returns (last step, last metrics).

    Raises RunFinished (before loading anything) when the run's newest intact
    checkpoint is already at ``trainer.total_steps``.
    """
    from memrl.train import checkpoint
    from memrl.train.guards import RunFinished

    done = checkpoint.finished(Path(cfg.trainer.output_dir), cfg.trainer.total_steps)
    if done is not None:
        raise RunFinished(done, cfg.trainer.total_steps)
    world = cfg.cluster.trainers
    if world <= 1 or "WORLD_SIZE" in os.environ:
        from memrl.train.trainer import Trainer

        trainer = Trainer(cfg)
        try:
            last = trainer.run()
            return trainer.step, last
        finally:
            trainer.dist.close()
    return _spawn(cfg, world)


def _spawn(cfg: MemRLConfig, world: int) -> tuple[int, dict[str, float]]:
    import torch.multiprocessing as mp

    from memrl.dist.ddp import free_port
    from memrl.train.preflight import check_config
    from memrl.train.signals import HANDLED, TrainingInterrupted

    check_config(cfg)  # one line here rather than a traceback from every rank
    with mp.Manager() as manager:
        result = manager.dict()
        ctx = mp.start_processes(_rank_main, args=(cfg.model_dump(mode="json"), world, free_port(), result),
                                 nprocs=world, start_method="spawn", join=False)

        def forward(signum: int, frame: Any) -> None:
            for p in ctx.processes:
                if p.is_alive() and p.pid is not None:
                    os.kill(p.pid, signum)

        previous = {sig: signal.signal(sig, forward) for sig in HANDLED}
        try:
            while not ctx.join():
                pass
        except Exception:
            if "__error__" in result:
                name, message = result["__error__"]
                raise _relayed()[name](message) from None
            raise
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        last = dict(result)
    if "__interrupted__" in last:
        raise TrainingInterrupted(*last["__interrupted__"])
    return cfg.trainer.total_steps, last
