"""The RL loop for multi-conversation agents.

Per step: take prompts from a resumable order, run ``algorithm.n`` episodes of
each through the workflow and engine concurrently (DAPO dynamic sampling
optional; ``train.rollout``), score, compute one advantage per episode within its
group and broadcast it to every generated token of every conversation of the
episode (``train.scoring``), then PPO epochs over mini-batches (``train.update``),
then weight sync (``train.engine_sync``). Checkpoints and resume: ``train.state``.

With the in-process HF engine the engine generates with the policy module
itself, so weight sync is free; other engines receive merged weights through
``update_weights``.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

from memrl.config import ConfigError, MemRLConfig
from memrl.dist.ddp import DistContext
from memrl.engines.base import Engine
from memrl.train import checkpoint, state
from memrl.train.async_rollout import AsyncRollout, async_step_metrics
from memrl.train.batch import Row, rows_from_trajectories
from memrl.train.engine_sync import WeightSync, engine_weights
from memrl.train.guards import IdleStreak, RolloutTally
from memrl.train.policy import Reference, build_policy
from memrl.train.preflight import RESUMABLE_CHANGES, check_config  # noqa: F401 (re-exported)
from memrl.train.preflight import check_dataset_size
from memrl.train.rollout import RolloutRunner, evaluate_samples, rollout_metrics
from memrl.train.rollouts import save_step_rollouts
from memrl.train.sampler import ResumableSampler
from memrl.train.scoring import assign_advantages, without_non_finite
from memrl.train.setup import build_engine, build_optimizer, seed_everything
from memrl.train.signals import StopRequest, TrainingInterrupted
from memrl.train.tracking import Tracker
from memrl.train.update import PolicyUpdate
from memrl.types import Trajectory
from memrl.workflows import Workflow
from memrl.workflows.registry import as_workflow


class _QuietTracker:
    """Ranks other than 0 log nothing (rank 0 writes metrics and checkpoints)."""

    def __init__(self) -> None:
        from rich.console import Console

        self.console = Console(quiet=True)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        return None

    def close(self) -> None:
        return None


class NonFiniteLossError(RuntimeError):
    """Too many steps in a row produced NaN/inf losses or gradients."""


def as_config(config: Any) -> MemRLConfig:
    """A MemRLConfig from itself, a dict of sections, or a YAML path."""
    if isinstance(config, MemRLConfig):
        return config
    if isinstance(config, (str, Path)):
        from memrl.config import load_config

        return load_config(config)
    return MemRLConfig.model_validate(dict(config or {}))


class Trainer:
    """One RL run: ``Trainer(config).run()``; from Python also with your own workflow object and records.

    ``memrl.Trainer({"model": {"path": "tiny"}}, workflow=MyWorkflow(), train=[{...}, ...])``
    needs no YAML and no import path; ``train``/``eval`` replace what the workflow would load.
    """

    def __init__(self, cfg: MemRLConfig | dict[str, Any] | str | Path | None = None, *, workflow: Any = None,
                 train: list[Any] | None = None, eval: list[Any] | None = None, policy: Any = None,
                 tokenizer: Any = None, engine: Engine | None = None, tracker_console: Any = None) -> None:
        cfg = as_config(cfg)
        wf = as_workflow(workflow) if workflow is not None else cfg.workflow.build()
        check_config(cfg, wf, has_samples=train is not None)
        self.cfg = cfg
        self.dist = DistContext.from_env(cfg.cluster.backend, group_of_one=cfg.cluster.strategy == "fsdp")
        self.run_dir = Path(cfg.trainer.output_dir)
        from rich.console import Console

        self.console = tracker_console or Console(stderr=True, width=None if sys.stderr.isatty() else 160)
        found = None
        if self.dist.main:  # before any model loads: a damaged run fails (or falls back) in seconds
            found = state.choose_checkpoint(cfg, self.run_dir, lambda msg: self.console.print(
                f"[yellow]warning:[/yellow] {msg}", highlight=False))
        # the others wait until rank 0 has checked the config and chosen the checkpoint, then use the same one
        found = self.dist.broadcast(found)
        seed_everything(cfg.trainer.seed)
        from memrl.models.resolve import load_tokenizer

        self.tokenizer = tokenizer or load_tokenizer(cfg.model.tokenizer or cfg.model.path)
        device = cfg.engine.device
        if self.dist.active and torch.cuda.is_available():
            device = f"cuda:{int(os.environ.get('LOCAL_RANK', self.dist.rank))}"
        self.policy = policy if policy is not None else build_policy(cfg, device=device)
        self.dist.sync_params(self.policy)
        self.device = next(self.policy.parameters()).device
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self.reference = Reference(self.policy, needed=cfg.algorithm.kl_coef > 0)  # initial weights, not resumed
        self.state = state.RunState()
        self.idle = IdleStreak(cfg)
        self.workflow: Workflow = wf.setup(cfg)
        self._load_samples(train, eval)
        self.sampler = ResumableSampler(len(self.samples), cfg.trainer.seed)
        self.runner = RolloutRunner(cfg, self.workflow, self.samples, self.sampler, self.tokenizer,
                                    lambda msg: self.tracker.console.print(msg, highlight=False))
        if found is not None:  # weights first: engines built next start from them
            checkpoint.load_weights(self.policy, found[1])
        self.sharded = cfg.cluster.strategy == "fsdp" and torch.distributed.is_initialized()
        self.pool: Any = None
        if not self.dist.main:
            self.engine, self.shared_engine = None, True  # only rank 0 generates
        else:
            built = build_engine(cfg, self.policy, engine, resumed=found is not None, device=self.device,
                                 pad_id=self.pad_id, sharded=self.sharded, trainer_ranks=self.dist.world,
                                 own_copy=cfg.trainer.mode == "async")
            self.engine, self.shared_engine, self.pool = built.engine, built.shared, built.pool
            self.status_line = built.status_line
        self.runner.engine = self.engine
        # every rank must agree: under FSDP gathering the engine's weights is collective
        self.sync_engine = bool(self.dist.broadcast(not self.shared_engine))
        if self.sharded:
            from memrl.dist.fsdp import shard_model

            shard_model(self.policy)
            if self.reference.frozen is not None:
                shard_model(self.reference.frozen)
        self.optimizer, self.scheduler = build_optimizer(cfg, self.policy)
        if found is not None:
            self.state = state.restore(cfg, found[1], self.policy, self.optimizer, self.scheduler)
            self.sampler.position = self.state.data_position
            self.idle.streak = self.state.idle_streak
            self.runner.pending = list(self.state.pending)  # an asynchronous run's samples not trained on yet
        self.producer: AsyncRollout | None = None  # trainer.mode=async: started by the first step
        self.updater = PolicyUpdate(cfg, self.policy, self.optimizer, self.scheduler, self.reference, self.dist,
                                    sharded=self.sharded, pad_id=self.pad_id, device=self.device)
        self.weight_sync = WeightSync(cfg, self.engine, self.pool, self.policy, push=self.sync_engine,
                                      sharded=self.sharded, main=self.dist.main)
        self.tracker: Any = Tracker(self.run_dir, self.step, cfg.trainer.tensorboard, cfg.trainer.wandb_project,
                                    cfg.model_dump(mode="json"), console=self.console,
                                    total_steps=cfg.trainer.total_steps) \
            if self.dist.main else _QuietTracker()
        if self.status_line:
            self.tracker.console.print(self.status_line)
        self.resumed_from = found[0] if found else None

    status_line = ""

    def _load_samples(self, train: list[Any] | None, eval: list[Any] | None) -> None:
        """The training and held-out samples: given ones, else the workflow's own."""
        cfg, wf = self.cfg, self.workflow
        self.samples = list(train) if train is not None else wf.load_samples("train")
        check_dataset_size(cfg, len(self.samples), wf.data_source(cfg, "train"))
        wf.check_samples(cfg, self.tokenizer, self.samples, lambda msg: self.console.print(
            f"[yellow]warning:[/yellow] {msg}", highlight=False))
        held_out = list(eval) if eval is not None else wf.load_samples("eval")
        self.eval_samples = held_out[: cfg.trainer.eval_samples]
        if cfg.trainer.eval_every and not self.eval_samples:
            raise ConfigError("trainer.eval_every > 0 but there are no eval samples (data.eval_file, or eval=[...])")

    # -- counters (kept in self.state so a checkpoint holds them) ------------------------------------
    @property
    def step(self) -> int:
        return self.state.step

    @step.setter
    def step(self, value: int) -> None:
        self.state.step = value

    @property
    def trained_steps(self) -> int:
        """Steps that updated the policy (or tried to): what ``trainer.total_steps`` counts."""
        return self.state.step - self.state.idle_steps

    @property
    def nan_streak(self) -> int:
        return self.state.nan_streak

    @property
    def failed_episodes(self) -> int:
        return self.runner.failed_episodes

    @property
    def tally(self) -> RolloutTally:
        return self.runner.tally

    # -- the parts of a step -------------------------------------------------------------------------
    def rollout(self) -> tuple[list[Trajectory], list[Trajectory], dict[str, float]]:
        """(episodes to train on, every episode generated, stats); see :meth:`RolloutRunner.rollout`."""
        self.policy.eval()
        return self.runner.rollout(self.step)

    def advantages(self, trajs: list[Trajectory], rows: list[Row]) -> None:
        assign_advantages(self.cfg, trajs, rows)

    def update(self, rows: list[Row]) -> dict[str, float]:
        return self.updater(rows, self.step)

    def train_step(self) -> dict[str, float]:
        rows, metrics, tally = self.dist.broadcast(self._collect() if self.dist.main else None)
        warning = self.idle.record(bool(rows), tally)  # run() stops after trainer.max_failed_steps idle steps
        if warning:
            self.state.idle_steps += 1  # verl/AReaL count steps that update the policy: this one does not
            self.tracker.console.print(f"[yellow]{warning}; skipping the update (a step that trains nothing does "
                                       "not count toward trainer.total_steps)[/yellow]", highlight=False)
            metrics.update({"time/logprob": 0.0, "time/update": 0.0, "time/sync": 0.0, "skipped_updates": 1.0,
                            "data_position": float(self.sampler.position),
                            "idle_steps": float(self.state.idle_steps)})
            if self.producer is not None:  # the version moves on even so: the producer's bound opens
                self.producer.publish(self.step, _nothing)
            return metrics
        if self.producer is None:
            self.weight_sync.before_update()
        t2 = time.perf_counter()
        upd = self.update(rows)
        t3 = time.perf_counter()
        self._check_finite(upd)
        metrics.update(upd)
        metrics["time/update"] = t3 - t2 - upd["time/logprob"]
        tc = self.cfg.trainer
        if self.dist.main and tc.rollouts_every and self.step % tc.rollouts_every == 0:
            save_step_rollouts(self.run_dir, self.step, self.step_trajectories, rows, self.tokenizer,
                               tc.rollouts_per_step, tc.seed)
        t4 = time.perf_counter()
        if self.producer is None:
            metrics.update(self.weight_sync.after_update())
        else:  # generation goes on; it pauses only while the weights are pushed
            weights = self.weight_sync.gather()
            metrics["async/sync_hold_s"] = self.producer.publish(
                self.step, lambda: self.weight_sync.push_weights(weights))
            metrics.update(self.weight_sync.engine_stats())
        metrics["time/sync"] = time.perf_counter() - t4
        if self.device.type == "cuda":  # peak of this step (rollout, update, sync) on this rank's GPU
            metrics["gpu_peak_gib"] = torch.cuda.max_memory_allocated(self.device) / 2**30
            torch.cuda.reset_peak_memory_stats(self.device)
        if self.state.idle_steps:  # a run with idle steps reaches total_steps at a later step number
            metrics["idle_steps"] = float(self.state.idle_steps)
        metrics["train_rows"] = float(len(rows))
        metrics["train_tokens"] = float(sum(r.num_response for r in rows))
        metrics["data_position"] = float(self.sampler.position)
        return metrics

    def _check_finite(self, upd: dict[str, float]) -> None:
        """Count steps whose every mini-batch was dropped for a non-finite loss; stop after too many."""
        if upd["skipped_updates"] < self.cfg.trainer.mini_batches * self.cfg.algorithm.ppo_epochs:
            self.state.nan_streak = 0
            return
        self.state.nan_streak += 1
        self.tracker.console.print(f"[yellow]non-finite loss or gradient: step {self.step} skipped "
                                   f"({self.nan_streak} in a row)[/yellow]")
        if self.nan_streak >= self.cfg.trainer.max_nan_steps:
            raise NonFiniteLossError(f"{self.nan_streak} steps in a row had non-finite losses; last good "
                                     f"checkpoint is in {self.run_dir}/checkpoints. Lower trainer.lr or check "
                                     "the data")

    def _collect(self) -> tuple[list[Row], dict[str, float], RolloutTally]:
        """Rank 0: rollout, rewards, advantages -> (rows to train on, metrics so far, what happened to episodes)."""
        self.runner.tally = RolloutTally()
        t0 = time.perf_counter()
        if self.cfg.trainer.mode == "async":
            if self.producer is None:
                self.producer = AsyncRollout(self.cfg, self.runner, self.engine, version=self.step - 1,
                                             pending=self.runner.pending)
                self.runner.pending = []
            trajs, all_trajs, stats = self.producer.take()
        else:
            trajs, all_trajs, stats = self.rollout()
        t1 = time.perf_counter()
        trajs, all_trajs = self._drop_non_finite(trajs, all_trajs)
        metrics: dict[str, float] = {**stats, "failed_episodes": float(self.failed_episodes)}
        if self.producer is not None:  # reward of the episodes trained (AReaL); reward_finished of those generated
            metrics.update(async_step_metrics(trajs, all_trajs, stats["async/span_s"]))
        else:
            metrics.update(rollout_metrics(all_trajs, t1 - t0))
        metrics["time/rollout"] = t1 - t0
        self.tally.dropped_groups = int(stats["dropped_groups"])
        self._count_too_long(all_trajs, metrics)
        rows = rows_from_trajectories(trajs)
        if rows:
            self.advantages(trajs, rows)
        self.step_trajectories = trajs  # rows[i].episode indexes these (for the rollout records)
        return rows, metrics, self.tally

    def _drop_non_finite(self, trajs: list[Trajectory],
                         all_trajs: list[Trajectory]) -> tuple[list[Trajectory], list[Trajectory]]:
        """Episodes whose reward is NaN/inf count as failed: not trained on, not averaged, not written."""
        all_trajs, bad = without_non_finite(all_trajs)
        if not bad:
            return trajs, all_trajs
        self.runner.failed_episodes += len(bad)
        self.tally.failed += len(bad)
        self.tally.last_error = (f"workflow {self.workflow.label!r} returned reward {bad[0].reward} for sample "
                                 f"{bad[0].sample_id}: a reward must be a finite number")
        self.tracker.console.print(f"[yellow]{len(bad)} episode(s) failed:[/yellow] {self.tally.last_error}",
                                   highlight=False)
        return without_non_finite(trajs)[0], all_trajs

    def _count_too_long(self, trajs: list[Trajectory], metrics: dict[str, float]) -> None:
        self.tally.prompt_too_long = sum(int(t.metrics.get("prompt_too_long", 0)) for t in trajs)
        metrics["prompt_too_long"] = float(self.tally.prompt_too_long)
        if self.tally.prompt_too_long:
            self.tracker.console.print(
                f"[yellow]{self.tally.prompt_too_long} of {self.tally.attempted} episodes cut before generating: "
                f"the prompt exceeded workflow.max_total_tokens={self.cfg.workflow.max_total_tokens}[/yellow]")

    def evaluate(self) -> float:
        """Accuracy (%) of the configured reward on ``data.eval_file`` (greedy unless trainer.eval_temperature)."""
        self.policy.eval()
        run = asyncio.run if self.producer is None else self.producer.run  # the engine lives on the producer's loop
        return run(evaluate_samples(self.cfg, self.workflow, self.eval_samples, self.engine, self.tokenizer))

    def engine_weights(self) -> dict[str, torch.Tensor] | None:
        """Merged weights for the engine (rank 0); under FSDP every rank must call this (collective gather)."""
        return engine_weights(self.policy, sharded=self.sharded, main=self.dist.main)

    def save(self) -> Path:
        """Rank 0 writes; under FSDP every rank calls this, since gathering the shards is collective."""
        self.state.data_position = self.sampler.position
        self.state.pending = list(self.runner.pending)
        if self.producer is not None:
            self.state.data_position, self.state.pending = self.producer.snapshot()
        self.state.idle_streak = self.idle.streak
        return state.save(self.cfg, self.run_dir, self.state, self.policy, self.optimizer, self.scheduler,
                          write=self.dist.main)

    # -- the loop ------------------------------------------------------------------------------------
    def run(self) -> dict[str, float]:
        """Train to ``trainer.total_steps``; on SIGINT/SIGTERM save the last finished step and raise TrainingInterrupted."""
        t = self.cfg.trainer
        last: dict[str, float] = {}
        if self.resumed_from is not None:
            self.tracker.console.print(f"resumed from step {self.resumed_from} ({self.run_dir})")
        saved = True  # the step we start from is either a checkpoint or step 0 (nothing to save)
        try:
            with StopRequest() as stop:
                if t.eval_every and self.step == 0 and self.dist.main:  # the curve starts from the untrained policy
                    self.tracker.log(0, {"eval/accuracy": self.evaluate()})
                while not self._stopping(stop, saved):
                    self.step += 1
                    last = self.train_step()
                    if t.eval_every and self.step % t.eval_every == 0 and self.dist.main:
                        last["eval/accuracy"] = self.evaluate()
                    self.tracker.log(self.step, last)
                    saved = self.step % t.save_every == 0 or self.trained_steps >= t.total_steps
                    if saved and (self.dist.main or self.sharded):
                        self.save()
                    self.idle.check()  # every rank holds the same streak: all stop together
        finally:
            if self.producer is not None:
                self.producer.close()
                self.producer = None
            self.tracker.close()
        return last

    fit = run  # the name other trainers use

    def _stopping(self, stop: StopRequest, saved: bool) -> bool:
        """Whether the run is complete; if rank 0 got a signal, checkpoint the last finished step and raise.

        Ranks move on together: the broadcast is also the barrier after rank 0's eval or save.
        """
        signum = self.dist.broadcast(stop.signum)
        if self.trained_steps >= self.cfg.trainer.total_steps:
            return True
        if signum is None:
            return False
        if not saved and self.step > 0 and (self.dist.main or self.sharded):
            self.save()
        raise TrainingInterrupted(self.step, signum)


async def _nothing() -> None:
    return None
