"""Token selection from logits for a whole decode batch: temperature, top-k, top-p, greedy; log-probs.

Each row keeps its own sampling parameters and random generator, yet the work
is batch-wide: one softmax, one sort (only when some row filters), one
inverse-CDF draw. A row's randomness is a single uniform number drawn from its
own generator per token, so a seeded request gets the same tokens whatever
batch it lands in (its probabilities agree to float rounding across batches).

Log-probs are those of the temperature-scaled distribution *before* top-k/top-p
filtering, the quantity the trainer recomputes (verl divides logits by the
rollout temperature), so engine and trainer log-probs are comparable. They
come from the same log-softmax the sampling distribution is built from.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from memrl.engines.base import SamplingParams


def filter_logits_batch(logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                        any_k: bool | None = None, any_p: bool | None = None) -> torch.Tensor:
    """Mask (to -inf) tokens outside each row's top-k and top-p nucleus. ``logits``: [B, V].

    ``top_k``: [B] (0 or >= V: off); ``top_p``: [B] (1.0: off). A token is
    dropped from the nucleus when the mass before it already reaches top_p, so
    at least one token stays. ``any_k``/``any_p``: whether some row filters, when
    the caller knows it from the parameters (else read from the tensors: on a GPU
    each read waits for the device, and a decode step is launch-bound already).
    """
    vocab = logits.shape[-1]
    if any_k is None:
        any_k = bool(((top_k > 0) & (top_k < vocab)).any())
    if any_p is None:
        any_p = bool((top_p < 1.0).any())
    if not any_k and not any_p:
        return logits
    use_k, use_p = (top_k > 0) & (top_k < vocab), top_p < 1.0
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
    if any_k:
        kth = sorted_logits.gather(-1, (top_k.clamp(1, vocab) - 1).unsqueeze(-1))
        kth = torch.where(use_k.unsqueeze(-1), kth, torch.full_like(kth, float("-inf")))
        logits = logits.masked_fill(logits < kth, float("-inf"))
        sorted_logits = sorted_logits.masked_fill(sorted_logits < kth, float("-inf"))
    if any_p:
        probs = torch.softmax(sorted_logits, dim=-1)
        drop_sorted = ((torch.cumsum(probs, dim=-1) - probs) >= top_p.unsqueeze(-1)) & use_p.unsqueeze(-1)
        drop_sorted[..., 0] = False  # the most likely token always stays (a top_p that rounds to 0 in float32)
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def _bounded_k(top_k: int, vocab: int) -> int:
    """``top_k`` with the same meaning inside int64: 0 (off) for any value <= 0, ``vocab`` (off) past it, so a
    client's ``top_k=10**20`` cannot overflow the tensor and fail every row of its batch."""
    return 0 if top_k <= 0 else min(top_k, vocab)


def filter_logits(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """One row ``[V]`` of :func:`filter_logits_batch`."""
    k = torch.tensor([_bounded_k(top_k, logits.shape[-1])], device=logits.device)
    p = torch.tensor([top_p], dtype=torch.float32, device=logits.device)
    return filter_logits_batch(logits.unsqueeze(0), k, p).squeeze(0)


def _inverse_cdf(probs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Per row, the token where the cumulative probability first exceeds ``u * total`` (float64 sums).

    Zero-probability tokens are never chosen: a rounding overshoot past the
    last cumulative value is clamped to the row's last token with mass (always
    computed, so the step never waits for the device to learn whether it is needed).
    """
    cdf = probs.double().cumsum(-1)
    target = uniforms.to(cdf.device, torch.float64).unsqueeze(-1) * cdf[:, -1:]
    vocab = probs.shape[-1]
    pos = torch.searchsorted(cdf, target, right=True).squeeze(-1).clamp(max=vocab - 1)
    empty = probs.gather(-1, pos.unsqueeze(-1)).squeeze(-1) <= 0
    last = vocab - 1 - torch.argmax(torch.flip(probs > 0, dims=[-1]).to(torch.int8), dim=-1)
    return torch.where(empty, last, pos)


def _row_settings(params: Sequence[SamplingParams], sampled: list[int], vocab: int,
                  generators: Sequence[torch.Generator | None], device: torch.device) -> torch.Tensor:
    """Every row's temperature, then per sampled row its index, top-k, top-p and uniform draw, as one float64
    tensor on ``device``: one host-to-device copy a step (each value exact in float64)."""
    host = [1.0 if p.is_greedy else p.temperature for p in params]
    for i in sampled:
        host += [float(i), float(_bounded_k(params[i].top_k, vocab)), params[i].top_p]
    draws = [torch.rand(1, generator=generators[i], dtype=torch.float64) for i in sampled]
    settings = torch.cat([torch.tensor(host, dtype=torch.float64), *draws])
    if device.type == "mps":  # no float64 there: greedy rows still decode (sampled ones never could: float64 sums)
        settings = settings.float()
    return to_device(settings, device)


def to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A small host tensor on ``device`` without waiting: on a GPU it goes through pinned memory (torch's
    caching host allocator keeps the block until the copy is done), so the host goes on queueing the step's
    kernels while the device still runs the graph launched before; a copy from pageable memory would wait."""
    if device.type != "cuda":
        return t.to(device)
    return t.pin_memory().to(device, non_blocking=True)


def select_tokens(logits: torch.Tensor, params: Sequence[SamplingParams],
                  generators: Sequence[torch.Generator | None]) -> tuple[list[int], list[float]]:
    """Next token and its log-prob for each row of ``logits`` [B, V], each under its own parameters.

    Greedy rows take the argmax (log-prob at temperature 1). Sampled rows draw
    one uniform from their generator (``None``: the global one) and pick by
    inverse CDF in one batched operation. Raises ``RuntimeError`` if a sampled
    row's distribution is not finite (e.g. a temperature so small the logits
    overflow), as ``torch.multinomial`` would. The device is read once, for the
    tokens, their log-probs and that check together: on a GPU every read is a
    wait, and the step around it is a few hundred microseconds of graph replay.
    """
    logits = logits.float()
    rows, vocab = logits.shape
    sampled = [i for i, p in enumerate(params) if not p.is_greedy]
    settings = _row_settings(params, sampled, vocab, generators, logits.device)
    temps = settings[:rows].float()
    scaled = logits / temps.unsqueeze(-1)
    logp = torch.log_softmax(scaled, dim=-1)
    tokens = torch.argmax(logits, dim=-1)
    wide = settings.dtype  # float64, or float32 where there is none (mps): token ids < 2**24 stay exact
    bad = torch.zeros(1, dtype=wide, device=logits.device)
    if sampled:
        per_row = settings[rows:rows + 3 * len(sampled)].view(-1, 3)
        index, top_k, top_p = per_row[:, 0].long(), per_row[:, 1].long(), per_row[:, 2].float()
        any_k = any(0 < _bounded_k(params[i].top_k, vocab) < vocab for i in sampled)
        any_p = any(params[i].top_p < 1.0 for i in sampled)
        picked = scaled if len(sampled) == rows else scaled[index]
        probs = torch.softmax(filter_logits_batch(picked, top_k, top_p, any_k, any_p), dim=-1)
        # a softmax is >= 0 or NaN, so a NaN/inf anywhere in a row makes its sum non-finite: [B] work, not [B, V]
        mass = probs.sum(-1)
        bad = (~torch.isfinite(mass) | (mass <= 0)).any().to(wide).reshape(1)
        draws = _inverse_cdf(probs, settings[rows + 3 * len(sampled):])
        tokens = draws if len(sampled) == rows else tokens.index_copy(0, index, draws)
    chosen = logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    got = torch.cat([tokens.to(wide), chosen.to(wide), bad]).tolist()  # the one read of the device
    if got[-1]:
        raise RuntimeError("probability tensor contains inf, nan or no mass (temperature too small?)")
    return [int(t) for t in got[:rows]], got[rows:2 * rows]


def top_logprobs(rows: torch.Tensor, params: Sequence[SamplingParams]) -> list[list[tuple[int, float]] | None]:
    """Per row, its ``top_logprobs`` most likely tokens with log-probs (None where not asked for).

    Log-probs of the temperature-scaled distribution, as the sampled token's (greedy: temperature 1).
    """
    want = [k for k, p in enumerate(params) if p.top_logprobs > 0]
    out: list[list[tuple[int, float]] | None] = [None] * len(params)
    if not want:
        return out
    temps = torch.tensor([1.0 if params[k].is_greedy else params[k].temperature for k in want], device=rows.device)
    logp = torch.log_softmax(rows[torch.tensor(want, device=rows.device)].float() / temps.unsqueeze(-1), dim=-1)
    values, ids = logp.topk(min(max(params[k].top_logprobs for k in want), logp.shape[-1]), dim=-1)
    for r, k in enumerate(want):
        n = params[k].top_logprobs
        out[k] = list(zip(ids[r, :n].tolist(), values[r, :n].tolist()))
    return out


def select_token(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None) -> tuple[int, float]:
    """Pick the next token for one sequence ``[V]``; returns ``(token_id, logprob)``."""
    toks, lps = select_tokens(logits.unsqueeze(0), [params], [generator])
    return toks[0], lps[0]
