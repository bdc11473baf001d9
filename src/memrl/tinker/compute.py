"""The training math of one request: target log-probs, Tinker's loss per datum, gradients, and AdamW steps.

A datum's ``model_input`` is ``T`` token ids and its ``target_tokens`` ``T`` more (usually the input
shifted by one); position ``t`` scores ``target_tokens[t]`` given ``model_input[:t+1]``, at temperature
1. Datums run in micro-batches of at most ``micro_tokens`` padded tokens (right padding, so positions
need no shift); the decoder runs once per micro-batch and the LM head only over the real positions,
in chunks (``memrl.train.logits``), so a large vocabulary never materializes a ``[B, L, V]`` tensor.
Each datum's loss is Tinker's sum-reduced loss from ``memrl.tinker.losses``; ``forward_backward``
adds the gradients of their sum to whatever is already accumulated (Tinker's contract: gradients
accumulate until ``optim_step``), and ``forward`` only reports. Metrics are merged across datums by
the reduction their name carries (``loss:sum`` adds, ``ratio:max`` takes the max).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from memrl.tinker.wire import Datum

_INT_KEYS = ("target_tokens",)


@dataclass
class StepResult:
    """Per-datum outputs (``logprobs`` of the targets) and the merged metrics."""

    outputs: list[dict[str, np.ndarray]]
    metrics: dict[str, float]


def micro_batches(data: list[Datum], micro_tokens: int) -> list[list[int]]:
    """Datum indices grouped so each group's padded size (rows x longest) stays within ``micro_tokens``."""
    groups: list[list[int]] = []
    longest = 0
    for i, datum in enumerate(data):
        n = len(datum.tokens)
        if groups and max(longest, n) * (len(groups[-1]) + 1) <= micro_tokens:
            groups[-1].append(i)
            longest = max(longest, n)
        else:
            groups.append([i])
            longest = n
    return groups


def _targets(datum: Datum, device: torch.device) -> torch.Tensor:
    return torch.as_tensor(datum.inputs["target_tokens"], dtype=torch.long, device=device)


def batch_logprobs(model: Any, data: list[Datum]) -> list[torch.Tensor]:
    """Log-prob of each datum's target tokens (``[T]``, or ``[T, K]`` for several targets per position)."""
    from memrl.train.logits import head_logprobs, split_head

    device = next(model.parameters()).device
    width = max(len(d.tokens) for d in data)
    ids = torch.zeros((len(data), width), dtype=torch.long, device=device)
    mask = torch.zeros((len(data), width), dtype=torch.long, device=device)
    for i, d in enumerate(data):
        ids[i, : len(d.tokens)] = torch.tensor(d.tokens, dtype=torch.long)
        mask[i, : len(d.tokens)] = 1
    parts = split_head(model)
    if parts is None:  # a model whose logits are more than lm_head(hidden): the whole forward
        logp = torch.log_softmax(model(input_ids=ids, attention_mask=mask, use_cache=False).logits.float(), -1)
        return [_gather(logp[i, : len(d.tokens)], _targets(d, device)) for i, d in enumerate(data)]
    decoder, head = parts
    hidden = decoder(input_ids=ids, attention_mask=mask, use_cache=False)
    hidden = hidden[0] if isinstance(hidden, tuple) else hidden.last_hidden_state
    out: list[torch.Tensor | None] = [None] * len(data)
    flat = [i for i, d in enumerate(data) if d.inputs["target_tokens"].ndim == 1]
    if flat:
        picked = torch.cat([hidden[i, : len(data[i].tokens)] for i in flat])
        targets = torch.cat([_targets(data[i], device) for i in flat])
        lp, _ = head_logprobs(head, picked, targets)
        for i, part in zip(flat, torch.split(lp, [len(data[i].tokens) for i in flat]), strict=True):
            out[i] = part
    for i, d in enumerate(data):
        if out[i] is None:  # [T, K] targets (top-k distillation): the head over this datum's positions
            logp = torch.log_softmax(head(hidden[i, : len(d.tokens)]).float(), -1)
            out[i] = _gather(logp, _targets(d, device))
    return [t for t in out if t is not None]


def _gather(logp: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    if targets.ndim == 1:
        return logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return logp.gather(-1, targets)


def merge_metrics(rows: list[dict[str, float]]) -> dict[str, float]:
    """Merge per-datum metrics by their ``:reduction`` suffix; a name without one is summed as ``name:sum``."""
    merged: dict[str, list[float]] = {}
    for row in rows:
        for key, value in row.items():
            key = key if key.count(":") == 1 else f"{key.replace(':', '_')}:sum"
            merged.setdefault(key, []).append(float(value))
    out = {}
    for key, values in merged.items():
        how = key.split(":")[1]
        out[key] = (max(values) if how == "max" else min(values) if how == "min"
                    else sum(values) / len(values) if how == "mean" else sum(values))
    return out


def run_datums(model: Any, data: list[Datum], loss_fn: str, config: dict[str, Any], *, backward: bool,
               micro_tokens: int) -> StepResult:
    """Forward (and backward) every datum of a request; the loss of each is Tinker's, summed over tokens. A
    request that fails leaves the gradients as they were before it (all or nothing, as the SDK reports it)."""
    if not backward:
        return _run_groups(model, data, loss_fn, config, backward=False, micro_tokens=micro_tokens)
    params = [p for p in model.parameters() if p.requires_grad]
    before = [None if p.grad is None else p.grad.clone() for p in params]
    try:
        return _run_groups(model, data, loss_fn, config, backward=True, micro_tokens=micro_tokens)
    except BaseException:
        # the micro-batches before the failing one had added their gradients already; the SDK reports the
        # request as failed, and a script that retries it would have the next optim_step apply them twice
        for p, grad in zip(params, before, strict=True):
            p.grad = grad
        raise


def _run_groups(model: Any, data: list[Datum], loss_fn: str, config: dict[str, Any], *, backward: bool,
                micro_tokens: int) -> StepResult:
    from memrl.tinker.losses import tinker_loss

    device = next(model.parameters()).device
    outputs: list[dict[str, np.ndarray]] = [{} for _ in data]
    rows: list[dict[str, float]] = []
    total = 0.0
    for group in micro_batches(data, micro_tokens):
        with torch.set_grad_enabled(backward):
            logprobs = batch_logprobs(model, [data[i] for i in group])
            losses = []
            for i, lp in zip(group, logprobs, strict=True):
                inputs = {k: torch.as_tensor(v, dtype=torch.long if k in _INT_KEYS else torch.float32, device=device)
                          for k, v in data[i].inputs.items()}
                loss, metrics = tinker_loss(loss_fn, lp, inputs, config)
                losses.append(loss)
                rows.append(metrics)
                outputs[i]["logprobs"] = lp.detach().float().cpu().numpy()
            group_loss = torch.stack(losses).sum()
            if backward:
                group_loss.backward()
        total += float(group_loss.detach())
    metrics = merge_metrics(rows)
    metrics.setdefault("loss:sum", total)
    return StepResult(outputs, metrics)


def adam_step(optimizer: torch.optim.Optimizer, params: list[torch.nn.Parameter],
              hp: dict[str, float]) -> dict[str, float]:
    """One AdamW step with this call's hyperparameters (Tinker sends them every step), then zero the grads."""
    for group in optimizer.param_groups:
        group["lr"] = hp["learning_rate"]
        group["betas"] = (hp["beta1"], hp["beta2"])
        group["eps"] = hp["eps"]
        group["weight_decay"] = hp["weight_decay"]
    grads = [p.grad for p in params if p.grad is not None]
    norm = float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.float()) for g in grads]))) \
        if grads else 0.0
    if hp["grad_clip_norm"] > 0 and grads:
        torch.nn.utils.clip_grad_norm_(params, hp["grad_clip_norm"])
    if not math.isfinite(norm):
        optimizer.zero_grad(set_to_none=True)
        raise ValueError(f"the accumulated gradient is not finite (norm {norm}); the step was skipped "
                         "and the gradients dropped")
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return {"grad_norm": norm, "learning_rate": hp["learning_rate"]}
