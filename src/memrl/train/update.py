"""The policy update: PPO epochs over mini-batches, micro-batches under a token budget, gradient accumulation.

Losses are normalised by the mini-batch's global token (or row) count, so the
gradient does not depend on how rows are split into micro-batches or across
ranks. A non-finite loss or gradient drops that mini-batch's optimizer step on
every rank. With one epoch and one mini-batch the update's own detached
log-probs serve as the old ones (the ratio is 1 by construction), so no separate
pass is run.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch

from memrl.config import MemRLConfig
from memrl.dist.ddp import DistContext, shard_by_tokens
from memrl.dist.fsdp import grad_norm_value
from memrl.rl.losses import loss_aggregation
from memrl.rl.objective import objective_metric_names, policy_objective
from memrl.rl.offpolicy import off_policy_correction
from memrl.train.batch import Row, collate, iter_chunks, micro_batches, row_tensor, token_logprobs
from memrl.train.policy import Reference


class PolicyUpdate:
    """One trainer step's optimisation of the policy on scored rows."""

    def __init__(self, cfg: MemRLConfig, policy: Any, optimizer: torch.optim.Optimizer, scheduler: Any,
                 reference: Reference, dist: DistContext, *, sharded: bool, pad_id: int,
                 device: torch.device) -> None:
        self.cfg = cfg
        self.policy = policy
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.reference = reference
        self.dist = dist
        self.sharded = sharded
        self.pad_id = pad_id
        self.device = device

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

    def __call__(self, rows: list[Row], step: int) -> dict[str, float]:
        """PPO epochs over mini-batches of ``rows``; the step's metrics (losses token-weighted over ranks)."""
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
        per_token = loss_aggregation(a.loss_agg_mode).per_token  # micro-batches weigh by tokens, else by rows
        behaviour = off_policy_correction(a.off_policy).uses_behaviour
        sums: dict[str, float] = {}
        weight_total = 0.0
        grad_norms: list[float] = []
        skipped = 0
        gen = torch.Generator().manual_seed(cfg.trainer.seed * 7919 + step)
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
                    mask = batch.loss_mask
                    old = logp.detach() if on_policy else row_tensor(group, "old_logprobs", width, self.device)
                    if on_policy and not dummy:  # the trainer's log-probs, kept for the rollout records
                        for i, r in enumerate(group):
                            r.old_logprobs = old[i, : len(r) - 1].cpu()
                    adv = row_tensor(group, "advantages", width, self.device)
                    scale = (float(mask.sum()) / n_tok) if per_token else len(group) / n_rows
                    loss, terms = policy_objective(
                        logp, old, adv, mask, a, entropy=ent, norm_length=norm_len,
                        ref_log_prob=row_tensor(group, "ref_logprobs", width, self.device) if a.kl_coef > 0 else None,
                        # the engine's sampling log-probs are the behaviour policy's
                        behaviour_log_prob=behaviour_logprobs(group, width, self.device) if behaviour else None)
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
                    for key, val in terms.items():
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
            keys = [*objective_metric_names(a), "logprob_mismatch"]
            totals = self.dist.sum([sums.get(k, 0.0) for k in keys] + [weight_total])
            sums, weight_total = dict(zip(keys, totals[:-1])), totals[-1]
        out = {k: v / max(weight_total, 1.0) for k, v in sums.items()}
        out["grad_norm"] = statistics.fmean(grad_norms) if grad_norms else float("nan")
        out["skipped_updates"] = float(skipped)
        out["lr"] = self.scheduler.get_last_lr()[0]
        out["time/logprob"] = logprob_time
        return out



def _mismatch(rows: list[Row], logp: torch.Tensor, mask: torch.Tensor) -> float:
    """Sum over response tokens of |engine logprob - trainer logprob| (weighted into a mean later)."""
    total = 0.0
    for i, r in enumerate(rows):
        eng = torch.tensor(r.engine_logprobs[1:], dtype=torch.float32, device=logp.device)
        n = eng.numel()
        total += float(((eng - logp[i, :n].detach()).abs() * mask[i, :n]).sum())
    return total


def behaviour_logprobs(rows: list[Row], width: int, device: torch.device) -> torch.Tensor:
    """The engine's sampling log-probs of each row's target tokens, ``[B, width]`` (0 on prompt and padding)."""
    out = torch.zeros((len(rows), width), dtype=torch.float32)
    for i, r in enumerate(rows):
        eng = torch.as_tensor(list(r.engine_logprobs[1:]), dtype=torch.float32)
        out[i, : eng.numel()] = eng
    return out.to(device)
