"""``memrl train`` with ``cluster.trainers > 1``: one process per rank on this machine.

Under ``torchrun`` (WORLD_SIZE set) each process is already a rank and this
just runs the trainer. Otherwise it spawns the ranks itself, gloo on CPU, NCCL
with CUDA, rank 0 driving rollouts and writing metrics and checkpoints.

Spawned ranks leave the terminal's process group, so Ctrl-C reaches only this
parent, which forwards each SIGINT/SIGTERM once to every rank: the ranks agree
on the step to stop at, save it, and the parent reports the interruption as a
single process would. A second signal is forwarded too (each rank exits at once),
and ranks still alive :data:`HARD_STOP_S` later are killed: a rank stuck inside a
collective (a peer that stopped answering) cannot run its signal handler. Errors that
end a run for a known reason (a bad checkpoint, an engine that died, steps with
nothing to train) travel back from rank 0 as themselves rather than as a child's
traceback, and a rank that died is named in one line (:class:`RankDiedError`).

Rank 0's answer comes back through a file, not a ``multiprocessing.Manager``: a
manager is a forked server process that inherited the run folder's lock, and
outlived a SIGKILLed parent holding it, so the run could never be resumed.
"""

from __future__ import annotations

import json
import os
import signal
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from memrl.config import MemRLConfig

HARD_STOP_S = 10.0  # after a second signal, how long ranks get to exit before they are killed
PARENT_POLL_S = 0.5  # how often a rank checks that its launcher is alive


class RankDiedError(RuntimeError):
    """A trainer rank ended without finishing (killed, crashed): the others were stopped with it."""


def _relayed() -> dict[str, type[Exception]]:
    """Exceptions rank 0 reports to the parent by name and message (their constructors take one message)."""
    from memrl.config import ConfigError
    from memrl.engines.base import EngineDeadError
    from memrl.train.checkpoint import CheckpointError
    from memrl.train.guards import NothingTrainableError
    from memrl.train.trainer import NonFiniteLossError

    return {c.__name__: c for c in (ConfigError, CheckpointError, EngineDeadError, NothingTrainableError,
                                    NonFiniteLossError)}


def _report(path: str, answer: dict[str, Any]) -> None:
    """Rank 0's answer to the parent, written whole (a rename) so the parent never reads half of it."""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(answer, fh)
    os.replace(tmp, path)


def _watch_parent(parent: int) -> None:
    """One SIGTERM when the launcher dies (the rank finishes its step and saves it), instead of torch's
    parent-death SIGINT: the kernel sends that again each time a thread of the dying parent exits, and a
    second signal means "exit at once, without a checkpoint"."""
    from torch.multiprocessing import _prctl_pr_set_pdeathsig

    _prctl_pr_set_pdeathsig(0)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="memrl-parent-watch", daemon=True).start()


def _rank_main(rank: int, raw: dict[str, Any], world: int, port: int, result: str, parent: int) -> None:
    os.setpgrp()  # out of the terminal's group: signals come once, forwarded by the parent
    _watch_parent(parent)
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
                _report(result, {"last": last})
        finally:
            trainer.dist.close()
    except TrainingInterrupted as stop:
        if rank == 0:
            _report(result, {"interrupted": [stop.step, stop.signum]})
    except tuple(_relayed().values()) as err:
        if rank == 0:
            _report(result, {"error": [type(err).__name__, str(err)]})
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
    with tempfile.TemporaryDirectory(prefix="memrl-ranks-") as tmp:
        result = os.path.join(tmp, "rank0.json")
        ctx = mp.start_processes(_rank_main, args=(cfg.model_dump(mode="json"), world, free_port(), result,
                                                   os.getpid()),
                                 nprocs=world, start_method="spawn", join=False)
        signals: list[int] = []
        previous = {sig: signal.signal(sig, _forwarder(ctx, signals)) for sig in HANDLED}
        try:
            while not ctx.join():
                pass
        except Exception as exc:
            raise _failure(exc, _read(result), signals) from None
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        answer = _read(result)
    if "interrupted" in answer:
        raise TrainingInterrupted(*answer["interrupted"])
    return cfg.trainer.total_steps, answer.get("last", {})


def _read(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return {}


def _forwarder(ctx: Any, signals: list[int]) -> Any:
    """The parent's SIGINT/SIGTERM handler: forward to every rank; from the second on, kill what is left later."""
    def alive() -> list[int]:
        return [p.pid for p in ctx.processes if p.is_alive() and p.pid is not None]

    def kill_stragglers() -> None:
        for pid in alive():
            os.kill(pid, signal.SIGKILL)

    def forward(signum: int, frame: Any) -> None:
        signals.append(signum)
        for pid in alive():
            os.kill(pid, signum)
        if len(signals) == 2:
            timer = threading.Timer(HARD_STOP_S, kill_stragglers)
            timer.daemon = True
            timer.start()

    return forward


def _failure(exc: Exception, answer: dict[str, Any], signals: list[int]) -> BaseException:
    """What the parent raises when a rank failed: rank 0's own error, the second signal's exit, or one line."""
    from torch.multiprocessing import ProcessExitedException

    if "error" in answer:
        name, message = answer["error"]
        return _relayed()[name](message)
    if len(signals) >= 2:  # the ranks exited at once, as asked; each said so
        return SystemExit(128 + signals[-1])
    if isinstance(exc, ProcessExitedException):
        how = (f"was killed by {exc.signal_name}" if getattr(exc, "signal_name", None)
               else f"exited with code {exc.exit_code}")
        return RankDiedError(f"trainer rank {exc.error_index} {how}; the other ranks were stopped (checkpoints "
                             "saved so far are kept: re-run the same command to resume)")
    return exc
