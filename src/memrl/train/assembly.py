"""Building a run, in the order it must happen: :func:`build_run` returns every part the loop uses.

The order is the point: the checkpoint is chosen before any model loads (a damaged run
fails in seconds); the policy loads before the engine (an engine of its own starts from
the policy's weights, the checkpoint's when resuming); the optimizer exists before the
state it restores; the rollout source needs the engine and the weight sync; the tracker
comes last, at the step the run resumes from.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from memrl.config import ConfigError, MemRLConfig
from memrl.dist.ddp import DistContext
from memrl.engines.base import Engine
from memrl.io.console import log_console
from memrl.train import state
from memrl.train.arguments import as_config, checked_records, run_workflow  # noqa: F401 (as_config: its old home)
from memrl.train.engine_sync import WeightSync
from memrl.train.guards import IdleStreak
from memrl.models.resolve import quiet_hub_progress
from memrl.train.policy import Reference, build_policy
from memrl.train.preflight import check_config, check_dataset_size
from memrl.train.rollout import RolloutRunner
from memrl.train.rollouts import drop_rollouts_after
from memrl.train.sampler import ResumableSampler
from memrl.train.setup import build_engine, build_optimizer, seed_everything
from memrl.train.sources import RolloutSource, rollout_source
from memrl.train.tracking import Tracker, print_warning
from memrl.train.teacher import build_teacher
from memrl.train.update import PolicyUpdate
from memrl.workflows import samples_of
from memrl.workflows.api import Workflow


_BUILDING = threading.RLock()  # see build_run


class QuietTracker:
    """Ranks other than 0 log nothing (rank 0 writes metrics and checkpoints)."""

    def __init__(self) -> None:
        from rich.console import Console

        self.console = Console(quiet=True)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        return None

    def phase(self, text: str) -> None:
        return None

    def close(self) -> None:
        return None


@dataclass
class RunParts:
    """Everything a training run holds; :class:`memrl.train.trainer.Trainer` is these plus the loop."""

    cfg: MemRLConfig
    dist: DistContext
    run_dir: Path
    console: Any
    resumed_from: int | None
    tokenizer: Any
    policy: Any
    device: torch.device
    pad_id: int
    reference: Reference
    workflow: Workflow
    samples: list[Any]
    eval_samples: list[Any]
    sampler: ResumableSampler
    runner: RolloutRunner
    engine: Engine | None
    shared_engine: bool
    pool: Any
    status_line: str
    sync_engine: bool
    sharded: bool
    optimizer: torch.optim.Optimizer
    scheduler: Any
    state: state.RunState
    idle: IdleStreak
    updater: PolicyUpdate
    weight_sync: WeightSync
    source: RolloutSource
    tracker: Any


def start_line(p: RunParts) -> str:
    """What the run trains, on what, from which data, and where it writes: printed before the first step,
    which with a real model can take minutes."""
    cfg, t = p.cfg, p.cfg.trainer
    size = f"{_count(sum(w.numel() for w in p.policy.parameters()))} parameters"
    if cfg.lora.enabled:
        trained = sum(w.numel() for w in p.policy.parameters() if w.requires_grad)
        size += f", LoRA r={cfg.lora.r}: {_count(trained)} trained"
    data = f"{len(p.samples):,} training samples" + (f", {len(p.eval_samples):,} held out" if p.eval_samples else "")
    steps = f"{t.total_steps} step{'s' if t.total_steps != 1 else ''}"
    mode = "" if t.mode == "sync" else f", {t.mode}"
    return (f"memrl train: {cfg.model.path} ({size}) on {p.device}; workflow {p.workflow.label}, {data}; engine "
            f"{cfg.engine.kind}; {steps} x {t.prompts_per_step} prompts x {cfg.algorithm.n} episodes{mode}; "
            f"run folder {p.run_dir}")


def _count(n: int) -> str:
    return f"{n / 1e9:.1f}B" if n >= 1e9 else f"{n / 1e6:.1f}M" if n >= 1e5 else f"{n:,}"


def load_data(cfg: MemRLConfig, wf: Workflow, tokenizer: Any, train: list[Any] | None, eval: list[Any] | None,
              warn: Callable[[str], None]) -> tuple[list[Any], list[Any]]:
    """The training and held-out samples: given ones, else the workflow's own; checked before any episode."""
    samples = list(train) if train is not None else samples_of(wf, "train")
    check_dataset_size(cfg, len(samples), "the train= samples" if train is not None else wf.data_source(cfg, "train"))
    wf.check_samples(cfg, tokenizer, samples, warn)
    held_out = (list(eval) if eval is not None else _eval_samples(cfg, wf))[: cfg.trainer.eval.samples]
    if cfg.trainer.eval.every and not held_out:
        raise ConfigError("trainer.eval.every > 0 but there are no eval samples (data.eval_file, or eval=[...])")
    return samples, held_out


def _eval_samples(cfg: MemRLConfig, wf: Workflow) -> list[Any]:
    """The workflow's held-out samples; a run that never evaluates (trainer.eval.every 0) does without them
    when they cannot load (a custom domain with no eval split), instead of failing for a split it does not use."""
    try:
        return samples_of(wf, "eval")
    except (ValueError, FileNotFoundError):
        if cfg.trainer.eval.every:
            raise
        return []


def _model(cfg: MemRLConfig, dist: DistContext, tokenizer: Any, policy: Any) -> tuple[Any, Any, torch.device]:
    from memrl.models.resolve import config_tokenizer

    tokenizer = tokenizer or config_tokenizer(cfg.model)
    device = cfg.engine.device
    if dist.active and torch.cuda.is_available():
        device = f"cuda:{int(os.environ.get('LOCAL_RANK', dist.rank))}"
    policy = policy if policy is not None else build_policy(cfg, device=device)
    dist.sync_params(policy)
    return tokenizer, policy, next(policy.parameters()).device


def _engine(cfg: MemRLConfig, dist: DistContext, policy: Any, given: Engine | None, *, resumed: bool,
            device: torch.device, pad_id: int, sharded: bool) -> tuple[Engine | None, bool, Any, str]:
    """(engine, shares the policy module, Ray pool, status line); only rank 0 generates."""
    if not dist.main:
        return None, True, None, ""
    built = build_engine(cfg, policy, given, resumed=resumed, device=device, pad_id=pad_id, sharded=sharded,
                         trainer_ranks=dist.world, own_copy=cfg.trainer.mode == "async")
    return built.engine, built.shared, built.pool, built.status_line


def build_run(cfg: Any, *, workflow: Any = None, train: list[Any] | None = None, eval: list[Any] | None = None,
              policy: Any = None, tokenizer: Any = None, engine: Engine | None = None,
              console: Any = None) -> RunParts:
    """Every part of a run, built in the order the module docstring explains; one run at a time per process
    (transformers' lazy imports and model init are not thread-safe, and the seed is global)."""
    with _BUILDING:
        return _build_run(cfg, workflow=workflow, train=train, eval=eval, policy=policy, tokenizer=tokenizer,
                          engine=engine, console=console)


def _build_run(cfg: Any, *, workflow: Any, train: Any, eval: Any, policy: Any, tokenizer: Any,
               engine: Engine | None, console: Any) -> RunParts:
    train, eval = checked_records(train, "train"), checked_records(eval, "eval")
    cfg, wf = run_workflow(cfg, workflow)
    check_config(cfg, wf, has_samples=train is not None)
    quiet_hub_progress()
    dist = DistContext.from_env(cfg.cluster.backend, group_of_one=cfg.cluster.strategy == "fsdp",
                                timeout_s=cfg.cluster.collective_timeout_s)
    run_dir = Path(cfg.trainer.output_dir)
    console = console or log_console()
    warn = (lambda msg: print_warning(console, msg))  # noqa: E731 (messages carry user text: never markup)
    # rank 0 chooses the checkpoint before any model loads; the others use the same one
    found = dist.broadcast(state.choose_checkpoint(cfg, run_dir, warn) if dist.main else None)
    seed_everything(cfg.trainer.seed)
    tokenizer, policy, device = _model(cfg, dist, tokenizer, policy)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    reference = Reference(policy, needed=cfg.algorithm.kl_coef > 0)  # the initial weights, not the resumed ones
    wf.setup(cfg)
    samples, eval_samples = load_data(cfg, wf, tokenizer, train, eval, warn)
    fingerprint = state.samples_fingerprint(samples)
    sampler = ResumableSampler(len(samples), cfg.trainer.seed, shuffle=cfg.data.shuffle)
    runner = RolloutRunner(cfg, wf, samples, sampler, tokenizer, lambda msg: print_warning(console, msg, ""))
    if found is not None:  # weights first: engines built next start from them
        state.load_weights(found[1], policy, reference)
    sharded = cfg.cluster.strategy == "fsdp" and torch.distributed.is_initialized()
    eng, shared, pool, status_line = _engine(cfg, dist, policy, engine, resumed=found is not None, device=device,
                                             pad_id=pad_id, sharded=sharded)
    runner.engine = eng
    sync_engine = bool(dist.broadcast(not shared))  # all ranks agree: gathering FSDP weights is collective
    if sharded:
        from memrl.dist.fsdp import shard_model

        for model in (policy, reference.frozen):
            if model is not None:
                shard_model(model)
    optimizer, scheduler = build_optimizer(cfg, policy)
    run_state, idle = state.RunState(), IdleStreak(cfg)
    if found is not None:
        run_state = state.restore(cfg, found[1], policy, optimizer, scheduler)
        state.check_same_samples(cfg, run_state.samples, fingerprint, run_dir)
        sampler.position, idle.streak = run_state.data_position, run_state.idle_streak
        runner.pending = list(run_state.pending)  # an asynchronous run's samples not trained on yet
        runner.producer = run_state.producer
    run_state.samples = fingerprint
    updater = PolicyUpdate(cfg, policy, optimizer, scheduler, reference, dist, sharded=sharded, pad_id=pad_id,
                           device=device, norm_length=cfg.algorithm.loss_scale_factor or wf.norm_tokens(),
                           teacher=build_teacher(cfg, tokenizer, device), entropy_state=run_state.entropy_control)
    weight_sync = WeightSync(cfg, eng, pool, policy, push=sync_engine, sharded=sharded, main=dist.main)
    if dist.main:
        drop_rollouts_after(run_dir, run_state.step)  # as the tracker drops the metrics rows of those steps
    tracker = Tracker(run_dir, run_state.step, cfg.trainer.tensorboard, cfg.trainer.wandb_project,
                      cfg.model_dump(mode="json"), console=console, total_steps=cfg.trainer.total_steps) \
        if dist.main else QuietTracker()
    runner.progress = updater.progress = tracker.phase
    if dist.main:
        updater.notice = warn
    return RunParts(cfg, dist, run_dir, console, found[0] if found else None, tokenizer, policy, device, pad_id,
                    reference, wf, samples, eval_samples, sampler, runner, eng, shared, pool, status_line,
                    sync_engine, sharded, optimizer, scheduler, run_state, idle, updater, weight_sync,
                    rollout_source(cfg, runner, eng, weight_sync, policy), tracker)
