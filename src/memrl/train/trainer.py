"""The RL loop for multi-conversation agents.

Per step: take prompts from a resumable order, run ``algorithm.n`` episodes of
each through the workflow and engine concurrently (DAPO dynamic sampling
optional), score, compute one advantage per episode within its group and
broadcast it to every generated token of every conversation of the episode,
then PPO epochs over mini-batches (micro-batches under a token budget,
gradient accumulation, grad-norm clipping, AdamW), then weight sync.

With the in-process HF engine the engine generates with the policy module
itself, so weight sync is free; other engines receive merged weights through
``update_weights``.
"""

from __future__ import annotations

import asyncio
import math
import os
import random
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np
import torch

from memrl.config import MemRLConfig
from memrl.dist.ddp import DistContext, shard_by_tokens
from memrl.dist.fsdp import grad_norm_value
from memrl.engines.base import Engine, EngineDeadError, SamplingParams
from memrl.rl.advantages import broadcast, combine_step_advantages, episode_advantages
from memrl.rl.dapo import keep_groups
from memrl.rl.losses import agg_loss, compute_policy_loss, kl_penalty
from memrl.train import checkpoint
from memrl.train.batch import Row, collate, iter_chunks, micro_batches, row_tensor, rows_from_trajectories, token_logprobs
from memrl.train.engine_sync import adapter_payload, sync_stats, syncs_adapter
from memrl.train.guards import IdleStreak, RolloutTally
from memrl.train.policy import Reference, build_policy, merged_state_dict
from memrl.train.preflight import RESUMABLE_CHANGES, check_config, check_run_config  # noqa: F401 (re-exported)
from memrl.train.rollouts import save_step_rollouts
from memrl.train.sampler import ResumableSampler
from memrl.train.signals import StopRequest, TrainingInterrupted
from memrl.train.tracking import Tracker
from memrl.types import Trajectory
from memrl.workflows import get_workflow, load_samples

SUMMED = ("pg_loss", "clipfrac", "clipfrac_lower", "ppo_kl", "entropy", "kl", "logprob_mismatch")


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


EPISODE_METRICS = ("em", "sub_em", "f1", "num_conversations", "response_tokens", "answered", "memory_truncated",
                   "final_truncated", "turns", "tool_calls", "tool_call_validity", "invalid_tool_calls",
                   "tool_errors", "made_tool_call", "db_match", "completed", "user_turns")


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def lr_lambda(step: int, warmup: int, total: int, schedule: str) -> float:
    if warmup and step < warmup:
        return (step + 1) / warmup
    if schedule == "cosine" and total > warmup:
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        return 0.5 * (1 + math.cos(math.pi * progress))
    return 1.0


class Trainer:
    def __init__(self, cfg: MemRLConfig, *, policy: Any = None, tokenizer: Any = None,
                 engine: Engine | None = None, tracker_console: Any = None) -> None:
        check_config(cfg)
        self.cfg = cfg
        self.dist = DistContext.from_env(cfg.cluster.backend, group_of_one=cfg.cluster.strategy == "fsdp")
        self.run_dir = Path(cfg.trainer.output_dir)
        from rich.console import Console

        self.console = tracker_console or Console(stderr=True, width=None if sys.stderr.isatty() else 160)
        found = None
        if self.dist.main:  # before any model loads: a damaged run fails (or falls back) in seconds
            check_run_config(cfg, self.run_dir)
            found = checkpoint.select(self.run_dir, warn=lambda msg: self.console.print(f"[yellow]warning:[/yellow] "
                                                                                        f"{msg}", highlight=False))
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
        self.step = 0
        self.nan_streak = 0
        self.failed_episodes = 0
        self.idle = IdleStreak(cfg)
        self.tally = RolloutTally()
        self.workflow = get_workflow(cfg.workflow.name)
        self.samples = load_samples(cfg, "train")
        self.eval_samples = load_samples(cfg, "eval")[: cfg.trainer.eval_samples]
        self.sampler = ResumableSampler(len(self.samples), cfg.trainer.seed)
        if found is not None:  # weights first: engines built next start from them
            checkpoint.load_weights(self.policy, found[1])
        self.sharded = cfg.cluster.strategy == "fsdp" and torch.distributed.is_initialized()
        self.pool: Any = None
        if not self.dist.main:
            self.engine, self.shared_engine = None, True  # only rank 0 generates
        else:
            self.engine, self.shared_engine = self._build_engine(engine, resumed=found is not None)
        # every rank must agree: under FSDP gathering the engine's weights is collective
        self.sync_engine = bool(self.dist.broadcast(not self.shared_engine))
        if self.sharded:
            from memrl.dist.fsdp import shard_model

            shard_model(self.policy)
            if self.reference.frozen is not None:
                shard_model(self.reference.frozen)
        params = [p for p in self.policy.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=cfg.trainer.lr, weight_decay=cfg.trainer.weight_decay)
        t = cfg.trainer
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: lr_lambda(s, t.warmup_steps, t.total_steps, t.lr_schedule))
        if found is not None:
            state = checkpoint.load_trainer_state(found[1], self.policy, self.optimizer, self.scheduler)
            self.step = state["step"]
            self.sampler.position = state["data_position"]
            self.nan_streak = state.get("nan_streak", 0)
            self.idle.streak = state.get("idle_streak", 0)
        self.tracker: Any = Tracker(self.run_dir, self.step, cfg.trainer.tensorboard, cfg.trainer.wandb_project,
                                    cfg.model_dump(mode="json"), console=self.console,
                                    total_steps=cfg.trainer.total_steps) \
            if self.dist.main else _QuietTracker()
        if self.status_line:
            self.tracker.console.print(self.status_line)
        self.resumed_from = found[0] if found else None

    # -- setup ---------------------------------------------------------------------------------
    status_line = ""

    def _build_engine(self, given: Engine | None, resumed: bool) -> tuple[Engine, bool]:
        """(engine, whether it is the policy itself); an engine of its own starts from the policy's weights.

        ``given``: the caller's engine, used as it is apart from that first weight push.
        """
        c = self.cfg.cluster
        if given is None and c.rollout_replicas > 0:
            from memrl.dist.pool import RayEnginePool
            from memrl.dist.ray_support import init_ray

            self.status_line = init_ray(c.address)
            e = self.cfg.engine
            vllm = e.kind == "vllm"
            engine_gpus = 0
            if vllm:
                from memrl.engines.vllm_args import on_cpu, require_vllm

                require_vllm()
                engine_gpus = 0 if on_cpu() else e.tensor_parallel_size  # vLLM's CPU build needs no GPU
            self.pool = RayEnginePool(self.cfg.model.path, c.rollout_replicas, dtype=self.cfg.model.dtype,
                                      device=self.cfg.engine.device, weights=merged_state_dict(self.policy),
                                      num_cpus=c.replica_cpus,
                                      num_gpus=c.replica_gpus or engine_gpus,
                                      kind=e.kind, engine_options={"config": self.cfg.model_dump(mode="json")}
                                      if vllm else None,
                                      max_batch_size=self.cfg.engine.max_batch_size, seed=self.cfg.trainer.seed,
                                      retries=self.cfg.engine.retries, weight_sync=c.weight_sync,
                                      sync_backend="nccl" if c.replica_gpus > 0 and self.device.type == "cuda"
                                      else "gloo")
            self.status_line += f"; {c.rollout_replicas} rollout replica(s), {self.dist.world} trainer rank(s)"
            return self.pool, False
        if given is None and self.cfg.engine.kind == "hf":
            from memrl.engines.hf import HFEngine

            model, shared = self.policy, True
            if self.sharded:
                # a sharded policy cannot generate on rank 0 alone: the engine gets its own full copy
                from memrl.models.resolve import load_model

                model = load_model(self.cfg.model.path, dtype=self.cfg.model.dtype, device=str(self.device))
                shared = False
                model.load_state_dict(merged_state_dict(self.policy), strict=False)
                model.eval()
            return HFEngine(model, pad_token_id=self.pad_id, max_batch_size=self.cfg.engine.max_batch_size,
                            seed=self.cfg.trainer.seed), shared
        from memrl.engines.factory import build_engine

        built = given if given is not None else build_engine(self.cfg)
        if resumed:  # it holds model.path's weights (or the caller's): the checkpoint's are newer
            if syncs_adapter(self.cfg, built):
                asyncio.run(built.update_adapter(*adapter_payload(self.policy)))
            else:
                asyncio.run(built.update_weights(merged_state_dict(self.policy)))
        return built, False

    # -- rollout -------------------------------------------------------------------------------
    def _sampling(self) -> SamplingParams:
        s = self.cfg.sampling
        return SamplingParams(temperature=s.temperature, top_p=s.top_p, top_k=s.top_k)

    async def _episodes(self, indices: list[int], round_: int) -> list[Trajectory]:
        n = self.cfg.algorithm.n
        base = self._sampling()
        sem = asyncio.Semaphore(self.cfg.engine.concurrency)

        async def one(idx: int, k: int) -> Trajectory | None:
            seed = (self.cfg.trainer.seed * 1_000_003 + self.step * 10_007 + round_ * 101 + idx * 31 + k) % 2**31
            async with sem:
                self.tally.attempted += 1
                try:
                    return await self.workflow(self.samples[idx], self.engine, self.tokenizer, self.cfg.workflow,
                                               sampling=base.with_(seed=seed), sample_id=str(idx),
                                               group_id=f"{self.step}:{round_}:{idx}")
                except EngineDeadError:
                    raise  # every later episode would fail too: stop the run
                except Exception:  # an episode failing must not stop training
                    self.failed_episodes += 1
                    self.tally.failed += 1
                    self.tally.last_error = traceback.format_exc(limit=2).strip().splitlines()[-1]
                    self.tracker.console.print(f"[yellow]episode of sample {idx} failed:[/yellow] "
                                               + self.tally.last_error, highlight=False)
                    return None

        results = await asyncio.gather(*(one(i, k) for i in indices for k in range(n)))
        return [t for t in results if t is not None]

    def rollout(self) -> tuple[list[Trajectory], list[Trajectory], dict[str, float]]:
        """(episodes to train on, every episode generated, stats).

        With dynamic sampling the first list holds only groups whose rewards vary.
        """
        cfg = self.cfg
        want = cfg.trainer.prompts_per_step
        kept: list[Trajectory] = []
        stats = {"dropped_groups": 0.0, "gen_rounds": 0.0}
        all_trajs: list[Trajectory] = []
        self.policy.eval()
        for round_ in range(cfg.algorithm.max_gen_batches if cfg.algorithm.dynamic_sampling else 1):
            have = len({t.group_id for t in kept})
            indices = self.sampler.take(want - have)
            trajs = asyncio.run(self._episodes(indices, round_))
            all_trajs += trajs
            stats["gen_rounds"] += 1
            if cfg.algorithm.dynamic_sampling:
                keep = keep_groups([t.reward for t in trajs], [t.group_id for t in trajs])
                stats["dropped_groups"] += len({t.group_id for t, k in zip(trajs, keep) if not k})
                kept += [t for t, k in zip(trajs, keep) if k]
                if len({t.group_id for t in kept}) >= want:
                    break
            else:
                kept = trajs
        stats["rollout_episodes"] = float(len(all_trajs))
        return kept, all_trajs, stats

    # -- advantages ------------------------------------------------------------------------------
    def advantages(self, trajs: list[Trajectory], rows: list[Row]) -> None:
        a = self.cfg.algorithm
        scores = torch.tensor([t.reward for t in trajs], dtype=torch.float32)
        groups = [t.group_id for t in trajs]
        ep_adv = episode_advantages(scores, groups, a.adv_estimator, a.epsilon)
        width = max(len(r) for r in rows) - 1
        mask = torch.zeros((len(rows), width))
        for i, r in enumerate(rows):
            mask[i, : len(r) - 1] = torch.tensor(r.loss_mask[1:], dtype=torch.float32)
        conv_episode = [r.episode for r in rows]
        if a.step_rewards:
            per_row = combine_step_advantages(ep_adv, torch.tensor([r.step_reward for r in rows]), conv_episode,
                                              groups, [r.step for r in rows], self.cfg.workflow.state_reward_alpha,
                                              2.0 if self.cfg.workflow.rememr1_variant == "released" else 1.0)
            tok = per_row.unsqueeze(-1) * mask
        else:
            tok = broadcast(ep_adv, conv_episode, mask, a.adv_estimator, a.gamma)
        for i, r in enumerate(rows):
            r.advantages = tok[i, : len(r) - 1].clone()

    @torch.no_grad()
    def _logprobs(self, rows: list[Row], attr: str, model: Any) -> None:
        temp = self.cfg.sampling.temperature or 1.0
        for mb in micro_batches(rows, self.cfg.trainer.micro_batch_tokens):
            group = [rows[i] for i in mb]
            lp, _ = token_logprobs(model, collate(group, self.pad_id, self.device), temp,
                                   response_only=not self.sharded)
            for r, v in zip(group, lp):
                setattr(r, attr, v[: len(r) - 1].float().cpu())
        if self.sharded:  # a no-grad forward leaves the root's weights gathered; free them
            model.reshard()

    # -- update ----------------------------------------------------------------------------------
    def update(self, rows: list[Row]) -> dict[str, float]:
        cfg, a = self.cfg, self.cfg.algorithm
        on_policy = a.ppo_epochs == 1 and cfg.trainer.mini_batches == 1
        t0 = time.perf_counter()
        self.policy.eval()
        if not on_policy:  # one update per batch: the update pass's own log-probs are the old ones
            self._logprobs(rows, "old_logprobs", self.policy)
        if a.kl_coef > 0:
            with self.reference.model() as ref:
                self._logprobs(rows, "ref_logprobs", ref)
        logprob_time = time.perf_counter() - t0
        self.policy.train()
        temp = cfg.sampling.temperature or 1.0
        norm_len = cfg.workflow.norm_tokens
        sums: dict[str, float] = {}
        weight_total = 0.0
        grad_norms: list[float] = []
        skipped = 0
        gen = torch.Generator().manual_seed(cfg.trainer.seed * 7919 + self.step)
        # the optimizer's own list: FSDP swaps unsharded tensors into the module between forward and backward
        params = [p for g in self.optimizer.param_groups for p in g["params"]]
        for _ in range(a.ppo_epochs):
            order = torch.randperm(len(rows), generator=gen).tolist()
            for mini in iter_chunks(order, cfg.trainer.mini_batches):
                mrows = [rows[i] for i in mini]
                n_tok = sum(r.num_response for r in mrows) or 1  # global counts: each rank's loss is its share
                n_rows = len(mrows)
                if self.dist.active:
                    mine = shard_by_tokens([len(r) for r in mrows], self.dist.world)[self.dist.rank]
                    mrows = [mrows[i] for i in mine]
                self.optimizer.zero_grad(set_to_none=True)
                bad = False
                micros = [[mrows[i] for i in m] for m in micro_batches(mrows, cfg.trainer.micro_batch_tokens)]
                padding = 0
                if self.sharded:  # sharded forward/backward passes are collective: every rank does as many
                    padding = int(self.dist.max([float(len(micros))])[0]) - len(micros)
                    filler = micros[0][:1] if micros else [rows[mini[0]]]
                    micros += [filler] * padding
                for j, group in enumerate(micros):
                    dummy = j >= len(micros) - padding
                    batch = collate(group, self.pad_id, self.device)
                    width = batch.targets.shape[1]
                    # generated positions only; a sharded (FSDP) policy runs whole: its root hooks gather weights
                    logp, ent = token_logprobs(self.policy, batch, temp, with_entropy=True,
                                               response_only=not self.sharded)
                    if a.entropy_coef == 0:
                        ent = ent.detach()
                    mask = batch.loss_mask
                    old = logp.detach() if on_policy else row_tensor(group, "old_logprobs", width, self.device)
                    if on_policy and not dummy:  # the trainer's log-probs, kept for the rollout records
                        for i, r in enumerate(group):
                            r.old_logprobs = old[i, : len(r) - 1].cpu()
                    adv = row_tensor(group, "advantages", width, self.device)
                    mode = a.loss_agg_mode
                    scale = (float(mask.sum()) / n_tok) if mode == "token-mean" else len(group) / n_rows
                    pg, clipfrac, ppo_kl, lower = compute_policy_loss(
                        old, logp, adv, mask, cliprange_low=a.clip_ratio_low, cliprange_high=a.clip_ratio_high,
                        clip_ratio_c=a.clip_ratio_c, loss_agg_mode=mode, norm_length=norm_len)
                    loss = pg
                    ent_mean = agg_loss(ent, mask, mode, norm_length=norm_len)
                    if a.entropy_coef > 0:
                        loss = loss - a.entropy_coef * ent_mean
                    kl_val = torch.tensor(0.0)
                    if a.kl_coef > 0:
                        ref = row_tensor(group, "ref_logprobs", width, self.device)
                        kl_val = agg_loss(kl_penalty(logp, ref, a.kl_estimator), mask, mode, norm_length=norm_len)
                        loss = loss + a.kl_coef * kl_val
                    # FSDP averages gradients over ranks; times world, that is the sum DDP-style ranks take
                    loss = loss * (0.0 if dummy else scale * (self.dist.world if self.sharded else 1))
                    if not torch.isfinite(loss):
                        bad = True
                        if not self.sharded:
                            break
                    loss.backward()  # (sharded: a non-finite pass still runs its collectives; the step is dropped)
                    if dummy or bad:
                        continue
                    w = float(mask.sum())
                    weight_total += w
                    for key, val in (("pg_loss", pg), ("clipfrac", clipfrac), ("clipfrac_lower", lower),
                                     ("ppo_kl", ppo_kl), ("entropy", ent_mean), ("kl", kl_val)):
                        sums[key] = sums.get(key, 0.0) + float(val.detach()) * w
                    sums["logprob_mismatch"] = sums.get("logprob_mismatch", 0.0) + _mismatch(group, logp, mask)
                bad = self.dist.sum([float(bad)])[0] > 0  # one rank's NaN skips the step everywhere
                if not bad:
                    if not self.sharded:  # FSDP already summed them in backward
                        self.dist.sum_grads(params)
                    gn = grad_norm_value(torch.nn.utils.clip_grad_norm_(params, cfg.trainer.grad_clip))
                    bad = not torch.isfinite(gn)
                if bad:
                    self.optimizer.zero_grad(set_to_none=True)
                    skipped += 1
                    continue
                grad_norms.append(float(gn))
                self.optimizer.step()
        if grad_norms:  # the schedule counts trainer steps that updated the weights
            self.scheduler.step()
        self.policy.eval()
        if self.dist.active:
            totals = self.dist.sum([sums.get(k, 0.0) for k in SUMMED] + [weight_total])
            sums, weight_total = dict(zip(SUMMED, totals[:-1])), totals[-1]
        out = {k: v / max(weight_total, 1.0) for k, v in sums.items()}
        out["grad_norm"] = statistics.fmean(grad_norms) if grad_norms else float("nan")
        out["skipped_updates"] = float(skipped)
        out["lr"] = self.scheduler.get_last_lr()[0]
        out["time/logprob"] = logprob_time
        return out

    # -- one step --------------------------------------------------------------------------------
    def train_step(self) -> dict[str, float]:
        rows, metrics, tally = self.dist.broadcast(self._collect() if self.dist.main else None)
        warning = self.idle.record(bool(rows), tally)  # run() stops after trainer.max_failed_steps idle steps
        if warning:
            self.tracker.console.print(f"[yellow]{warning}; skipping the update[/yellow]", highlight=False)
            metrics.update({"time/logprob": 0.0, "time/update": 0.0, "time/sync": 0.0, "skipped_updates": 1.0,
                            "data_position": float(self.sampler.position)})
            return metrics
        colocated = self.pool is not None and self.cfg.cluster.placement == "colocate"
        if colocated:
            self.pool.sleep()
        engine_sleeps = self.pool is None and self.dist.main and getattr(self.engine, "sleep_enabled", False)
        if engine_sleeps:  # an in-process vLLM engine gives the accelerator back during the update
            asyncio.run(self.engine.sleep(1))
        t2 = time.perf_counter()
        upd = self.update(rows)
        t3 = time.perf_counter()
        if upd["skipped_updates"] >= self.cfg.trainer.mini_batches * self.cfg.algorithm.ppo_epochs:
            self.nan_streak += 1
            self.tracker.console.print(f"[yellow]non-finite loss or gradient: step {self.step} skipped "
                                       f"({self.nan_streak} in a row)[/yellow]")
            if self.nan_streak >= self.cfg.trainer.max_nan_steps:
                raise NonFiniteLossError(f"{self.nan_streak} steps in a row had non-finite losses; last good "
                                         f"checkpoint is in {self.run_dir}/checkpoints. Lower trainer.lr or check "
                                         "the data")
        else:
            self.nan_streak = 0
        metrics.update(upd)
        metrics["time/update"] = t3 - t2 - upd["time/logprob"]
        tc = self.cfg.trainer
        if self.dist.main and tc.rollouts_every and self.step % tc.rollouts_every == 0:
            save_step_rollouts(self.run_dir, self.step, self.step_trajectories, rows, self.tokenizer,
                               tc.rollouts_per_step, tc.seed)
        t4 = time.perf_counter()
        if colocated:
            self.pool.wake()
        if engine_sleeps:
            asyncio.run(self.engine.wake_up())
        if self.sync_engine:
            if syncs_adapter(self.cfg, self.engine):  # only the adapter travels; the engine keeps the base
                asyncio.run(self.engine.update_adapter(*adapter_payload(self.policy)))
            else:
                weights = self.engine_weights()
                if self.dist.main:
                    asyncio.run(self.engine.update_weights(weights))
            if self.dist.main:
                metrics.update(sync_stats(self.engine))
        metrics["time/sync"] = time.perf_counter() - t4
        if self.pool is not None:
            metrics.update(self.pool.stats())
        if self.device.type == "cuda":  # peak of this step (rollout, update, sync) on this rank's GPU
            metrics["gpu_peak_gib"] = torch.cuda.max_memory_allocated(self.device) / 2**30
            torch.cuda.reset_peak_memory_stats(self.device)
        metrics["train_rows"] = float(len(rows))
        metrics["data_position"] = float(self.sampler.position)
        return metrics

    def _collect(self) -> tuple[list[Row], dict[str, float], RolloutTally]:
        """Rank 0: rollout, rewards, advantages -> (rows to train on, metrics so far, what happened to episodes)."""
        self.tally = RolloutTally()
        t0 = time.perf_counter()
        trajs, all_trajs, stats = self.rollout()
        t1 = time.perf_counter()
        metrics: dict[str, float] = {**stats, "failed_episodes": float(self.failed_episodes)}
        if all_trajs:
            metrics["reward"] = statistics.fmean(t.reward for t in all_trajs)
            for key in EPISODE_METRICS:
                vals = [t.metrics[key] for t in all_trajs if key in t.metrics]
                if vals:
                    metrics[key] = statistics.fmean(vals)
            gen_tokens = sum(t.num_generated_tokens for t in all_trajs)
            metrics["tokens_per_s"] = gen_tokens / max(t1 - t0, 1e-9)
        metrics["time/rollout"] = t1 - t0
        self.tally.dropped_groups = int(stats["dropped_groups"])
        self.tally.prompt_too_long = sum(int(t.metrics.get("prompt_too_long", 0)) for t in all_trajs)
        metrics["prompt_too_long"] = float(self.tally.prompt_too_long)
        if self.tally.prompt_too_long:
            self.tracker.console.print(
                f"[yellow]{self.tally.prompt_too_long} of {self.tally.attempted} episodes cut before generating: "
                f"the prompt exceeded workflow.max_total_tokens={self.cfg.workflow.max_total_tokens}[/yellow]")
        rows = rows_from_trajectories(trajs)
        if rows:
            self.advantages(trajs, rows)
        self.step_trajectories = trajs  # rows[i].episode indexes these (for the rollout records)
        return rows, metrics, self.tally

    async def _evaluate(self) -> float:
        tc = self.cfg.trainer  # trainer.eval_n episodes per question, averaged (verl's val_kwargs.n)
        params = (SamplingParams(greedy=True) if tc.eval_temperature == 0
                  else SamplingParams(temperature=tc.eval_temperature, top_p=tc.eval_top_p))
        trajs = await asyncio.gather(*(self.workflow(s, self.engine, self.tokenizer, self.cfg.workflow,
                                                     sampling=params)
                                       for s in self.eval_samples for _ in range(tc.eval_n)))
        return 100.0 * statistics.fmean(t.reward for t in trajs)

    def evaluate(self) -> float:
        """Accuracy (%) of the configured reward on ``data.eval_file`` (greedy unless trainer.eval_temperature)."""
        self.policy.eval()
        return asyncio.run(self._evaluate())

    def engine_weights(self) -> dict[str, torch.Tensor] | None:
        """Merged weights for the engine (rank 0); under FSDP every rank must call this (collective gather)."""
        if not (self.sharded or self.dist.main):
            return None
        from memrl.dist.fsdp import full_state_dict

        state = full_state_dict(self.policy)  # collective when sharded
        return merged_state_dict(self.policy, state) if self.dist.main else None

    def save(self) -> Path:
        """Rank 0 writes; under FSDP every rank calls this, since gathering the shards is collective."""
        return checkpoint.save(self.run_dir, self.step, self.policy, self.optimizer, self.scheduler,
                               {"data_position": self.sampler.position, "nan_streak": self.nan_streak,
                                "idle_streak": self.idle.streak},
                               keep=self.cfg.trainer.keep_checkpoints, write=self.dist.main)

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
                    saved = self.step % t.save_every == 0 or self.step == t.total_steps
                    if saved and (self.dist.main or self.sharded):
                        self.save()
                    self.idle.check()  # every rank holds the same streak: all stop together
        finally:
            self.tracker.close()
        return last

    def _stopping(self, stop: StopRequest, saved: bool) -> bool:
        """Whether the run is complete; if rank 0 got a signal, checkpoint the last finished step and raise.

        Ranks move on together: the broadcast is also the barrier after rank 0's eval or save.
        """
        signum = self.dist.broadcast(stop.signum)
        if self.step >= self.cfg.trainer.total_steps:
            return True
        if signum is None:
            return False
        if not saved and self.step > 0 and (self.dist.main or self.sharded):
            self.save()
        raise TrainingInterrupted(self.step, signum)


def _mismatch(rows: list[Row], logp: torch.Tensor, mask: torch.Tensor) -> float:
    """Sum over response tokens of |engine logprob - trainer logprob| (weighted into a mean later)."""
    total = 0.0
    for i, r in enumerate(rows):
        eng = torch.tensor(r.engine_logprobs[1:], dtype=torch.float32, device=logp.device)
        n = eng.numel()
        total += float(((eng - logp[i, :n].detach()).abs() * mask[i, :n]).sum())
    return total
