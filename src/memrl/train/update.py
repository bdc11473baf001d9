"""The policy update: PPO epochs over mini-batches, micro-batches under a token budget, gradient accumulation.

Losses are normalised by the mini-batch's global token (or row) count, so the
gradient does not depend on how rows are split into micro-batches or across
ranks. A non-finite loss or gradient drops that mini-batch's optimizer step on
every rank. With one epoch and one mini-batch the update's own detached
log-probs serve as the old ones (the ratio is 1 by construction), so no separate
pass is run, unless rollout correction, a teacher (``teacher.student=trainer``) or the optimal token
baseline (its sum pi^2 too) needs them before the update.
"""

from __future__ import annotations

import functools
import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from memrl.config import MemRLConfig
from memrl.dist.ddp import DistContext, shard_by_tokens
from memrl.dist.fsdp import grad_norm_value
from memrl.rl.advantages import get_estimator
from memrl.rl.entropy_control import AdaptiveEntropy
from memrl.rl.losses import loss_aggregation, response_width
from memrl.rl.objective import bonus_tokens, objective_metric_names, policy_objective
from memrl.rl.offpolicy import off_policy_correction
from memrl.train.batch import Row, collate, iter_chunks, micro_batches, row_tensor, token_logprobs
from memrl.train.correction import apply_rollout_correction, mismatch_metrics
from memrl.train.memory_fit import MemoryModel, memory_model, split_note
from memrl.train.policy import Reference
from memrl.train.teacher import Teacher
from memrl.train.token_baseline import apply_token_baseline, variance_proxy


_LOGPROB_LABELS = {"old_logprobs": "log-probs before the update", "ref_logprobs": "reference log-probs"}


class PolicyUpdate:
    """One trainer step's optimisation of the policy on scored rows."""

    def __init__(self, cfg: MemRLConfig, policy: Any, optimizer: torch.optim.Optimizer, scheduler: Any,
                 reference: Reference, dist: DistContext, *, sharded: bool, pad_id: int,
                 device: torch.device, norm_length: int | None = None, teacher: Teacher | None = None,
                 entropy_state: dict[str, Any] | None = None) -> None:
        self.cfg = cfg
        self.teacher = teacher  # on-policy distillation (teacher.*): sets the rows' advantages before the epochs
        self.norm_length = norm_length  # the workflow's longest response (seq-mean-token-sum-norm); None: padded width
        self.policy = policy
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.reference = reference
        self.dist = dist
        self.sharded = sharded
        self.pad_id = pad_id
        self.device = device
        self.progress: Callable[[str], None] = lambda text: None  # the tracker's phase line
        self.notice: Callable[[str], None] = lambda text: None  # a warning line (the run's console)
        self._split_said = False  # the line about splitting for memory is said once a run
        self.entropy_control = AdaptiveEntropy.from_config(cfg.algorithm)  # algorithm.adaptive_entropy, else None
        if self.entropy_control is not None:  # a resumed run's coefficient and last entropy (its checkpoint's)
            self.entropy_control.restore(entropy_state)

    @torch.no_grad()
    def _logprobs(self, rows: list[Row], attr: str, model: Any, sum_pi_squared: bool = False) -> None:
        """Each row's ``attr`` log-probs under ``model`` (and, asked, its ``sum_pi_squared``)."""
        temp = self.cfg.sampling.temperature or 1.0
        batches = micro_batches(rows, self.cfg.trainer.micro_batch_tokens)
        for j, mb in enumerate(batches):
            self.progress(f"{_LOGPROB_LABELS.get(attr, attr)}: micro-batch {j + 1}/{len(batches)}")
            group = [rows[i] for i in mb]
            lp, second = token_logprobs(model, collate(group, self.pad_id, self.device), temp,
                                        response_only=not self.sharded, sum_pi_squared=sum_pi_squared)
            for i, (r, v) in enumerate(zip(group, lp)):
                setattr(r, attr, v[: len(r) - 1].float().cpu())
                if sum_pi_squared and second is not None:
                    r.sum_pi_squared = second[i, : len(r) - 1].float().cpu()
        if self.sharded:  # a no-grad forward leaves the root's weights gathered; free them
            model.reshard()

    def __call__(self, rows: list[Row], step: int) -> dict[str, float]:
        """PPO epochs over mini-batches of ``rows``; the step's metrics (losses token-weighted over ranks)."""
        cfg, a = self.cfg, self.cfg.algorithm
        rc = a.rollout_correction
        weighted = rc.enabled and not rc.bypass_mode  # verl's decoupled mode: needs old log-probs before the update
        distills = self.teacher is not None and self.teacher.reads_trainer_logprobs  # so does the teacher's signal
        per_token = get_estimator(a.adv_estimator).policy_stats  # and the optimal token baseline's
        second = per_token or a.variance_proxy  # sum pi^2 from the log-prob pass (verl's calculate_sum_pi_squared)
        agg = loss_aggregation(a.loss_agg_mode)
        plan = _Plan(on_policy=a.ppo_epochs == 1 and cfg.trainer.mini_batches == 1
                     and not (weighted or distills or second),
                     temperature=cfg.sampling.temperature or 1.0, norm_length=self._norm_length(rows, agg.normed),
                     per_token=agg.per_token, summed=agg.summed,
                     behaviour=(off_policy_correction(a.off_policy).uses_behaviour or rc.bypass_mode
                                or a.off_policy_mask_threshold is not None),
                     weighted=weighted)
        t0 = time.perf_counter()
        self.policy.eval()
        correction: dict[str, float] = {}
        if not plan.on_policy:  # one update per batch: the update pass's own log-probs are the old ones
            self._logprobs(rows, "old_logprobs", self.policy, sum_pi_squared=second)
        if weighted:
            correction = apply_rollout_correction(rows, rc)
        if per_token:  # after the correction, whose weights it reads (verl's order)
            apply_token_baseline(rows)
        if a.kl_coef > 0:
            with self.reference.model() as ref:
                self._logprobs(rows, "ref_logprobs", ref)
        if self.teacher is not None:
            correction.update(self.teacher.apply(rows, plan.temperature))
        logprob_time = time.perf_counter() - t0
        self.policy.train()
        tally = _Tally()
        gen = torch.Generator().manual_seed(cfg.trainer.seed * 7919 + step)
        for epoch in range(a.ppo_epochs):
            if cfg.trainer.minibatch_order == "turn_major":
                minis = turn_major_minis(rows, cfg.trainer.mini_batches, cfg.trainer.minibatch_ranks)
            else:
                minis = list(iter_chunks(torch.randperm(len(rows), generator=gen).tolist(), cfg.trainer.mini_batches))
            for m, mini in enumerate(minis):
                where = f"update: epoch {epoch + 1}/{a.ppo_epochs}, " if a.ppo_epochs > 1 else "update: "
                self._mini_batch(rows, mini, plan, tally, f"{where}mini-batch {m + 1}/{len(minis)}")
        with warnings.catch_warnings():  # a first step skipped for non-finite values: torch warns of the order
            warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step", category=UserWarning)
            self.scheduler.step()  # every update, as verl's (a step skipped for non-finite values included)
        self.policy.eval()
        out = {**mismatch_metrics(rows), **correction, **self._metrics(tally, logprob_time)}
        if second:  # verl logs its gradient-variance proxies wherever sum pi^2 was computed
            out.update(variance_proxy(rows, out["grad_norm"]))  # NaN (no step taken): verl's NaN signal too
        return out

    def _mini_batch(self, rows: list[Row], mini: list[int], plan: _Plan, tally: _Tally, where: str) -> None:
        """One optimizer step over this rank's share of the mini-batch ``mini`` (dropped on every rank if non-finite)."""
        mrows = [rows[i] for i in mini]
        n_tok = sum(r.num_trained for r in mrows) or 1  # global counts: each rank's loss is its share
        n_rows = len(mrows)
        if self.dist.active:
            mine = shard_by_tokens([len(r) for r in mrows], self.dist.world)[self.dist.rank]
            mrows = [mrows[i] for i in mine]
        self.optimizer.zero_grad(set_to_none=True)
        bad = False
        micros, padding = self._micro_groups(mrows, rows[mini[0]])
        for j, group in enumerate(micros):
            self.progress(f"{where}, micro-batch {j + 1}/{len(micros)}")
            dummy = j >= len(micros) - padding
            if dummy and not self.sharded:  # DDP-style: only the threshold's gather is collective; no forward
                empty = torch.zeros(1, 0, device=self.device)  # NCCL gathers device tensors
                bonus_tokens(empty, empty, self.cfg.algorithm, across_ranks=True,
                             contribute=False)
                continue
            loss, terms, before, mask = self._micro_loss(group, dummy, plan, n_tok, n_rows)
            if not torch.isfinite(loss):
                bad = True
                if not self._lockstep:
                    break
            loss.backward()  # (lockstep: a non-finite pass still runs its collectives; the step is dropped)
            if not (dummy or bad):
                tally.add(terms, group, before, mask)
        if self.entropy_control is not None:  # TRL: the window closes at every optimizer step, a dropped one too
            self.entropy_control.end_step(self.dist.sum(self.entropy_control.window()) if self.dist.active
                                          else self.entropy_control.window())
        # the optimizer's own list: FSDP swaps unsharded tensors into the module between forward and backward
        params = [p for g in self.optimizer.param_groups for p in g["params"]]
        bad = self.dist.sum([float(bad)])[0] > 0  # one rank's NaN skips the step everywhere
        if not bad:
            if not self.sharded:  # FSDP already summed them in backward
                self.dist.sum_grads(params)
            gn = grad_norm_value(torch.nn.utils.clip_grad_norm_(params, self.cfg.trainer.grad_clip))
            bad = not torch.isfinite(gn)
        if bad:
            self.optimizer.zero_grad(set_to_none=True)
            tally.skipped += 1
            return
        tally.grad_norms.append(float(gn))
        self.optimizer.step()
        self._sync_reference()

    def _sync_reference(self) -> None:
        """algorithm.ref_sync_every: every that many optimizer steps of the run (AdamW's own count, which a
        checkpoint restores), mix the policy into the reference (TRL's SyncRefModelCallback on_step_end)."""
        every = self.cfg.algorithm.ref_sync_every
        if every is not None and optimizer_steps(self.optimizer) % every == 0:
            self.reference.mix(self.cfg.algorithm.ref_mixup_alpha)

    def _norm_length(self, rows: list[Row], normed: bool) -> int | None:
        """Dr. GRPO's constant ``L``: the configured one, else the widest response span of the whole update over
        every rank (verl pads the batch's responses to one width before splitting it); a micro-batch's own
        width made the gradient depend on how rows fell into micro-batches and ranks."""
        if self.norm_length is not None or not normed:
            return self.norm_length
        spans = (getattr(r, "generated", None) or r.loss_mask for r in rows)  # a masked truncated row spans its own
        width = max((response_width(torch.tensor([list(m[1:])])) for m in spans), default=1)
        return int(self.dist.max([float(width)])[0]) if self.dist.active else width

    @property
    def _lockstep(self) -> bool:
        """Whether every rank runs as many micro-batch passes: a sharded (FSDP) pass is collective, and so is
        ``top_entropy_quantile``'s threshold over the ranks' tokens (TRL's gather); DDP-style ranks otherwise run
        their own shard's count, which differs with the rows' lengths (a rank may have none)."""
        return self.sharded or (self.dist.active and self.cfg.algorithm.top_entropy_quantile < 1.0)

    def _micro_groups(self, mrows: list[Row], filler_row: Row) -> tuple[list[list[Row]], int]:
        """Micro-batches under the token budget; in lockstep, padded with dummy passes to the ranks' most (a
        sharded dummy pass runs forward and backward for FSDP's collectives; a DDP-style one only joins the
        entropy threshold's gather)."""
        micros = [[mrows[i] for i in m] for m in self._split(mrows)]
        padding = 0
        if self._lockstep:  # collective passes: every rank does as many
            padding = int(self.dist.max([float(len(micros))])[0]) - len(micros)
            filler = micros[0][:1] if micros else [filler_row]
            micros += [filler] * padding
        return micros, padding

    @functools.cached_property
    def _memory(self) -> MemoryModel | None:
        """What a micro-batch may spend (measured at the first update, after the rollout freed what it held);
        None where the split is not this process's to change: memory_model's cases, and FSDP's collective passes."""
        return None if self.sharded else memory_model(self.cfg, self.policy, self.device, self.dist.world)

    def _split(self, mrows: list[Row]) -> list[list[int]]:
        """Micro-batches under the token budget, split further where their backward would not fit in memory
        (:mod:`memrl.train.memory_fit`)."""
        budget = self.cfg.trainer.micro_batch_tokens
        memory = self._memory
        if memory is None:
            return micro_batches(mrows, budget)
        groups = micro_batches(mrows, budget, memory.fits)
        plain = [] if self._split_said else micro_batches(mrows, budget)
        if len(groups) > len(plain) > 0:
            worst = max(plain, key=lambda g: memory.cost(len(g), max(len(mrows[i]) for i in g)))
            self.notice(split_note(memory, len(worst), max(len(mrows[i]) for i in worst), budget))
            self._split_said = True
        return groups

    def _micro_loss(self, group: list[Row], dummy: bool, plan: _Plan, n_tok: int,
                    n_rows: int) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor, torch.Tensor]:
        """Forward pass and :func:`policy_objective` of one micro-batch, scaled to its share of the mini-batch;
        with it, the log-probs of the weights that sampled (``old``), against which the engine's are checked:
        after a first mini-batch or epoch the pass's own have already moved."""
        a = self.cfg.algorithm
        batch = collate(group, self.pad_id, self.device)
        width = batch.targets.shape[1]
        # generated positions only; a sharded (FSDP) policy runs whole: its root hooks gather weights
        logp, ent = token_logprobs(self.policy, batch, plan.temperature, with_entropy=True,
                                   response_only=not self.sharded)
        mask = row_tensor(group, "train_mask", width, self.device) if plan.weighted else batch.loss_mask
        old = logp.detach() if plan.on_policy else row_tensor(group, "old_logprobs", width, self.device)
        if plan.on_policy and not dummy:  # the trainer's log-probs, kept for the rollout records
            for i, r in enumerate(group):
                r.old_logprobs = old[i, : len(r) - 1].cpu()
        adv = row_tensor(group, "advantages", width, self.device)
        scale = 1.0 if plan.summed else (float(mask.sum()) / n_tok) if plan.per_token else len(group) / n_rows
        control = self.entropy_control
        # once per pass: over the ranks, a collective every rank runs as often (_lockstep)
        kept = bonus_tokens(ent, mask, a, across_ranks=self.dist.active, contribute=not dummy)
        loss, terms = policy_objective(
            logp, old, adv, mask, a, entropy=ent, norm_length=plan.norm_length, kept=kept,
            entropy_coef=control.applied() if control is not None else None,
            ref_log_prob=row_tensor(group, "ref_logprobs", width, self.device) if a.kl_coef > 0 else None,
            # the engine's sampling log-probs are the behaviour policy's
            behaviour_log_prob=behaviour_logprobs(group, width, self.device) if plan.behaviour else None,
            is_weights=_weights(group, width, self.device) if plan.weighted else None)
        if control is not None and not dummy:
            control.observe(float((ent.detach() * kept).sum()), float(kept.sum()))
        # FSDP averages gradients over ranks; times world, that is the sum DDP-style ranks take
        loss = loss * (0.0 if dummy else scale * (self.dist.world if self.sharded else 1))
        return loss, terms, old, mask

    def _metrics(self, tally: _Tally, logprob_time: float) -> dict[str, float]:
        """The step's metrics: token-weighted means over every rank's micro-batches, grad norm, lr, timing."""
        sums, weight_total = tally.sums, tally.weight
        if self.dist.active:
            keys = [*objective_metric_names(self.cfg.algorithm), "logprob_mismatch"]
            totals = self.dist.sum([sums.get(k, 0.0) for k in keys] + [weight_total])
            sums, weight_total = dict(zip(keys, totals[:-1])), totals[-1]
        out = {k: v / max(weight_total, 1.0) for k, v in sums.items()}
        out["grad_norm"] = statistics.fmean(tally.grad_norms) if tally.grad_norms else float("nan")
        out["skipped_updates"] = float(tally.skipped)
        out["lr"] = self.scheduler.get_last_lr()[0]
        if self.entropy_control is not None:
            out["entropy_coef"] = self.entropy_control.coef  # after the step's last move, as TRL logs it
        out["time/logprob"] = logprob_time
        return out


@dataclass(frozen=True)
class _Plan:
    """What one update call decides once: on-policy shortcut, temperature, normaliser, weighting, behaviour."""

    on_policy: bool
    temperature: float
    norm_length: int | None
    per_token: bool
    behaviour: bool
    weighted: bool = False  # rollout correction (decoupled): rows carry is_weights and train_mask
    summed: bool = False  # the aggregation is a sum (token-sum): micro-batches are not scaled


@dataclass
class _Tally:
    """Token-weighted metric sums of the update's micro-batches, grad norms and skipped steps."""

    sums: dict[str, float] = field(default_factory=dict)
    weight: float = 0.0
    grad_norms: list[float] = field(default_factory=list)
    skipped: int = 0

    def add(self, terms: dict[str, torch.Tensor], group: list[Row], before: torch.Tensor, mask: torch.Tensor) -> None:
        """``before``: the trainer's log-probs under the weights that sampled (compared with the engine's)."""
        w = float(mask.sum())
        self.weight += w
        for key, val in terms.items():
            self.sums[key] = self.sums.get(key, 0.0) + float(val.detach()) * w
        self.sums["logprob_mismatch"] = self.sums.get("logprob_mismatch", 0.0) + _mismatch(group, before, mask)


def _mismatch(rows: list[Row], logp: torch.Tensor, mask: torch.Tensor) -> float:
    """Sum over response tokens of |engine logprob - trainer logprob| (weighted into a mean later)."""
    total = 0.0
    for i, r in enumerate(rows):
        eng = torch.tensor(r.engine_logprobs[1:], dtype=torch.float32, device=logp.device)
        n = eng.numel()
        total += float(((eng - logp[i, :n].detach()).abs() * mask[i, :n]).sum())
    return total


def _weights(rows: list[Row], width: int, device: torch.device) -> torch.Tensor | None:
    """The rows' rollout-correction weights ``[B, width]``, or None when the correction computes none."""
    if all(r.is_weights is None for r in rows):
        return None
    return row_tensor(rows, "is_weights", width, device)


def optimizer_steps(optimizer: torch.optim.Optimizer) -> int:
    """Optimizer steps taken so far (a step dropped for non-finite values is not one), from AdamW's state: the
    most any parameter has (one that got no gradient for a while has fewer)."""
    return max((int(state["step"]) for state in optimizer.state.values() if "step" in state), default=0)


def behaviour_logprobs(rows: list[Row], width: int, device: torch.device) -> torch.Tensor:
    """The engine's sampling log-probs of each row's target tokens, ``[B, width]`` (0 on prompt and padding)."""
    out = torch.zeros((len(rows), width), dtype=torch.float32)
    for i, r in enumerate(rows):
        eng = torch.as_tensor(list(r.engine_logprobs[1:]), dtype=torch.float32)
        out[i, : eng.numel()] = eng
    return out.to(device)


def turn_major(rows: list[Row]) -> list[int]:
    """Row positions in MemAgent's / ReMemR1's batch layout: their generation loop appends every active episode's
    k-th conversation at turn k, and the final answers after the loop, and nothing reorders the batch
    (``shuffle: False``, contiguous splits). A row is final when it is its episode's last conversation."""
    last = {}
    for r in rows:
        last[r.episode] = max(last.get(r.episode, -1), r.step)
    def key(i: int) -> tuple[bool, int, int]:
        final = rows[i].step == last[rows[i].episode]
        return final, 0 if final else rows[i].step, rows[i].episode  # the answers in batch order

    return sorted(range(len(rows)), key=key)


def turn_major_minis(rows: list[Row], mini_batches: int, ranks: int = 1) -> list[list[int]]:
    """The mini-batches of MemAgent's / ReMemR1's trainers on ``ranks`` data-parallel GPUs: each GPU takes a
    contiguous slice of the turn-major batch and splits it into ``mini_batches`` pieces; mini-batch ``m`` is
    every GPU's ``m``-th piece. On one GPU that is the turn-major order cut into consecutive parts; on their
    32 every mini-batch holds each turn and some final answers."""
    slices = list(iter_chunks(turn_major(rows), ranks))
    pieces = [list(iter_chunks(part, mini_batches)) for part in slices]
    minis = [[i for per_rank in pieces if m < len(per_rank) for i in per_rank[m]] for m in range(mini_batches)]
    return [mini for mini in minis if mini]
