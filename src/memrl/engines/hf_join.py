"""Continuous batching for the HF engine: requests that arrive while a batch decodes join it at the next step.

Why: an agent's next call comes as soon as its previous one is answered. Without joining, a call that
arrives while a batch decodes waits for that batch's longest row (a MemAgent episode whose chunk
answer was short waited for the longest answer of the step; a τ² agent for the slowest turn), and
the batch shrinks as rows finish. Joining keeps the batch full: the newcomers are prefilled on their
own, their cache rows appended to the running batch's (left-padded to a common width, the padding
masked as a prompt's is), and from then on every step decodes them with the rest.

What a row generates does not depend on joining: a seeded request draws from its own generator,
and the padding is masked, so its tokens are those it would get in any batch, its log-probs equal
to float rounding (as between any two batch compositions, see :mod:`memrl.engines.hf`).
Only the eager decode joins; the static (CUDA-graph) decode keeps fixed batches.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch

from memrl.engines.hf_batch import BatchRows, EagerStepper, Request, fair_order, left_padded, over_attention, prefill
from memrl.engines.kv_cache import reserved_cache

log = logging.getLogger(__name__)


def pick_joiners(pending: list[Request], *, live: int, width: int, tokens_left: int, max_rows: int,
                 max_tokens: int, attention_cap: tuple[int, int] | None) -> list[Request]:
    """Take from ``pending`` (in place) the requests that fit beside ``live`` decoding rows, in turn order.

    The same limits as a new batch: at most ``max_rows`` rows, and the padded width the batch can reach
    (its ``width`` or the longest new prompt, plus the most new tokens any row may still add) times its
    rows within ``max_tokens``; the newcomers' own prefill within the attention cap.
    """
    pending[:] = [r for r in pending if not r.future.done()]  # cancelled while queued: nobody waits for them
    if live >= max_rows:
        return []
    picked: list[Request] = []
    lengths: set[int] = set()
    prompts: set[tuple[int, ...]] = set()
    for req in fair_order(pending):
        rows = live + len(picked) + 1
        reach = max(width, len(req.prompt)) + max(tokens_left, req.params.max_new_tokens)
        key = tuple(req.prompt)
        distinct = len(prompts | {key})
        if rows > max_rows or reach * rows > max_tokens or \
                over_attention(attention_cap, distinct, lengths | {len(key)}):
            break
        picked.append(req)
        lengths.add(len(key))
        prompts.add(key)
        width, tokens_left = max(width, len(req.prompt)), max(tokens_left, req.params.max_new_tokens)
    taken = {id(r) for r in picked}
    pending[:] = [r for r in pending if id(r) not in taken]
    return picked


def admit(model: Any, cache_kw: str, stepper: EagerStepper, rows: BatchRows, joiners: Sequence[Request],
          logits: torch.Tensor, active: list[int], *, pad_token_id: int,
          split: bool = False) -> tuple[torch.Tensor, list[int]]:
    """Prefill ``joiners``, append them to the running batch; the batch's next-token logits and live rows.

    ``logits`` are the live rows' (from the step just taken); the newcomers' come from their prefill,
    so the next sampling step draws every row's token at once.
    """
    new = rows.add(list(joiners))
    if not new:  # all cancelled already, or asked for no tokens: answered by rows.add
        return logits, active
    prompts = [rows.reqs[i].prompt for i in new]
    input_ids, attention, positions = left_padded(prompts, pad_token_id, logits.device)
    cache = reserved_cache(input_ids.shape[1])  # copied into the batch's cache at once: the batch keeps the room
    joined = prefill(model, cache_kw, cache, prompts, input_ids, attention, positions, split=split)
    stepper.admit(cache, attention, positions[:, -1])
    return torch.cat([logits, joined.to(logits.dtype)]), active + new


def join_waiting(engine: Any, lane: Any, rows: BatchRows, stepper: EagerStepper, logits: torch.Tensor,
                 active: list[int]) -> tuple[torch.Tensor, list[int]]:
    """Requests waiting in ``lane`` that fit join ``engine``'s decoding batch; its logits and live rows after."""
    with lane.guard:
        joiners = pick_joiners(lane.pending, live=len(active), width=stepper.width,
                               tokens_left=max(rows.tokens_left(i) for i in active), max_rows=engine.max_batch_size,
                               max_tokens=engine.max_batch_tokens, attention_cap=engine._attention_cap)
        lane.running.extend(joiners)  # seen by interrupt/close, and by the one-by-one retry if the batch fails
    if not joiners:
        return logits, active
    engine.stats.requests += len(joiners)
    engine.stats.prompt_tokens += sum(len(r.prompt) for r in joiners)
    first = len(rows.reqs)
    try:
        logits, active = admit(engine.model, engine.cache_kw, stepper, rows, joiners, logits, active,
                               pad_token_id=engine.pad_token_id, split=engine._split_prefill)
    except Exception as exc:  # noqa: BLE001 - out of memory, most likely: the batch goes on without them
        _requeue(lane, rows, first, exc)
        stepper.admits = False
        return logits, active
    engine.stats.joined += len(joiners)
    engine.stats.peak_rows = max(engine.stats.peak_rows, len(active))
    return logits, active


def _requeue(lane: Any, rows: BatchRows, first: int, exc: BaseException) -> None:
    """Put the requests that failed to join (rows ``first..``, not yet answered) back at the head of the queue:
    they decode in a batch of their own once this one ends, and this one keeps its rows."""
    back = [r for i, r in enumerate(rows.reqs[first:], first) if rows.reasons[i] is None]
    for i in range(first, len(rows.reqs)):
        rows.reasons[i] = rows.reasons[i] or "requeued"  # never answered from this batch
    with lane.guard:
        gone = {id(r) for r in back}
        lane.running[:] = [r for r in lane.running if id(r) not in gone]
        lane.pending[:0] = back
    log.warning("hf engine: %d request(s) could not join the running batch (%s: %s); they wait for the next batch",
                len(back), type(exc).__name__, " ".join(str(exc).split())[:200])
