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
import concurrent.futures
import time
from dataclasses import fields
from pathlib import Path
from typing import Any

import torch

from memrl.config import MemRLConfig
from memrl.engines.base import Engine
from memrl.train import state
from memrl.train.assembly import RunParts, as_config, build_run, start_line  # noqa: F401 (as_config re-exported)
from memrl.train.batch import Row, mask_truncated_rows, rows_from_trajectories
from memrl.train.correction import mismatch_warning
from memrl.train.engine_sync import engine_weights
from memrl.train.guards import RolloutTally
from memrl.train.preflight import RESUMABLE_CHANGES, check_config  # noqa: F401 (re-exported)
from memrl.train.rollout import EvalStopped, evaluate_samples
from memrl.train.rollouts import save_step_rollouts
from memrl.train.greedy_baseline import greedy_baseline
from memrl.train.scoring import assign_advantages, unread_turn_rewards, without_non_finite
from memrl.train.signals import StopRequest, TrainingInterrupted
from memrl.train.sources import RolloutSource
from memrl.train.tracking import print_warning
from memrl.types import Trajectory
from memrl.workflows import Workflow


class NonFiniteLossError(RuntimeError):
    """Too many steps in a row produced NaN/inf losses or gradients."""


class Trainer:
    """One RL run: ``Trainer(config).run()``; from Python also with your own workflow object and records.

    ``memrl.Trainer({"model": {"path": "tiny"}}, workflow=MyWorkflow(), train=[{...}, ...])``
    needs no YAML and no import path; ``train``/``eval`` replace what the workflow would load.
    """

    def __init__(self, cfg: MemRLConfig | dict[str, Any] | str | Path | None = None, *, workflow: Any = None,
                 train: list[Any] | None = None, eval: list[Any] | None = None, policy: Any = None,
                 tokenizer: Any = None, engine: Engine | None = None, tracker_console: Any = None) -> None:
        parts = build_run(cfg, workflow=workflow, train=train, eval=eval, policy=policy, tokenizer=tokenizer,
                          engine=engine, console=tracker_console)
        for f in fields(RunParts):  # the parts, as attributes: the loop below reads them by name
            setattr(self, f.name, getattr(parts, f.name))
        self.cfg: MemRLConfig = parts.cfg
        self.source: RolloutSource = parts.source
        self.workflow: Workflow = parts.workflow
        self._turn_note_said = False  # unread_turn_rewards: said once per run
        if self.dist.main:
            self.tracker.console.print(start_line(parts), highlight=False, markup=False, soft_wrap=True)
        if self.status_line:
            self.tracker.console.print(self.status_line)

    @property
    def producer(self) -> Any:
        """The asynchronous producer once started (None in sync mode or before the first step)."""
        return getattr(self.source, "producer", None)

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
        assign_advantages(self.cfg, trajs, rows, self.workflow.state_advantage())

    def update(self, rows: list[Row]) -> dict[str, float]:
        return self.updater(rows, self.step)

    def train_step(self) -> dict[str, float]:
        rows, metrics, tally = self.dist.broadcast(self._collect() if self.dist.main else None)
        if tally.stopped and self.source.redoes_cut_steps:
            raise StepCut(tally.stopped)
        warning = self.idle.record(bool(rows), tally)  # run() stops after trainer.max_failed_steps idle steps
        if warning:
            self.state.idle_steps += 1  # verl/AReaL count steps that update the policy: this one does not
            self.tracker.console.print(f"{warning}; skipping the update (a step that trains nothing does not count "
                                       "toward trainer.total_steps)", style="yellow", highlight=False, markup=False)
            metrics.update({"time/logprob": 0.0, "time/update": 0.0, "time/sync": 0.0, "skipped_updates": 1.0,
                            "data_position": float(self.sampler.position),
                            "idle_steps": float(self.state.idle_steps)})
            self.source.skip(self.step)
            return metrics
        self.source.before_update()
        t2 = time.perf_counter()
        upd = self.update(rows)
        t3 = time.perf_counter()
        self._check_finite(upd)
        metrics.update(upd)
        if self.step == 1 and self.dist.main:  # the engine still has the trainer's weights: only rounding differs
            self._warn_mismatch(upd.get("logprob_mismatch", 0.0))
        metrics["time/update"] = t3 - t2 - upd["time/logprob"]
        tc = self.cfg.trainer
        if self.dist.main and tc.rollouts_every and self.step % tc.rollouts_every == 0:
            save_step_rollouts(self.run_dir, self.step, self.step_trajectories, rows, self.tokenizer,
                               tc.rollouts_per_step, tc.seed)
        t4 = time.perf_counter()
        metrics.update(self.source.after_update(self.step))
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

    def _warn_mismatch(self, mismatch: float) -> None:
        param = next(self.policy.parameters())
        dtype, label = str(param.dtype).removeprefix("torch."), None
        if dtype == "float32" and param.is_cuda and torch.get_float32_matmul_precision() != "highest":
            # TF32 products keep float16's 10-bit mantissa: its rounding is what to expect
            dtype, label = "float16", "float32 with TF32 products"
        line = mismatch_warning(mismatch, dtype, temperature=self.cfg.sampling.temperature or 1.0,
                                engine=self.cfg.engine.kind, label=label)
        if line:
            self.tracker.console.print(f"warning: {line}", style="yellow", highlight=False, markup=False)

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
        trajs, all_trajs, stats = self.source.collect(self.step)
        t1 = time.perf_counter()
        trajs, all_trajs = self._drop_non_finite(trajs, all_trajs)
        metrics: dict[str, float] = {**stats, "failed_episodes": float(self.failed_episodes),
                                     **self.source.metrics(trajs, all_trajs, stats, t1 - t0)}
        metrics["time/rollout"] = t1 - t0
        if self.tally.repeated:
            self.tracker.console.print(f"... and {self.tally.repeated} more episode(s) failed with the same error "
                                       f"(tracebacks in {self.run_dir}/failures)", style="yellow", highlight=False,
                                       markup=False)
        self.tally.dropped_groups = int(stats["dropped_groups"])
        if greedy_baseline(self.cfg):
            metrics["baseline_failed"] = float(self.tally.baseline_failed)
        self._count_too_long(all_trajs, metrics)
        rows = rows_from_trajectories(trajs)
        if rows:
            self.advantages(trajs, rows)
            if self.cfg.algorithm.mask_truncated_completions:
                metrics["masked_truncated"] = mask_truncated_rows(rows, trajs) / len(rows)
            note = None if self._turn_note_said else unread_turn_rewards(self.cfg, trajs)
            if note:
                self._turn_note_said = True
                self.tracker.console.print(note, style="yellow", highlight=False, markup=False)
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
        print_warning(self.tracker.console, self.tally.last_error, f"{len(bad)} episode(s) failed:")
        return without_non_finite(trajs)[0], all_trajs

    def _count_too_long(self, trajs: list[Trajectory], metrics: dict[str, float]) -> None:
        self.tally.prompt_too_long = sum(int(t.metrics.get("prompt_too_long", 0)) for t in trajs)
        metrics["prompt_too_long"] = float(self.tally.prompt_too_long)
        if self.tally.prompt_too_long:
            self.tracker.console.print(
                f"[yellow]{self.tally.prompt_too_long} of {self.tally.attempted} episodes cut before generating: "
                f"the prompt exceeded workflow.options.max_total_tokens={self.cfg.workflow.max_total_tokens}[/yellow]")

    def evaluate(self) -> dict[str, float] | None:
        """``eval/accuracy`` (the mean reward in %) on ``data.eval_file`` and the mean of each metric its episodes
        reported as ``eval/<name>`` (greedy unless trainer.eval.temperature); None when a stop cut it short
        (``trainer.stop_grace_s``): the step is then logged and saved without it."""
        self.policy.eval()
        try:
            return self.source.run(evaluate_samples(self.cfg, self.workflow, self.eval_samples, self.engine,
                                                    self.tokenizer, self.runner.progress, step=self.step))
        except EvalStopped as stopped:
            self.tracker.console.print(f"step {self.step}: eval abandoned ({stopped}); the step is saved without "
                                       "eval/accuracy", style="yellow", highlight=False, markup=False)
            return None

    def engine_weights(self) -> dict[str, torch.Tensor] | None:
        """Merged weights for the engine (rank 0); under FSDP every rank must call this (collective gather)."""
        return engine_weights(self.policy, sharded=self.sharded, main=self.dist.main)

    def save(self) -> Path:
        """Rank 0 writes; under FSDP every rank calls this, since gathering the shards is collective."""
        self.state.data_position = self.sampler.position
        self.state.data_position, self.state.pending = self.source.snapshot(self.sampler.position,
                                                                            list(self.runner.pending))
        self.state.producer = self.source.producer_state()
        self.state.idle_streak = self.idle.streak
        control = self.updater.entropy_control  # (a run resumed without it saves none: no stale state)
        self.state.entropy_control = control.state() if control is not None else None
        return state.save(self.cfg, self.run_dir, self.state, self.policy, self.optimizer, self.scheduler,
                          write=self.dist.main, reference=self.reference)

    # -- the loop ------------------------------------------------------------------------------------
    def run(self) -> dict[str, float]:
        """Train to ``trainer.total_steps``; on SIGINT/SIGTERM save the last finished step and raise
        TrainingInterrupted.

        Called where an event loop is already running (a Jupyter cell, an ``async def``), the run goes to a
        worker thread of its own (the rollouts start event loops of their own) and this call waits for it;
        signals then reach the notebook, not the run: interrupt the kernel to stop waiting."""
        if not _loop_running():
            return self._run()
        with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="memrl-train") as pool:
            return pool.submit(self._run).result()

    def _run(self) -> dict[str, float]:
        t = self.cfg.trainer
        last: dict[str, float] = {}
        if self.resumed_from is not None:
            self.tracker.console.print(f"resumed from step {self.resumed_from} ({self.run_dir})")
        if self.trained_steps >= t.total_steps:  # run() again, or a finished run: say so rather than return {}
            self.tracker.console.print(f"nothing to train: {self.run_dir} has trained {self.trained_steps} of "
                                       f"trainer.total_steps={t.total_steps} steps (raise it to train more)")
        saved = True  # the step we start from is either a checkpoint or step 0 (nothing to save)
        try:
            with StopRequest(t.stop_grace_s) as stop:
                if t.eval.every and self.step == 0 and self.dist.main:  # the curve starts from the untrained policy
                    self._log_eval(0, {})
                while not self._stopping(stop, saved):
                    self.step += 1
                    began, mark = time.perf_counter(), self._mark()
                    try:
                        last = self.train_step()
                    except StepCut as cut:  # the stop's save (next check) keeps the step before, data as then
                        self._drop_cut_step(cut, mark)
                        continue
                    if t.eval.every and self.step % t.eval.every == 0 and self.dist.main:
                        self._log_eval(None, last)
                    last["time/step"] = time.perf_counter() - began  # throughput over steps 2..N leaves warm-up out
                    self.tracker.log(self.step, last)
                    saved = self.step % t.save_every == 0 or self.trained_steps >= t.total_steps
                    if saved and self.trained_steps and (self.dist.main or self.sharded):
                        self.save()  # not a run that never trained: its folder then takes a corrected config
                    self.idle.check()  # every rank holds the same streak: all stop together
        finally:
            self.source.close()
            self.workflow.close()
            self.tracker.close()
        return last

    fit = run  # the names other trainers use (TRL: trainer.train())
    train = run

    def _log_eval(self, step: int | None, into: dict[str, float]) -> None:
        """Evaluate; its metrics go into ``into`` (logged with step 0 itself when ``step`` is 0)."""
        into.update(self.evaluate() or {})
        if step == 0 and into:
            self.tracker.log(0, into)

    def _mark(self) -> tuple[int, list[int], int]:
        """What a cut step must give back: the data position, the pending samples, the failed-episode count."""
        return self.sampler.position, list(self.runner.pending), self.runner.failed_episodes

    def _drop_cut_step(self, cut: StepCut, mark: tuple[int, list[int], int]) -> None:
        """Forget a step the stop cut short: nothing of it was trained, and the data position goes back to where
        the step began, so the resumed run draws its samples again (as if the stop had come before it)."""
        self.tracker.console.print(f"step {self.step}: the stop cut {cut.episodes} episode(s) short "
                                   "(trainer.stop_grace_s); the step is not trained and the resumed run does it again",
                                   style="yellow", highlight=False, markup=False)
        self.step -= 1
        self.sampler.position, self.runner.pending, self.runner.failed_episodes = mark[0], list(mark[1]), mark[2]

    def _stopping(self, stop: StopRequest, saved: bool) -> bool:
        """Whether the run is complete; if rank 0 got a signal, checkpoint the last finished step and raise.

        Ranks move on together: the broadcast is also the barrier after rank 0's eval or save.
        """
        signum = self.dist.broadcast(stop.signum)
        if self.trained_steps >= self.cfg.trainer.total_steps:
            return True
        if signum is None:
            return False
        if not saved and self.trained_steps > 0 and (self.dist.main or self.sharded):
            self.save()
        raise TrainingInterrupted(self.step, signum)


class StepCut(Exception):
    """A stop cut this step's episodes short (``trainer.stop_grace_s``): it must not be trained or saved."""

    def __init__(self, episodes: int) -> None:
        super().__init__(f"{episodes} episode(s) cut short by the stop")
        self.episodes = episodes


def _loop_running() -> bool:
    """Whether this thread is inside a running event loop (a notebook cell, an ``async def``)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
